"""Benchmark: rlwatch's TensorBoard reader against tbparse and a bare framing walk, same file.

    python bench/bench_tensorboard.py                  # 150 tags x 20,000 steps = 3,000,000 scalars
    python bench/bench_tensorboard.py --steps 2000     # a quick run (300,000 scalars)

Writes the run once with tensorboardX (cached under --dir), then measures each method in a
fresh process (time and peak RSS) and prints ratios. Targets (issue #2): >= 30x faster than
tbparse (issue #15: >= 60x), <= 2x the framing walk, peak RSS <= 0.4 GB, an incremental poll
after 10 new steps <= 1% of a full load.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TAG_STEMS = [
    "actor/entropy",
    "actor/grad_norm",
    "actor/pg_loss",
    "actor/pg_clipfrac",
    "actor/ppo_kl",
    "actor/kl_loss",
    "critic/score/mean",
    "critic/score/max",
    "critic/score/min",
    "critic/rewards/mean",
    "response_length/mean",
    "response_length/max",
    "response_length/clip_ratio",
    "global_seqlen/minmax_diff",
    "timing_s/gen",
    "timing_s/step",
    "perf/throughput",
    "perf/mfu/actor",
]


def tags(n: int) -> list[str]:
    out = list(TAG_STEMS[:n])
    i = 0
    while len(out) < n:
        out.append(f"timing_s/agent_loop/extra_{i}/mean")
        i += 1
    return out


def generate(run_dir: Path, n_tags: int, steps: int) -> Path:
    from tensorboardX import SummaryWriter

    run_dir.mkdir(parents=True, exist_ok=True)
    w = SummaryWriter(str(run_dir), max_queue=10_000, flush_secs=3600)
    names = tags(n_tags)
    for step in range(steps):
        for j, t in enumerate(names):
            w.add_scalar(t, (step % 97) * 0.01 + j, step)
    w.close()
    return next(run_dir.glob("events.out.tfevents.*"))


def bench_args(description: str) -> argparse.ArgumentParser:
    """The options every benchmark shares: the size of the run and where it is cached."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--tags", type=int, default=150)
    ap.add_argument("--steps", type=int, default=20_000)
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "rlwatch-bench")
    return ap


