"""Many runs: a folder, an MLflow experiment on a real server, a W&B project on the local
stand-in and a trackio project each diagnose as one table, worst first, natural order within;
the process pool and Ray give the same report as one process."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import FIXTURES
from typer.testing import CliRunner

from rlwatch import executor
from rlwatch.cli.app import app
from rlwatch.render import sweep as table

runner = CliRunner()


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Real event files (the shipped fixtures, written by tensorboardX) as a sweep of 6 runs."""
    root = tmp_path_factory.mktemp("sweep")
    for name, src in {
        "run1": "grpo-healthy",
        "run2": "grpo-broken",
        "run10": "grpo-broken",
        "run3": "grpo-healthy",
        "seed/run20": "grpo-healthy",
        "seed/run4": "grpo-restart",
    }.items():
        shutil.copytree(FIXTURES / src, root / name)
    return root


RANK = {"error": 0, "warning": 1, "info": 2, "ok": 3, "skipped": 4}


def _rows(doc: dict) -> list[dict]:
    """The table order, recomputed from the JSON report: worst first, natural order within."""
    out = []
    for run in doc["runs"]:
        mine = [v for v in doc["verdicts"] if v["run"] == run["name"]]
        fired = [v for v in mine if v["episodes"]]
        worst = min(
            (v["severity"] for v in fired),
            key=RANK.get,
            default="ok" if any(v["state"] != "skipped" for v in mine) else "skipped",
        )
        errors = sorted(
            (v for v in fired if v["severity"] == "error"),
            key=lambda v: v["episodes"][0]["first_step"],
        )
        out.append(
            {
                "run": run["name"],
                "worst": worst,
                "first_error": errors[0]["code"] if errors else None,
                "first_error_step": errors[0]["episodes"][0]["first_step"] if errors else None,
                "steps": run["steps"]["count"],
                "last": run["last_values"],
            }
        )
    return sorted(out, key=lambda r: (RANK[r["worst"]], table.natural_key(r["run"])))


def _units(root: Path) -> list[executor.Unit]:
    return executor.expand([str(root)])


def test_a_folder_is_one_table_worst_first_natural_order(sweep_dir: Path) -> None:
    r = runner.invoke(app, ["diagnose", str(sweep_dir), "-f", "json"])
    assert r.exit_code == 1, r.output
    doc = json.loads(r.stdout)
    assert doc["run_count"] == 6 and doc["skipped"] == []
    rows = _rows(doc)
    names = [x["run"] for x in rows]
    worst = [x["worst"] for x in rows]
    assert names[:2] == ["run2", "run10"]  # errors first, run2 before run10
    assert worst[:2] == ["error", "error"] and "error" not in worst[2:]
    rest = [n for n, w in zip(names, worst, strict=True) if w == worst[2]]
    assert rest == sorted(rest, key=table.natural_key)
    broken = rows[0]
    assert broken["first_error"] and broken["first_error_step"] > 0
    assert broken["steps"] == 240 and "entropy" in broken["last"]
    # the text table says the same
    t = runner.invoke(app, ["diagnose", str(sweep_dir)])
    assert t.exit_code == 1
    lines = [ln for ln in t.output.splitlines() if ln.startswith(("run", "seed/"))]
    assert [ln.split()[0] for ln in lines][1:3] == ["run2", "run10"]
    assert f"{broken['first_error']} @{broken['first_error_step']}" in t.output
    assert [r["run"] for r in table.rows(_report(sweep_dir))] == names


def _report(root: Path):
    return executor.diagnose_many(_units(root), executor.Settings(), jobs=1).report


def test_fail_on_and_detail(sweep_dir: Path) -> None:
    healthy = sweep_dir.parent / "healthy"
    healthy.mkdir(exist_ok=True)
    for n in ("run1", "run3", "seed"):
        if not (healthy / n).exists():
            shutil.copytree(sweep_dir / n, healthy / n)
    r = runner.invoke(app, ["diagnose", str(healthy), "-f", "json"])
    doc = json.loads(r.stdout)
    worst = {x["worst"] for x in _rows(doc)}
    assert "error" not in worst
    assert r.exit_code == 0
    strict = runner.invoke(app, ["diagnose", str(healthy), "--fail-on", "info"])
    assert strict.exit_code == (1 if worst & {"warning", "info"} else 0)
    d = runner.invoke(app, ["diagnose", str(sweep_dir), "--detail"])
    assert d.output.count("fired,") == 6  # one verdict block per run


