"""Benchmark: the whole built-in rule pack on a 3,000,000-scalar run, against its load time.

    python bench/bench_rules.py              # uses the run bench_tensorboard.py writes
    python bench/bench_rules.py --steps 2000

Target (issue #3): every rule on the run in <= 1 s. Prints the evaluation time (wide view
included), the load time of the same run, and their ratio.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_tensorboard import TAG_STEMS, bench_args, ensure_run


def main() -> None:
    ap = bench_args(__doc__.splitlines()[0])
    args = ap.parse_args()
    run = ensure_run(args.dir, args.tags, args.steps).parent

    from rlwatch.engine.evaluate import evaluate_frame
    from rlwatch.engine.rules import load_rules
    from rlwatch.sources import tensorboard

    rules = load_rules()
    loads, evals = [], []
    for _ in range(3):
        t0 = time.perf_counter()
        frame = tensorboard.load(run)
        loads.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        verdicts = evaluate_frame(frame, rules)
        evals.append(time.perf_counter() - t0)
    load, ev = statistics.median(loads), statistics.median(evals)
    evaluated = sum(v.state != "skipped" for v in verdicts)
    print(
        f"run: {len(frame.data):,} scalars ({args.tags} tags x {args.steps:,} steps; "
        f"{len(TAG_STEMS)} verl-named tags)"
    )
    print(f"rules: {len(rules.rules)} ({evaluated} evaluated, the rest skipped: metric not logged)")
    print(f"load (tensorboard.load):        {load:7.3f} s")
    print(f"evaluate the whole pack:        {ev:7.3f} s   (target <= 1 s)")
    print(f"evaluate / load:                {ev / load:7.2f}x")


if __name__ == "__main__":
    main()
