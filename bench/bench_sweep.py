"""Benchmark: many small runs in one folder, end to end, against one run in the same bench run.

    python bench/bench_sweep.py                     # 2,000 runs, --jobs = cores, + Ray
    python bench/bench_sweep.py --runs 500 --no-ray
    python bench/bench_sweep.py --no-ray --pool-repeat 3   # best of 3 for the pool too

Writes N small verl FileLogger JSONL runs (60 steps x 8 metrics; every 10th run's entropy
collapses) into one folder, then times in this one bench run, each as a fresh `rlwatch diagnose`
process (start-up included, as a user or CI pays it):

  baseline   one run of the folder
  pool       the whole folder, --jobs N (default: the cores) -> ratio to the baseline
  serial     the whole folder, --jobs 1 (per-run cost without a pool)
  ray        the whole folder, --executor ray on a local Ray started by rlwatch (start-up
             included), and the same with a Ray already running (RAY_ADDRESS), per-run ms

Target (issue #14): 2,000 runs cost at most 15x one run on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

KEYS = (
    "actor/entropy",
    "actor/grad_norm",
    "actor/pg_clipfrac",
    "actor/ppo_kl",
    "critic/score/mean",
    "response_length/mean",
    "response_length/clip_ratio",
    "timing_s/step",
)


def write_runs(root: Path, n: int, steps: int = 60) -> None:
    rng = random.Random(0)
    for i in range(n):
        broken = i % 10 == 3
        lines = []
        for s in range(1, steps + 1):
            data = {k: 0.3 + 0.01 * rng.random() for k in KEYS}
            data["actor/entropy"] = 0.001 if broken and s > steps // 2 else 0.5
            data["critic/score/mean"] = 0.2 + s / 200
            lines.append(json.dumps({"step": s, "data": data}))
        (root / f"run{i}.jsonl").write_text("\n".join(lines) + "\n")


CPU: list[float] = []  # CPU seconds (user + sys) of the last timed process and its children


def timed(args: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    """Wall time of one `rlwatch diagnose` process (the default text table) and its stdout;
    its CPU time (with its pool workers) is appended to CPU."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "rlwatch", "diagnose", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "120", **(env or {})},
    )
    dt = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    if out.returncode not in (0, 1):
        raise SystemExit(f"rlwatch failed ({out.returncode}): {out.stderr[-2000:]}")
    return dt, out.stdout


def runs_in(table: str) -> int:
    m = re.search(r"^(\d+) run\(s\):", table, re.M)
    return int(m.group(1)) if m else -1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=3, help="baseline: best of N (wall, CPU)")
    ap.add_argument("--pool-repeat", type=int, default=1, help="the pool: best of N (wall, CPU)")
    ap.add_argument("--no-ray", action="store_true")
    ap.add_argument("--serial", dest="no_serial", action="store_false", help="also --jobs 1")
    ap.add_argument("--json", action="store_true", help="also time --format json")
    args = ap.parse_args()
    d = Path(tempfile.mkdtemp(prefix="rlwatch-sweep-bench-"))
    try:
        write_runs(d, args.runs)
        cores = len(os.sched_getaffinity(0))
        jobs = args.jobs or cores
        print(f"{args.runs} runs x 60 steps x {len(KEYS)} metrics in one folder; {cores} cores")
        bases = []
        for _ in range(args.repeat):
            bases.append((timed([str(d / "run3.jsonl")])[0], CPU[-1]))
        # best wall and best CPU, each over the repeats (another job's burst inflates both)
        base, base_cpu = min(b[0] for b in bases), min(b[1] for b in bases)
        print(f"baseline  one run:  {base:7.2f} s wall, {base_cpu:6.2f} s CPU")
        pools = []
        for _ in range(max(1, args.pool_repeat)):
            t_pool, doc = timed([str(d), "--jobs", str(jobs)])
            pools.append((t_pool, CPU[-1]))
            assert runs_in(doc) == args.runs, doc[-500:]
        t_pool, pool_cpu = min(p[0] for p in pools), min(p[1] for p in pools)
        print(
            f"pool      {args.runs} runs, --jobs {jobs}: {t_pool:7.2f} s wall = "
            f"{t_pool / base:5.1f}x one run (target <= 15x); CPU {pool_cpu:6.1f} s = "
            f"{1000 * (pool_cpu - base_cpu) / args.runs:.1f} ms per extra run; "
            f"uncontended estimate (CPU / {jobs} cores) {pool_cpu / jobs / base_cpu:5.1f}x"
            + (f" (best of {len(pools)})" if len(pools) > 1 else "")
        )
        print(f"          load average during the bench: {os.getloadavg()[0]:.1f} on {cores} cores")
        if args.json:
            t_j, _ = timed([str(d), "--jobs", str(jobs), "-f", "json", "-o", os.devnull])
            print(f"pool json {args.runs} runs, --format json: {t_j:7.2f} s = {t_j / base:5.1f}x")
        if not args.no_serial:
            t_one, _ = timed([str(d), "--jobs", "1"])
            print(
                f"serial    {args.runs} runs, --jobs 1: {t_one:7.2f} s = {t_one / base:5.1f}x "
                f"(CPU {CPU[-1]:.1f} s)"
            )
        if not args.no_ray:
            try:
                import ray  # noqa: F401
            except ImportError:
                print("ray       skipped: ray is not importable (pip install 'rlwatch[ray]')")
                return
            t_ray, rdoc = timed([str(d), "--executor", "ray", "--jobs", str(jobs)])
            same = rdoc == doc
            if not same:
                diff = next(
                    (a, b)
                    for a, b in zip(rdoc.splitlines(), doc.splitlines(), strict=False)
                    if a != b
                )
                print(f"          first difference: ray {diff[0]!r} vs pool {diff[1]!r}")
            print(
                f"ray       {args.runs} runs, local Ray started by rlwatch: {t_ray:7.2f} s = "
                f"{t_ray / base:5.1f}x one run; same report as the pool: {same}"
            )
            # a Ray that is already up (as on a cluster): this bench's own head, held by a
            # helper process; closing its stdin shuts down that cluster only
            holder = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    "import sys, ray\n"
                    f"ray.init(num_cpus={jobs}, include_dashboard=False, log_to_driver=False)\n"
                    "print(ray.get_runtime_context().gcs_address, flush=True)\n"
                    "sys.stdin.read()\n"
                    "ray.shutdown()\n",
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"},
            )
            assert holder.stdout is not None and holder.stdin is not None
            address = holder.stdout.readline().strip()
            try:
                if not address:
                    print("ray       (running cluster) skipped: the Ray head did not start")
                    return
                t_warm, _ = timed(
                    [str(d), "--executor", "ray"],
                    env={"RAY_ADDRESS": address, "RAY_AUTH_MODE": "disabled"},
                )
                print(
                    f"ray       {args.runs} runs on a running Ray (RAY_ADDRESS): {t_warm:7.2f} s"
                    f" = {t_warm / base:5.1f}x one run ({1000 * t_warm / args.runs:.1f} ms/run)"
                )
            finally:
                holder.stdin.close()
                holder.wait(timeout=120)
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