def test_every_format_carries_every_run(sweep_dir: Path) -> None:
    junit = runner.invoke(app, ["diagnose", str(sweep_dir), "-f", "junit"]).stdout
    suites = ET.fromstring(junit).findall("testsuite")
    assert len(suites) == 6
    md = runner.invoke(app, ["diagnose", str(sweep_dir), "-f", "markdown"]).stdout
    assert md.count("\n### ") == 6 and "| run | worst |" in md
    gh = runner.invoke(app, ["diagnose", str(sweep_dir), "-f", "github"]).stdout
    assert "run10" in gh and "run2" in gh and "6 run(s) read" in gh.strip().splitlines()[-1]


def test_pool_gives_the_same_report_as_one_process(sweep_dir: Path) -> None:
    settings = executor.Settings()
    units = _units(sweep_dir)
    one = executor.diagnose_many(units, settings, jobs=1).report.to_dict()
    pool = executor.diagnose_many(units, settings, jobs=2).report.to_dict()
    assert one == pool
    assert [r["name"] for r in one["runs"]] == [u.name for u in units]


def test_an_unreadable_run_is_listed_and_exit_2_when_otherwise_healthy(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "grpo-healthy", tmp_path / "a")
    shutil.copytree(FIXTURES / "grpo-healthy", tmp_path / "b")
    bad = tmp_path / "c"
    bad.mkdir()
    (bad / "events.out.tfevents.1.x").write_bytes(b"\x07" * 40)  # not TFRecord framing
    r = runner.invoke(app, ["diagnose", str(tmp_path), "-f", "json"])
    doc = json.loads(r.stdout)
    assert doc["run_count"] == 2
    assert len(doc["skipped"]) == 1 and "c" in doc["skipped"][0]["path"]
    assert r.exit_code == 2


def test_trackio_project_is_many_runs(tmp_path: Path) -> None:
    pytest.importorskip("trackio")
    from test_trackio import write_trackio

    store = write_trackio(
        tmp_path,
        """
        for i, name in enumerate(["r10", "r2", "r1"]):
            trackio.init(project="p", name=name, config={"seed": i})
            for s in range(60):
                ent = 0.5 if (name != "r2" or s < 30) else 0.001
                gn = math.nan if (name == "r2" and s >= 30) else 0.3
                trackio.log({"actor/entropy": ent, "critic/score/mean": 0.1 + s / 100,
                             "actor/grad_norm": gn}, step=s)
            trackio.finish()
        """,
    )
    r = runner.invoke(app, ["diagnose", str(store / "p.db"), "-f", "json"])
    doc = json.loads(r.stdout)
    assert sorted(x["name"] for x in doc["runs"]) == ["r1", "r10", "r2"]
    rows = _rows(doc)
    assert rows[0]["run"] == "r2" and rows[0]["worst"] == "error"
    assert [x["run"] for x in rows[1:]] == ["r1", "r10"]
    f = runner.invoke(app, ["diagnose", str(store / "p.db"), "--filter", "params.seed=0"])
    assert "r10" in f.output and "r2 " not in f.output


# -- MLflow: a 300-run experiment on a real server --------------------------------------------


def _log_experiment(uri: str, n: int) -> None:
    """n verl-shaped runs logged fast with the real client's log_batch (one call per run)."""
    import time

    from mlflow import MlflowClient
    from mlflow.entities import Metric, Param, RunTag

    client = MlflowClient(uri)
    eid = client.create_experiment("sweep300")
    t = int(time.time() * 1000)
    for i in range(n):
        broken = i % 50 == 7
        run = client.create_run(eid, run_name=f"run{i}", tags={"team": "rl"})
        metrics = []
        for s in range(40):
            ent = 0.001 if broken and s >= 20 else 0.4
            metrics += [
                Metric("actor/entropy", ent, t + s, s),
                Metric("critic/score/mean", 0.2 + s / 200, t + s, s),
                Metric("actor/grad_norm", float("nan") if ent < 0.1 else 0.3, t + s, s),
            ]
        client.log_batch(
            run.info.run_id,
            metrics=metrics,
            params=[Param("seed", str(i % 3))],
            tags=[RunTag("kind", "broken" if broken else "ok")],
        )
        client.set_terminated(run.info.run_id, "FAILED" if i == 299 else "FINISHED")


