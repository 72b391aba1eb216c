"""`rlwatch tail`: live following while real writers append, state changes, the watchdog,
alerts, and the real TTY dashboard driven under tmux."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import FIXTURES, GATE_RULES, ROOT, tb_record

from rlwatch.engine.evaluate import evaluate_frame
from rlwatch.engine.rules import load_rules
from rlwatch.live import Watch
from rlwatch.sources import load

RULES = load_rules()


def _canon(d: pd.DataFrame) -> pd.DataFrame:
    d = d[["run", "tag", "step", "value"]].astype({"run": str, "tag": str})
    return d.sort_values(["run", "tag", "step"]).reset_index(drop=True)


def test_tail_sees_every_row_once_while_writers_append(tmp_path: Path) -> None:
    """A writer thread appends to an event file (splitting records across polls), starts a
    second event file mid-run, and appends to a JSONL log; the verdict appears within the poll
    after the data that causes it; the rows tail saw equal a final batch read."""
    tb = tmp_path / "logs" / "grpo"
    tb.mkdir(parents=True)
    jsonl = tmp_path / "logs" / "verl.jsonl"
    first = tb / "events.out.tfevents.1700000000.host"
    first.write_bytes(b"")
    jsonl.write_text("")
    watch = Watch([str(tb.parent / "grpo"), str(jsonl)], RULES, stale_after=3600, keep_rows=True)
    events: list = []
    done = threading.Event()

    def writer() -> None:
        pending = b""
        for step in range(60):
            entropy = 0.5 if step < 30 else 0.005
            data = pending + b"".join(
                tb_record(step, t, v)
                for t, v in (
                    ("actor/entropy", entropy),
                    ("actor/grad_norm", 0.3),
                    ("response_length/clip_ratio", 0.5 if step >= 30 else 0.01),
                )
            )
            cut = len(data) - 7 if step % 3 == 0 else len(data)  # a partial record now and then
            target = first if step < 40 else tb / "events.out.tfevents.1700000100.host"
            with open(target, "ab") as fh:
                fh.write(data[:cut])
            pending = data[cut:]
            if step == 39 and pending:  # finish the first file before the writer moves on
                with open(first, "ab") as fh:
                    fh.write(pending)
                pending = b""
            with open(jsonl, "a") as fh:
                fh.write(json.dumps({"step": step, "data": {"critic/score/mean": 0.5}}) + "\n")
            time.sleep(0.01)
        if pending:
            with open(tb / "events.out.tfevents.1700000100.host", "ab") as fh:
                fh.write(pending)
        done.set()

    t = threading.Thread(target=writer)
    t.start()
    while not done.is_set():
        events += watch.poll()
        time.sleep(0.02)
    t.join()
    events += watch.poll()
    fired = [e for e in events if e.kind == "fired" and e.verdict.code == "EX03"]
    assert fired and fired[0].run == "grpo"
    assert {e.run for e in events if e.kind == "appeared"} == {"grpo", "verl"}
    seen = _canon(watch.rows())
    batch = _canon(load([str(tb), str(jsonl)]).data)
    assert len(seen) == 60 * 4
    pd.testing.assert_frame_equal(seen, batch)


def test_idle_polls_read_and_evaluate_nothing(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "grpo-healthy", tmp_path / "run")
    watch = Watch([str(tmp_path)], RULES)
    watch.poll()
    before = [v.to_dict() for v in watch.verdicts()]
    evaluated = watch.evaluations
    assert evaluated > 0
    assert watch.poll() == []
    assert watch.evaluations == evaluated  # evaluated nothing new
    assert [v.to_dict() for v in watch.verdicts()] == before


def test_stale_runs_and_vanished_sources_are_reported_not_fatal(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    log.write_text("step:1 - actor/entropy:0.5 - actor/grad_norm:1.0\n")
    watch = Watch([str(log)], RULES, stale_after=0.2)
    assert [e.kind for e in watch.poll()] == ["appeared"]
    time.sleep(0.3)
    (stale,) = watch.poll()
    assert stale.kind == "stale" and "no update for" in stale.message
    log.unlink()
    (gone,) = watch.poll()
    assert gone.kind == "file" and "deleted; waiting" in gone.message
    assert watch.poll() == []  # said once


def rlwatch(*args: str, **kw) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "100"}
    return subprocess.run(
        [sys.executable, "-m", "rlwatch", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=ROOT,
        **kw,
    )


def test_plain_lines_and_the_watchdog() -> None:
    r = rlwatch("tail", "fixtures/grpo-healthy", "--once")
    assert r.returncode == 0
    assert r.stdout.splitlines()[0].endswith("grpo-healthy: appeared (trl): fixtures/grpo-healthy")
    r = rlwatch("tail", "fixtures/grpo-broken", "--exit-on", "error", "--interval", "0.2")
    assert r.returncode == 1
    assert "ERROR ST03 stability.grad_norm_nonfinite since step 238" in r.stdout
    assert "watchdog: a verdict at or above error fired" in r.stderr


def test_on_alert_gets_the_verdict_as_json_and_env(tmp_path: Path) -> None:
    out = tmp_path / "alerts.jsonl"
    cmd = (
        f'{sys.executable} -c "import json,os,sys; d=json.load(sys.stdin); '
        f"open(r'{out}','a').write(json.dumps([d['code'], os.environ['RLWATCH_CODE'], "
        f"os.environ['RLWATCH_SEVERITY'], os.environ['RLWATCH_STEP']])+chr(10))\""
    )
    r = rlwatch("tail", "fixtures/grpo-broken", "--once", "--on-alert", cmd, "--alert-on", "error")
    assert r.returncode == 0, r.stderr
    alerts = [json.loads(x) for x in out.read_text().splitlines()]
    assert ["ST03", "ST03", "error", "238"] in alerts
    assert all(a[2] == "error" for a in alerts)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
@pytest.mark.parametrize("columns", [120, 80])
def test_the_tty_dashboard_under_tmux(tmp_path: Path, columns: int) -> None:
    session = f"rlwatch-{os.getpid()}-{columns}"
    shutil.copytree(FIXTURES / "grpo-broken", tmp_path / "grpo-broken")
    cmd = f"cd {ROOT} && {sys.executable} -m rlwatch tail {tmp_path} --interval 0.5"
    subprocess.run(
        [
            "tmux",
            "-L",
            session,
            "new-session",
            "-d",
            "-s",
            session,
            "-x",
            str(columns),
            "-y",
            "40",
            "bash",
            "-c",
            f"{cmd}; echo EXIT=$?; sleep 30",
        ],
        check=True,
    )
    try:
        screen = ""
        for _ in range(60):
            time.sleep(0.5)
            screen = subprocess.run(
                ["tmux", "-L", session, "capture-pane", "-p", "-t", session],
                capture_output=True,
                text=True,
            ).stdout
            if "firing" in screen and "grpo-broken" in screen:
                break
        assert "rlwatch tail: 1 run(s)" in screen
        assert "grpo-broken" in screen and "ST03" in screen and "240" in screen
        # per run: step, rate, firing verdicts and the key metrics, even at 80 columns
        assert "steps/min" in screen if columns > 100 else "step 240" in screen
        for short in ("entropy", "kl", "grad", "reward", "trunc"):
            assert short in screen
        assert max(len(line) for line in screen.splitlines()) <= columns, screen
        assert "0.0363471" not in screen  # numbers for people, not raw floats
        subprocess.run(["tmux", "-L", session, "send-keys", "-t", session, "C-c"], check=True)
        for _ in range(20):
            time.sleep(0.3)
            screen = subprocess.run(
                ["tmux", "-L", session, "capture-pane", "-p", "-t", session],
                capture_output=True,
                text=True,
            ).stdout
            if "EXIT=" in screen:
                break
        assert "EXIT=0" in screen and "Traceback" not in screen
    finally:
        subprocess.run(["tmux", "-L", session, "kill-session", "-t", session], capture_output=True)


def test_a_run_followed_from_its_start_keeps_its_early_level(tmp_path: Path) -> None:
    """Early levels come from the first steps even when they arrived a few per poll."""
    log = tmp_path / "run.log"
    log.write_text("")
    watch = Watch([str(log)], RULES)
    events = []
    for step in range(400):
        entropy = 0.5 if step < 300 else 0.01
        with open(log, "a") as fh:
            fh.write(f"step:{step} - actor/entropy:{entropy} - actor/pg_clipfrac:0.001\n")
        if step % 3 == 0:
            events += watch.poll()
    events += watch.poll()
    fired = [e for e in events if e.kind == "fired" and e.verdict.code == "EX01"]
    assert fired and "of its early level (0.5)" in fired[0].message


def test_an_episode_inside_one_poll_is_reported_and_the_watchdog_exits(tmp_path: Path) -> None:
    """Three NaN grad_norm steps written in one burst with finite steps after them: the error
    fired and cleared between two polls, and tail still reports it with its first/last step."""
    log = tmp_path / "run.log"
    lines = [f"step:{s} - actor/entropy:0.5 - actor/grad_norm:1.0\n" for s in range(1, 31)]
    log.write_text("".join(lines))
    watch = Watch([str(log)], RULES)
    watch.poll()
    burst = [
        f"step:{s} - actor/entropy:0.5 - actor/grad_norm:{'nan' if s <= 33 else 1.0}\n"
        for s in range(31, 60)
    ]
    with open(log, "a") as fh:
        fh.write("".join(burst))
    events = watch.poll()
    fired = [e for e in events if e.kind == "fired" and e.verdict.code == "ST03"]
    resolved = [e for e in events if e.kind == "resolved" and e.verdict.code == "ST03"]
    assert fired and "steps 31-33" in fired[0].message
    assert resolved and "steps 31-33" in resolved[0].message
    r = rlwatch("tail", str(log), "--once", "--exit-on", "error")
    assert r.returncode == 1


def test_an_ongoing_episode_keeps_its_first_step_and_a_nan_never_ages_out(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    log.write_text("")
    watch = Watch([str(log)], RULES)
    events, since = [], set()
    for step in range(1, 601):
        entropy = 0.5 if step < 155 else 0.004
        grad = "nan" if step >= 300 else "1.0"
        with open(log, "a") as fh:
            fh.write(f"step:{step} - actor/entropy:{entropy} - actor/grad_norm:{grad}\n")
        if step % 7 == 0:
            events += watch.poll()
            if step > 200:
                (run,) = watch.snapshot()["runs"]
                ex01 = [f for f in run["firing"] if f["code"] == "EX01"]
                assert ex01
                since.add(ex01[0]["since"])
    events += watch.poll()
    (ex01,) = [v for v in evaluate_frame(load([str(log)]), RULES) if v.code == "EX01"]
    assert since == {ex01.episodes[0].first_step}  # diagnose's start, never a window's start
    assert not [e for e in events if e.kind == "resolved" and e.verdict.code in ("EX01", "ST03")]
    st03 = next(v for v in watch.verdicts() if v.code == "ST03")
    assert st03.state == "firing" and st03.episodes[0].first_step == 300
    assert st03.episodes[0].last_step == 600


@pytest.mark.parametrize(
    ("losses", "once_rc"),
    [
        ([0.69] * 8 + [0.3] * 8, 0),  # a slow warm-up at chance that ends: not failing
        ([0.69] * 16, 1),  # still at chance at the last step: failing now
        ([0.3] * 8 + [9.0] + [0.3] * 7, 1),  # a gate: any error anywhere
    ],
)
def test_gate_last_rules_are_judged_at_the_end_by_tail_as_by_diagnose(
    tmp_path: Path, losses: list[float], once_rc: int
) -> None:
    """A `gate: last` rule that fires does not trip the watchdog (a healthy run may pass through
    that state); `tail --once --exit-on error` exits as `diagnose` does on the same file."""
    rules = tmp_path / "gate.yaml"
    rules.write_text(GATE_RULES)
    log = tmp_path / "run.log"
    log.write_text("".join(f"step:{s} - loss:{v}\n" for s, v in enumerate(losses, 1)))
    sel = ["--rules", str(rules), "--select", "XX01", "--select", "XX02"]
    once = rlwatch("tail", str(log), "--once", "--exit-on", "error", *sel)
    diag = rlwatch("diagnose", str(log), *sel)
    assert (once.returncode, diag.returncode) == (once_rc, once_rc), (once.stdout, diag.stdout)
    # the watchdog (no --once): a gate: last rule is announced but never stops it
    cmd = [sys.executable, "-m", "rlwatch", "tail", str(log), "--exit-on", "error", "-n", "0.1"]
    proc = subprocess.Popen(
        [*cmd, *sel], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT
    )
    try:
        seen = []
        for line in proc.stdout:  # one line per state change (not a TTY)
            seen.append(line)
            if "XX02" in line or "XX01" in line:
                break
        if max(losses) > 5:
            assert proc.wait(timeout=60) == 1  # XX02 (gate: any) stops the watchdog
        else:
            assert any("XX01" in x for x in seen), seen
            time.sleep(1.0)  # ten more polls of a finished file
            assert proc.poll() is None, seen  # still watching: XX01 stopped nothing
    finally:
        proc.kill()
        proc.wait()
