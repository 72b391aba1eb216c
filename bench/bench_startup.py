"""Start-up: `rlwatch --help` and `rlwatch diagnose` of a small real log, as whole processes.

Each figure is the median CPU time (user + sys, the process's own accounting) and wall time over
--runs runs, against baselines measured in the same run:

    python -c pass             the interpreter alone        (--help target: <= 0.2 s)
    python -c "import pandas"  pandas' own import            (diagnose target: <= pandas + 0.3 s)

`diagnose` is measured warm (the compiled rule pack in the cache, the usual case) and cold
(RLWATCH_NO_CACHE=1: every YAML file parsed and validated). CPU time is the figure to quote on a
shared machine: wall time there includes waiting for a core.

    python bench/bench_startup.py [--runs 7] [--log fixtures/...jsonl]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOG = "fixtures/verl-filelogger-jsonl-gsm8k-ppo-collapse/gsm8k.jsonl"


def measure(cmd: list[str], runs: int, env: dict[str, str]) -> tuple[float, float]:
    """(median cpu s, median wall s) of `cmd` over `runs` runs after one warm-up."""
    cpu, wall = [], []
    for i in range(runs + 1):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        w = time.perf_counter() - t
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if i:  # the first run warms the file cache (and the rule-pack cache)
            cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
            wall.append(w)
    return statistics.median(cpu), statistics.median(wall)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--log", default=LOG, help="a small real log to diagnose")
    args = ap.parse_args()
    py = sys.executable
    with tempfile.TemporaryDirectory() as cache:
        # bytecode as an installed package has it: the warm-up run writes any stale .pyc
        # (PYTHONDONTWRITEBYTECODE in the caller's environment would make every run compile
        # rlwatch's sources again, ~0.1 s)
        base = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env = {**base, "NO_COLOR": "1", "XDG_CACHE_HOME": cache, "RLWATCH_NO_CACHE": ""}
        cold = {**env, "RLWATCH_NO_CACHE": "1"}
        rows = {
            "python -c pass": measure([py, "-c", "pass"], args.runs, env),
            'python -c "import pandas"': measure([py, "-c", "import pandas"], args.runs, env),
            "rlwatch --help": measure([py, "-m", "rlwatch", "--help"], args.runs, env),
            "rlwatch diagnose (warm)": measure(
                [py, "-m", "rlwatch", "diagnose", args.log], args.runs, env
            ),
            "rlwatch diagnose (cold)": measure(
                [py, "-m", "rlwatch", "diagnose", args.log], args.runs, cold
            ),
        }
    print(f"start-up, median of {args.runs} runs each; diagnose target: {args.log}")
    print(f"{'command':<28} {'cpu s':>7} {'wall s':>7}")
    for name, (c, w) in rows.items():
        print(f"{name:<28} {c:7.3f} {w:7.3f}")
    base_cpu = rows["python -c pass"][0]
    pd_cpu, pd_wall = rows['python -c "import pandas"']
    help_cpu, help_wall = rows["rlwatch --help"]
    print()
    print(
        f"--help: cpu {help_cpu:.3f} s = {help_cpu / base_cpu:.1f}x the bare interpreter "
        f"(target <= 0.2 s: {'met' if help_cpu <= 0.2 else 'NOT met'}); wall {help_wall:.3f} s"
    )
    for which in ("warm", "cold"):
        c, w = rows[f"rlwatch diagnose ({which})"]
        print(
            f"diagnose ({which}): cpu {c:.3f} s = {c / pd_cpu:.2f}x pandas' import, "
            f"pandas + {c - pd_cpu:.3f} s (target <= + 0.3 s: "
            f"{'met' if c - pd_cpu <= 0.3 else 'NOT met'}); wall {w:.3f} s = pandas + "
            f"{w - pd_wall:.3f} s"
        )


if __name__ == "__main__":
    main()