def ensure_run(directory: Path, n_tags: int, steps: int) -> Path:
    """The benchmark run's event file, written once with tensorboardX and then reused."""
    run = directory / f"tb_{n_tags}x{steps}"
    files = list(run.glob("events.out.tfevents.*"))
    if files:
        return files[0]
    print(f"writing {n_tags} x {steps} scalars with tensorboardX to {run} ...", file=sys.stderr)
    t0 = time.perf_counter()
    file = generate(run, n_tags, steps)
    print(f"  written in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return file


# each method: (imports, measured work); imports are done before the clock starts
CHILD = {
    "rlwatch": (
        "from rlwatch.sources import tensorboard",
        """
f = tensorboard.load(RUN)
rows = len(f.data)
""",
    ),
    "tbparse": (
        "from tbparse import SummaryReader",
        """
rows = len(SummaryReader(RUN, extra_columns={"wall_time"}).scalars)
""",
    ),
    "framing": (
        "import struct",
        """
data = open(FILE, "rb").read()
pos, rows, n, unpack = 0, 0, len(data), struct.unpack_from
while pos + 12 <= n:
    (length,) = unpack("<Q", data, pos)
    pos += 16 + length
    rows += 1
""",
    ),
    "poll": (
        """
from rlwatch.sources import tensorboard
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.record_writer import RecordWriter
""",
        """
follower = tensorboard.Follower(RUN)
t0 = time.perf_counter(); full = len(follower.poll().data); t_full = time.perf_counter() - t0
last = int(follower.runs[next(iter(follower.runs))].readers[0].offset)
with open(FILE, "ab") as fh:
    w = RecordWriter(fh)
    for step in range(10):
        for j, tag in enumerate(TAGS):
            v = summary_pb2.Summary.Value(tag=tag, simple_value=float(j))
            ev = event_pb2.Event(wall_time=time.time(), step=10**7 + step,
                                 summary=summary_pb2.Summary(value=[v]))
            w.write(ev.SerializeToString())
t0 = time.perf_counter(); rows = len(follower.poll().data); elapsed = time.perf_counter() - t0
print(json.dumps({"full": t_full, "full_rows": full}), file=sys.stderr)
with open(FILE, "r+b") as fh:
    fh.truncate(last)
""",
    ),
}


def measure(kind: str, run: Path, file: Path, names: list[str]) -> dict[str, float]:
    setup, work = CHILD[kind]
    code = f"""
import json, resource, sys, time
RUN, FILE, TAGS = {str(run)!r}, {str(file)!r}, {names!r}
{setup}
t0 = time.perf_counter()
{work}
elapsed = locals().get("elapsed", time.perf_counter() - t0)
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2
print(json.dumps({{"seconds": elapsed, "rss_gb": rss, "rows": rows}}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if out.stderr.strip():
        result.update(json.loads(out.stderr.strip().splitlines()[-1]))
    return result


def main() -> None:
    ap = bench_args(__doc__.splitlines()[0])
    ap.add_argument("--skip-tbparse", action="store_true", help="tbparse takes ~80 s at 3M")
    ap.add_argument("--repeat", type=int, default=3, help="runs per method; the median is kept")
    args = ap.parse_args()

    file = ensure_run(args.dir, args.tags, args.steps)
    run = file.parent
    names = tags(args.tags)
    size_mb = file.stat().st_size / 1e6

    def median(kind: str, repeat: int) -> dict[str, float]:
        runs = [measure(kind, run, file, names) for _ in range(repeat)]
        runs.sort(key=lambda r: r["seconds"])
        return runs[len(runs) // 2]

    res = {
        "rlwatch": median("rlwatch", args.repeat),
        "framing": median("framing", args.repeat),
        "poll": median("poll", args.repeat),
    }
    if not args.skip_tbparse:
        res["tbparse"] = median("tbparse", 1)
    scalars = args.tags * args.steps
    print(
        f"file: {file.name}  {size_mb:.0f} MB  {scalars:,} scalars ({args.tags} tags x "
        f"{args.steps:,} steps), tensorboardX writer"
    )
    print(f"{'method':<34}{'seconds':>9}{'peak RSS GB':>13}{'rows':>12}")
    labels = {
        "rlwatch": "rlwatch tensorboard.load",
        "tbparse": "tbparse SummaryReader.scalars",
        "framing": "bare read + framing walk (struct)",
        "poll": "rlwatch poll after 10 new steps",
    }
    for k in ("rlwatch", "tbparse", "framing", "poll"):
        if k in res:
            r = res[k]
            print(f"{labels[k]:<34}{r['seconds']:>9.3f}{r['rss_gb']:>13.3f}{int(r['rows']):>12,}")
    rl = res["rlwatch"]["seconds"]
    print()
    if "tbparse" in res:
        ratio = res["tbparse"]["seconds"] / rl
        print(f"speed-up vs tbparse:         {ratio:6.1f}x   (target >= 60x)")
    print(f"load / framing walk:         {rl / res['framing']['seconds']:6.2f}x   (target <= 2x)")
    print(f"peak RSS of rlwatch:         {res['rlwatch']['rss_gb']:6.3f} GB (target <= 0.4 GB)")
    poll = res["poll"]
    print(
        f"poll(10 steps) / full load:  {100 * poll['seconds'] / poll['full']:6.2f}%   "
        f"(target <= 1%; {poll['seconds'] * 1000:.1f} ms vs {poll['full']:.2f} s)"
    )
    if res["rlwatch"]["rows"] != scalars:
        sys.exit(f"rlwatch returned {res['rlwatch']['rows']} rows, expected {scalars}")


if __name__ == "__main__":
    main()
