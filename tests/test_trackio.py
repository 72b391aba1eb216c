"""trackio projects written by the real trackio client (local SQLite store) read with the same
values as their TensorBoard twins, while WAL mode lets the reader in during training."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
from conftest import write_tbx

from rlwatch.errors import SourceError
from rlwatch.sources import load, resolve
from rlwatch.sources import trackio as tr

pytest.importorskip("trackio")

SERIES = {
    "actor/entropy": [0.5 - 0.015625 * s for s in range(20)],
    "actor/grad_norm": [0.25 + (4.0 if s == 12 else 0.0) for s in range(20)],
    "critic/score/mean": [0.125 * (s % 8) for s in range(20)],
}

GUARD = """
import socket
def _no_network(self, addr):
    if isinstance(addr, tuple) and addr[0] not in ("127.0.0.1", "localhost", "::1"):
        raise RuntimeError(f"network contact attempted: {addr}")
    return _connect(self, addr)
_connect = socket.socket.connect
socket.socket.connect = _no_network
"""


def write_trackio(tmp_path: Path, body: str) -> Path:
    """Run `body` with the real trackio client writing into tmp_path/trackio; no network."""
    env = {
        "TRACKIO_DIR": str(tmp_path / "trackio"),
        "HF_HUB_OFFLINE": "1",
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
    }
    code = GUARD + "import math, trackio\n" + textwrap.dedent(body)
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=240, cwd=tmp_path)
    return tmp_path / "trackio"


def _canon(frame) -> pd.DataFrame:
    d = frame.data[["metric", "tag", "step", "value"]].astype({"metric": str, "tag": str})
    return d.sort_values(["tag", "step"]).reset_index(drop=True)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("trackio")
    store = write_trackio(
        tmp,
        f"""
        series = {SERIES!r}
        trackio.init(project="sweep", name="verl-run", config={{"lr": 1e-6, "seed": 3}})
        for s in range(20):
            trackio.log({{k: v[s] for k, v in series.items()}}, step=s)
        trackio.finish()
        # the transformers callback: no step; train/global_step is the real one
        trackio.init(project="sweep", name="trl-run")
        for s in range(5):
            trackio.log({{"loss": 1.0 / (s + 1), "entropy": 0.5, "train/global_step": 10 * s}})
        trackio.finish()
        trackio.init(project="sweep", name="nonfinite")
        for s in range(4):
            trackio.log({{"actor/grad_norm": [0.5, math.nan, math.inf, -math.inf][s]}}, step=s)
        trackio.finish()
        """,
    )
    return store / "sweep.db"


def test_same_values_as_tensorboard(project: Path, tmp_path: Path) -> None:
    write_tbx(tmp_path / "tb", SERIES)
    tb = _canon(load([str(tmp_path / "tb")]))
    whole = load([str(project)])
    twin = _canon(tr.load(project, "verl-run"))
    pd.testing.assert_frame_equal(tb, twin)
    assert set(twin["metric"]) == {"entropy", "grad_norm", "reward_mean"}
    d = whole.data[whole.data["run"] == "verl-run"]
    assert len(d) == len(tb)


def test_a_project_beside_its_twin_is_one_run(project: Path, tmp_path: Path) -> None:
    """A run logged to trackio and TensorBoard at once (report_to=["tensorboard", "trackio"])
    is one run of its folder in diagnose (the many-run executor) as in sources.load; the
    project's other runs stay runs of their own."""
    import shutil

    from typer.testing import CliRunner

    from rlwatch.cli.app import app

    out = tmp_path / "out"  # the trainer's output folder, TRACKIO_DIR set to it
    write_tbx(out / "runs" / "Nov27_00-41-49_vm", SERIES)
    shutil.copy(project, out / "sweep.db")
    r = CliRunner().invoke(app, ["diagnose", str(out), "--format", "json", "--exit-zero"])
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    addresses = sorted(run["address"] for run in report["runs"])
    assert len(addresses) == 3, addresses  # verl-run folded into tb; trl-run, nonfinite alone
    assert not any(a.endswith(" run verl-run") for a in addresses)
    assert "verl-run (its values agree)" in r.stderr
    assert len(load([str(out)]).runs) == 3


def test_project_runs_config_and_sniffing(project: Path) -> None:
    assert tr.is_store(project)
    frame = resolve(str(project))()
    assert list(frame.runs) == ["verl-run", "trl-run", "nonfinite"]
    info = frame.runs["verl-run"]
    assert info.source == "trackio" and info.framework == "verl"
    assert info.hparams["lr"] == 1e-6 and info.hparams["trackio/project"] == "sweep"
    assert [k for k, _ in tr.list_runs(project)] and len(tr.list_runs(project)) == 3


def test_transformers_callback_step_is_global_step(project: Path) -> None:
    frame = tr.load(project, "trl-run")
    assert sorted(frame.data["step"].unique().tolist()) == [0, 10, 20, 30, 40]
    assert "train/global_step" not in set(frame.data["tag"].astype(str))


