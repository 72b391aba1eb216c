"""Benchmark: text logs. rlwatch's streaming columnar readers against the naive baselines,
measured in the same run, each in its own process (time and peak resident memory):

- verl console log (~49 MB): a regex-and-dict loop into pandas.DataFrame;
- verl FileLogger JSONL (~54 MB): pandas.read_json(lines=True).

Targets: >= 2x faster than each baseline; peak resident <= 150 MB + 2x the file size.
`--big` also times a 1 GB console log (target < 30 s, < 2.5 GB). The logs are generated in a
temp folder (never committed) in verl's exact line shapes, keys taken from a real verl log.

    python bench/bench_logs.py            # ~49 MB console + ~54 MB JSONL
    python bench/bench_logs.py --big      # and the 1 GB console log
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# verl's own metric keys (a v0.5 GRPO run: actor/critic/rollout/timing/perf families) ...
BASE_KEYS = [
    "rollout/too_bad_sample_ratio",
    "rollout/too_good_sample_ratio",
    "rollout/total_num_samples",
    "timing_s/get_batch_rollout_with_filtering",
    "actor/entropy",
    "actor/pg_loss",
    "actor/pg_clipfrac",
    "actor/ppo_kl",
    "actor/pg_clipfrac_lower",
    "actor/grad_norm",
    "perf/mfu/actor",
    "perf/max_memory_allocated_gb",
    "perf/max_memory_reserved_gb",
    "perf/cpu_memory_used_gb",
    "actor/lr",
    "training/global_step",
    "training/epoch",
    "critic/score/mean",
    "critic/score/max",
    "critic/score/min",
    "critic/rewards/mean",
    "critic/rewards/max",
    "critic/rewards/min",
    "critic/advantages/mean",
    "critic/advantages/max",
    "critic/advantages/min",
    "critic/returns/mean",
    "critic/returns/max",
    "critic/returns/min",
    "response_length/mean",
    "response_length/max",
    "response_length/min",
    "response_length/clip_ratio",
    "prompt_length/mean",
    "prompt_length/max",
    "prompt_length/min",
    "prompt_length/clip_ratio",
    "num_turns/min",
    "num_turns/max",
    "num_turns/mean",
    "timing_s/reward",
    "timing_s/old_log_prob",
    "timing_s/adv",
    "timing_s/update_actor",
    "timing_s/step",
    "timing_per_token_ms/adv",
    "timing_per_token_ms/update_actor",
    "perf/total_num_tokens",
    "perf/time_per_step",
    "perf/throughput",
    "global_seqlen/min",
    "global_seqlen/max",
    "global_seqlen/minmax_diff",
    "global_seqlen/balanced_min",
    "global_seqlen/balanced_max",
    "global_seqlen/mean",
    "training/rollout_probs_diff_max",
    "training/rollout_probs_diff_mean",
    "training/rollout_probs_diff_std",
    "actor/kl_loss",
    "actor/kl_coef",
]
# ... and per-data-source families, as multi-task runs log them: hundreds of keys a step
SOURCES = ["gsm8k", "math", "aime", "gpqa"]
FAMILY = [
    "reward/mean@1",
    "reward/std@1",
    "acc/mean@1",
    "acc/best@4/mean",
    "acc/maj@4/mean",
    "response_length/mean",
    "response_length/clip_ratio",
    "pass@1",
    "pass@4",
    "entropy/mean",
    "kl/mean",
    "score/max",
    "score/min",
    "format/ok",
    "timing/gen",
    "tokens/mean",
    "ratio/mean",
    "ratio/max",
    "ratio/min",
    "tool_calls/mean",
    "turns/mean",
    "truncated",
    "aborted",
    "len/p50",
    "len/p90",
    "len/p99",
    "rollout_is/mean",
    "rollout_is/ess",
    "rollout_corr/kl",
    "rollout_corr/chi2",
    "probs_diff/max",
    "probs_diff/mean",
    "probs_diff/std",
    "reward_std/mean",
    "zero_std_frac",
    "solve_none",
    "solve_all",
    "advantage/mean",
    "advantage/std",
    "grad_norm",
    "clip_frac",
    "clip_frac_low",
    "clip_frac_high",
]
PREFIX = "\x1b[36m(TaskRunner pid=2021996)\x1b[0m "


def keys() -> list[str]:
    fam = [f"{s}/{f}" for s in SOURCES for f in FAMILY]
    return BASE_KEYS + [f"val-core/{k}" for k in fam] + [f"train/{k}" for k in fam]


def _value(rng: random.Random, key: str) -> float | int:
    if key.endswith(("/min", "/max", "num_samples", "global_step", "total_num_tokens")):
        return rng.randrange(1, 40000)
    return rng.gauss(0.3, 1.0)


def write_console(path: Path, size: int, seed: int = 0) -> Path:
    """A verl console log of about `size` bytes: `step:N - key:value - ...` lines with the
    Ray prefix and ANSI colour, numbers as verl >= 0.5 prints them (Python repr)."""
    rng, ks = random.Random(seed), keys()
    with open(path, "w") as f:
        step, written = 1, 0
        while written < size:
            items = " - ".join(f"{k}:{_value(rng, k)!r}" for k in ks)
            line = f"{PREFIX}step:{step} - {items}\n"
            if step % 50 == 0:
                f.write(f"{PREFIX}Training Progress:  {step}%|##   | {step}/9999\n")
            f.write(line)
            written += len(line)
            step += 1
    return path


def write_jsonl(path: Path, size: int, seed: int = 0, spaced: bool = False) -> Path:
    """verl's FileLogger: one {"step": N, "data": {...}} record per line, compact as in the
    real FileLogger files (`{"step":1,"data":{...}}`; `spaced`: json.dumps' default)."""
    seps = (", ", ": ") if spaced else (",", ":")
    rng, ks = random.Random(seed), keys()
    with open(path, "w") as f:
        step, written = 1, 0
        while written < size:
            data = {k: _value(rng, k) for k in ks}
            line = json.dumps({"step": step, "data": data}, separators=seps) + "\n"
            f.write(line)
            written += len(line)
            step += 1
    return path


# -- what each process runs ------------------------------------------------------------------
def naive_console(path: str) -> int:
    """The baseline: a regex per line, a dict per step, a DataFrame of the dicts."""
    import re

    import pandas as pd

    pat = re.compile(r"step:(\d+) - (.*)$")
    rows = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = pat.search(line.rstrip("\n"))
            if not m:
                continue
            row: dict[str, float] = {"step": int(m.group(1))}
            for item in m.group(2).split(" - "):
                k, _, v = item.partition(":")
                with contextlib.suppress(ValueError):
                    row[k.strip()] = float(v)
            rows.append(row)
    return pd.DataFrame(rows).size


def naive_jsonl(path: str) -> int:
    import pandas as pd

    return pd.read_json(path, lines=True).size


def rlwatch_load(path: str) -> int:
    from rlwatch.sources import logs

    return len(logs.load_file(path).data)


def _cpu() -> float:
    """CPU seconds of this process and of any process it waited for (a reader that used a
    child process is charged for it)."""
    import resource

    me, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def child(fn: str, path: str) -> None:
    """Time one load in a fresh process, after the imports both sides need (pandas; and
    rlwatch's reader module for rlwatch: start-up is bench_startup.py's business)."""
    import resource

    import pandas  # noqa: F401

    if fn == "rlwatch_load":
        import rlwatch.sources.logs  # noqa: F401
        from rlwatch import names

        if os.environ.get("BENCH_WARM_CATALOGUE") == "1":
            names.catalogue()  # the metric-name catalogue (rules/metrics.yaml), a start-up cost
    t0, c0 = time.perf_counter(), _cpu()
    n = globals()[fn](path)
    dt, cpu = time.perf_counter() - t0, _cpu() - c0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"seconds": dt, "cpu": cpu, "peak": peak, "rows": n}))


