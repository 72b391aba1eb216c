"""Benchmark: what following costs. (1) Resident memory while following a 3,000,000-scalar run
(target <= 120 MB), next to the interpreter's floor and diagnose's peak on the same run.
(2) One poll after 10 new steps, against a full load of the same run. (3) Write -> verdict
latency at the default interval (2 s; target <= 1 s median). (4) CPU of 20 idle runs.

    python bench/bench_tail.py            # uses (a copy of) the run bench_tensorboard.py writes
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_tensorboard import bench_args, ensure_run, tags

RSS = """
def rss(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) / 1024
"""
FOLLOW = (
    RSS
    + """
import sys, json
from rlwatch.engine.rules import load_rules
from rlwatch.live import Watch
rules = load_rules()
floor = rss("VmRSS")
w = Watch([sys.argv[1]], rules)
w.poll()
for _ in range(3):
    w.poll()
print(json.dumps({"floor": floor, "rss": rss("VmRSS"), "peak": rss("VmHWM")}))
"""
)
DIAGNOSE = (
    RSS
    + """
import sys, json
from rlwatch.api import diagnose
diagnose([sys.argv[1]])
print(json.dumps({"peak": rss("VmHWM")}))
"""
)


def child(code: str, run: Path) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", code, str(run)], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def append_steps(file: Path, first: int, n: int, names: list[str], bad: bool = False) -> None:
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.record_writer import RecordWriter

    with open(file, "ab") as fh:
        w = RecordWriter(fh)
        for step in range(first, first + n):
            for j, tag in enumerate(names):
                value = float("nan") if bad and tag == "actor/grad_norm" else float(j) + 0.5
                v = summary_pb2.Summary.Value(tag=tag, simple_value=value)
                ev = event_pb2.Event(
                    wall_time=time.time(), step=step, summary=summary_pb2.Summary(value=[v])
                )
                w.write(ev.SerializeToString())
        fh.flush()


def latency(rules, rounds: int, interval: float) -> list[float]:
    """A writer thread appends a step every 0.25 s and, at random moments, a step with a NaN
    grad_norm; the follower runs tail's loop (poll, then `Watch.sleep(interval)`)."""
    from rlwatch.live import Watch

    d = Path(tempfile.mkdtemp(prefix="rlwatch-latency-"))
    run = d / "run"
    run.mkdir()
    file = run / "events.out.tfevents.1700000000.bench"
    names = ["actor/entropy", "actor/grad_norm", "critic/score/mean", "actor/pg_loss"]
    append_steps(file, 0, 30, names)
    written: list[float] = []
    seen: list[float] = []
    stop = threading.Event()

    def writer() -> None:
        step, rng = 30, random.Random(0)
        while not stop.is_set() and len(written) < rounds:
            time.sleep(rng.uniform(1.0, 3.0))
            append_steps(file, step, 1, names, bad=True)
            written.append(time.time())
            step += 1
            for _ in range(4):  # finite steps: the episode ends before the next NaN
                time.sleep(0.25)
                append_steps(file, step, 1, names)
                step += 1

    watch = Watch([str(run)], rules)
    watch.poll()
    t = threading.Thread(target=writer)
    t.start()
    deadline = time.time() + rounds * 6 + 30
    try:
        while len(seen) < rounds and time.time() < deadline:
            for ev in watch.poll():
                if ev.kind == "fired" and ev.verdict is not None and ev.verdict.code == "ST03":
                    seen.append(time.time())
            watch.sleep(interval)
    finally:
        stop.set()
        t.join()
        shutil.rmtree(d, ignore_errors=True)
    return [b - a for a, b in zip(written, seen, strict=False)]


def main() -> None:
    ap = bench_args(__doc__.splitlines()[0])
    ap.add_argument("--idle-seconds", type=float, default=20.0)
    ap.add_argument("--rounds", type=int, default=12)
    args = ap.parse_args()
    src = ensure_run(args.dir, args.tags, args.steps).parent
    from rlwatch.engine.rules import load_rules
    from rlwatch.live import Watch
    from rlwatch.sources import tensorboard

    rules = load_rules()
    scalars = args.tags * args.steps
    tmp = Path(tempfile.mkdtemp(prefix="rlwatch-bench-tail-"))
    try:
        run = tmp / src.name
        shutil.copytree(src, run)  # the shared cached run is never appended to
        (file,) = run.glob("events.out.tfevents.*")

        mem = child(FOLLOW, run)
        diag = child(DIAGNOSE, run)
        print(
            f"memory following a {scalars:,}-scalar run: {mem['rss']:.0f} MB resident after "
            f"catching up (target <= 120 MB; the interpreter with pandas and the rules alone: "
            f"{mem['floor']:.0f} MB, so following adds {mem['rss'] - mem['floor']:.0f} MB); "
            f"peak while catching up {mem['peak']:.0f} MB; diagnose's peak on the same run "
            f"{diag['peak']:.0f} MB ({diag['peak'] / mem['rss']:.1f}x tail's resident)"
        )

        t0 = time.perf_counter()
        tensorboard.load(run)
        full = time.perf_counter() - t0
        watch = Watch([str(run)], rules)
        t0 = time.perf_counter()
        watch.poll()
        first = time.perf_counter() - t0
        costs, evals = [], []
        for k in range(7):
            append_steps(file, args.steps + 10 * k, 10, tags(args.tags))
            e0 = watch.evaluations
            t0 = time.perf_counter()
            watch.poll()
            costs.append(time.perf_counter() - t0)
            evals.append(watch.evaluations - e0)
        poll = sorted(costs)[len(costs) // 2]
        print(
            f"full load {full:.2f} s; first poll (catch-up + rules) {first:.2f} s; poll after "
            f"10 new steps (read + rules, {evals[-1]} rule evaluations): {poll * 1000:.1f} ms = "
            f"{100 * poll / full:.2f}% of a full load"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    lat = sorted(latency(rules, args.rounds, 2.0))
    if lat:
        print(
            f"write -> verdict at the default 2 s interval ({len(lat)} NaN steps): median "
            f"{lat[len(lat) // 2]:.2f} s, max {lat[-1]:.2f} s (target <= 1 s median)"
        )

    idle = Path(tempfile.mkdtemp(prefix="rlwatch-idle-"))
    try:
        from tensorboardX import SummaryWriter

        for i in range(20):
            w = SummaryWriter(str(idle / f"run{i:02d}"))
            for s in range(200):
                for t in ("actor/entropy", "actor/grad_norm", "critic/score/mean"):
                    w.add_scalar(t, 0.5, s)
            w.close()
        watch = Watch([str(idle)], rules, stall_floor=1e9)
        watch.poll()
        polls = 0
        cpu0, wall0 = time.process_time(), time.perf_counter()
        while time.perf_counter() - wall0 < args.idle_seconds:
            watch.poll()
            polls += 1
            watch.sleep(2.0)
        cpu = time.process_time() - cpu0
        wall = time.perf_counter() - wall0
    finally:
        shutil.rmtree(idle, ignore_errors=True)
    print(
        f"20 idle runs, {polls} polls at 2 s: {cpu * 1000 / polls:.1f} ms CPU per poll "
        f"(with the 0.1 s change checks between), {100 * cpu / wall:.2f}% of a core"
    )


if __name__ == "__main__":
    main()
