"""As-of join across cadences: a rule over a dense and a sparse metric aligns them by step.

Real logs mix cadences: verl logs its training metrics every step and validation every
`test_freq` steps (and at step 0, before training); TRL logs training rows every
`logging_steps` and evaluation rows every `eval_steps`, at steps that need not coincide.
A rule that combines two such metrics must read, at each step, the last value of each metric
at or before that step (an as-of join), never only the steps where both were logged.
Every run here is written by a real writer (tensorboardX) or in the exact shape the trainer
writes (transformers' trainer_state.json), then read back through `load_run`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlwatch.api import diagnose, load_run
from rlwatch.engine.evaluate import Verdict, evaluate_frame
from rlwatch.engine.rules import load_rules

VAL = "val-core/openai/gsm8k/reward/mean@1"  # verl's validation key (val_score)
REWARD = "critic/score/mean"  # verl's training reward (reward_mean)

# validation below 0.4 while the training reward is above 0.8: two metrics, two cadences
RULES = """\
version: 1
groups:
  - name: asof
    rules:
      - code: AS01
        name: asof.val_low_reward_high
        severity: error
        description: validation below 0.4 while the training reward is above 0.8
        when:
          all:
            - threshold: {metric: val_score, below: 0.4}
            - threshold: {metric: reward_mean, above: 0.8}
        summary: "val {val_score.value} reward {reward_mean.value} at step {step}"
        checks:
          - {metric: reward_mean, hint: "h"}
        runbook: r
      - code: AS02
        name: asof.val_low_reward_high_held
        severity: error
        description: the same, held for 3 logged steps
        when:
          all:
            - threshold: {metric: val_score, below: 0.4}
            - threshold: {metric: reward_mean, above: 0.8}
        for: 3
        summary: "val {val_score.value} reward {reward_mean.value} at step {step}"
        checks:
          - {metric: reward_mean, hint: "h"}
        runbook: r
