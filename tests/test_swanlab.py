"""SwanLab runs written by the real swanlab client in offline mode (nothing leaves the machine:
the writer runs with outbound connections refused) read with the same values as their
TensorBoard twins."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
from conftest import write_tbx
from test_trackio import GUARD

from rlwatch.errors import SourceError
from rlwatch.sources import load, resolve
from rlwatch.sources import swanlab as sw

pytest.importorskip("swanlab")

SERIES = {
    "actor/entropy": [0.5 - 0.015625 * s for s in range(20)],
    "actor/grad_norm": [0.25 + (4.0 if s == 12 else 0.0) for s in range(20)],
    "critic/score/mean": [0.125 * (s % 8) for s in range(20)],
}


def write_swanlab(logdir: Path, body: str) -> None:
    env = {"HOME": str(logdir.parent), "PATH": "/usr/bin:/bin", "SWANLAB_SAVE_DIR": str(logdir)}
    code = GUARD + "import math, swanlab\n" + textwrap.dedent(body)
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        timeout=240,
        cwd=logdir.parent,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    debug = "".join(p.read_text() for p in logdir.rglob("debug.log"))
    assert "network contact attempted" not in debug + out.stderr + out.stdout


def _canon(frame) -> pd.DataFrame:
    d = frame.data[["metric", "tag", "step", "value"]].astype({"metric": str, "tag": str})
    return d.sort_values(["tag", "step"]).reset_index(drop=True)


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("swanlab") / "swanlog"
    root.mkdir()
    write_swanlab(
        root,
        f"""
        series = {SERIES!r}
        logdir = {str(root)!r}
        swanlab.init(project="sweep", experiment_name="verl-run", mode="offline",
                     logdir=logdir, config={{"lr": 1e-6}})
        for s in range(20):
            swanlab.log({{k: v[s] for k, v in series.items()}}, step=s)
        swanlab.finish()
        swanlab.init(project="sweep", experiment_name="nemo-run", mode="offline", logdir=logdir)
        for s in range(6):
            swanlab.log({{"train/loss": 1.0 / (s + 1), "train/grad_norm":
                         [0.5, math.nan, math.inf, 0.5, 0.5, 0.5][s]}}, step=s + 1)
        swanlab.finish()
        """,
    )
    return root


def test_same_values_as_tensorboard(logdir: Path, tmp_path: Path) -> None:
    write_tbx(tmp_path / "tb", SERIES)
    tb = _canon(load([str(tmp_path / "tb")]))
    (record,) = [p for p in sw.find_runs(logdir) if sw.load_file(p).runs.get("verl-run")]
    twin = _canon(sw.load_file(record))
    pd.testing.assert_frame_equal(tb, twin)
    assert set(twin["metric"]) == {"entropy", "grad_norm", "reward_mean"}


def test_folder_of_runs_sniffed(logdir: Path) -> None:
    frame = resolve(str(logdir))()
    assert sorted(frame.runs) == ["nemo-run", "verl-run"]
    info = frame.runs["verl-run"]
    assert info.source == "swanlab" and info.hparams["lr"] == 1e-6
    assert info.hparams["swanlab/project"] == "sweep"
    # a run folder and its record file are targets too
    (record,) = [p for p in sw.find_runs(logdir) if "nemo" in str(sw.load_file(p).runs)]
    assert list(resolve(str(record.parent))().runs) == ["nemo-run"]
    assert list(resolve(str(record))().runs) == ["nemo-run"]


def test_nonfinite_values_kept(logdir: Path) -> None:
    frame = load([str(logdir)])
    d = frame.data[(frame.data["run"] == "nemo-run") & (frame.data["metric"] == "grad_norm")]
    v = d.sort_values("step")["value"].tolist()
    assert len(v) == 6 and v[1] != v[1] and v[2] == float("inf")
    assert sorted(d["step"]) == [1, 2, 3, 4, 5, 6]


def test_cut_off_tail_and_bad_header(logdir: Path, tmp_path: Path) -> None:
    (record,) = [p for p in sw.find_runs(logdir) if "verl" in str(sw.load_file(p).runs)]
    data = record.read_bytes()
    cut = tmp_path / "run-cut.swanlab"
    cut.write_bytes(data[: len(data) - 5])  # a live run: the last record half-written
    full = sw.load_file(record).data
    part = sw.load_file(cut).data
    assert 0 < len(part) <= len(full)
    bad = tmp_path / "run-bad.swanlab"
    bad.write_bytes(b":SWL" + data[4:6] + bytes([9]) + data[7:])
    with pytest.raises(SourceError, match="format version 9"):
        sw.load_file(bad)
