"""Benchmark: what RLWatchCallback adds to a real TRL trainer's step time (target < 2%).

    python bench/bench_callback.py                 # DPO and GRPO on the tiny CPU model
    python bench/bench_callback.py --steps 20 --repeats 3 --trainers dpo

For each trainer, runs without the callback (the baseline); with it evaluating every log
inline (`overhead=None`); inline within the 1% budget (the default: logs evaluated N at a time
when one evaluation costs more than 1% of a step); and in its worker thread (`background=True`,
1% budget); interleaved `--repeats` times, logging every step. Prints the median step time of
each (the time between consecutive `on_step_begin`, so logging and callbacks are inside; the
first 2 steps left out), the ratio to the baseline, and the callback's own time on the training
loop's path per step.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "fixtures" / "realgen"))


def _timer():
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.starts: list[float] = []

        def on_step_begin(self, args, state, control, **kw):
            self.starts.append(time.perf_counter())

        def on_train_end(self, args, state, control, **kw):
            self.starts.append(time.perf_counter())

    return StepTimer()


def run(trainer: str, mode: str, steps: int, model_dir: Path, tok, out: Path) -> dict:
    import tiny

    from rlwatch.integrations.transformers import RLWatchCallback

    timer = _timer()
    callbacks = [timer]
    cb = None
    if mode != "none":
        cb = RLWatchCallback(
            background=mode == "background",
            overhead=None if mode == "every-log" else 0.01,
            stop_on=None,
        )
        callbacks.append(cb)
    common = dict(
        output_dir=str(out),
        learning_rate=1e-5,
        max_steps=steps,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
        per_device_train_batch_size=8,
    )
    if trainer == "grpo":
        from trl import GRPOConfig, GRPOTrainer

        cfg = GRPOConfig(**common, num_generations=4, max_completion_length=8, beta=0.04)
        tr = GRPOTrainer(
            model=str(model_dir),
            reward_funcs=[tiny.successor_reward],
            args=cfg,
            train_dataset=tiny.prompt_dataset(512),
            processing_class=tok,
            callbacks=callbacks,
        )
    else:
        from trl import DPOConfig, DPOTrainer

        cfg = DPOConfig(**common, max_length=32)
        tr = DPOTrainer(
            model=str(model_dir),
            args=cfg,
            train_dataset=tiny.preference_dataset(512),
            processing_class=tok,
            callbacks=callbacks,
        )
    from transformers import PrinterCallback

    tr.remove_callback(PrinterCallback)  # stdout carries the results only
    tr.train()
    durations = [b - a for a, b in zip(timer.starts, timer.starts[1:], strict=False)][2:]
    return {
        "step": statistics.median(durations),
        "cb_per_step": (cb.seconds / max(tr.state.global_step, 1)) if cb else 0.0,
        "eval_per_step": (cb.eval_seconds / max(tr.state.global_step, 1)) if cb else 0.0,
        "every": cb.every if cb else 1,
    }


def r_every(runs: list[dict]) -> int:
    return max(r["every"] for r in runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=14)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--trainers", default="dpo,grpo")
    args = ap.parse_args()
    import tiny

    tiny.offline_env()
    import transformers

    transformers.logging.set_verbosity_error()
    tmp = Path(tempfile.mkdtemp(prefix="rlwatch-bench-cb-"))
    tok = tiny.build_tokenizer()
    model = tiny.build_lm(tok, seed=0)
    model.save_pretrained(tmp / "model")
    tok.save_pretrained(tmp / "model")
    modes = ("none", "every-log", "inline", "background")
    for trainer in args.trainers.split(","):
        got: dict[str, list[dict]] = {m: [] for m in modes}
        for _ in range(args.repeats):
            for m in modes:
                got[m].append(run(trainer, m, args.steps, tmp / "model", tok, tmp / "out"))
        base = statistics.median(r["step"] for r in got["none"])
        print(f"{trainer}: {args.steps} steps x {args.repeats} repeats, logging every step")
        print(f"  no callback (baseline):  {base * 1e3:8.1f} ms/step")
        for m in modes[1:]:
            step = statistics.median(r["step"] for r in got[m])
            cb = statistics.median(r["cb_per_step"] for r in got[m])
            ev = statistics.median(r["eval_per_step"] for r in got[m])
            print(
                f"  callback {m:10}:    {step * 1e3:8.1f} ms/step ({step / base - 1:+.1%} vs "
                f"baseline); on the loop's path {cb * 1e3:.1f} ms/step ({cb / base:.2%}), "
                f"evaluating {ev * 1e3:.1f} ms/step, every {r_every(got[m])} log(s)"
            )


if __name__ == "__main__":
    main()
