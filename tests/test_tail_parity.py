"""tail and diagnose agree: every fixture and corpus run is written again, in random bursts (cut
anywhere: inside a record, inside a line), while `tail` follows it; what tail reported must be
what `diagnose --format json` says about the final files: the same rule codes with the same
first and last step for every episode."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
from conftest import FIXTURES
from typer.testing import CliRunner

from rlwatch.cli.app import app
from rlwatch.engine.rules import load_rules
from rlwatch.live import Watch

METRIC_FILES = ("events.out.tfevents.", ".jsonl", ".log", ".wandb", ".txt", ".json")


def _runs() -> list[Path]:
    runs = [
        p for p in sorted(FIXTURES.iterdir()) if p.is_dir() and p.name not in ("realgen", "bad")
    ]
    corpus = FIXTURES / "realgen" / "runs"
    if corpus.is_dir():
        runs += sorted(p for p in corpus.iterdir() if p.is_dir())
    return [r for r in runs if any(_is_metric(f) for f in r.rglob("*") if f.is_file())]


def _is_metric(f: Path) -> bool:
    return any(k in f.name for k in METRIC_FILES) and f.name not in ("config.json",)


def _episodes(verdicts: list[dict]) -> list[tuple[str, str, int, int]]:
    return sorted(
        (v["run"], v["code"], e["first_step"], e["last_step"])
        for v in verdicts
        for e in v["episodes"]
    )


def _replay(src: Path, dst: Path, seed: int) -> Watch:
    """Copy `src` to `dst` file by file in random bursts, polling a Watch in between."""
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
    watch = Watch([str(dst)], load_rules(), stale_after=1e9, stall_floor=1e9)
    watch.poll()  # nothing there yet: waiting
    assert watch.waiting
    for data, out in todo:
        if out.name.endswith(".json"):  # trainer_state.json: rewritten whole at checkpoints
            out.write_bytes(data)
            watch.poll()
            continue
        at = 0
        while at < len(data):
            n = rng.choice([1, 7, 100, 1000, 10_000, 50_000])
            with open(out, "ab") as fh:
                fh.write(data[at : at + n])
            at += n
            if rng.random() < 0.7:
                watch.poll()
    watch.poll()
    return watch


@pytest.mark.slow
@pytest.mark.parametrize("run", _runs(), ids=lambda p: p.name)
def test_tail_reports_what_diagnose_reports(run: Path, tmp_path: Path) -> None:
    dst = tmp_path / run.name
    dst.mkdir()
    watch = _replay(run, dst, seed=len(run.name))
    tail = _episodes([v.to_dict() for v in watch.verdicts()])
    r = CliRunner().invoke(app, ["diagnose", str(dst), "--format", "json", "--exit-zero"])
    assert r.exit_code == 0, r.output
    diagnose = _episodes(json.loads(r.stdout)["verdicts"])
    assert tail == diagnose
    assert watch.evaluations > 0
