"""TM00 throughput.stalled: one rule of the pack, judged live by `tail` and by `diagnose`.

A real writer (tensorboardX, in its own process) logs steps, then stops logging while it keeps
its event file open: tail and diagnose both say "stalled". A copied healthy run (every file's
modification time is the copy time) and a finished run must never be called stalled.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT

from rlwatch.engine.rules import load_rules
from rlwatch.engine.select import select
from rlwatch.live import Watch

WRITER = """
import sys, time
from tensorboardX import SummaryWriter
d, n, dt, hold = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
w = SummaryWriter(d, flush_secs=1)
for s in range(n):
    w.add_scalar("actor/entropy", 0.5, s, walltime=time.time())
    w.add_scalar("actor/grad_norm", 1.0, s, walltime=time.time())
    w.flush()
    time.sleep(dt)
print("stalled", flush=True)
sys.stdin.read()  # alive, the event file still open, no new step: until the test says stop
w.add_scalar("actor/entropy", 0.5, n, walltime=time.time())
w.add_scalar("actor/grad_norm", 1.0, n, walltime=time.time())
w.close()
"""

# TM00 as shipped but with a 1 s floor (the shipped 120 s would make a slow test): a user file
# overrides a shipped rule by code, as rlwatch.toml's `rules` do
FAST = """version: 1
groups:
  - name: mine
    rules:
      - code: TM00
        name: throughput.stalled
        severity: warning
        description: no new step for 10x the median step interval, at least 1 s
        when:
          stalled: {factor: 10, floor: 1}
        summary: "no new step for {value:.0f} s after step {step}"
        checks: [{metric: step_time, hint: "slower steps before?"}]
        runbook: test
"""


def _writer(run: Path, steps: int = 8, dt: float = 0.05) -> subprocess.Popen:
    p = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(run), str(steps), str(dt), "0"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert p.stdout is not None and p.stdout.readline().strip() == "stalled"
    return p


def _diagnose(target: Path, rules: Path, cwd: Path) -> dict:
    r = subprocess.run(
        [
            *(sys.executable, "-m", "rlwatch", "diagnose", str(target), "--rules", str(rules)),
            *("--select", "TM00", "--format", "json", "--exit-zero"),
        ],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert r.returncode == 0, r.stderr
    (v,) = [v for v in json.loads(r.stdout)["verdicts"] if v["code"] == "TM00"]
    return v


def test_the_stall_is_a_rule_of_the_pack() -> None:
    rules = load_rules()
    rule = rules.get("TM00")
    assert rule is not None and rule.name == "throughput.stalled" and rule.when.KIND == "stalled"
    assert select(rules, None, ["TM00"]).get("TM00") is None  # --ignore sees it
    r = subprocess.run(
        [sys.executable, "-m", "rlwatch", "rules", "explain", "TM00"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert r.returncode == 0 and "stalled" in r.stdout


def test_tail_and_diagnose_say_stalled_while_a_real_writer_holds_its_file(
    tmp_path: Path,
) -> None:
    run = tmp_path / "run"
    fast = tmp_path / "fast.yaml"
    fast.write_text(FAST)
    p = _writer(run)
    try:
        # diagnose: the writer still holds the file open, so "now" is the current time
        time.sleep(1.5)
        v = _diagnose(run, fast, tmp_path)
        assert v["state"] == "firing", v
        (ep,) = v["episodes"]
        assert ep["first_step"] == ep["last_step"] == 7
        assert f"process {p.pid} still has" in ep["summary"]
        # tail, started on the stalled run: the same writer evidence, caught at once
        watch = Watch([str(run)], select(load_rules([fast]), ["TM00"], None))
        events = watch.poll()
        fired = [e for e in events if e.kind == "fired" and e.verdict.code == "TM00"]
        assert fired and "since step 7" in fired[0].message, [e.line() for e in events]
        # a step arrives: resolved with its steps
        assert p.stdin is not None
        p.stdin.close()
        p.wait(timeout=30)
        deadline = time.time() + 20
        resolved = []
        while not resolved and time.time() < deadline:
            resolved = [e for e in watch.poll() if e.kind == "resolved"]
            time.sleep(0.1)
        assert resolved and "steps 7-7" in resolved[0].message
    finally:
        if p.poll() is None:
            p.kill()
    # the writer is gone: judged at the run's latest record, the finished run is not stalled
    assert _diagnose(run, fast, tmp_path)["state"] == "ok"


def test_tail_judges_a_stall_by_its_own_clock_once_steps_arrived(tmp_path: Path) -> None:
    """Steps arrive while tail follows; the writer then stops (file closed, so only tail's
    clock knows): --stall-floor overrides the rule's floor."""
    from tensorboardX import SummaryWriter

    run = tmp_path / "run"
    w = SummaryWriter(str(run), flush_secs=1)
    watch = Watch([str(run)], load_rules(), stall_floor=0.8)
    events = []
    for s in range(8):
        w.add_scalar("actor/entropy", 0.5, s, walltime=time.time())
        w.flush()
        events += watch.poll()
        time.sleep(0.05)
    w.close()
    assert watch.rules.get("TM00").when.floor == 0.8
    deadline = time.time() + 20
    while time.time() < deadline:
        events += watch.poll()
        if any(e.kind == "fired" and e.verdict.code == "TM00" for e in events):
            break
        time.sleep(0.1)
    fired = [e for e in events if e.kind == "fired" and e.verdict.code == "TM00"]
    assert fired and "WARNING TM00 throughput.stalled since step 7" in fired[0].message


@pytest.mark.parametrize("fixture", ["grpo-healthy", "verl-gpg-math-qwen2-7b-fsdp"])
def test_a_copied_healthy_run_is_never_stalled(tmp_path: Path, fixture: str) -> None:
    """Every file's mtime is the copy time (months after its records): not evidence."""
    fast = tmp_path / "fast.yaml"
    fast.write_text(FAST)
    dst = tmp_path / fixture
    shutil.copytree(FIXTURES / fixture, dst)
    now = time.time()
    for f in dst.rglob("*"):
        os.utime(f, (now, now))
    v = _diagnose(dst, fast, tmp_path)
    assert v["state"] in ("ok", "skipped") and not v["episodes"], v
    watch = Watch([str(dst)], select(load_rules([fast]), ["TM00"], None))
    events = watch.poll()
    time.sleep(1.2)
    events += watch.poll()
    assert not [e for e in events if e.kind == "fired"], [e.line() for e in events]