def measure(fn: str, path: Path, warm: bool = False) -> dict[str, float]:
    env = dict(os.environ, BENCH_WARM_CATALOGUE="1" if warm else "0")
    out = subprocess.run(
        [sys.executable, __file__, "--child", fn, str(path)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def report(name: str, path: Path, baseline: str, repeat: int) -> None:
    size = path.stat().st_size

    def best(fn: str, warm: bool = False) -> dict[str, float]:
        runs = [measure(fn, path, warm) for _ in range(repeat)]
        out = min(runs, key=lambda r: r["seconds"])
        return dict(out, cpu=min(r["cpu"] for r in runs))

    base = best(baseline)
    cold = best("rlwatch_load")
    warm = best("rlwatch_load", warm=True)
    limit = 150e6 + 2 * size
    print(
        f"{name} ({size / 1e6:.0f} MB, {cold['rows']:,} scalars): {baseline} "
        f"{base['seconds']:.2f} s (cpu {base['cpu']:.2f} s); rlwatch {cold['seconds']:.2f} s "
        f"(cpu {cold['cpu']:.2f} s) -> {base['seconds'] / cold['seconds']:.2f}x "
        f"(cpu {base['cpu'] / cold['cpu']:.2f}x); reader alone (metric catalogue already "
        f"loaded) {warm['seconds']:.2f} s (cpu {warm['cpu']:.2f} s) -> "
        f"{base['seconds'] / warm['seconds']:.2f}x (cpu {base['cpu'] / warm['cpu']:.2f}x) "
        f"(target >= 2x)\n  peak RSS rlwatch {cold['peak'] / 1e6:.0f} MB (limit 150 MB + 2x "
        f"file = {limit / 1e6:.0f} MB), {baseline} {base['peak'] / 1e6:.0f} MB"
    )


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "rlwatch-bench")
    ap.add_argument("--console-mb", type=float, default=49)
    ap.add_argument("--jsonl-mb", type=float, default=54)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--big", action="store_true", help="also the 1 GB console log")
    args = ap.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    console = args.dir / f"verl_console_{args.console_mb:g}MB.log"
    jsonl = args.dir / f"verl_filelogger_{args.jsonl_mb:g}MB.jsonl"
    if not console.exists():
        write_console(console, int(args.console_mb * 1e6))
    if not jsonl.exists():
        write_jsonl(jsonl, int(args.jsonl_mb * 1e6))
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.1f}; best of {args.repeat} (wall and cpu apart)"
    )
    report("verl console", console, "naive_console", args.repeat)
    report("verl JSONL", jsonl, "naive_jsonl", args.repeat)
    if args.big:
        big = args.dir / "verl_console_1GB.log"
        if not big.exists():
            write_console(big, 1 << 30, seed=1)
        r = measure("rlwatch_load", big)
        print(
            f"verl console 1 GB ({big.stat().st_size / 1e9:.2f} GB, {r['rows']:,} scalars): "
            f"rlwatch {r['seconds']:.1f} s wall, {r['cpu']:.1f} s cpu (target < 30 s), peak RSS "
            f"{r['peak'] / 1e9:.2f} GB (target < 2.5 GB); load average {os.getloadavg()[0]:.1f}"
        )


if __name__ == "__main__":
    main()