"""


def _write(run: Path, events: list[tuple[str, float, int]]) -> None:
    """Write (tag, value, step) scalars in exactly this order with tensorboardX."""
    from tensorboardX import SummaryWriter

    run.mkdir(parents=True, exist_ok=True)
    w = SummaryWriter(str(run), flush_secs=3600)
    for i, (tag, value, step) in enumerate(events):
        w.add_scalar(tag, value, step, walltime=1_700_000_000.0 + i)
    w.close()


def _verl_run(
    run: Path,
    *,
    last: int,
    reward: dict[int, float],
    val: dict[int, float],
    val_after_train: bool = False,
) -> None:
    """A verl-shaped run: validation at step 0 (before training) and every k steps, the
    training reward at every step 1..last; `val_after_train` writes each validation row after
    the training row of the same step (verl logs them in one dict, either order happens)."""
    events: list[tuple[str, float, int]] = []
    if 0 in val:
        events.append((VAL, val[0], 0))
    for step in range(1, last + 1):
        row = [(REWARD, reward[step], step)]
        if step in val:
            row = (
                [*row, (VAL, val[step], step)]
                if val_after_train
                else [(VAL, val[step], step), *row]
            )
        events += row
    _write(run, events)


def _verdicts(target: Path, tmp_path: Path) -> dict[str, Verdict]:
    rules = tmp_path / "asof.yaml"
    rules.write_text(RULES, encoding="utf-8")
    frame = load_run([str(target)])
    assert len(frame.runs) == 1
    return {v.code: v for v in evaluate_frame(frame, load_rules([rules], with_builtin=False))}


def _levels(last: int, changes: dict[int, float], first: float) -> dict[int, float]:
    """A step -> value map that starts at `first` and switches level at the given steps."""
    out, level = {}, first
    for step in range(0, last + 1):
        level = changes.get(step, level)
        out[step] = level
    return out


def test_dense_and_sparse_fire_at_the_eval_step_that_breaks(tmp_path: Path) -> None:
    # reward high from step 120; validation fine at 0, 50, 100, low from the eval at 150
    reward = _levels(200, {120: 0.9}, 0.5)
    val = {0: 0.6, 50: 0.6, 100: 0.6, 150: 0.3, 200: 0.3}
    _verl_run(tmp_path / "run", last=200, reward=reward, val=val)
    v = _verdicts(tmp_path / "run", tmp_path)["AS01"]
    assert v.state == "firing"
    (ep,) = v.episodes
    # not at 120-149 (validation's last value is still 0.6), from 150 on, at every dense step
    assert (ep.first_step, ep.last_step) == (150, 200)
    assert ep.observed["val_score.value"] == pytest.approx(0.3)


def test_the_sparse_value_is_carried_to_the_dense_step_that_breaks(tmp_path: Path) -> None:
    # validation low from the eval at 150, the reward crosses 0.8 only at 170 (no eval there)
    reward = _levels(200, {170: 0.9}, 0.5)
    val = {0: 0.6, 50: 0.6, 100: 0.6, 150: 0.3, 200: 0.3}
    _verl_run(tmp_path / "run", last=200, reward=reward, val=val)
    v = _verdicts(tmp_path / "run", tmp_path)
    (ep,) = v["AS01"].episodes
    assert (ep.first_step, ep.last_step) == (170, 200)
    assert ep.observed["val_score.value"] == pytest.approx(0.3)  # the eval at 150, as of 170
    # `for: 3` counts logged steps of the union: 170, 171, 172 (not three evaluations)
    (held,) = v["AS02"].episodes
    assert held.first_step == 172


def test_a_metric_logged_only_at_eval_steps_does_not_skip_the_rule(tmp_path: Path) -> None:
    # one bad evaluation only, the last one: the rule is evaluated and fires at once, and
    # `for: 3` still holds over the dense steps that follow it
    reward = _levels(160, {}, 0.9)
    val = {0: 0.6, 50: 0.6, 100: 0.6, 150: 0.3}
    _verl_run(tmp_path / "run", last=160, reward=reward, val=val, val_after_train=True)
    v = _verdicts(tmp_path / "run", tmp_path)
    assert v["AS01"].state == v["AS02"].state == "firing"
    assert v["AS01"].episodes[0].first_step == 150
    assert v["AS02"].episodes[0].first_step == 152


def test_a_recovered_evaluation_ends_the_episode_at_the_step_before(tmp_path: Path) -> None:
    reward = _levels(200, {}, 0.9)
    val = {0: 0.6, 50: 0.3, 100: 0.6, 150: 0.6, 200: 0.6}
    _verl_run(tmp_path / "run", last=200, reward=reward, val=val)
    v = _verdicts(tmp_path / "run", tmp_path)["AS01"]
    assert v.state == "resolved"
    (ep,) = v.episodes
    assert (ep.first_step, ep.last_step) == (50, 99)


def test_validation_before_training_at_step_zero_counts_as_of_step_one(tmp_path: Path) -> None:
    # verl's val_before_train: the only evaluation so far is at step 0, training starts at 1
    reward = _levels(20, {}, 0.9)
    _verl_run(tmp_path / "run", last=20, reward=reward, val={0: 0.2})
    (ep,) = _verdicts(tmp_path / "run", tmp_path)["AS01"].episodes
    assert (ep.first_step, ep.last_step) == (1, 20)


def test_an_evaluation_written_late_is_aligned_at_its_own_step(tmp_path: Path) -> None:
    # an asynchronous evaluator writes the result for step 50 after the trainer reached 55:
    # the value belongs to step 50, it is not a restart, and it is not dated 55
    events: list[tuple[str, float, int]] = [(VAL, 0.6, 0)]
    for step in range(1, 101):
        events.append((REWARD, 0.9, step))
        if step == 55:
            events.append((VAL, 0.3, 50))
    events.append((VAL, 0.6, 100))
    _write(tmp_path / "run", events)
    frame = load_run([str(tmp_path / "run")])
    assert not next(iter(frame.runs.values())).restarts
    (ep,) = _verdicts(tmp_path / "run", tmp_path)["AS01"].episodes
    assert (ep.first_step, ep.last_step) == (50, 99)


def test_a_resumed_run_uses_the_last_write_of_a_relogged_step(tmp_path: Path) -> None:
    # first segment: a broken evaluation at step 100, then the job dies at 110; resumed from
    # the step-100 checkpoint it re-logs steps 100.. with a sound evaluation at 100. The
    # stale evaluation is superseded: nothing fires between 100 and 150.
    events: list[tuple[str, float, int]] = [(VAL, 0.6, 0)]
    for step in range(1, 111):
        if step in (50, 100):
            events.append((VAL, 0.6 if step == 50 else 0.3, step))
        events.append((REWARD, 0.9, step))
    for step in range(100, 201):
        if step in (100, 150, 200):
            events.append((VAL, 0.6 if step == 100 else 0.3, step))
        events.append((REWARD, 0.9, step))
    _write(tmp_path / "run", events)
    frame = load_run([str(tmp_path / "run")])
    info = next(iter(frame.runs.values()))
    assert [r.step for r in info.restarts] == [100]
    (ep,) = _verdicts(tmp_path / "run", tmp_path)["AS01"].episodes
    assert (ep.first_step, ep.last_step) == (150, 200)


def test_a_duplicated_write_of_the_same_step_keeps_the_last_value(tmp_path: Path) -> None:
    # the same evaluation written twice (a logger that logs a dict twice, as slime does):
    # first 0.3, then corrected to 0.6; the last write wins and nothing fires
    events: list[tuple[str, float, int]] = [(VAL, 0.6, 0)]
    for step in range(1, 101):
        events.append((REWARD, 0.9, step))
        if step == 50:
            events += [(VAL, 0.3, 50), (VAL, 0.6, 50)]
    _write(tmp_path / "run", events)
    v = _verdicts(tmp_path / "run", tmp_path)["AS01"]
    assert v.state == "ok" and not v.episodes


def _trainer_state(path: Path, rows: list[dict[str, float]]) -> None:
    """transformers' trainer_state.json: train rows and eval rows in one log_history."""
    state = {
        "best_metric": None,
        "epoch": 1.0,
        "eval_steps": 25,
        "global_step": max(int(r["step"]) for r in rows),
        "is_world_process_zero": True,
        "log_history": rows,
        "logging_steps": 10,
        "max_steps": 100,
        "num_train_epochs": 1,
        "trial_name": None,
    }
    path.write_text(json.dumps(state, indent=2), encoding="utf-8")