def test_nonfinite_strings_are_values(project: Path) -> None:
    raw = sqlite3.connect(project).execute(
        "SELECT metrics FROM metrics WHERE run_name = 'nonfinite' ORDER BY id"
    )
    texts = [json.loads(t)["actor/grad_norm"] for (t,) in raw]
    assert texts[1:] == ["NaN", "Infinity", "-Infinity"]  # the fact the reader relies on
    v = tr.load(project, "nonfinite").data.sort_values("step")["value"].tolist()
    assert v[0] == 0.5 and v[1] != v[1] and v[2] == float("inf") and v[3] == float("-inf")


def test_trackio_target_form(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACKIO_DIR", str(project.parent))
    assert list(resolve("trackio:sweep/trl-run")().runs) == ["trl-run"]
    assert len(resolve("trackio:sweep")().runs) == 3
    with pytest.raises(SourceError, match="no trackio project"):
        resolve("trackio:nope")


def test_old_store_without_run_id(tmp_path: Path) -> None:
    """Files from before trackio added run_id: runs are told apart by name."""
    db = tmp_path / "old.db"
    con = sqlite3.connect(db)
    con.execute(
        "CREATE TABLE metrics (id INTEGER PRIMARY KEY AUTOINCREMENT, timestamp TEXT NOT NULL, "
        "run_name TEXT NOT NULL, step INTEGER NOT NULL, metrics TEXT NOT NULL)"
    )
    for s in range(3):
        con.execute(
            "INSERT INTO metrics (timestamp, run_name, step, metrics) VALUES (?, ?, ?, ?)",
            ("2025-06-01T00:00:00", "a", s, json.dumps({"actor/entropy": 0.5, "x": "NaN"})),
        )
    con.commit()
    con.close()
    frame = resolve(str(db))()
    assert list(frame.runs) == ["a"] and len(frame.data) == 6


def test_read_while_training_writes(tmp_path: Path) -> None:
    """WAL mode: a reader sees committed rows while the writer process still holds the run."""
    env = {"TRACKIO_DIR": str(tmp_path / "trackio"), "HOME": str(tmp_path), "PATH": "/usr/bin"}
    code = GUARD + textwrap.dedent(
        """
        import sys, time, trackio
        trackio.init(project="live", name="r")
        for s in range(5):
            trackio.log({"actor/entropy": 0.5}, step=s)
        trackio.log({"actor/entropy": 0.5}, step=5)
        print("logged", flush=True)
        sys.stdin.readline()
        trackio.finish()
        """
    )
    p = subprocess.Popen(
        [sys.executable, "-c", code],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    try:
        assert p.stdout is not None
        while (line := p.stdout.readline()) and line.strip() != "logged":
            pass
        assert line.strip() == "logged"
        db = tmp_path / "trackio" / "live.db"
        import time

        deadline = time.time() + 60
        frame = None
        while time.time() < deadline:
            try:
                frame = tr.load(db)
                if frame.data["step"].max() == 5:
                    break
            except SourceError:
                pass
            time.sleep(0.5)
        assert frame is not None and frame.data["step"].max() == 5
    finally:
        assert p.stdin is not None
        p.stdin.write("\n")
        p.stdin.close()
        p.wait(timeout=120)


def test_a_cut_or_foreign_sqlite_file_is_named_never_read_as_a_log(
    project: Path, tmp_path: Path
) -> None:
    """A trackio store cut short: one line and exit 2 when given, a skipped file named in a
    folder (its neighbours read); another app's SQLite file is not a trackio project."""
    from typer.testing import CliRunner

    from rlwatch.cli.app import app

    out = tmp_path / "out"
    write_tbx(out / "runs" / "x", SERIES)
    cut = out / "sweep.db"
    cut.write_bytes(project.read_bytes()[:8192])
    r = CliRunner().invoke(app, ["diagnose", str(cut)])
    assert r.exit_code == 2
    assert "a SQLite file that cannot be read" in r.stderr and "Traceback" not in r.output
    r = CliRunner().invoke(app, ["diagnose", str(out), "--format", "json", "--exit-zero"])
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    assert len(report["runs"]) == 1
    assert any("sweep.db" in s["path"] for s in report["skipped"]), report["skipped"]
    other = tmp_path / "app.db"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    r = CliRunner().invoke(app, ["diagnose", str(other)])
    assert r.exit_code == 2 and "not a trackio project" in r.stderr


def test_tail_follows_each_run_of_a_project(project: Path, tmp_path: Path) -> None:
    """`tail` follows a project's runs one by one, named as diagnose names them, whether the
    project is the target or lies in a folder (it stopped with 'too many values to unpack')."""
    import re
    import shutil

    from typer.testing import CliRunner

    from rlwatch.cli.app import app

    out = tmp_path / "out"
    out.mkdir()
    shutil.copy(project, out / "sweep.db")
    for target in (project, out):
        d = CliRunner().invoke(app, ["diagnose", str(target), "--format", "json", "--exit-zero"])
        names = sorted(run["name"] for run in json.loads(d.stdout)["runs"])
        assert len(names) == 3, names
        t = CliRunner().invoke(app, ["tail", str(target), "--once", "--plain"])
        assert t.exit_code == 0, t.output
        assert sorted(re.findall(r"Z? (\S+): appeared", t.stdout)) == names, t.stdout
