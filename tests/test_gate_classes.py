"""One test per crash class of #11: each input that used to end in a traceback (often with exit
1, the code for "unhealthy") now gives a verdict or one line and exit 2. Real writers (tensorboardX,
TensorBoard's RecordWriter), real files, real sockets; an MLflow impostor is a local socket server.
"""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import FIXTURES, tb_record
from typer.testing import CliRunner

from rlwatch.cli.app import app
from rlwatch.errors import redact_secrets, register_secret_uri

runner = CliRunner()


def contract(r, *, codes=(0, 1, 2)) -> None:
    """The CLI contract for any input: a known exit code, no traceback, exit 2 = one line."""
    err = r.stderr if hasattr(r, "stderr") else ""
    code = r.returncode if hasattr(r, "returncode") else r.exit_code
    assert code in codes, (code, err)
    assert "Traceback" not in err and "Traceback" not in (r.stdout or "")
    assert "this is not a verdict" not in err, err  # the guard should not have been needed
    if code == 2:
        errors = [ln for ln in err.splitlines() if ln.startswith("rlwatch: error: ")]
        assert len(errors) == 1, err


def cli(*args: str, cwd: Path | None = None, env: dict | None = None):
    return subprocess.run(
        [sys.executable, "-m", "rlwatch", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={**os.environ, **(env or {})},
    )


def events(path: Path, records: list[bytes]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    f = path / "events.out.tfevents.1700000000.test"
    f.write_bytes(b"".join(records))
    return f


def _scalars(n: int = 20, tag: str = "actor/entropy") -> list[bytes]:
    return [tb_record(s, tag, 0.5) for s in range(n)]


# -- event files -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "steps", [[-5, -1, 0, 1, 2], [2**62, 3, 4], [-(2**63), 0, 1], [0, 1, 2**63 - 1]]
)
def test_negative_and_huge_steps(tmp_path: Path, steps: list[int]) -> None:
    f = events(tmp_path / "run", [tb_record(s, "actor/entropy", 0.5) for s in steps])
    r = runner.invoke(app, ["metrics", str(f), "--format", "json"])
    contract(r, codes=(0,))


def test_nan_inf_huge_values_are_evidence_not_crashes(tmp_path: Path) -> None:
    vals = [math.nan, math.inf, -math.inf, 3.4e38, -3.4e38, 0.0] * 4
    f = events(tmp_path / "run", [tb_record(s, "actor/grad_norm", v) for s, v in enumerate(vals)])
    r = runner.invoke(app, ["diagnose", str(f), "--format", "json"])
    contract(r, codes=(1,))
    json.loads(r.stdout)


def test_inf_wall_time_keeps_json_valid(tmp_path: Path) -> None:
    recs = [
        tb_record(s, "actor/entropy", 0.5, wall_time=math.inf if s == 3 else None)
        for s in range(20)
    ]
    f = events(tmp_path / "run", recs)
    r = runner.invoke(app, ["diagnose", str(f), "--format", "json", "--exit-zero"])
    contract(r, codes=(0, 2))
    if r.exit_code == 0:
        json.loads(r.stdout)
    r = runner.invoke(app, ["metrics", str(f), "--format", "json"])
    contract(r, codes=(0,))
    json.loads(r.stdout)


def _hparams_record(content: bytes) -> bytes:
    import io

    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.record_writer import RecordWriter

    meta = summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="hparams", content=content)
    )
    ev = event_pb2.Event(
        step=0,
        wall_time=1.7e9,
        summary=summary_pb2.Summary(
            value=[summary_pb2.Summary.Value(tag="_hparams_/session_start_info", metadata=meta)]
        ),
    )
    ev.summary.value[0].tensor.dtype = 7  # DT_STRING, as the writer does
    buf = io.BytesIO()
    RecordWriter(buf).write(ev.SerializeToString())
    return buf.getvalue()


def test_corrupt_hparams_proto(tmp_path: Path) -> None:
    f = events(tmp_path / "run", [_hparams_record(b"\x12\xff\xff\xff\x0f garbage"), *_scalars()])
    r = runner.invoke(app, ["metrics", str(f), "--format", "json"])
    contract(r, codes=(0,))
    doc = json.loads(r.stdout)
    assert doc  # the scalars are still read


