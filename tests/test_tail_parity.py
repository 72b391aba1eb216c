"""tail and diagnose agree: every fixture and corpus run is written again, in random bursts (cut
anywhere: inside a record, inside a line), while `tail` follows it; what tail reported must be
what `diagnose --format json` says about the final files: the same rule codes with the same
first and last step for every episode."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES
from typer.testing import CliRunner

from rlwatch.cli.app import app
from rlwatch.engine.rules import load_rules
from rlwatch.live import Watch

METRIC_FILES = (
    "events.out.tfevents.",
    ".jsonl",
    ".log",
    ".out",  # a console redirected by nohup or Slurm
    ".wandb",
    ".txt",
    ".json",
    ".ipynb",
    ".csv",
    ".tsv",  # a table pasted as tab-separated values
    ".md",  # a console saved as Markdown (README.md and SOURCE.md are never runs)
    ".html",
    ".swanlab",  # a SwanLab run's record file (appended as it trains)
    ".db",  # a trackio project (SQLite: rewritten in place, given whole below)
    "out.sh",  # a console saved under a script's name (read by its content)
)


CORPUS = FIXTURES / "realgen" / "runs"


def _runs() -> list[Path]:
    runs = [
        p
        for p in sorted(FIXTURES.iterdir())
        if p.is_dir() and p.name not in ("realgen", "bad", "public")
    ]
    # each public run on its own: replayed as one folder of 100 runs, every poll walks them all
    # (the suite's longest test, quadratic in the runs)
    runs += sorted(p.parent for p in (FIXTURES / "public").glob("*/SOURCE.md"))
    if CORPUS.is_dir():
        runs += sorted(p for p in CORPUS.iterdir() if p.is_dir())
    return [r for r in runs if any(_is_metric(f) for f in r.rglob("*") if f.is_file())]


def _is_metric(f: Path) -> bool:
    return any(k in f.name for k in METRIC_FILES) and f.name not in ("config.json",)


def _episodes(verdicts: list[dict]) -> list[tuple[str, str, int, int]]:
    return sorted(
        (v["run"], v["code"], e["first_step"], e["last_step"])
        for v in verdicts
        for e in v["episodes"]
    )


def _replay(
    src: Path, dst: Path, seed: int, keep_rows: bool = False, poll_share: float = 0.7
) -> Watch:
    """Copy `src` to `dst` file by file in random bursts, polling a Watch after `poll_share` of
    them."""
    rng = random.Random(seed)
    files = sorted(
        (f for f in src.rglob("*") if f.is_file()), key=lambda f: (f.stat().st_mtime, f.name)
    )
    todo = []
    for f in files:
        out = dst / f.relative_to(src)
        out.parent.mkdir(parents=True, exist_ok=True)
        if _is_metric(f):
            todo.append((f.read_bytes(), out))
        else:
            shutil.copy2(f, out)
    watch = Watch([str(dst)], load_rules(), stale_after=1e9, stall_floor=1e9, keep_rows=keep_rows)
    watch.poll()  # nothing there yet: waiting
    assert watch.waiting
    for data, out in todo:
        # trainer_state.json is rewritten whole at checkpoints, a notebook whole when saved,
        # a SQLite store in place (never as a growing prefix)
        if out.name.endswith((".json", ".ipynb", ".db")):
            out.write_bytes(data)
            watch.poll()
            continue
        at = 0
        # at most ~25 bursts a file (a folder of dozens of runs is walked at every poll)
        floor = len(data) // 25
        while at < len(data):
            n = max(floor, rng.choice([1, 7, 100, 1000, 10_000, 50_000]))
            with open(out, "ab") as fh:
                fh.write(data[at : at + n])
            at += n
            if rng.random() < poll_share:
                watch.poll()
    watch.poll()
    return watch


# known differences, found when the public runs were replayed one by one (28 Nov)
TAIL_DIFFERS: dict[str, str] = {}  # run name -> why tail reports otherwise (strict xfail)


def _cases() -> list[Any]:
    return [
        pytest.param(r, marks=pytest.mark.xfail(strict=True, reason=TAIL_DIFFERS[r.name]))
        if r.name in TAIL_DIFFERS
        else r
        for r in _runs()
    ]


@pytest.mark.slow
@pytest.mark.parametrize("run", _cases(), ids=lambda p: p.name)
def test_tail_reports_what_diagnose_reports(run: Path, tmp_path: Path) -> None:
    """Every fixture and public run (each on its own), polled after 70% of the bursts; the 675 corpus runs (TRL's
    shapes again and again, in every writer) after 35%, the same cuts at half the polls: the
    suite's longest test, kept within the suite's time."""
    dst = tmp_path / run.name
    dst.mkdir()
    share = 0.35 if run.parent == CORPUS else 0.7
    watch = _replay(run, dst, seed=len(run.name), poll_share=share)
    tail = _episodes([v.to_dict() for v in watch.verdicts()])
    r = CliRunner().invoke(app, ["diagnose", str(dst), "--format", "json", "--exit-zero"])
    assert r.exit_code == 0, r.output
    diagnose = _episodes(json.loads(r.stdout)["verdicts"])
    assert tail == diagnose
    assert watch.evaluations > 0


def _verl_log(val_in_steps: bool) -> str:
    """A verl console log with `Initial/Final validation metrics: {...}` lines (as verl's
    trainer prints them), its step lines carrying the validation keys or not."""
    out = [
        "(TaskRunner pid=1) Initial validation metrics: {'val-core/openai/gsm8k/reward/mean@1':"
        " 0.62, 'val-aux/num_turns/min': 2}"
    ]
    for s in range(1, 41):
        entropy = 0.6 if s < 20 else 0.6 * 0.8 ** (s - 19)
        line = (
            f"(TaskRunner pid=1) step:{s} - actor/entropy:{entropy:.4f} - actor/grad_norm:0.5"
            f" - critic/score/mean:{0.2 + s / 100:.3f} - actor/pg_loss:0.01"
        )
        if val_in_steps and s % 10 == 0:
            line += f" - val-core/openai/gsm8k/reward/mean@1:{0.6 - s / 200:.3f}"
        out.append(line)
    out.append(
        "(TaskRunner pid=1) Final validation metrics: {'val-core/openai/gsm8k/reward/mean@1':"
        " 0.31, 'val-aux/num_turns/min': 2}"
    )
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("val_in_steps", [False, True], ids=["dicts-only", "dicts-repeat-steps"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_initial_and_final_validation_rows_live_as_in_diagnose(
    tmp_path: Path, val_in_steps: bool, seed: int
) -> None:
    """verl's Initial/Final validation dicts count only where no step line logs their keys
    (diagnose's reader); tail, fed in random bursts, ends with the same rows and verdicts."""
    from rlwatch.sources import load

    src = tmp_path / "src"
    src.mkdir()
    (src / "train.log").write_text(_verl_log(val_in_steps))
    dst = tmp_path / "run"
    dst.mkdir()
    watch = _replay(src, dst, seed, keep_rows=True)
    seen = watch.rows()
    batch = load([str(dst)]).data
    key = ["metric", "step", "value"]

    def rows(d):
        d = d[key].astype({"metric": str})
        return sorted(map(tuple, d.itertuples(index=False)))

    assert rows(seen) == rows(batch)
    val = batch[batch["metric"].astype(str) == "val_score"]
    assert len(val) == (4 if val_in_steps else 2)  # the dicts only when no step line has them
    tail = _episodes([v.to_dict() for v in watch.verdicts()])
    r = CliRunner().invoke(app, ["diagnose", str(dst), "--format", "json", "--exit-zero"])
    assert tail == _episodes(json.loads(r.stdout)["verdicts"])


@pytest.mark.parametrize("seed", [0, 1])
def test_a_metric_with_no_finite_value_fires_in_tail_as_in_diagnose(
    tmp_path: Path, seed: int
) -> None:
    """No value is not healthy: a metric a rule needs, logged as NaN at every step (here the
    loss and grad_norm), makes the rule fire in diagnose; tail, fed the file in bursts, fires
    the same rules over the same steps (it used to skip them and exit 0). The entropy is NaN
    for its first 12 logs and then has values: fired while it had none, judged as any metric
    once it has."""
    src = tmp_path / "src"
    src.mkdir()
    lines = []
    for s in range(1, 41):
        rec = {"step": s, "loss": float("nan"), "grad_norm": float("nan"), "reward": 0.5}
        rec["entropy"] = float("nan") if s <= 12 else 0.6
        lines.append(json.dumps(rec))
    (src / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    dst = tmp_path / "run"
    dst.mkdir()
    watch = _replay(src, dst, seed)
    tail = _episodes([v.to_dict() for v in watch.verdicts()])
    r = CliRunner().invoke(app, ["diagnose", str(dst), "--format", "json", "--exit-zero"])
    diagnose = _episodes(json.loads(r.stdout)["verdicts"])
    assert tail == diagnose
    fired = {code for _, code, _, _ in tail}
    assert {"ST03", "ST05"} <= fired  # grad_norm and loss without a value
    assert not any(code.startswith("EX") for code in fired)  # the entropy has values now
    once = CliRunner().invoke(app, ["tail", str(dst), "--once", "--plain", "--exit-on", "error"])
    assert once.exit_code == 1, once.output
    assert "loss has no finite value at all" in once.output


def test_a_metric_nan_at_its_first_log_only_does_not_stop_a_watched_run() -> None:
    """Live (tail's watchdog, the training callback's stop): an entropy NaN at its first log
    and finite after it is reported by no rule; one with no finite value fires the entropy
    rules once it was NaN on 3 logs, not before (no value is not healthy, and 3 logs are the
    evidence a run needs)."""
    from rlwatch.engine.incremental import Evaluator

    rules = load_rules()
    first_only, always = Evaluator(rules, run="a"), Evaluator(rules, run="b")
    fired: dict[str, list[tuple[int, str]]] = {"a": [], "b": []}
    for step in range(1, 8):
        logs = {"loss": 0.5, "grad_norm": 0.3, "reward": 0.5}
        entropy = float("nan") if step == 1 else 0.6
        for ch in first_only.log(step, logs | {"entropy": entropy}):
            fired["a"] += [(step, ch.code)] if ch.kind == "fired" else []
        for ch in always.log(step, logs | {"entropy": float("nan")}):
            fired["b"] += [(step, ch.code)] if ch.kind == "fired" else []
    assert not [c for _, c in fired["a"] if c.startswith("EX")], fired["a"]
    ex = [(s, c) for s, c in fired["b"] if c.startswith("EX")]
    assert (3, "EX01") in ex and all(s >= 3 for s, _ in ex), fired["b"]
    assert any(v.code == "EX01" and v.state == "firing" for v in always.verdicts())
    # EX05 judges the entropy of sampled responses, in a run that logs their length: this
    # run logs none, and no value of its entropy could make EX05 fire here
    assert not any(c == "EX05" for _, c in ex), fired["b"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_file_of_single_samples_lives_as_diagnose_reads_it(tmp_path: Path, seed: int) -> None:
    """A per-sample JSONL (one record per completion, several a step) fed in random bursts: a
    step cut between polls is averaged again when its other samples come, so tail ends with
    diagnose's per-step means and verdicts (the reward collapses at step 30: RW01)."""
    from rlwatch.sources import load

    src = tmp_path / "src"
    src.mkdir()
    lines = []
    for s in range(1, 61):
        for k in range(8):
            good = k < (6 if s < 30 else 0) + (k == 0 and s >= 30)
            rec = {"step": s, "prompt": "Solve 12 * 7 and explain briefly.", "reward": float(good)}
            lines.append(json.dumps(rec))
    (src / "rollouts.jsonl").write_text("\n".join(lines) + "\n")
    dst = tmp_path / "run"
    dst.mkdir()
    watch = _replay(src, dst, seed, keep_rows=True)
    seen = watch.rows()
    last = seen.drop_duplicates(["metric", "step"], keep="last")  # a step sent again: its mean
    batch = load([str(dst)]).data

    def rows(d):
        d = d[["metric", "step", "value"]].astype({"metric": str})
        return sorted(map(tuple, d.itertuples(index=False)))

    assert rows(last) == rows(batch)
    assert sorted(batch["value"].unique()) == [0.125, 0.75]
    tail = _episodes([v.to_dict() for v in watch.verdicts()])
    r = CliRunner().invoke(app, ["diagnose", str(dst), "--format", "json", "--exit-zero"])
    diagnose = _episodes(json.loads(r.stdout)["verdicts"])
    assert tail == diagnose
    assert any(code.startswith("RW") for _, code, _, _ in diagnose)


def test_a_folder_of_chart_exports_is_named_by_its_run_from_the_first_chart_on(
    tmp_path: Path,
) -> None:
    """W&B's export of each chart of a run (a CSV each, `<run> - <key>` columns) is one run
    named by the export's run, in diagnose and in tail, while only the first chart is written
    and once the second arrives (tail had named it by its first chart's file until then)."""
    from rlwatch.sources import load

    def chart(name: str, key: str, values: list[float]) -> None:
        head = ",".join(f'"{c}"' for c in ["Step"] + [f"grpo-7b - {key}{x}" for x in ("", "__MIN")])
        rows = [",".join(f'"{c}"' for c in (s, v, v)) for s, v in enumerate(values, 1)]
        (tmp_path / name).write_text("\n".join([head, *rows]) + "\n")

    watch = Watch([str(tmp_path)], load_rules(), stale_after=1e9, stall_floor=1e9)
    chart("entropy.csv", "actor/entropy", [0.5 - 0.001 * s for s in range(40)])
    watch.poll()
    assert list(load(str(tmp_path)).runs) == ["grpo-7b"]
    assert sorted(watch.runs) == ["grpo-7b"]
    chart("reward.csv", "critic/score/mean", [0.2 + 0.01 * s for s in range(40)])
    watch.poll()
    frame = load(str(tmp_path))
    assert list(frame.runs) == ["grpo-7b"]
    assert sorted(frame.data["metric"].unique()) == ["entropy", "reward_mean"]
    assert sorted(watch.runs) == ["grpo-7b"]


def test_a_console_followed_before_its_wandb_file_appears_is_that_run(tmp_path: Path) -> None:
    """A log in a folder that a `.wandb` file later claims (a W&B run folder copied flat, its
    console first): diagnose never lists the log beside the `.wandb`; tail, which followed it
    first, drops it once the W&B run appears and ends with diagnose's runs and verdicts."""
    wandb_file = FIXTURES / "tinker-rlvr-qwen3-4b-rubric" / "run-8zwal4ai.wandb"
    watch = Watch([str(tmp_path)], load_rules(), stale_after=1e9, stall_floor=1e9)
    console = "".join(
        f"step:{s} - critic/score/mean:{0.1 + s / 100} - actor/entropy:0.5\n" for s in range(30)
    )
    (tmp_path / "output.log").write_text(console)
    watch.poll()
    assert len(watch.runs) == 1
    shutil.copy(wandb_file, tmp_path / wandb_file.name)
    watch.poll()
    r = CliRunner().invoke(app, ["diagnose", str(tmp_path), "--format", "json", "--exit-zero"])
    report = json.loads(r.stdout)
    assert sorted(watch.runs) == sorted(run["name"] for run in report["runs"])
    assert len(watch.runs) == 1
    tail = _episodes([v.to_dict() for v in watch.verdicts()])
    assert tail == _episodes(report["verdicts"])