def test_trl_eval_rows_between_logging_steps(tmp_path: Path) -> None:
    # TRL GRPO: training rows every 10 steps, evaluation rows every 25 (25 and 75 fall between
    # two training rows). Validation drops at the eval of step 75 while the reward is high.
    train = [
        {
            "epoch": step / 100,
            "grad_norm": 0.5,
            "learning_rate": 1e-6,
            "loss": 0.01,
            "reward": 0.5 if step < 40 else 0.9,
            "reward_std": 0.3,
            "frac_reward_zero_std": 0.1,
            "completions/mean_length": 120.0,
            "step": step,
        }
        for step in range(10, 101, 10)
    ]
    evals = [_eval_row(step) for step in (25, 50, 75, 100)]
    # log_history order: by step, the training row before the eval row of the same step
    rows = sorted(train + evals, key=lambda r: (r["step"], "eval_loss" in r))
    assert [r["step"] for r in rows if "eval_loss" in r] == [25, 50, 75, 100]
    _trainer_state(tmp_path / "trainer_state.json", rows)
    v = _verdicts(tmp_path / "trainer_state.json", tmp_path)
    (ep,) = v["AS01"].episodes
    # fires at the eval step itself (75), with the reward of the training row at 70
    assert (ep.first_step, ep.last_step) == (75, 100)
    assert ep.observed["reward_mean.value"] == pytest.approx(0.9)
    # held for 3 logged steps of the union: 75, 80, 90
    assert v["AS02"].episodes[0].first_step == 90


def _eval_row(step: int) -> dict[str, float]:
    return {
        "epoch": step / 100,
        "eval_loss": 0.02,
        "eval_reward": 0.6 if step < 75 else 0.3,
        "eval_runtime": 3.2,
        "eval_samples_per_second": 10.0,
        "eval_steps_per_second": 1.0,
        "step": step,
    }


def test_the_shipped_validation_rule_reads_a_sparse_validation(tmp_path: Path) -> None:
    # VL01 (validation falls while the training reward rises) on a verl run with validation
    # every 10 steps: the rule is evaluated (not skipped) and fires once the falling
    # evaluations are in
    last = 150
    reward = {s: 0.5 + 0.4 * s / last for s in range(0, last + 1)}
    val = {s: (0.6 if s <= 90 else 0.6 - 0.05 * (s - 90) / 10) for s in range(0, last + 1, 10)}
    _verl_run(tmp_path / "run", last=last, reward=reward, val=val)
    report = diagnose(str(tmp_path / "run"), select=["VL01"])
    (v,) = [x for x in report.verdicts if x.code == "VL01"]
    assert v.state == "firing", v.reason
    # the trend of the 6 last evaluations first passes -5% at the eval of step 110; `for: 3`
    # holds over the dense steps 110, 111, 112 (three evaluations would take until 130)
    assert (v.episodes[0].first_step, v.episodes[0].last_step) == (112, last)


RATIO = """\
version: 1
groups:
  - name: asof
    rules:
      - code: AS03
        name: asof.reward_over_val
        severity: error
        description: the training reward is more than 2x the validation score
        when:
          threshold: {metric: reward_mean, divided_by: val_score, above: 2.0}
        summary: "reward / val {value:.2f} at step {step}"
        checks:
          - {metric: reward_mean, hint: "h"}
        runbook: r
"""


def test_a_ratio_of_two_cadences_is_taken_as_of_each_step(tmp_path: Path) -> None:
    # `divided_by` a sparse metric: reward (every step) over validation (every 50 steps):
    # validation falls to 0.3 at the eval of 150 while the reward is 0.9 (ratio 3); the
    # ratio must be read at every step from 150 on, not only where both were logged
    reward = _levels(200, {}, 0.9)
    val = {0: 0.6, 50: 0.6, 100: 0.6, 150: 0.3}
    _verl_run(tmp_path / "run", last=200, reward=reward, val=val)
    rules = tmp_path / "ratio.yaml"
    rules.write_text(RATIO, encoding="utf-8")
    frame = load_run([str(tmp_path / "run")])
    (v,) = evaluate_frame(frame, load_rules([rules], with_builtin=False))
    assert v.state == "firing", v.reason
    (ep,) = v.episodes
    assert (ep.first_step, ep.last_step) == (150, 200)
    assert ep.observed["value"] == pytest.approx(3.0)
