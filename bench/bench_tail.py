"""Benchmark: what following costs. (1) One poll after 10 new steps on a 3,000,000-scalar run,
against a full load of the same run (target <= 1%). (2) The CPU used while following 20 idle
runs at the default 2 s interval (target < 2% of a core).

    python bench/bench_tail.py            # uses the run bench_tensorboard.py writes
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_tensorboard import bench_args, ensure_run, tags


def main() -> None:
    ap = bench_args(__doc__.splitlines()[0])
    ap.add_argument("--idle-seconds", type=float, default=20.0)
    args = ap.parse_args()
    run = ensure_run(args.dir, args.tags, args.steps).parent
    (file,) = run.glob("events.out.tfevents.*")
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.record_writer import RecordWriter

    from rlwatch.engine.rules import load_rules
    from rlwatch.live import Watch
    from rlwatch.sources import tensorboard

    rules = load_rules()
    t0 = time.perf_counter()
    tensorboard.load(run)
    full = time.perf_counter() - t0
    size = file.stat().st_size
    try:
        watch = Watch([str(run)], rules)
        t0 = time.perf_counter()
        watch.poll()
        first = time.perf_counter() - t0
        costs = []
        for k in range(7):
            with open(file, "ab") as fh:
                w = RecordWriter(fh)
                for step in range(10):
                    for j, tag in enumerate(tags(args.tags)):
                        v = summary_pb2.Summary.Value(tag=tag, simple_value=float(j))
                        ev = event_pb2.Event(
                            wall_time=time.time(),
                            step=args.steps + 10 * k + step,
                            summary=summary_pb2.Summary(value=[v]),
                        )
                        w.write(ev.SerializeToString())
            t0 = time.perf_counter()
            watch.poll()
            costs.append(time.perf_counter() - t0)
    finally:
        with open(file, "r+b") as fh:
            fh.truncate(size)
    poll = sorted(costs)[len(costs) // 2]
    print(
        f"run: {args.tags * args.steps:,} scalars; full load {full:.2f} s; first poll "
        f"(load + rules) {first:.2f} s"
    )
    print(
        f"poll after 10 new steps (read + rules): {poll * 1000:.1f} ms = "
        f"{100 * poll / full:.2f}% of a full load (target <= 1%)"
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
        watch = Watch([str(idle)], rules)
        watch.poll()
        polls = 0
        cpu0, wall0 = time.process_time(), time.perf_counter()
        while time.perf_counter() - wall0 < args.idle_seconds:
            watch.poll()
            polls += 1
            time.sleep(2.0)
        cpu = time.process_time() - cpu0
        wall = time.perf_counter() - wall0
    finally:
        shutil.rmtree(idle, ignore_errors=True)
    print(
        f"20 idle runs, {polls} polls at 2 s: {cpu * 1000 / polls:.1f} ms CPU per poll, "
        f"{100 * cpu / wall:.2f}% of a core (target < 2%)"
    )


if __name__ == "__main__":
    main()
