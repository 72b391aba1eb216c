"""The field's spike detectors, replayed on real runs (docs/field-review.md has the figures).

    python docs/field_spikes.py [RUN_DIR ...]

Default targets: ../shared/realruns/* (real public logs) and fixtures/realgen/runs/* (unmodified
TRL trainers; labels in fixtures/realgen/labels.yaml). For grad_norm and loss it counts the logs
each detector flags: rlwatch ST01 (10x the rolling median of 20 logs), OLMo-core (6 sigma above
the mean of the last 128 values, after 64), a robust 6 sigma (median/MAD of the last 20),
Megatron (>= 10x the largest of the first 100 values; a shorter run: of its first third),
llm-foundry KillLossSpike (>= 2x the running mean, more than 4 logs in a row) and ST06's core
(10x the early level on half of the last 10 logs) with the early median or the early maximum.
"""

from __future__ import annotations

import glob
import os
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def st01(v: np.ndarray, window: int = 20, min_n: int = 5) -> int:
    n = 0
    for i in range(v.size):
        h = v[max(0, i - window) : i]
        if h.size >= min_n:
            b = np.median(h)
            n += bool(v[i] >= 10 * b and v[i] - b >= 0.1)
    return n


def olmo(v: np.ndarray, window: int = 128, min_n: int = 64, k: float = 6.0) -> int:
    n = 0
    for i in range(v.size):
        h = v[max(0, i - window) : i]
        if h.size >= min_n and h.std() > 1e-10:
            n += bool(v[i] - h.mean() > k * h.std())
    return n


def robust6(v: np.ndarray, window: int = 20, min_n: int = 5) -> int:
    n = 0
    for i in range(v.size):
        h = v[max(0, i - window) : i]
        if h.size >= min_n:
            b = np.median(h)
            s = 1.4826 * np.median(np.abs(h - b))
            n += bool(s > 0 and v[i] - b > 6 * s)
    return n


def megatron(v: np.ndarray, first: int = 100, factor: float = 10) -> int:
    first = first if v.size > first else max(1, v.size // 3)
    top = np.abs(v[:first]).max()
    return int(np.sum(np.abs(v[first:]) >= factor * top))


def foundry(v: np.ndarray, window: int = 100, patience: int = 4) -> int:
    window = min(window, max(5, v.size // 5))
    n = run = 0
    for i in range(window, v.size):
        avg = v[i - window : i].mean()
        run = run + 1 if avg > 0 and v[i] >= 2 * avg else 0
        n += run > patience
    return n


def st06_core(v: np.ndarray, early: str) -> int:
    first = 10 if v.size > 10 else max(2, v.size // 3)
    head = v[:first]
    ref = min(np.median(head), np.median(head[:3])) if early == "median" else head.max()
    hit = (v > 10 * ref) & (np.abs(v - ref) >= 1.0)
    hit[:first] = False
    return sum(1 for i in range(9, v.size) if hit[i] and hit[i - 9 : i + 1].mean() >= 0.5)


DETECTORS: dict[str, Callable[[np.ndarray], int]] = {
    "ST01": st01,
    "OLMo": olmo,
    "MAD6": robust6,
    "Megatron": megatron,
    "foundry": foundry,
    "ST06med": lambda v: st06_core(v, "median"),
    "ST06max": lambda v: st06_core(v, "max"),
}


def main(targets: list[str]) -> None:
    import yaml

    from rlwatch.api import load_run

    labels_file = ROOT / "fixtures/realgen/labels.yaml"
    labels = yaml.safe_load(labels_file.read_text()) if labels_file.exists() else {}
    print(
        f"{'run':44} {'label':8} {'metric':9} {'logs':>5} " + " ".join(f"{d:>8}" for d in DETECTORS)
    )
    for target in targets:
        name = os.path.basename(target.rstrip("/"))
        try:
            frame = load_run([target])
        except Exception as exc:  # a folder that is not a run
            print(f"{name}: not read ({exc})", file=sys.stderr)
            continue
        wide = frame.wide(next(iter(frame.runs)))
        label = (labels.get(name) or {}).get("label", "-")
        for metric in ("grad_norm", "loss"):
            if metric not in wide.columns:
                continue
            v = wide[metric].to_numpy(dtype=float)
            v = v[np.isfinite(v)]
            if v.size < 6:
                continue
            counts = " ".join(f"{fn(v):>8}" for fn in DETECTORS.values())
            print(f"{name[:44]:44} {label:8} {metric:9} {v.size:>5} {counts}")


if __name__ == "__main__":
    default = sorted(glob.glob(str(ROOT.parent / "shared/realruns/*/"))) + sorted(
        glob.glob(str(ROOT / "fixtures/realgen/runs/*/"))
    )
    main(sys.argv[1:] or default)
