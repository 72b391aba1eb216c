"""RLWatchCallback inside real TRL trainers (GRPOTrainer, DPOTrainer) on the tiny CPU model of
fixtures/realgen/tiny.py (nothing downloaded): a destructive learning rate stops training early
with the error verdict in the report; a healthy run trains to the end untouched."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import GATE_RULES

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "fixtures" / "realgen"))

pytest.importorskip("trl")
pytest.importorskip("torch")


def test_rlwatch_cli_does_not_import_transformers():
    code = (
        "import sys, rlwatch.cli.app, rlwatch.api; "
        "print('transformers' in sys.modules, 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


@pytest.mark.slow
def test_replayed_broken_run_stops_at_the_error_step_inline_and_in_background(tmp_path):
    """The callback against real transformers TrainerState/TrainerControl objects, fed the
    broken fixture's logs step by step: inline it stops at the first error step exactly; in the
    background no later than the next log."""
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from rlwatch.integrations.transformers import RLWatchCallback
    from rlwatch.sources import load

    frame = load([str(ROOT / "fixtures" / "grpo-broken")])
    wide = frame.data.pivot(index="step", columns="tag", values="value")
    args = TrainingArguments(output_dir=str(tmp_path / "out"), report_to=[], use_cpu=True)
    stops = {}
    for background in (False, True):
        cb = RLWatchCallback(
            background=background, overhead=None, output_dir=tmp_path / f"bg{background}"
        )
        state, control = TrainerState(), TrainerControl()
        cb.on_train_begin(args, state, control)
        for step, row in wide.iterrows():
            state.global_step = int(step)
            cb.on_log(args, state, control, logs={str(k): float(v) for k, v in row.items()})
            cb.on_step_end(args, state, control)
            if control.should_training_stop:
                stops[background] = int(step)
                break
            if background:  # a training step takes a while: let the worker keep up
                cb._drain()
        cb.on_train_end(args, state, control)
        assert cb.stopped_by is not None and str(cb.stopped_by.severity) == "error"
        report = json.loads((tmp_path / f"bg{background}" / "rlwatch-report.json").read_text())
        fired = {v["code"] for v in report["verdicts"] if v["episodes"]}
        assert cb.stopped_by.code in fired
    # the step where the earliest error verdict that diagnose finds on the whole run fires
    first = _first_error_step(ROOT / "fixtures" / "grpo-broken")
    assert stops[False] == first
    assert first <= stops[True] <= first + 1


def _first_error_step(run) -> int:
    """Where `rlwatch diagnose --format json` dates the run's earliest error verdict that may
    stop training (`gate: any`; a `gate: last` rule is judged at the end)."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "rlwatch", "diagnose", str(run), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 1, out.stderr
    doc = json.loads(out.stdout)
    from rlwatch.engine.rules import load_rules
    from rlwatch.sources import load

    rules = load_rules()
    steps = sorted(load([str(run)]).data["step"].unique().tolist())

    def fires_at(v, e) -> int:  # an episode is dated from its first step; it fires `for` logs on
        return steps[steps.index(e["first_step"]) + rules.get(v["code"]).for_ - 1]

    return min(
        fires_at(v, e)
        for v in doc["verdicts"]
        if v["severity"] == "error" and v["gate"] == "any"
        for e in v["episodes"]
    )


def _tiny(tmp_path, pretrain_steps=0):
    import tiny

    tiny.offline_env()
    tok = tiny.build_tokenizer()
    # pre-trained (as the corpus' healthy runs): it ends its sentences instead of running to the
    # completion cap, which the truncation rules rightly call unhealthy
    model = tiny.build_lm(tok, seed=0, pretrain_steps=pretrain_steps)
    path = tmp_path / "model"
    model.save_pretrained(path)  # TRL builds its reference model from a path
    tok.save_pretrained(path)
    return tiny, tok, str(path)


def _grpo(tmp_path, lr, steps, cb, pretrain_steps=0):
    from trl import GRPOConfig, GRPOTrainer

    tiny, tok, path = _tiny(tmp_path, pretrain_steps)
    cfg = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=24,
        learning_rate=lr,
        max_steps=steps,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        beta=0.04,
        seed=0,
        disable_tqdm=True,
    )
    tr = GRPOTrainer(
        model=path,
        reward_funcs=[tiny.successor_reward],
        args=cfg,
        train_dataset=tiny.prompt_dataset(256),
        processing_class=tok,
        callbacks=[cb],
    )
    tr.train()
    return tr


def _dpo(tmp_path, lr, steps, cb, pretrain_steps=0):
    from trl import DPOConfig, DPOTrainer

    tiny, tok, path = _tiny(tmp_path)
    cfg = DPOConfig(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=8,
        learning_rate=lr,
        max_steps=steps,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
        max_length=32,
    )
    tr = DPOTrainer(
        model=path,
        args=cfg,
        train_dataset=tiny.preference_dataset(256),
        processing_class=tok,
        callbacks=[cb],
    )
    tr.train()
    return tr


TRAINERS = {"grpo": _grpo, "dpo": _dpo}
PRETRAIN = 200


