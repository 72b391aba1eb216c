"""Fuzzing campaign: damaged inputs against every reader and the rule/config loaders.

    python bench/fuzz.py --cases 10000 --seed 1
    nice -n 19 python bench/fuzz.py --cases 10000 --seed 1 --time-limit 20 --mem-limit-mb 1024

Seeds are made by the real writers (tensorboardX event files, a real W&B run file from the
fixtures, JSONL / verl console / trainer_state.json / TRL console logs, a shipped rule file, an
rlwatch.toml and a pyproject.toml). Each case mutates one seed (truncation, bit flips, inserted
NaN/inf/huge numbers, wrong types, deep nesting, non-UTF-8 bytes, ...) and runs the real CLI on
it in a child forked from a warm parent, under a time limit (alarm + kill) and a memory limit
(RLIMIT_AS). The contract checked per case: exit code in {0, 1, 2}; no traceback on stderr; exit
2 is one short stderr line; --format json output parses; no "unexpected" guard line (the guard
catching a crash class that should be fixed at its source).

Prints cases, crashes, hangs, worst time and worst memory (peak RSS of a case, and its growth
over the warm parent), with the kinds of failure found and one reproducer per kind saved under
--keep (default bench/fuzz-out/).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import resource
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KINDS = [
    "tensorboard",
    "jsonl",
    "verl",
    "verl_jsonl",
    "trainer_state",
    "pydicts",
    "pydicts_cut",
    "pydicts_bar",
    "pydicts_summary",
    "csv",
    "wandb_csv",
    "notebook",
    "dschat",
    "spaced",
    "wandb",
    "trackio",
    "swanlab",
    "ms_swift",
    "gh_table",
    "history_dump",
    "torchtune",
    "nemo_blocks",
    "loop_jsonl",
    "word_items",
    "nb_prints",
    "nb_one_line",
    "own_counter",
    "json_after_step",
    "stacked_csv",
    "tsv",
    "md_table",
    "kaggle_log",
    "mlx_iter",
    "prime_console",
    "epoch_blocks",
    "update_jsonl",
    "sample_lists",
    "tb_renamed",
    "long_csv",
    "rich_table",
    "dschat_trailer",
    "counted_jsonl",
    "curves_json",
    "curve_sweep",
    "readme_table",
    "torch_reprs",
    "header_pairs",
    "halos",
    "nb_restart",
    "nb_cells",
    "mlx_report",
    "orz_console",
    "samples_jsonl",
    "dpo_items",
    "ruled_blocks",
    "rows_doc",
    "rules",
    "config",
    "pyproject",
]
WALL_FACTOR = 8  # a case is killed after time-limit x this many wall seconds (shared machine)
HUGE = [
    "nan",
    "NaN",
    "inf",
    "-inf",
    "Infinity",
    "1e400",
    "-1e400",
    "1" + "0" * 400,
    "-9223372036854775809",
    "9223372036854775808",
    "1.5",
    "-1",
    "0",
    "1e-400",
    "null",
    "true",
    '"x"',
    "[]",
    "{}",
]


# -- seeds ----------------------------------------------------------------------------------
def make_seeds(where: Path) -> dict[str, tuple[str, bytes]]:
    """kind -> (file name, bytes) of one valid input per reader/loader."""
    where.mkdir(parents=True, exist_ok=True)
    seeds: dict[str, tuple[str, bytes]] = {}
    steps = 24
    # TensorBoard: the real writer, with hparams (a plugin proto) and a text summary
    from tensorboardX import SummaryWriter

    tb = where / "tb"
    w = SummaryWriter(str(tb), flush_secs=3600)
    for s in range(steps):
        w.add_scalar("actor/entropy", 0.5 - 0.01 * s, s, walltime=1.7e9 + s)
        w.add_scalar("actor/grad_norm", 0.3 + 0.01 * s, s, walltime=1.7e9 + s)
        w.add_scalar("critic/score/mean", 0.1 * s, s, walltime=1.7e9 + s)
    w.add_hparams({"lr": 1e-6, "algo": "grpo"}, {"hparam/reward": 0.5})
    w.add_text("config", "grpo run", 0)
    w.close()
    (ev,) = sorted(tb.glob("events.out.tfevents.*"))
    seeds["tensorboard"] = ("events.out.tfevents.1700000000.fuzz", ev.read_bytes())
    jsonl = "".join(
        json.dumps(
            {
                "step": s,
                "env/all/reward/total": 0.5 + 0.01 * s,
                "optim/entropy": 0.5,
                "optim/kl_sample_train_v1": 0.001,
                "time/total": 10.0 + s,
            }
        )
        + "\n"
        for s in range(steps)
    )
    seeds["jsonl"] = ("metrics.jsonl", jsonl.encode())
    verl = "".join(
        f"(TaskRunner pid=1) step:{s} - actor/entropy:{0.5 - 0.01 * s:.3f} - "
        f"actor/grad_norm:{0.3:.3f} - critic/score/mean:{0.1 * s:.3f} - "
        f"response_length/mean:{200 + s:.1f} - timing_s/step:{30.0 + s:.2f}\n"
        for s in range(1, steps + 1)
    )
    seeds["verl"] = ("train.log", verl.encode())
    verl_jsonl = "".join(
        json.dumps(
            {
                "step": s,
                "data": {"actor/entropy": 0.5, "actor/grad_norm": 0.3, "critic/score/mean": 0.1},
            }
        )
        + "\n"
        for s in range(steps)
    )
    seeds["verl_jsonl"] = ("gsm8k.jsonl", verl_jsonl.encode())
    hist = [
        {"step": s, "loss": 0.5, "reward": 0.1 * s, "kl": 0.01, "grad_norm": 0.3, "epoch": s / 10}
        for s in range(1, steps + 1)
    ]
    state = {"global_step": steps, "log_history": hist, "best_metric": None}
    seeds["trainer_state"] = ("trainer_state.json", json.dumps(state, indent=2).encode())
    dicts = "".join(
        repr({"loss": 0.5, "grad_norm": 0.3, "reward": 0.1 * s, "kl": 0.01, "epoch": s / 10}) + "\n"
        for s in range(1, steps + 1)
    )
    seeds["pydicts"] = ("grpo.log", dicts.encode())
    # the same console as a terminal capture: rows cut at a pane's width, trailing spaces gone
    rows = [ln[i : i + 57].rstrip(" ") for ln in dicts.splitlines() for i in range(0, len(ln), 57)]
    seeds["pydicts_cut"] = ("capture.log", ("\n".join(rows) + "\n").encode())
    # as ProgressCallback writes it: tqdm's bar redrawn with \r, each dict by tqdm.write
    bar = "".join(
        f"\r {s}%|#  | {10 * s}/{10 * steps} [00:01<00:09, 9.9it/s]\r          \r"
        + repr({"loss": "0.5", "reward": f"{0.1 * s:.4g}", "epoch": f"{s / 10:.4g}"})
        + f"\n\r {s}%|#  | {10 * s}/{10 * steps} [00:01<00:09, 9.9it/s]"
        for s in range(1, steps + 1)
    )
    seeds["pydicts_bar"] = ("console.log", (bar + "\n").encode())
    # stdout alone (no bars): steps from each dict's epoch once the summary is printed
    out = "".join(
        repr({"loss": f"{0.5 / s:.4g}", "grad_norm": "0.3", "epoch": f"{s / 40:.4g}"}) + "\n"
        for s in range(10, 10 * steps + 1, 10)
    )
    summary = {"train_runtime": "12.5", "train_steps_per_second": f"{10 * steps / 12.5:.4g}"}
    out += repr({**summary, "train_loss": "0.1", "epoch": f"{10 * steps / 40:.4g}"}) + "\n"
    seeds["pydicts_summary"] = ("train.out", out.encode())
    # a metrics CSV (verl's shape), a notebook's progress table, DeepSpeed-Chat's step-3 log
    csv = "step,critic/score/mean,actor/entropy,actor/grad_norm,timing_s/gen\n" + "".join(
        f"{s},{0.1 + s / 100:.4f},{0.5 - s / 200:.4f},0.3,4.1\n" for s in range(1, steps + 1)
    )
    seeds["csv"] = ("metrics.csv", csv.encode())
    # W&B's panel export of two runs: "Step", then "<run> - <key>" with __MIN/__MAX, all quoted
    cells = ['"Step"'] + [
        f'"{r} - actor/entropy{x}"' for r in ("grpo-a", "grpo-b") for x in ("", "__MIN", "__MAX")
    ]
    rows = [",".join(cells)]
    for s in range(1, steps + 1):
        a, b = f"{0.5 - s / 200:.4f}", f"{0.5 * 0.9**s:.4g}" if s % 2 else ""
        rows.append(",".join(f'"{c}"' for c in (s, a, a, a, b, b, b)))
    seeds["wandb_csv"] = ("wandb_export_2026-01-29.csv", ("\n".join(rows) + "\n").encode())
    head = "".join(f"<th>{h}</th>" for h in ("Step", "Training Loss", "reward", "kl"))
    body = "".join(
        f"<tr><td>{s}</td><td>0.01</td><td>{s / 10:.3f}</td><td>0.001</td></tr>"
        for s in range(1, steps + 1)
    )
    html = f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    nb = {"cells": [{"cell_type": "code", "outputs": [{"data": {"text/html": [html]}}]}]}
    seeds["notebook"] = ("grpo.ipynb", json.dumps(nb).encode())
    ds = "".join(
        f"epoch: 0|step: {s}|ppo_ep: 1|act_loss: {0.3 - s / 100}|cri_loss: 0.17|unsuper_loss: 0.0\n"
        f"average reward score: {s / 10}\n" + "-" * 40 + "\n"
        for s in range(steps)
    )
    seeds["dschat"] = ("training.log", ds.encode())
    spaced = "".join(
        f"pass 1/4 step {s}/{steps} lr {5e-6 * (1 - s / steps):.3e} reward {s / 100:.3f}\n"
        for s in range(1, steps + 1)
    )
    seeds["spaced"] = ("train_stdout.log", spaced.encode())
    # ms-swift's logging.jsonl: the step only in "global_step/max_steps": "N/M", its trainer
    # state (log_history and all) appended as the last line
    logs = [
        {
            "loss": round(0.5 / s, 8), "reward": round(s / 100, 8), "kl": 0.001,
            "completions/clipped_ratio": 0.03125, "epoch": round(s / 40, 8),
            "global_step/max_steps": f"{s}/{steps}", "percentage": f"{100 * s / steps:.2f}%",
            "elapsed_time": f"{s}m 2s", "remaining_time": f"{steps - s}m 2s",
        }
        for s in range(1, steps + 1)
    ]  # fmt: skip
    state = {"last_model_checkpoint": "out/checkpoint-9", "global_step": steps, "log_history": logs}
    swift = "".join(json.dumps(r) + "\n" for r in [*logs, state])
    seeds["ms_swift"] = ("logging.jsonl", swift.encode())
    # a notebook's progress table pasted into a GitHub comment: no outer pipes, `-- | --` rule
    cols = ["Step", "Training Loss", "reward", "reward_std", "completion_length", "kl"]
    table = " | ".join(cols) + "\n" + " | ".join(["--"] * len(cols)) + "\n"
    table += "".join(
        f"{s} | {0.5 / s:.6f} | {s / 10 - 3:.6f} | 1.5 | {300 + s:.6f} | {s / 1e4:.6f}\n"
        for s in range(1, steps + 1)
    )
    seeds["gh_table"] = ("comment.md", ("```\n" + table + "```\n").encode())
    # a script's own dump of trainer.state.log_history beside other series
    dump = {
        "learning_rate": [
            {"learning_rate": 1e-6 * s, "step": float(s)} for s in range(1, steps + 1)
        ],
        "raw_log_history": [
            {"loss": 0.69 - s / 1e3, "rewards/chosen": s / 100, "logps/chosen": -30.0, "step": s}
            for s in range(1, steps + 1)
        ],
    }
    seeds["history_dump"] = ("dpo_history.json", json.dumps(dump, indent=2).encode())
    # torchtune's DiskLogger: `Step N | name:value name:value `
    tune = "".join(
        f"Step {s} | scores:{s / 50:.6f} num_stop_tokens:{s % 7} kl:{s / 1e3:.6f} "
        f"clipfrac:0.02 ratios:1.0 approx_policy_kl:0.0004 response_lengths:{100 + s}.0 \n"
        for s in range(1, steps + 1)
    )
    seeds["torchtune"] = ("log_1732700000.txt", tune.encode())
    # NeMo RL's console: a step header, then one `  • Name: number` a line (units, notes)
    nemo = "Final config:\n{'grpo': {'max_num_steps': 50,\n          'seed': 42}}\n" + "".join(
        f"\n{'=' * 25} Step {s}/{steps} {'=' * 25}\n"
        "(VllmGenerationWorker pid=5889, ip=10.0.0.1) Processed prompts: 100%|##| 64/64 "
        "[00:25<00:00, 2.47it/s, est. speed input: 280.26 toks/s, output: 1551.36 toks/s]\n"
        f"\n📊 Training Results:\n  • Loss: {0.02 - s / 1e4:.4f}\n"
        f"  • Generation KL Error: 0.0006\n  • Avg Reward: {0.3 + s / 100:.4f}\n"
        f"  • Mean Generation Length: {600 + s:.4f}\n\n⏱️  Timing:\n"
        f"  • Total step time: {44 + s / 10:.2f}s\n  • generation: 32.82s (73.4%)\n"
        for s in range(1, steps + 1)
    )
    seeds["nemo_blocks"] = ("grpo_console.log", nemo.encode())
    # a hand-written GRPO loop's metrics.jsonl: its own counter, records of several kinds
    loop = []
    for s in range(1, steps + 1):
        if s % 5 == 1:
            loop.append({"type": "eval", "grpo_step": s - 1, "reward": 0.4, "stop": "</a>"})
        loop.append({"type": "rollout", "grpo_step": s, "reward": s / 100, "std_reward": 0.3})
        loop.append({"type": "train", "grpo_step": s, "optimizer_step": 2 * s, "loss": 0.1,
                     "grad_norm": 0.5, "token_entropy": 0.8, "reference_kl": None})  # fmt: skip
    seeds["loop_jsonl"] = ("metrics.jsonl", "".join(json.dumps(r) + "\n" for r in loop).encode())
    # LLMs-from-scratch's DPO loop: comma-separated items of words and a number
    items = "".join(
        f"Ep 1 (Step {s:06d}): Train loss {0.69 - s / 1e3:.3f}, Val loss 0.690, "
        f"Train reward margins {s / 100:.3f}, Val reward margins 0.010\n"
        for s in range(0, 5 * steps, 5)
    )
    seeds["word_items"] = ("dpo.log", items.encode())
    # a loop's prints saved in a notebook's outputs (the lines as its JSON holds them)
    text = [f"epoch 0 step {s} | loss {s / 1e3:.4f} | kl 0.0001 | R {s / 10:.3f}\n"
            for s in range(5, 5 * steps, 5)]  # fmt: skip
    cell = {"cell_type": "code", "source": ["train()"], "metadata": {}, "execution_count": 1,
            "outputs": [{"output_type": "stream", "name": "stdout", "text": text}]}  # fmt: skip
    nb = {"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    seeds["nb_prints"] = ("grpo.ipynb", json.dumps(nb, indent=1).encode())
    # a notebook saved as one line of JSON (Kaggle, Colab), TRL's printed dicts in its output
    text = [repr({"loss": s / 1e3, "reward": s / 100, "epoch": s / 10}) + "\n"
            for s in range(1, steps + 1)]  # fmt: skip
    cell = {"cell_type": "code", "source": ["train()"], "metadata": {}, "execution_count": 1,
            "outputs": [{"output_type": "stream", "name": "stdout", "text": text}]}  # fmt: skip
    nb = {"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    seeds["nb_one_line"] = ("kaggle.ipynb", json.dumps(nb, separators=(",", ":")).encode())
    # a loop's own counter (no `step`), a second epoch's batches after the first's
    own = "".join(
        f"Epoch {e}, Batch {b}/{steps}: loss={0.7 - b / 1e3:.4f}, reward={b / 100:.3f}\n"
        for e in (1, 2)
        for b in range(1, steps + 1)
    )
    seeds["own_counter"] = ("train.log", own.encode())
    # `Step N: {json}` lines through a logging prefix
    jl = "".join(
        f"2025-05-01 12:00:00 INFO Step {s}: "
        + json.dumps({"loss": s / 1e3, "reward": {"mean": s / 100}, "ok": True})
        + "\n"
        for s in range(1, steps + 1)
    )
    seeds["json_after_step"] = ("run.log", jl.encode())
    # a results CSV of several experiments' rows, one after another
    stacked = "experiment,tau,step,mean_reward,entropy\n" + "".join(
        f"{name},{tau},{s},{s / 100:.3f},1.0\n"
        for name, tau in (("baseline", ""), ("softmax", "0.5"))
        for s in range(1, steps + 1)
    )
    seeds["stacked_csv"] = ("all_experiments.csv", stacked.encode())
    tsv = "step\tloss\treward\n" + "".join(
        f"{s}\t{0.7 - s / 1e3:.4f}\t{s / 100:.3f}\n" for s in range(1, steps + 1)
    )
    seeds["tsv"] = ("metrics.tsv", tsv.encode())
    md = "# Notes\n\n| epoch | step | loss | acc |\n|---|---|---|---|\n" + "".join(
        f"| {s / 10:.2f} | {s} | {0.8 - s / 1e3:.4f} | 0.5 |\n" for s in range(1, steps + 1)
    )
    seeds["md_table"] = ("session_summary.md", md.encode())
    # a Kaggle kernel's log: a JSON array of output chunks, a printed dict split over two
    chunks = []
    for s in range(1, steps + 1):
        d = repr({"loss": f"{0.5 - s / 1e3:.4g}", "reward": f"{s / 100:.4g}"})
        chunks += [f"\r {s}/{steps} [00:01<00:02, 1.0s/it]", "\r" + d[:12], d[12:] + "\r\n"]
    kaggle = (
        "["
        + "\n,".join(
            json.dumps({"stream_name": "stdout", "time": 1.0 + i, "data": c}, separators=(",", ":"))
            for i, c in enumerate(chunks)
        )
        + "]"
    )
    seeds["kaggle_log"] = ("kernel.log", kaggle.encode())
    per_step = {  # kind: (file name, the text of step s)
        # mlx-lm's `Iter N:` items of words, a number and a unit
        "mlx_iter": (
            "mlx.log",
            lambda s: (
                f"Iter {s}: Train loss {0.7 - s / 1e3:.3f}, Chosen reward {-s / 100:.3f}, "
                "It/sec 1.015, Peak mem 2.334 GB\n"
            ),
        ),
        # prime-rl's console: `Step N | 1m 13s | Reward 0.39 | Seq. Length: 345.6 tokens/sample`
        "prime_console": (
            "orchestrator.log",
            lambda s: (
                f"02:33:26 SUCCESS Step {s} | {'1m 13s':>7} | Reward {s / 100:.4f} | "
                f"Trainable 60/64 (93.8%) | Seq. Length: {300 + s:.1f} tokens/sample | "
                "Truncation 3.1%\n"
            ),
        ),
        # a loop's `Epoch N/M` alone on its line, its results tab-indented below it
        "epoch_blocks": (
            "output.log",
            lambda s: (
                f"  [DEBUG] gradient norm: {7 + s / 10:.6f}\nEpoch {s}/50\n"
                f" \tLoss: {1 / s:.4f}\n \tReward: {s / 100:.4f}\n"
            ),
        ),
        # a REINFORCE loop's JSONL counting its `update`s
        "update_jsonl": (
            "train_metrics.jsonl",
            lambda s: json.dumps({"update": s, "loss": 1 / s, "reward": s / 100}) + "\n",
        ),
        # a GRPO loop's JSONL with each step's samples as a list
        "sample_lists": (
            "grpo_log.jsonl",
            lambda s: (
                json.dumps({"step": s, "rewards": [s % 2, 1.0], "skipped": s % 3 == 0}) + "\n"
            ),
        ),
        # the Tinker cookbook's console: a rich table of each step's metrics
        "rich_table": (
            "logs.log",
            lambda s: (
                f"__main__:277 [INFO] === Step {s} ===\n\x1b[3m   Step {s}   \x1b[0m\n"
                + "".join(
                    f"\u2502\x1b[36m {k:<20}\x1b[0m\u2502\x1b[32m {v:<12.6f}\x1b[0m\u2502\n"
                    for k, v in (("mean_reward", s / 100), ("loss:sum", 7485.6 + s))
                )
            ),
        ),
        # DeepSpeed-Chat's later console: the reward three lines below the step's line
        "dschat_trailer": (
            "step3.log",
            lambda s: (
                f"Epoch: 0 | Step: {s} | PPO Epoch: 1 | Actor Loss: {1 / s:.4f} | Critic Loss: "
                f"{2 / s:.4f} | Unsupervised Loss: 0.0\nEnd-to-End => Latency: 2.36s\n"
                f"Generation => Latency: 0.28s\nTraining   => Latency: 1.80s\n"
                f"Average reward score: {s / 100} | EMA reward score: {s / 200}\n"
            ),
        ),
        # RL4LMs' rollout_info.jsonl: namespaced numbers, no step (each line one log)
        "counted_jsonl": (
            "rollout_info.jsonl",
            lambda s: (
                json.dumps({"rollout_info/ep_rew": s / 100, "rollout_info/ep_lens": 24.0}) + "\n"
            ),
        ),
        # an experiment report's table of steps (read where a folder holds nothing else)
        "readme_table": (
            "README.md",
            lambda s: (
                ("| Step | Loss | Reward |\n|---|---|---|\n" if s == 1 else "")
                + f"| {s} | **{1 / s:.3f}** | {s / 100} |\n"
            ),
        ),
    }
    for kind, (name, text) in per_step.items():
        seeds[kind] = (name, "".join(map(text, range(1, steps + 1))).encode())
    # TensorBoard's CSV export of one tag, renamed after it
    tb = "Wall time,Step,Value\n" + "".join(
        f"{1.7e9 + s * 10.5},{s},{s / 100}\n" for s in range(1, steps + 1)
    )
    seeds["tb_renamed"] = ("TrainRewardsMargins.csv", tb.encode())
    # a long CSV: a row per value, the metric named in its row
    long = "run_name,metric,step,value\n" + "".join(
        f"run{r},{m},{s},{s / 100}\n" for r in (1, 2) for s in range(1, steps + 1) for m in "ab"
    )
    seeds["long_csv"] = ("sweep_data.csv", long.encode())
    # a script's dump of whole curves beside its summary numbers
    curves = {
        "beta": 0.05,
        "rewards_curve": [s / 100 for s in range(1, steps + 1)],
        "kl_curve": [[s, 1 / s] for s in range(1, steps + 1)],
    }
    seeds["curves_json"] = ("ppo_metrics.json", json.dumps(curves).encode())
    # a sweep's curves in one JSONL, a record per seed
    sweep = "".join(
        json.dumps({"seed": seed, "reward_curve": [[s, s / 100] for s in range(1, steps + 1)]})
        + "\n"
        for seed in (0, 1, 7)
    )
    seeds["curve_sweep"] = ("per_seed_metrics.jsonl", sweep.encode())
    # printed dicts of torch's and JAX's scalars with their keyword arguments
    reprs = "".join(
        f"{{'step': {s}, 'loss': tensor({s / 100}, device='cuda:0', grad_fn=<AddBackward0>), "
        f"'reward': Array({s / 50}, dtype=float32), 'kl': np.float64({s / 1000})}}\n"
        for s in range(1, steps + 1)
    )
    seeds["torch_reprs"] = ("loop.log", reprs.encode())
    # a header line, then the step's pairs on one line behind a logging prefix
    pairs = "".join(
        f"=== Step {s} ===\n2026-01-02 03:04:05,678 - train - INFO - loss: {s / 100}, "
        f"reward: {s / 50}, token_entropy: {1 - s / 100}\n"
        for s in range(1, steps + 1)
    )
    seeds["header_pairs"] = ("train.log", pairs.encode())
    # ContextualAI HALOs' console: its examples seen count the logs, values as strings
    halos = "".join(
        f"train stats after {64 * s} examples: {{'rewards_train/chosen': '{-s / 100:.5g}', "
        f"'logps_train/chosen': '{-44 - s:.5g}', 'loss/train': '0.69', 'grad_norm': '3', "
        f"'counters/examples': {64 * s}, 'counters/updates': {4 * s}}}\n"
        + (f"eval after {64 * s}: {{'loss/eval': '0.7'}}\n" if s % 5 == 0 else "")
        for s in range(1, steps + 1)
    )
    seeds["halos"] = ("halos_train_dpo_log.txt", halos.encode())
    # a notebook: a smoke test's table, then the run's, whose steps start again
    smoke = html.replace("</tbody>", "").split("<tbody>")[0] + "<tbody>" + body[:400] + "</tbody>"
    nb = {
        "cells": [
            {"cell_type": "code", "outputs": [{"data": {"text/html": [part]}}]}
            for part in (smoke + "</table>", html)
        ]
    }
    seeds["nb_restart"] = ("grpo_training.ipynb", json.dumps(nb).encode())

    # a Kaggle notebook (one line of JSON) of two trainings, a cell each, its code beside them
    def cell(code: str, printed: str) -> dict:
        out = [{"name": "stdout", "output_type": "stream", "text": printed}]
        return {"cell_type": "code", "source": code, "outputs": out, "metadata": {}}

    rl = "".join(f"Step {s}/{steps} | Average reward: {s / 100} | loss: 0\n" for s in range(steps))
    dpo = "".join(f"Step {s} | dpo_loss: {0.69 - s / 1e3} | pref_acc: 0.75\n" for s in range(steps))
    cells = [cell("print(f'step={i} loss={l}')", rl), cell("# step 99 loss 9", dpo)]
    nb = {"metadata": {}, "nbformat": 4, "nbformat_minor": 4, "cells": cells}
    seeds["nb_cells"] = ("rl_and_dpo.ipynb", json.dumps(nb, separators=(",", ":")).encode())
    # mlx-lm-lora's GRPO report: a block of lines under `Iter N:`, statistics after labels
    report = [
        "=" * 80,
        "Iter {s}:",
        "Loss: {loss:.3f}",
        "Total Rewards:  \u03bc={reward:.3f}, \u03c3=0.150",
        "  \u2022 Hit limit: 20.0%",
        "Clipping:  low=0.006, high=0.005, total=0.011",
        "Learning Rate: 6.0000e-04",
    ]
    mlx = [
        line.format(s=s, loss=s / 100, reward=s / 50)
        for s in range(1, steps + 1)
        for line in report
    ]
    seeds["mlx_report"] = ("grpo.log", ("\n".join(mlx) + "\n").encode())
    # Open-Reasoner-Zero's Slurm output: loguru messages of pairs, a printed dict, then the
    # redraw of an episode's bar (one row below from the second episode on)
    orz = []
    for s in range(1, steps + 1):
        ep, k = (s - 1) // 5 + 1, (s - 1) % 5 + 1
        orz.append(
            f"2025-07-21 14:34:04.556 | INFO | orz.ppo.trainer:make_experience:317 - "
            f"avg_raw_rewards: {s / 100}, avg_kl: 0.0, avg_response_length: {100 + s}\n"
        )
        orz.append(
            f"2025-07-21 14:35:23.916 | INFO | orz.ppo.trainer:train:173 - "
            f"{{'policy_loss': {0.01 * s}, 'entropy': 1.8, 'kl': 0.0}}\n"
        )
        orz.append(
            ("\n" if ep > 1 else "") + f"\rEpisode [{ep}/9]: {20 * k}%|##| {k}/5 [00:01<00:04]"
        )
    seeds["orz_console"] = ("47145.out", "".join(orz).encode())
    # a loop's JSONL of single samples (a completion's text beside its reward, 4 a step)
    samples = [
        json.dumps({"step": s, "prompt": "Explain why the sky is blue at noon.", "reward": k / 4})
        for s in range(1, steps + 1)
        for k in range(4)
    ]
    seeds["samples_jsonl"] = ("rollouts.jsonl", ("\n".join(samples) + "\n").encode())
    # a DPO script's Slurm output: printed dataset examples, then `Name=number` items of words
    example = repr({"prompt": "how can i develop a habit of drawing daily", "score_chosen": 8.0})
    items = [example] + [
        f"Step {s * 100}: Train Loss={0.69 - s / 100}, Eval Loss={0.69 - s / 200}, Win Rate=0.5"
        for s in range(steps)
    ]
    seeds["dpo_items"] = ("log.out", ("\n".join(items) + "\n").encode())
    # a loop printing a step's namespaced `name: value` lines and a rule after them, no counter
    # (DeepLearning.AI's PPO lab)
    ruled = "".join(
        f"objective/kl: {28 + s / 7}\nppo/returns/mean: {-0.5 - s / 100}\n"
        f"ppo/policy/advantages_mean: {s * 1e-9}\n" + "-" * 99 + "\n"
        for s in range(steps)
    )
    seeds["ruled_blocks"] = ("lab3_output.txt", ruled.encode())
    # a document whose rows sit under a key of their own (Prime's hosted-RL export, a dump's
    # `points` after the run's facts)
    rows_doc = {
        "run": {"name": "fuzz", "planned_steps": steps},
        "points": [{"step": s, "reward/all/mean": s / steps, "run_id": "x"} for s in range(steps)],
    }
    seeds["rows_doc"] = ("metrics_raw.json", json.dumps(rows_doc, indent=2).encode())
    wb = ROOT / "fixtures" / "tinker-rlvr-qwen3-4b-rubric" / "run-8zwal4ai.wandb"
    if wb.exists():
        seeds["wandb"] = ("run-fuzz.wandb", wb.read_bytes()[: 96 << 10])
    # a trackio project (SQLite) and a SwanLab offline run, as the real clients wrote them
    run = ROOT / "fixtures" / "realgen" / "runs" / "ho19-b-dpo-lr3e-2-noclip-3ep-s44"
    db = run / "trackio" / "huggingface.db"
    if db.exists():
        seeds["trackio"] = ("project.db", db.read_bytes())
    for sw in sorted(run.glob("swanlog/run-*/run-*.swanlab")):
        seeds["swanlab"] = ("run-fuzz.swanlab", sw.read_bytes())
    rules = (ROOT / "rules" / "stability.yaml").read_bytes()
    seeds["rules"] = ("rules.yaml", rules)
    toml = b'select = ["ST", "EX"]\nignore = ["ST04"]\nfail_on = "error"\nrequire = []\n'
    seeds["config"] = ("rlwatch.toml", toml)
    pyproject = b'[project]\nname = "x"\n\n[tool.rlwatch]\nselect = ["ST"]\nfail_on = "error"\n'
    seeds["pyproject"] = ("pyproject.toml", pyproject)
    return seeds


# -- mutations ------------------------------------------------------------------------------
def _numbers(data: bytes) -> list[tuple[int, int]]:
    import re

    return [m.span() for m in re.finditer(rb"-?\d+(?:\.\d+)?(?:e-?\d+)?", data[:200_000])]


def mutate(data: bytes, rng: random.Random, kind: str) -> tuple[bytes, str]:
    """One damaged copy of `data`, and what was done to it."""
    ops = [
        "truncate",
        "bitflip",
        "number",
        "number",
        "bytes",
        "drop_lines",
        "dup_chunk",
        "nesting",
        "non_utf8",
        "wrong_type",
        "empty_value",
        "long_line",
    ]
    op = rng.choice(ops)
    b = bytearray(data)
    n = len(b)
    if op == "truncate" and n:
        cut = rng.randrange(n)
        return bytes(b[:cut]), f"truncate@{cut}"
    if op == "bitflip" and n:
        k = rng.choice([1, 2, 8, 64])
        for _ in range(k):
            i = rng.randrange(n)
            b[i] ^= 1 << rng.randrange(8)
        return bytes(b), f"bitflip x{k}"
    if op == "number":
        spans = _numbers(data)
        if spans:
            k = rng.choice([1, 3, 20])
            out = data
            for a, e in sorted(rng.sample(spans, min(k, len(spans))), reverse=True):
                out = out[:a] + rng.choice(HUGE).encode() + out[e:]
            return out, f"number x{k}"
    if op == "bytes" and n:
        i = rng.randrange(n + 1)
        junk = bytes(rng.randrange(256) for _ in range(rng.choice([1, 7, 64, 512])))
        return bytes(b[:i]) + junk + bytes(b[i:]), f"insert {len(junk)} bytes"
    if op == "drop_lines":
        lines = data.split(b"\n")
        if len(lines) > 2:
            i = rng.randrange(len(lines))
            del lines[i : i + rng.choice([1, 3, 10])]
            return b"\n".join(lines), "drop lines"
    if op == "dup_chunk" and n:
        a = rng.randrange(n)
        e = min(n, a + rng.choice([8, 100, 4000]))
        return bytes(b[:e]) + bytes(b[a:e]) * rng.choice([2, 10]) + bytes(b[e:]), "dup chunk"
    if op == "nesting":
        depth = rng.choice([100, 5000, 100_000])
        if kind in ("rules", "config", "pyproject"):
            nest = (b"[" * depth) + (b"]" * depth)
            if kind == "rules":
                return data + b"\nextra: " + nest + b"\n", f"nesting {depth}"
            return data + b"\nselect = " + nest + b"\n", f"nesting {depth}"
        nest = b'{"step": 1, "x": ' + b"[" * depth + b"]" * depth + b"}"
        lines = data.split(b"\n")
        lines.insert(rng.randrange(len(lines) + 1), nest)
        return b"\n".join(lines), f"nesting {depth}"
    if op == "non_utf8" and n:
        i = rng.randrange(n)
        return bytes(b[:i]) + b"\xff\xfe\xc3\x28\x80" + bytes(b[i:]), "non-utf8"
    if op == "wrong_type":
        swaps = [
            (b'"step": ', b'"step": "x", "_": '),
            (b"step:", b"step:[1] "),
            (b"log_history", b"log_hist"),
            (b'"log_history": [', b'"log_history": {"a": ['),
            (b"metric: ", b"metric: [a, b]\n        x: "),
            (b"select = ", b"select = 3\n#"),
            (b"[tool.rlwatch]", b"[[tool.rlwatch]]"),
            (b"fail_on = ", b"fail_on = 1\n#"),
            (b"- code: ", b"- code: {a: 1}\n  x: "),
            (b"for: ", b"for: 1000000000000\n        y: "),
        ]
        rng.shuffle(swaps)
        for old, new in swaps:
            if old in data:
                return data.replace(old, new, 1), f"wrong type {old[:12]!r}"
    if op == "empty_value":
        return data.replace(b"0.", b"", rng.choice([1, 5])), "empty values"
    if op == "long_line":
        i = rng.randrange(n + 1) if n else 0
        return (
            bytes(b[:i]) + b"step:1 - " + b"a:1 - " * rng.choice([1000, 100_000]) + bytes(b[i:]),
            "long line",
        )
    return bytes(b[: max(0, n - 1)]), "truncate last byte"


# -- one case -------------------------------------------------------------------------------
def _args_for(kind: str, path: Path, good: Path, full: bool) -> list[str]:
    select = [] if full else ["--select", "ST", "--select", "EX"]
    if kind == "rules":
        return ["diagnose", str(good), "--rules", str(path), "--format", "json", *select]
    if kind in ("config", "pyproject"):
        return ["diagnose", str(good), "--format", "json"]
    roll = random.random()
    if not full and roll < 0.55:  # the reader alone (cheaper): what was read
        return ["metrics", str(path), "--format", "json"]
    if not full and roll < 0.8:  # tail's follower: one poll, as a watchdog would make it
        return ["tail", str(path), "--once", "--plain", "--exit-on", "error", *select]
    return ["diagnose", str(path), "--format", "json", *select]


def run_case(
    kind: str,
    name: str,
    data: bytes,
    good: Path,
    work: Path,
    limit_s: float,
    mem_mb: int,
    full: bool,
) -> dict[str, object]:
    """Fork, run the CLI on the damaged input in the child, and judge the result."""
    case = Path(tempfile.mkdtemp(dir=work))
    cwd = case
    if kind == "pyproject":
        cwd = case / "sub" / "dir"
        cwd.mkdir(parents=True)
    target = case / name
    target.write_bytes(data)
    out, err = case / "stdout", case / "stderr"
    args = _args_for(kind, target, good, full)
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # the child: limits, then the real CLI in-process
        code = 3
        try:
            os.chdir(cwd)
            fo = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            fe = os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(fo, 1)
            os.dup2(fe, 2)
            soft = _vm_bytes() + (mem_mb << 20)
            resource.setrlimit(resource.RLIMIT_AS, (soft, soft))
            # CPU seconds, not wall seconds: the machine is shared, a busy neighbour is no hang
            cpu = int(limit_s) + 1
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
            signal.alarm(int(limit_s * WALL_FACTOR) + 1)
            from rlwatch.cli.app import app

            try:
                app(args, prog_name="rlwatch", standalone_mode=True)
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 3)
            except BaseException:
                import traceback

                traceback.print_exc()
                code = 4
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
    deadline = t0 + limit_s * WALL_FACTOR
    status, usage = None, None
    while True:
        wpid, st, ru = os.wait4(pid, os.WNOHANG)
        if wpid:
            status, usage = st, ru
            break
        if time.perf_counter() > deadline:
            os.kill(pid, signal.SIGKILL)
            _, status, usage = os.wait4(pid, 0)
            break
        time.sleep(0.005)
    elapsed = time.perf_counter() - t0
    stdout = out.read_text(errors="replace") if out.exists() else ""
    stderr = err.read_text(errors="replace") if err.exists() else ""
    result: dict[str, object] = {
        "kind": kind,
        "wall": elapsed,
        "seconds": (usage.ru_utime + usage.ru_stime) if usage else elapsed,  # CPU time
        "maxrss_mb": usage.ru_maxrss / 1024 if usage else 0.0,
        "args": args,
    }
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        hung = (signal.SIGKILL, signal.SIGALRM, signal.SIGXCPU)
        result["verdict"] = "hang" if sig in hung else f"signal {sig}"
        result["code"] = None
    else:
        code = os.WEXITSTATUS(status)
        result["code"] = code
        result["verdict"] = judge(code, stdout, stderr, json_out=args[0] != "tail")
    result["stderr"] = stderr[-2000:]
    if result["verdict"] == "ok":
        shutil.rmtree(case, ignore_errors=True)
    else:
        result["dir"] = str(case)
    return result


def judge(code: int, stdout: str, stderr: str, json_out: bool = True) -> str:
    """'ok' or the kind of contract breach (`json_out`: stdout must be one JSON document)."""
    if code not in (0, 1, 2):
        return f"exit {code}"
    if "Traceback" in stderr:
        return "traceback"
    if "this is not a verdict on the run" in stderr:  # the top-level guard caught a crash
        what = stderr.split("rlwatch: error: ", 1)[-1]
        if "unexpected " in what:
            return "guard: " + what.split("unexpected ", 1)[1].split(":", 1)[0].split(" ")[0]
        return "guard: " + what[:30]
    if code == 2:
        lines = [ln for ln in stderr.splitlines() if ln.startswith("rlwatch: error")]
        if len(lines) != 1 or len(lines[0]) > 2000:
            return "exit 2 without one error line"
        return "ok"
    if not json_out:
        return "ok"
    try:
        json.loads(stdout)
    except json.JSONDecodeError:
        return "invalid json"
    return "ok"


def _seeds_in_a_child(where: Path) -> dict[str, tuple[str, bytes]]:
    import pickle

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        code = 0
        try:
            blob = pickle.dumps(make_seeds(where))
            with os.fdopen(w, "wb") as f:
                f.write(blob)
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 1
        os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        blob = f.read()
    os.waitpid(pid, 0)
    return pickle.loads(blob)


def _vm_bytes(field: str = "VmSize") -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 2 << 30


def warm() -> None:
    """Import what the CLI imports, once, in the parent (children fork warm)."""
    import numpy  # noqa: F401
    import pandas  # noqa: F401
    import yaml  # noqa: F401

    import rlwatch.api
    import rlwatch.cli.app
    import rlwatch.render.formats
    import rlwatch.render.text  # noqa: F401
    from rlwatch.engine.rules import load_rules
    from rlwatch.sources import logs, tensorboard, wandb_local  # noqa: F401

    load_rules()
    with contextlib.suppress(ImportError):
        from wandb.proto import wandb_internal_pb2  # noqa: F401


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--time-limit", type=float, default=20.0, help="seconds per case")
    ap.add_argument("--mem-limit-mb", type=int, default=1024, help="address space per case")
    ap.add_argument("--kinds", default="", help="comma-separated subset of the seed kinds")
    ap.add_argument("--keep", type=Path, default=ROOT / "bench" / "fuzz-out")
    ap.add_argument("--full-every", type=int, default=10, help="every Nth case: all rules")
    ap.add_argument("--report-every", type=int, default=500)
    args = ap.parse_args()

    rng = random.Random(args.seed)
    random.seed(args.seed)
    work = Path(tempfile.mkdtemp(prefix="rlwatch-fuzz-"))
    seeds = _seeds_in_a_child(work / "seeds")  # the writers start threads: not in the parent
    kinds = [k for k in seeds if not args.kinds or k in args.kinds.split(",")]
    good = work / "good" / seeds["jsonl"][0]
    good.parent.mkdir()
    good.write_bytes(seeds["jsonl"][1])
    os.environ.pop("RLWATCH_DEBUG", None)
    os.environ["NO_COLOR"] = "1"
    warm()
    parent_rss = _vm_bytes("VmRSS") / (1 << 20)
    found: Counter[str] = Counter()
    examples: dict[str, dict[str, object]] = {}
    worst_t: tuple[float, str] = (0.0, "")
    worst_m: tuple[float, str] = (0.0, "")
    hangs = crashes = 0
    worst_w = 0.0
    codes: Counter[str] = Counter()  # (kind, command) -> exit codes: what the cases reached
    t_start = time.perf_counter()
    for i in range(args.cases):
        kind = kinds[i % len(kinds)]
        name, data = seeds[kind]
        damaged, what = mutate(data, rng, kind)
        res = run_case(
            kind,
            name,
            damaged,
            good,
            work,
            args.time_limit,
            args.mem_limit_mb,
            full=i % args.full_every == 0,
        )
        label = f"{kind} {what}"
        codes[f"{res['args'][0]} {res['code']}"] += 1
        worst_w = max(worst_w, float(res["wall"]))
        if res["seconds"] > worst_t[0]:
            worst_t = (float(res["seconds"]), label)
        if res["maxrss_mb"] > worst_m[0]:
            worst_m = (float(res["maxrss_mb"]), label)
        if res["verdict"] != "ok":
            key = f"{kind}: {res['verdict']}"
            found[key] += 1
            if res["verdict"] == "hang":
                hangs += 1
            else:
                crashes += 1
            print(f"case {i}: {key} ({what}, {res['seconds']:.1f} s)", flush=True)
            if key not in examples:
                examples[key] = {**res, "mutation": what}
                Path(str(res["dir"]), "verdict.json").write_text(
                    json.dumps({**res, "mutation": what}, indent=1, default=str)
                )
                args.keep.mkdir(parents=True, exist_ok=True)
                dest = args.keep / f"{len(examples):03d}-{kind}"
                shutil.rmtree(dest, ignore_errors=True)
                shutil.copytree(str(res["dir"]), dest)
            shutil.rmtree(str(res["dir"]), ignore_errors=True)
        if (i + 1) % args.report_every == 0:
            rate = (i + 1) / (time.perf_counter() - t_start)
            print(
                f"[{i + 1}/{args.cases}] {rate:.1f} cases/s, crashes {crashes}, hangs {hangs}, "
                f"worst {worst_t[0]:.2f} CPU s, {worst_m[0]:.0f} MB",
                flush=True,
            )
    shutil.rmtree(work, ignore_errors=True)
    print(f"cases: {args.cases} (seed {args.seed}; kinds: {', '.join(kinds)})")
    print(f"crashes: {crashes}")
    print("exit codes by command: " + ", ".join(f"{k}: {n}" for k, n in sorted(codes.items())))
    wall_limit = args.time_limit * WALL_FACTOR
    print(f"hangs (past {args.time_limit:g} CPU s or {wall_limit:g} wall s): {hangs}")
    print(f"worst time: {worst_t[0]:.2f} CPU s ({worst_t[1]}); worst wall {worst_w:.2f} s")
    print(
        f"worst memory: {worst_m[0]:.0f} MB peak RSS ({worst_m[1]}); warm parent "
        f"{parent_rss:.0f} MB, so at most {max(0.0, worst_m[0] - parent_rss):.0f} MB grown"
    )
    print(f"wall time: {time.perf_counter() - t_start:.0f} s")
    for key, n in found.most_common():
        ex = examples[key]
        print(f"  {n:5d}  {key}  e.g. {ex['mutation']}: {str(ex['stderr']).strip()[-300:]!r}")


if __name__ == "__main__":
    main()
