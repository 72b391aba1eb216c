"""Shared helpers: fixtures shipped in the repo, and real writers for event files made in tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# the runner's terminal is not the tests' business: xdist's workers set COLUMNS=80, which rich
# and `tail --plain` take as the width of piped output (a test that wants one sets it)
for _var in ("COLUMNS", "LINES"):
    os.environ.pop(_var, None)

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
REALRUNS = ROOT.parent / "shared" / "realruns"


def fixture_event_files() -> list[Path]:
    """The event files of the real-run fixtures (not fixtures/bad/: damaged on purpose, they are
    checked against the exit-code contract by tests/test_gate_corpus.py, not against tbparse)."""
    bad = FIXTURES / "bad"
    return sorted(p for p in FIXTURES.rglob("events.out.tfevents.*") if bad not in p.parents)


def write_tbx(
    run: Path,
    series: dict[str, list[float]],
    steps: list[int] | None = None,
    *,
    walltime0: float = 1_700_000_000.0,
    suffix: str = "",
) -> Path:
    """Write scalars with tensorboardX's SummaryWriter; returns the event file."""
    from tensorboardX import SummaryWriter

    run.mkdir(parents=True, exist_ok=True)
    before = set(run.glob("events.out.tfevents.*"))
    w = SummaryWriter(str(run), flush_secs=3600, filename_suffix=suffix)
    n = len(next(iter(series.values())))
    steps = list(range(n)) if steps is None else steps
    for i, step in enumerate(steps):
        for tag, values in series.items():
            w.add_scalar(tag, values[i], step, walltime=walltime0 + i)
    w.close()
    (new,) = set(run.glob("events.out.tfevents.*")) - before
    return new


def tb_record(step: int, tag: str, value: float, wall_time: float | None = None) -> bytes:
    """One scalar event framed as TensorBoard's own RecordWriter frames it."""
    import io

    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.record_writer import RecordWriter

    ev = event_pb2.Event(
        wall_time=1.7e9 + step if wall_time is None else wall_time,
        step=step,
        summary=summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)]),
    )
    buf = io.BytesIO()
    RecordWriter(buf).write(ev.SerializeToString())
    return buf.getvalue()


@pytest.fixture
def tbx_run(tmp_path: Path) -> Path:
    """A small verl-shaped run written by tensorboardX: 3 tags x 40 steps."""
    write_tbx(
        tmp_path / "run",
        {
            "actor/entropy": [0.5 - 0.01 * i for i in range(40)],
            "actor/grad_norm": [0.3 + 0.001 * i for i in range(40)],
            "critic/score/mean": [0.1 + 0.01 * i for i in range(40)],
        },
    )
    return tmp_path / "run"


# a gate: last rule (XX01, a state a healthy run may pass through) and a gate: any one (XX02):
# tail, diagnose and the training callback must judge them alike (test_tail, test_callback)
GATE_RULES = """\
version: 1
groups:
  - name: g
    rules:
      - code: XX01
        name: custom.at_chance
        severity: error
        gate: last
        description: a state a healthy run may pass through
        when:
          threshold: {metric: loss, above: 0.6}
        summary: "loss {value:.3g}"
      - code: XX02
        name: custom.blowup
        severity: error
        when:
          threshold: {metric: loss, above: 5}
        summary: "loss {value:.3g}"
"""


def followed_rows(
    tmp_path: Path, name: str, parts: list[str], sizes: list[int], seed: int
) -> dict[tuple[str, int], float]:
    """The rows `tail` ends with when the file `name` is written part after part, each in
    random bursts of `sizes` with a poll after each: each (tag, step)'s last write delivered."""
    import random

    from rlwatch.api import load_rules
    from rlwatch.live import Watch

    live = tmp_path / "live"
    live.mkdir()
    watch = Watch([str(live)], load_rules(), keep_rows=True, stale_after=1e9, stall_floor=1e9)
    rng = random.Random(seed)
    for part in parts:
        at = 0
        while at < len(part):
            n = rng.choice(sizes)
            with open(live / name, "a") as fh:
                fh.write(part[at : at + n])
            at += n
            watch.poll()
    watch.poll()
    return {(r.tag, r.step): r.value for r in watch.rows().itertuples()}


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def mlflow_server(mlflow_service: tuple[str, Path]) -> str:
    """The address of the session's real `mlflow server`."""
    return mlflow_service[0]


@pytest.fixture(scope="session")
def mlflow_service(tmp_path_factory: pytest.TempPathFactory):
    """A real `mlflow server` (sqlite backend, 127.0.0.1, a free port), one for the whole session:
    it takes ~17 s to start here, and each test module's runs live in experiments of their own
    (its address, its sqlite file). Each xdist worker that runs a test needing it starts one."""
    import subprocess
    import sys
    import time
    import urllib.request

    pytest.importorskip("mlflow", reason="the mlflow extra is part of rlwatch[test]")
    d = tmp_path_factory.mktemp("mlflow")
    port = free_port()
    log = open(d / "server.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "mlflow", "server"),
            *("--backend-store-uri", f"sqlite:///{d}/mlflow.db"),
            *("--default-artifact-root", str(d / "artifacts")),
            *("--host", "127.0.0.1", "--port", str(port), "--workers", "1"),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    uri = f"http://127.0.0.1:{port}"
    deadline = time.time() + 240  # ~17 s on an idle machine; minutes on an overloaded one
    while True:
        try:
            urllib.request.urlopen(f"{uri}/health", timeout=1)
            break
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()
                log.close()
                pytest.fail(
                    f"mlflow server did not start: {(d / 'server.log').read_text()[-2000:]}"
                )
            time.sleep(0.3)
    yield uri, d / "mlflow.db"
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()