@pytest.mark.slow
@pytest.mark.parametrize("trainer", ["grpo", "dpo"])
def test_destructive_learning_rate_stops_training_with_the_error_in_the_report(
    tmp_path, trainer, caplog
):
    from rlwatch.integrations.transformers import RLWatchCallback

    # every log evaluated: the stop lands on the step that fired, whatever this machine's speed
    # (with the default 1% budget a tiny model's fast steps are judged N logs at a time, so
    # where the stop lands depends on the CPU: test_overhead_budget_* below covers that)
    cb = RLWatchCallback(stop_on="error", html=True, overhead=None)
    max_steps = 30
    tr = TRAINERS[trainer](tmp_path, 1000.0, max_steps, cb)
    assert cb.stopped_by is not None, [c.code for c in cb.changes]
    assert str(cb.stopped_by.severity) == "error"
    assert cb.evaluations == tr.state.global_step  # one evaluation per log
    assert tr.state.global_step == cb.stop_step  # the Trainer ended on the step that fired
    assert tr.state.global_step < max_steps // 2  # stopped early (DPO at 2, GRPO at 9 here)
    out = tmp_path / "out" / "rlwatch"  # the trainer's output dir
    report = json.loads((out / "rlwatch-report.json").read_text())
    assert report["status"] == "unhealthy"
    fired = {v["code"]: v for v in report["verdicts"] if v["episodes"]}
    assert cb.stopped_by.code in fired and fired[cb.stopped_by.code]["severity"] == "error"
    text = (out / "rlwatch-report.txt").read_text()
    assert text.startswith(f"rlwatch stopped training: {cb.stopped_by.code}")
    assert cb.stopped_by.code in (out / "rlwatch-report.html").read_text()
    assert report["runs"][0]["framework"] == "trl"


@pytest.mark.slow
@pytest.mark.parametrize("trainer", ["grpo", "dpo"])
def test_healthy_run_trains_to_the_end_untouched(tmp_path, trainer):
    from rlwatch.integrations.transformers import RLWatchCallback

    cb = RLWatchCallback(stop_on="error")
    steps = 6
    tr = TRAINERS[trainer](tmp_path, 1e-5, steps, cb, pretrain_steps=PRETRAIN)
    assert cb.stopped_by is None, [(c.kind, c.code) for c in cb.changes]
    assert tr.state.global_step == steps
    assert not cb.errors
    report = json.loads((tmp_path / "out" / "rlwatch" / "rlwatch-report.json").read_text())
    assert report["status"] == "healthy"
    assert report["runs"][0]["steps"]["count"] == steps
    assert not (tmp_path / "out" / "rlwatch" / "rlwatch-report.html").exists()


def test_overhead_budget_batches_logs_when_an_evaluation_costs_more_than_its_share():
    """The 1% budget: one evaluation costing 5 ms between logs 100 ms apart (a tiny model's
    fast steps) is 5x its 1 ms share, so logs are judged 5 at a time; slow steps (real RL,
    seconds per step) are judged one by one; the batch never exceeds 50 logs."""
    from rlwatch.integrations.transformers import RLWatchCallback

    cb = RLWatchCallback()
    cb._interval = 0.1
    cb._adapt(0.005)
    assert cb.every == 5
    cb._interval = 10.0
    cb._adapt(0.005)
    assert cb.every == 1
    cb._interval = 0.001
    cb._adapt(1.0)
    assert cb.every == 50
    unbounded = RLWatchCallback(overhead=None)
    unbounded._interval = 0.001
    unbounded._adapt(1.0)
    assert unbounded.every == 1


def test_a_batched_callback_judges_a_nan_at_once_and_stops_on_it(tmp_path):
    """Even when logs are batched by the budget, a NaN is evaluated on the log that carries it."""
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from rlwatch.integrations.transformers import RLWatchCallback

    args = TrainingArguments(output_dir=str(tmp_path / "out"), report_to=[], use_cpu=True)
    cb = RLWatchCallback(stop_on="error", output_dir=tmp_path / "rw")
    state, control = TrainerState(), TrainerControl()
    cb.on_train_begin(args, state, control)
    cb.every = 50  # as if each evaluation cost 50x its budget
    for step in range(1, 8):
        state.global_step = step
        loss = float("nan") if step == 7 else 1.0 / step
        cb.on_log(args, state, control, logs={"loss": loss, "grad_norm": 0.5, "reward": 0.1})
        cb.on_step_end(args, state, control)
        if control.should_training_stop:
            break
    assert cb.evaluations == 1  # steps 1-6 waited for the batch, step 7 (NaN) flushed it
    assert control.should_training_stop and cb.stop_step == 7
    assert str(cb.stopped_by.severity) == "error"


@pytest.mark.parametrize(("tail", "status"), [(0.3, "healthy"), (0.69, "unhealthy")])
def test_a_gate_last_rule_is_announced_but_never_stops_training(tmp_path, tail, status):
    """A reward model at chance during a slow warm-up (a `gate: last` rule) must not be
    stopped: the callback announces it and the report judges it at the end, as diagnose does."""
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from rlwatch.integrations.transformers import RLWatchCallback

    rules = tmp_path / "gate.yaml"
    rules.write_text(GATE_RULES)
    args = TrainingArguments(output_dir=str(tmp_path / "out"), report_to=[], use_cpu=True)
    cb = RLWatchCallback(
        rules=[str(rules)], select=["XX01"], overhead=None, output_dir=tmp_path / "rw"
    )
    state, control = TrainerState(), TrainerControl()
    cb.on_train_begin(args, state, control)
    for step in range(1, 17):
        state.global_step = step
        cb.on_log(args, state, control, logs={"loss": 0.69 if step <= 8 else tail})
        cb.on_step_end(args, state, control)
        assert not control.should_training_stop
    cb.on_train_end(args, state, control)
    assert cb.stopped_by is None
    assert next((c.kind, c.verdict.code) for c in cb.changes) == ("fired", "XX01")  # announced
    report = json.loads((tmp_path / "rw" / "rlwatch-report.json").read_text())
    assert report["status"] == status
