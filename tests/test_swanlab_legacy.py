"""SwanLab runs written by pre-0.7 clients (swanlab 0.5.9 and 0.6.13 in local mode, the real
clients: see tests/swanlab_legacy/README.md), read without the swanlab package.

0.5.9 leaves `logs/<column number>/1000.log` JSON lines and the column keys in swanboard's
database beside the run; 0.6.13 leaves the same plus `backup.swanlab`, a record file of JSON
records (format version 1). Both read with the values the writer logged (write_run.py)."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from rlwatch.sources import discover, load
from rlwatch.sources import swanlab as sw

HERE = Path(__file__).parent / "swanlab_legacy"
V05, V06 = HERE / "swanlab-0.5.9", HERE / "swanlab-0.6.13"
STEPS = list(range(1, 31))
LOGGED = {  # what write_run.py logged
    "actor/entropy": [0.6 if s <= 15 else 0.004 for s in STEPS],
    "actor/grad_norm": [0.5 + s / 100 for s in STEPS],
    "critic/score/mean": [0.2 + s / 100 for s in STEPS],
    "response_length/mean": [300.0 + s for s in STEPS],
    "actor/pg_clipfrac": [math.nan if s == 20 else 0.01 for s in STEPS],
    "actor/ppo_kl": [math.inf if s == 21 else 0.001 for s in STEPS],
}


def _series(frame, tag: str) -> tuple[list[int], np.ndarray]:
    d = frame.data[frame.data["tag"] == tag].sort_values("step")
    return d["step"].tolist(), d["value"].to_numpy()


def _check(frame) -> None:
    (name,) = frame.runs
    info = frame.runs[name]
    assert name == "grpo-legacy"
    assert info.hparams["swanlab/project"] == "rlwatch-legacy"
    assert info.hparams["lr"] == 1e-6 and info.hparams["algo"] == "grpo"
    assert info.metrics["entropy"] == "actor/entropy"
    assert info.metrics["reward_mean"] == "critic/score/mean"
    for tag, values in LOGGED.items():
        steps, got = _series(frame, tag)
        assert steps == STEPS, tag
        np.testing.assert_array_equal(got, np.asarray(values), err_msg=tag)
    assert frame.data["wall_time"].notna().all()  # create_time, ISO in UTC


@pytest.mark.parametrize("logdir", [V05, V06], ids=["0.5.9", "0.6.13"])
def test_pre_0_7_local_runs_read_with_the_logged_values(logdir: Path) -> None:
    found = discover(logdir)
    assert [(f.kind, f.paths[0].parent.name == "swanlog") for f in found.runs] == [
        ("swanlab", False)
    ]
    assert found.skipped == []  # swanboard's runs.swanlab (SQLite) is not a run
    _check(load([str(logdir)]))


def test_0_6_record_file_and_logs_folder_agree(tmp_path: Path) -> None:
    """0.6.13 writes both layouts: the record file (read when present: it names system columns
    too) and, without it, the logs/ folder with names from swanboard's database."""
    (record,) = V06.glob("run-*/backup.swanlab")
    assert sw.version(record.read_bytes()) == 1
    from_record = load([str(record)])
    copy = tmp_path / "swanlog"
    shutil.copytree(V06, copy)
    next(copy.glob("run-*/backup.swanlab")).unlink()
    from_logs = load([str(copy)])
    for frame in (from_record, from_logs):
        _check(frame)
    (info,) = from_record.runs.values()
    assert any(t.startswith("__swanlab__.cpu") for t in info.unmapped)  # system columns, named


def test_without_swanboards_database_columns_are_numbered(tmp_path: Path) -> None:
    copy = tmp_path / "swanlog"
    shutil.copytree(V05, copy)
    (copy / "runs.swanlab").unlink()
    frame = load([str(copy)])
    (info,) = frame.runs.values()
    assert "column 0" in info.unmapped and not info.metrics
    assert any("runs.swanlab" in w for w in info.warnings)
    steps, values = _series(frame, "column 0")  # the first column logged: entropy
    assert steps == STEPS and values.tolist() == LOGGED["actor/entropy"]


def test_a_diagnosis_of_a_legacy_run_sees_the_entropy_collapse() -> None:
    import json

    from typer.testing import CliRunner

    from rlwatch.cli.app import app

    r = CliRunner().invoke(app, ["diagnose", str(V05), "-f", "json", "--fail-on", "warning"])
    assert r.exit_code == 1, r.output
    fired = {v["code"] for v in json.loads(r.stdout)["verdicts"] if v["episodes"]}
    assert "EX01" in fired  # entropy 0.6 -> 0.004 at step 16