@pytest.mark.slow
def test_a_300_run_mlflow_experiment_is_one_table(mlflow_service: tuple[str, Path]) -> None:
    """300 runs on a real server, read over HTTP. They are logged by the real client into the
    server's own sqlite store (the same rows as through the server, in half the time)."""
    mlflow_server, db = mlflow_service
    _log_experiment(f"sqlite:///{db}", 300)
    r = runner.invoke(
        app,
        ["diagnose", "mlflow:sweep300", "--tracking-uri", mlflow_server, "-f", "json", "-j", "2"],
    )
    assert r.exit_code == 1, r.output[-2000:]
    doc = json.loads(r.stdout)
    assert doc["run_count"] == 300 and doc["skipped"] == []
    rows = _rows(doc)
    errors = [x["run"] for x in rows if x["worst"] == "error"]
    assert errors == [f"run{i}" for i in range(300) if i % 50 == 7]
    assert rows[len(errors)]["run"] in ("run0", "run1")  # natural order within severity

    def listed(*filters: str) -> list[str]:
        units = executor.expand(["mlflow:sweep300"], tracking_uri=uri, filters=list(filters))
        return sorted(u.name for u in units)

    uri = mlflow_server
    assert listed("tags.kind=broken", "status=finished") == sorted(
        f"run{i}" for i in range(300) if i % 50 == 7
    )
    assert listed("params.seed=2", "status!=finished") == ["run299"]
    assert len(listed("tags.team=rl")) == 300 and len(listed("params.seed!=0")) == 200


# -- W&B: a project on the local stand-in ----------------------------------------------------
def test_a_wandb_project_is_one_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pyarrow")
    pytest.importorskip("wandb")
    from fake_wandb import FakeWandb
    from test_wandb import wandb_env

    runs = {}
    for i in range(12):
        broken = i in (3, 11)
        rows = [
            {
                "_step": s,
                "_timestamp": 1.7e9 + s,
                "train/reward": 0.1 + 0.01 * s,
                "train/entropy": 0.001 if broken and s >= 30 else 0.5,
                "train/completions/clipped_ratio": 0.02,
                "train/grad_norm": float("nan") if broken and s >= 30 else 0.3,
            }
            for s in range(60)
        ]
        runs[f"team/rl/id{i:03d}"] = {
            "name": f"grpo-{i}",
            "config": {"lr": 1e-6, "seed": i % 2},
            "rows": rows,
            "state": "crashed" if i == 5 else "finished",
            "tags": ["baseline"] if i < 6 else [],
        }
    fake = FakeWandb(runs)
    try:
        for k, v in wandb_env(tmp_path).items():
            if k.startswith("WANDB_") and k != "WANDB_MODE":
                monkeypatch.setenv(k, v)
        monkeypatch.delenv("WANDB_MODE", raising=False)
        monkeypatch.setenv("WANDB_BASE_URL", fake.url)
        monkeypatch.setenv("WANDB_API_KEY", fake.api_key)
        monkeypatch.setattr("rlwatch.sources.listing.PAGE", 5)  # three pages
        r = runner.invoke(app, ["diagnose", "wandb:team/rl", "-f", "json", "-j", "2"])
        assert r.exit_code == 1, r.output[-2000:]
        doc = json.loads(r.stdout)
        assert doc["run_count"] == 12 and fake.pages == 3
        rows = _rows(doc)
        assert [x["run"] for x in rows[:2]] == ["grpo-3", "grpo-11"]
        assert all(x["worst"] != "error" for x in rows[2:])
        f = runner.invoke(
            app,
            [
                "diagnose",
                "wandb:team/rl",
                "-f",
                "json",
                "--filter",
                "tag=baseline",
                "--filter",
                "status=finished",
                "--filter",
                "params.seed=1",
            ],
        )
        assert sorted(x["name"] for x in json.loads(f.stdout)["runs"]) == ["grpo-1", "grpo-3"]
    finally:
        fake.close()


# -- Ray ---------------------------------------------------------------------------------------
@pytest.mark.slow
def test_ray_gives_the_same_report_as_the_pool(sweep_dir: Path) -> None:
    try:
        import ray
    except ImportError:
        pytest.skip("ray is not importable: pip install 'rlwatch[ray]' to run this test")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        settings = executor.Settings()
        units = _units(sweep_dir)
        pool = executor.diagnose_many(units, settings, jobs=2).report.to_dict()
        on_ray = executor.diagnose_many(units, settings, executor="ray").report.to_dict()
        assert on_ray == pool
    finally:
        ray.shutdown()