def test_a_declared_huge_tensor_is_skipped_with_a_warning(tmp_path: Path) -> None:
    import io
    import resource

    from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2
    from tensorboard.summary.writer.record_writer import RecordWriter

    shape = tensor_shape_pb2.TensorShapeProto(
        dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=1_000_000_000)]
    )
    t = tensor_pb2.TensorProto(dtype=1, tensor_shape=shape, float_val=[1.0])
    ev = event_pb2.Event(
        step=5,
        wall_time=1.7e9,
        summary=summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag="actor/kl", tensor=t)]),
    )
    buf = io.BytesIO()
    RecordWriter(buf).write(ev.SerializeToString())
    f = events(tmp_path / "run", [*_scalars(), buf.getvalue()])
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    from rlwatch.sources import load

    frame = load(str(f))
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mb < 500, grown_mb  # 4 GB if the tensor were materialised
    (info,) = frame.runs.values()
    assert any("more than one element" in w for w in info.warnings)
    assert len(frame.data) == 20


def test_a_run_with_no_scalar_yet(tmp_path: Path) -> None:
    import io

    from tensorboard.compat.proto import event_pb2
    from tensorboard.summary.writer.record_writer import RecordWriter

    buf = io.BytesIO()
    RecordWriter(buf).write(
        event_pb2.Event(wall_time=1.0, file_version="brain.Event:2").SerializeToString()
    )
    f = events(tmp_path / "run", [buf.getvalue()])
    r = runner.invoke(app, ["diagnose", str(f)])
    contract(r, codes=(2,))
    assert "no scalars" in r.stderr
    contract(runner.invoke(app, ["metrics", str(f), "--format", "json"]), codes=(0,))


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads mode-000 files")
def test_mode_000_event_file(tmp_path: Path) -> None:
    f = events(tmp_path / "run", _scalars())
    f.chmod(0)
    try:
        r = runner.invoke(app, ["diagnose", str(f)])
        contract(r, codes=(2,))
        assert "permission denied" in r.stderr.lower()
        other = events(tmp_path / "ok", _scalars())
        r = runner.invoke(app, ["diagnose", str(tmp_path), "--format", "json", "--exit-zero"])
        contract(r, codes=(0,))
        assert json.loads(r.stdout)["skipped_count"] == 1 and other.exists()
    finally:
        f.chmod(0o644)


