"""The kept corpus of bad inputs (#11): every one against the contract.

fixtures/bad/ holds damaged event files (from the real writer), hostile logs, hostile rule files
and broken configuration (written by fixtures/bad/make_bad.py); odd targets (FIFO, socket,
device, dangling symlink, symlink loop, a folder named *.wandb, an empty folder, a 1 MB log
line) and tracking servers that fail in every way (a local socket server) are made here.
The contract: exit code in {0, 1, 2}; no traceback; exit 2 is one short `rlwatch: error:` line
(and never the top-level guard's "this is not a verdict" line: each class is fixed at source).
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
from pathlib import Path

import pytest
from conftest import FIXTURES
from typer.testing import CliRunner

from rlwatch.cli.app import app

runner = CliRunner()
BAD = FIXTURES / "bad"
GOOD = FIXTURES / "grpo-healthy"


def check(r) -> None:
    err = r.stderr
    assert r.exit_code in (0, 1, 2), (r.exit_code, err, r.exception)
    assert "Traceback" not in err and "Traceback" not in r.stdout
    assert "this is not a verdict" not in err, err
    if r.exit_code == 2:
        errors = [ln for ln in err.splitlines() if ln.startswith("rlwatch: error: ")]
        assert len(errors) == 1 and len(errors[0]) < 2000, err


def _files(sub: str) -> list[Path]:
    return sorted(p for p in (BAD / sub).rglob("*") if p.is_file())


EVENTS = sorted((BAD / "events").iterdir()) if (BAD / "events").is_dir() else []


@pytest.mark.parametrize("run", EVENTS, ids=[p.name for p in EVENTS])
def test_damaged_event_files(run: Path) -> None:
    check(runner.invoke(app, ["diagnose", str(run), "--format", "json"]))


@pytest.mark.parametrize("log", _files("logs"), ids=[p.name for p in _files("logs")])
def test_hostile_logs(log: Path) -> None:
    check(runner.invoke(app, ["diagnose", str(log), "--format", "json"]))


@pytest.mark.parametrize("rule", _files("rules"), ids=[p.name for p in _files("rules")])
def test_hostile_rule_files(rule: Path) -> None:
    check(runner.invoke(app, ["diagnose", str(GOOD), "--rules", str(rule), "--format", "json"]))


@pytest.mark.parametrize("conf", _files("config"), ids=[p.name for p in _files("config")])
def test_broken_configuration(conf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    name = conf.name.split("--")[0]
    if name.startswith("parent-"):
        shutil.copy(conf, tmp_path / name.removeprefix("parent-"))
        cwd = tmp_path / "a" / "b"
        cwd.mkdir(parents=True)
    else:
        shutil.copy(conf, tmp_path / name)
        cwd = tmp_path
    monkeypatch.chdir(cwd)
    check(runner.invoke(app, ["diagnose", str(GOOD), "--format", "json"]))


# -- odd targets, made here -------------------------------------------------------------------
def _odd(kind: str, tmp: Path) -> Path:
    if kind == "fifo":
        os.mkfifo(tmp / "run.log")
        return tmp / "run.log"
    if kind == "socket":
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(tmp / "run.jsonl"))
        return tmp / "run.jsonl"
    if kind == "dev-zero":
        return Path("/dev/zero")
    if kind == "dangling":
        (tmp / "run.log").symlink_to(tmp / "gone.log")
        return tmp / "run.log"
    if kind == "loop":
        (tmp / "a").mkdir()
        (tmp / "a" / "loop").symlink_to(tmp / "a", target_is_directory=True)
        return tmp / "a"
    if kind == "dir-wandb":
        (tmp / "x.wandb").mkdir()
        return tmp / "x.wandb"
    if kind == "empty-dir":
        return tmp
    if kind == "long-line":
        (tmp / "run.log").write_text("step:1 - " + "actor/entropy:0.5 - " * 60_000 + "\n")
        return tmp / "run.log"
    if kind == "folder-of-odd":
        os.mkfifo(tmp / "a.log")
        (tmp / "b.log").symlink_to(tmp / "nowhere")
        shutil.copytree(GOOD, tmp / "good")
        return tmp
    raise AssertionError(kind)


ODD = ["fifo", "socket", "dev-zero", "dangling", "loop", "dir-wandb", "empty-dir", "long-line"]


@pytest.mark.parametrize("kind", [*ODD, "folder-of-odd"])
def test_odd_targets(kind: str, tmp_path: Path) -> None:
    target = _odd(kind, tmp_path)
    r = runner.invoke(app, ["diagnose", str(target), "--format", "json"])
    check(r)
    if kind == "folder-of-odd":
        assert r.exit_code in (0, 1) and '"skipped_count": 2' in r.stdout


# -- tracking servers that fail in every way --------------------------------------------------
def _serve(reply) -> tuple[socket.socket, int]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)

    def loop() -> None:
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            try:
                c.recv(65536)
                reply(c)
            except OSError:
                pass
            finally:
                c.close()

    threading.Thread(target=loop, daemon=True).start()
    return srv, srv.getsockname()[1]


def _http(body: bytes, status: str = "200 OK") -> bytes:
    return (
        f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body


SERVERS = {
    "not-http": lambda c: c.sendall(b"\x00\xffSSH-2.0\r\n"),
    "bad-status-line": lambda c: c.sendall(b"HTTP/1.1 OK-ish\r\n\r\n"),
    "keyerror-json": lambda c: c.sendall(_http(b'{"run": {}}')),
    "json-list": lambda c: c.sendall(_http(b"[]")),
    "json-deep": lambda c: c.sendall(_http(b"[" * 50_000 + b"]" * 50_000)),
    "html-login": lambda c: c.sendall(_http(b"<html>sign in</html>")),
    "401": lambda c: c.sendall(_http(b"{}", "401 Unauthorized")),
    "503": lambda c: c.sendall(_http(b"busy", "503 Busy")),
    "hang-up": lambda c: None,
    "huge-header": lambda c: c.sendall(b"HTTP/1.1 200 OK\r\nX: " + b"a" * 200_000 + b"\r\n\r\n"),
}


@pytest.mark.parametrize("kind", sorted(SERVERS))
def test_tracking_servers_that_fail(kind: str) -> None:
    srv, port = _serve(SERVERS[kind])
    try:
        uri = f"http://u:p%40ss#w@127.0.0.1:{port}"
        r = runner.invoke(
            app, ["diagnose", "mlflow:exp/run", "--tracking-uri", uri, "--timeout", "20"]
        )
        check(r)
        assert r.exit_code == 2 and "p%40ss" not in r.output and "ss#w" not in r.output
    finally:
        srv.close()


def test_the_corpus_is_at_least_128_inputs() -> None:
    n = len(EVENTS) + sum(len(_files(s)) for s in ("logs", "rules", "config"))
    assert n + len(ODD) + 1 + len(SERVERS) >= 128, n