def test_ray_missing_is_a_usage_error(sweep_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    r = runner.invoke(app, ["diagnose", str(sweep_dir), "--executor", "ray"])
    assert r.exit_code == 2 and "rlwatch[ray]" in r.output


def test_help_names_the_new_sources_and_options() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "rlwatch", "diagnose", "--help"],
        capture_output=True,
        text=True,
        env={"COLUMNS": "200", "PATH": "/usr/bin"},
    ).stdout
    for word in ("trackio", "SwanLab", "--filter", "--jobs", "--executor", "--detail"):
        assert word in out


# -- the per-run work of a sweep, made cheaper: the same results ----------------------------------
def _without_explanations(doc: dict) -> dict:
    for v in doc["verdicts"]:
        v["checks"], v["context"] = [], {}
    for r in doc["runs"]:
        r["symptoms"] = []
    return doc


def test_the_table_alone_computes_no_explanations_and_the_same_verdicts(
    sweep_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The text table shows no checks, contexts or symptom tables: they are not computed
    (Settings.explain), and every verdict, episode and run summary is what the full run gives."""
    units = _units(sweep_dir)
    full = executor.diagnose_many(units, executor.Settings(), jobs=1).report.to_dict()
    lean = executor.diagnose_many(units, executor.Settings(explain=False), jobs=1).report
    assert any(v["checks"] for v in full["verdicts"]) and not any(
        v.checks or v.context for v in lean.verdicts
    )
    assert lean.to_dict() == _without_explanations(full)
    # the command's table (explain off) is the table of the full report
    import io

    from rich.console import Console

    from rlwatch.cli._common import PIPED_WIDTH

    monkeypatch.delenv("COLUMNS", raising=False)
    text = runner.invoke(app, ["diagnose", str(sweep_dir), "--exit-zero"]).output
    buf = io.StringIO()
    full_report = executor.diagnose_many(units, executor.Settings(), jobs=1).report
    Console(file=buf, width=PIPED_WIDTH, highlight=False).print(table.table_renderable(full_report))
    assert text == buf.getvalue()


def test_the_table_written_row_by_row_is_richs_table_byte_for_byte(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The table's rows are written as segments when every cell fits (rich's per-cell layout was
    most of a 2,000-run table's cost): the same bytes as rich's own table, coloured and plain,
    at many widths, with wide characters, emoji codes, markup and control characters (the last
    two, and tables wider than the console, take rich's path)."""
    import io
    import random

    from rich.console import Console

    from rlwatch.engine.evaluate import Episode, Verdict
    from rlwatch.report import Report
    from rlwatch.severity import Severity

    rng = random.Random(7)
    plain = ["run1", "run10", "a/b/seed-3", "x" * 40, "日本語のラン", "a:smile:b", "m:exp/r:2", ""]
    odd = ["[bold]x", "tab\there", "y" * 150]

    def report(n: int) -> Report:
        names = plain if rng.random() < 0.7 else plain + odd
        runs, verdicts = [], []
        for i in range(n):
            name = f"{rng.choice(names)}{i}"
            keys = rng.sample(table.KEYS, rng.randint(0, 5))
            last = {
                k: rng.choice([None, 0.5, 123456.0, -1e-9, float(rng.randint(0, 9))]) for k in keys
            }
            steps = {"count": rng.randint(0, 10 ** rng.randint(1, 7)), "first": 0, "last": 9}
            runs.append({"name": name, "steps": steps, "last_values": last})
            for code in rng.sample(["ER01", "WA02", "IN03", "ER04"], rng.randint(0, 3)):
                sev = {"E": Severity.ERROR, "W": Severity.WARNING, "I": Severity.INFO}[code[0]]
                state = rng.choice(["firing", "resolved", "ok", "skipped"])
                fired = state in ("firing", "resolved")
                eps = [Episode(rng.randint(0, 10**6), 5, 5, {}, "s")] if fired else []
                verdicts.append(Verdict(name, code, "a rule", sev, state, eps))
        return Report(runs, verdicts)

    calls = {"rich": 0}
    by_rows = table._Table._by_rows

    def counted(self, cells):
        calls["rich"] += 1
        return by_rows(self, cells)

    renders = 0
    for _ in range(150):
        rep = report(rng.randint(0, 25))
        for width in (rng.randint(20, 200), 80, 120):
            for term in (True, False):
                out = []
                for how in ("table", "rows"):
                    buf = io.StringIO()
                    console = Console(
                        file=buf,
                        width=width,
                        force_terminal=term,
                        color_system="truecolor" if term else None,
                        highlight=False,
                    )
                    rows = table.rows(rep)
                    t = table._Table(rows, table._columns(rows)[:3])
                    if how == "table":
                        with monkeypatch.context() as m:
                            m.setattr(table._Table, "_by_rows", counted)
                            console.print(t)
                    else:
                        console.print(t._by_rows(t._cells()))
                    out.append(buf.getvalue())
                assert out[0] == out[1]
                renders += 1
    assert renders - calls["rich"] > 200  # the segment path was taken, and checked


def test_the_cheaper_medians_are_numpys_and_pandas_bit_for_bit() -> None:
    """The medians a run's rules take by hand (one sort or partition instead of numpy's and
    pandas' per-call machinery) give their values, sign of zero and overflow included:
    robust._row_median = np.nanmedian(axis=1) (its masked-array path below 600 columns, its
    own above), robust.median = np.median, stall's expanding median = pandas'."""
    import warnings

    import numpy as np
    import pandas as pd

    from rlwatch.engine.conditions import _prior_expanding_median
    from rlwatch.engine.robust import _row_median, median

    def same(a: np.ndarray, b: np.ndarray) -> bool:
        a, b = np.asarray(a), np.asarray(b)
        return np.array_equal(a, b, equal_nan=True) and np.array_equal(np.signbit(a), np.signbit(b))

    rng = np.random.default_rng(0)
    special = [0.0, -0.0, 1.0, np.inf, -np.inf, 1e308, -1e308, 5e-324]

    def sample(shape: tuple[int, ...], trial: int) -> np.ndarray:
        return [
            rng.normal(size=shape),
            rng.integers(-3, 3, size=shape).astype(float),
            rng.choice(special, size=shape),
            rng.normal(size=shape) * 10.0 ** int(rng.integers(-300, 300)),
        ][trial % 4]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for trial in range(2000):
            shape = (int(rng.integers(1, 30)), int(rng.integers(1, 40)))
            if trial < 8:
                shape = (4, 700)
            w = sample(shape, trial)
            w[rng.random(shape) < rng.random()] = np.nan
            w = w[np.sum(~np.isnan(w), axis=1) >= 1]
            if w.size:
                assert same(np.nanmedian(w, axis=1), _row_median(w))
            x = sample((int(rng.integers(0, 40)),), trial)
            if trial % 7 == 0 and x.size:
                x[rng.integers(0, x.size)] = np.nan
            assert same(np.median(x), median(x))
            x = sample((int(rng.integers(0, 60)),), trial)
            x = x[np.isfinite(x)]
            periods = int(rng.integers(1, 8))
            expected = pd.Series(x).shift(1).expanding(min_periods=periods).median().to_numpy()
            assert same(expected, _prior_expanding_median(x, periods))


def test_progress_bar_on_a_terminal_goes_to_stderr_and_not_into_the_output(sweep_dir: Path) -> None:
    """On a terminal (stderr is a pty here, as the colour tests force a terminal), a sweep shows
    its progress on stderr; the JSON on the piped stdout carries no trace of it."""
    import os
    import pty
    import select
    import struct
    import threading

    fcntl = pytest.importorskip("fcntl")
    termios = pytest.importorskip("termios")
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "TERM")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlwatch", "diagnose", str(sweep_dir), "-f", "json", "--jobs", "1"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=slave,
        env={**env, "TERM": "xterm-256color", "COLUMNS": "100"},
    )
    os.close(slave)
    out: list[bytes] = []
    reader = threading.Thread(target=lambda: out.append(proc.stdout.read()))  # type: ignore[union-attr]
    reader.start()
    err = b""
    try:
        while True:
            ready, _, _ = select.select([master], [], [], 120)
            if not ready:
                break
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed its end of the terminal
                break
            if not chunk:
                break
            err += chunk
    finally:
        os.close(master)
        proc.wait(timeout=120)
        reader.join(timeout=120)
    assert proc.returncode == 1
    text = err.decode("utf-8", "replace")
    assert "diagnosing" in text and "/6" in text  # the bar: "diagnosing ━━━ 3/6 0:00:01"
    stdout = out[0].decode()
    assert "diagnosing" not in stdout and "\x1b" not in stdout
    assert json.loads(stdout)["run_count"] == 6