def test_an_unreadable_file_in_a_folder_is_skipped_not_fatal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mode-000 class as root sees it: the OS refuses the open (simulated at open())."""
    bad = events(tmp_path / "bad", _scalars())
    events(tmp_path / "good", _scalars())
    import builtins

    real_open = builtins.open

    def guarded(path, *a, **k):
        if str(path) == str(bad):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *a, **k)

    monkeypatch.setattr(builtins, "open", guarded)
    from rlwatch.sources import load

    frame = load(str(tmp_path))
    assert list(frame.runs) == ["good"]
    assert [(s.path, s.reason) for s in frame.skipped] == [
        (str(bad.parent), "cannot read (Permission denied)")
    ]


# -- odd targets -----------------------------------------------------------------------------
def test_fifo_socket_device_and_dangling_symlink_are_refused_before_reading(
    tmp_path: Path,
) -> None:
    fifo = tmp_path / "run.log"
    os.mkfifo(fifo)
    sock_path = tmp_path / "s.log"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(sock_path))
    (tmp_path / "dangling.log").symlink_to(tmp_path / "nowhere.log")
    try:
        for target, word in (
            (fifo, "FIFO"),
            (sock_path, "socket"),
            (Path("/dev/zero"), "device"),
            (tmp_path / "dangling.log", "dangling symlink"),
        ):
            t0 = time.perf_counter()
            r = cli("diagnose", str(target))
            contract(r, codes=(2,))
            assert word in r.stderr and time.perf_counter() - t0 < 60
        # in a folder: named as skipped, the other runs still read
        (tmp_path / "ok").mkdir()
        (tmp_path / "ok" / "m.jsonl").write_text(
            "".join(json.dumps({"step": i, "actor/entropy": 0.5}) + "\n" for i in range(20))
        )
        r = cli("diagnose", str(tmp_path), "--format", "json", "--exit-zero")
        contract(r, codes=(0,))
        reasons = {Path(x["path"]).name: x["reason"] for x in json.loads(r.stdout)["skipped"]}
        assert "FIFO" in reasons["run.log"] and "socket" in reasons["s.log"]
        assert "dangling" in reasons["dangling.log"]
    finally:
        s.close()


def test_a_directory_named_dot_wandb(tmp_path: Path) -> None:
    d = tmp_path / "run-x.wandb"
    d.mkdir()
    r = cli("diagnose", str(d))
    contract(r, codes=(2,))
    (d / "m.jsonl").write_text(
        "".join(json.dumps({"step": i, "actor/entropy": 0.5}) + "\n" for i in range(20))
    )
    r = cli("diagnose", str(tmp_path), "--format", "json", "--exit-zero")
    contract(r, codes=(0,))
    assert json.loads(r.stdout)["run_count"] == 1


def test_a_wandb_file_without_the_wandb_extra_says_which_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "wandb" else real(n, *a)
    )
    f = FIXTURES / "tinker-rlvr-qwen3-4b-rubric" / "run-8zwal4ai.wandb"
    r = runner.invoke(app, ["diagnose", str(f)])
    contract(r, codes=(2,))
    assert "pip install 'rlwatch[wandb]'" in r.stderr
    # in a folder the .wandb is skipped with the reason and the JSONL beside it is read
    r = runner.invoke(app, ["metrics", str(f.parent), "--format", "json"])
    contract(r, codes=(0,))


def test_the_same_target_twice(tmp_path: Path) -> None:
    t = str(FIXTURES / "grpo-broken")
    r = cli("diagnose", t, t, t + "/", "--format", "json")
    contract(r, codes=(1,))
    assert json.loads(r.stdout)["run_count"] == 1


# -- logs: hostile numbers and nesting (end to end; the parsers are the logs helper's) --------
@pytest.mark.parametrize(
    "line",
    [
        '{"step": 1e400, "loss": 1}',
        '{"step": NaN, "loss": 1}',
        '{"step": -Infinity, "loss": 1}',
        '{"step": ' + "1" * 400 + ', "loss": 1}',
        '{"step": 3, "loss": ' + "9" * 400 + "}",
        '{"step": 3, "loss": ' + "[" * 100_000 + "]" * 100_000 + "}",
        '{"step": -7, "loss": 1}',
    ],
)
def test_hostile_numbers_and_deep_nesting_in_jsonl(tmp_path: Path, line: str) -> None:
    good = "".join(
        json.dumps({"step": i, "loss": 0.5, "actor/entropy": 0.5}) + "\n" for i in range(10)
    )
    f = tmp_path / "metrics.jsonl"
    f.write_text(good + line + "\n")
    r = cli("diagnose", str(f), "--format", "json", "--exit-zero")
    contract(r, codes=(0, 2))
    if r.returncode == 0:
        assert json.loads(r.stdout)["runs"][0]["steps"]["count"] >= 10  # nothing before lost


# -- configuration -------------------------------------------------------------------------
GOOD_RUN = str(FIXTURES / "grpo-healthy")


@pytest.mark.parametrize(
    ("name", "body", "word"),
    [
        ("rlwatch.toml", b'select = ["ST"]\n\xff\xfe', "not UTF-8"),
        ("rlwatch.toml", b"select = " + b"[" * 100_000 + b"]" * 100_000 + b"\n", "nested"),
        ("rlwatch.toml", b"select = [\n", "invalid TOML"),
        ("pyproject.toml", b'[tool]\nrlwatch = "ST"\n', "must be a table"),
        ("pyproject.toml", b"[tool]\nrlwatch = 3\n", "must be a table"),
        ("pyproject.toml", b'[[tool.rlwatch]]\nselect = ["ST"]\n', "array of tables"),
        ("pyproject.toml", b'tool = "rlwatch"\n', "[tool] must be a table"),
        ("rlwatch.toml", b"select = 3\n", "must be a list of strings"),
    ],
)
def test_broken_configuration_is_one_line(
    tmp_path: Path, name: str, body: bytes, word: str
) -> None:
    (tmp_path / name).write_bytes(body)
    r = cli("diagnose", GOOD_RUN, cwd=tmp_path)
    contract(r, codes=(2,))
    assert word in r.stderr


def test_a_broken_pyproject_in_a_parent_directory_of_another_project(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_bytes(b"[project\nname = \xff\n")
    cwd = tmp_path / "a" / "b"
    cwd.mkdir(parents=True)
    r = cli("diagnose", GOOD_RUN, cwd=cwd)
    contract(r, codes=(0,))
    assert "warning: ignored" in r.stderr
    (tmp_path / "pyproject.toml").write_bytes(b"[tool.rlwatch\nselect = 1\n")
    contract(cli("diagnose", GOOD_RUN, cwd=cwd), codes=(2,))


def test_ascii_only_stdout(tmp_path: Path) -> None:
    env = {"PYTHONIOENCODING": "ascii", "LC_ALL": "C", "LANG": "C"}
    for fmt in ("text", "markdown", "github", "junit", "json"):
        r = cli("diagnose", str(FIXTURES / "grpo-broken"), "--format", fmt, env=env)
        contract(r, codes=(1,))


# -- secrets ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "password", ["s3cret", "p@ss", "p#ss/w?rd", "a:b@c#d/e?f", "p%40ss%23", "w/ith?all@#:"]
)
def test_credentials_are_redacted_however_written(password: str) -> None:
    uri = f"http://alice:{password}@127.0.0.1:1/x"
    register_secret_uri(uri)
    for text in (uri, f"error talking to {uri}: refused", f"see ({uri})"):
        out = redact_secrets(text)
        assert password not in out and "127.0.0.1" in out, out
    r = runner.invoke(app, ["diagnose", "mlflow:exp/run", "--tracking-uri", uri])
    contract(r, codes=(2,))
    assert password not in r.output and "alice" not in r.output


# -- an MLflow impostor: a local socket server that fails in every way -----------------------
class Impostor:
    """A TCP server answering each request with `reply(request_bytes, conn)`."""

    def __init__(self, reply):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.reply = reply
        self.stop = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        try:
            req = conn.recv(65536)
            self.reply(req, conn)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.stop = True
        self.sock.close()


def _http(body: bytes, status: str = "200 OK") -> bytes:
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body


REPLIES = {
    "garbage": lambda req, c: c.sendall(b"SSH-2.0-OpenSSH_9.6\r\n\x00\xff garbage"),
    "bad status": lambda req, c: c.sendall(b"HTTP/1.1 abc\r\n\r\n"),
    "keyerror json": lambda req, c: c.sendall(_http(b'{"run": {"data": {}}}')),
    "list json": lambda req, c: c.sendall(_http(b"[1, 2, 3]")),
    "html": lambda req, c: c.sendall(_http(b"<html>login</html>")),
    "deep json": lambda req, c: c.sendall(_http(b"[" * 100_000 + b"]" * 100_000)),
    "500": lambda req, c: c.sendall(_http(b'{"error_code": "INTERNAL"}', "500 Oops")),
    "close": lambda req, c: None,
}


@pytest.mark.parametrize("kind", sorted(REPLIES))
def test_an_mlflow_server_that_answers_garbage(kind: str) -> None:
    srv = Impostor(REPLIES[kind])
    try:
        uri = f"http://bob:pa%23ss@127.0.0.1:{srv.port}"
        r = runner.invoke(
            app, ["diagnose", "mlflow:exp/run", "--tracking-uri", uri, "--timeout", "20"]
        )
        contract(r, codes=(2,))
        assert "pa%23ss" not in r.output and "pa#ss" not in r.output
    finally:
        srv.close()


def test_a_trickling_server_is_abandoned_at_the_deadline() -> None:
    def trickle(req, c):
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
        for _ in range(600):
            c.sendall(b" ")
            time.sleep(0.5)

    srv = Impostor(trickle)
    try:
        t0 = time.perf_counter()
        r = cli(
            "diagnose",
            "mlflow:exp/run",
            "--tracking-uri",
            f"http://127.0.0.1:{srv.port}",
            "--timeout",
            "3",
        )
        elapsed = time.perf_counter() - t0
        contract(r, codes=(2,))
        assert "within 3 s" in r.stderr
        assert elapsed < 60, elapsed  # start-up on a loaded machine + 3 s, not minutes
    finally:
        srv.close()


def test_a_bad_port_is_a_usage_error() -> None:
    for port in ("99999", "-1", "abc"):
        r = runner.invoke(app, ["diagnose", "mlflow:x", "--tracking-uri", f"http://h:{port}"])
        contract(r, codes=(2,))
        assert "port" in r.stderr or "not an http" in r.stderr


def test_wandb_unreachable_is_said_fast(monkeypatch: pytest.MonkeyPatch) -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    t0 = time.perf_counter()
    r = runner.invoke(app, ["diagnose", "wandb:team/rl/abc"])
    contract(r, codes=(2,))
    assert "unreachable" in r.stderr and time.perf_counter() - t0 < 20
    assert "k" * 40 not in r.output
