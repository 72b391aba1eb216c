"""Downsampled curves that travel inside a Report, so the HTML renderer (and `diff`) stay pure.

A run of millions of scalars is drawn in a few hundred pixel columns: per column the minimum
and the maximum are kept (in step order), so a one-step spike survives any downsampling.
Non-finite values (NaN/inf) are kept apart as steps: they are evidence, drawn as marks.

Per run the Report carries (plain data, JSON-safe):

- ``metrics``: ``{metric: {"steps": [...], "values": [...], "nonfinite": [...]}}`` for the
  metrics fired rules read and the key metrics (small multiples, diff overlays);
- ``overlays``: ``{code: [{"metric", "label", "kind": "line"|"level", ...}]}`` per fired rule:
  the baselines and thresholds its condition compared the metric against.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

WIDTH = 600  # pixel columns of a plot: at most 2 points each
KEY_METRICS = (
    "reward_mean",
    "entropy",
    "kl_ref",
    "kl_ppo",
    "grad_norm",
    "clip_frac",
    "response_length_mean",
    "loss",
    "truncation_rate",
    "step_time",
)


def minmax(steps: np.ndarray, values: np.ndarray, width: int = WIDTH) -> tuple[list, list]:
    """At most 2 x `width` points: per pixel column the min and the max, in step order.

    `steps` sorted ascending, `values` finite. Returns plain lists (JSON-safe).
    """
    steps = np.asarray(steps, dtype=np.int64)
    values = np.asarray(values, dtype=np.float64)
    n = steps.size
    if n <= 2 * width:
        return steps.tolist(), _round(values)
    lo, hi = int(steps[0]), int(steps[-1])
    col = ((steps - lo) * (width / max(hi - lo, 1))).astype(np.int64)
    col = np.minimum(col, width - 1)
    starts = np.flatnonzero(np.concatenate([[True], col[1:] != col[:-1]]))
    group = np.cumsum(np.concatenate([[False], col[1:] != col[:-1]]))
    keep = np.union1d(
        _first_where(values == np.minimum.reduceat(values, starts)[group], group),
        _first_where(values == np.maximum.reduceat(values, starts)[group], group),
    )
    return steps[keep].tolist(), _round(values[keep])


def _first_where(hit: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Per group, the first position where `hit` is true (every group has one)."""
    idx = np.flatnonzero(hit)
    first = np.concatenate([[True], group[idx[1:]] != group[idx[:-1]]])
    return idx[first]


def _round(values: np.ndarray) -> list[float]:
    """Six significant digits: plenty for a pixel, a third of the JSON."""
    return [float(f"{v:.6g}") for v in values.tolist()]


def _split(steps: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    ok = np.isfinite(values)
    return steps[ok], values[ok], steps[~ok]


def curve(steps: np.ndarray, values: np.ndarray, width: int = WIDTH) -> dict[str, Any]:
    """One metric's curve: downsampled finite points plus the steps of non-finite values."""
    order = np.argsort(steps, kind="stable")
    s, v, bad = _split(np.asarray(steps)[order], np.asarray(values, dtype=float)[order])
    xs, ys = minmax(s, v, width)
    if bad.size > 4 * width:  # keep the first ones and a spread of the rest
        bad = np.unique(np.concatenate([bad[:width], bad[:: max(1, bad.size // width)]]))
    return {"steps": xs, "values": ys, "nonfinite": [int(b) for b in bad]}


def _leaves(cond: Any) -> list[tuple[str, Any, dict[str, Any]]]:
    """(kind, node, parameters with defaults) of every leaf condition of a rule."""
    from rlwatch.engine.registry import walk

    out = []
    for node in walk(cond):
        if node.KIND in ("all", "any", "count"):
            continue
        ((kind, spec),) = node.to_spec(defaults=True).items()
        out.append((kind, node, {k: v for k, v in spec.items() if v is not None}))
    return out


def _fmt(x: float) -> str:
    return f"{x:.3g}"


def overlays(ctx: Any, rule: Any, width: int = WIDTH) -> list[dict[str, Any]]:
    """The lines a rule compared its metrics against (thresholds, baselines, early levels)."""
    from rlwatch.engine.conditions import Skip, evaluate

    out: list[dict[str, Any]] = []
    for kind, node, spec in _leaves(rule.when):
        metric = spec.get("metric") or "step_time"
        if kind == "threshold" and "divided_by" not in spec and "minus" not in spec:
            for key in ("above", "below"):
                if key in spec:
                    out.append(_level(metric, float(spec[key]), f"{key} {_fmt(spec[key])}"))
            for key in ("outside", "inside"):
                if key in spec:
                    lo, hi = spec[key]
                    out.append(_level(metric, float(lo), f"{key} [{_fmt(lo)}, {_fmt(hi)}]"))
                    out.append(_level(metric, float(hi), ""))
            continue
        if kind not in ("spike", "relative", "stall"):
            continue
        try:
            sig = evaluate(ctx, node)
        except Skip:
            continue
        steps = sig.steps
        if kind == "relative":
            ref = float(sig.observed["reference"][0]) if steps.size else math.nan
            if math.isfinite(ref):
                out.append(_level(metric, ref, f"early level {_fmt(ref)}", dashed=False))
                for key in ("below_factor", "above_factor"):
                    if key in spec:
                        f = float(spec[key])
                        out.append(_level(metric, f * ref, f"{_fmt(f)} x early level"))
            continue
        base = np.asarray(sig.observed["baseline"], dtype=float)
        label = "rolling median" if kind == "spike" else "median of earlier steps"
        out.append(_line(metric, steps, base, label, width, dashed=False))
        if "factor" in spec:
            f = float(spec["factor"])
            out.append(_line(metric, steps, f * base, f"{_fmt(f)} x {label}", width))
        elif "drop" in spec:
            d = float(spec["drop"])
            out.append(_line(metric, steps, base - d * np.abs(base), f"drop {d:.0%}", width))
    return out


def _level(metric: str, y: float, label: str, *, dashed: bool = True) -> dict[str, Any]:
    return {
        "metric": metric,
        "kind": "level",
        "y": float(f"{y:.6g}"),
        "label": label,
        "dashed": dashed,
    }


def _line(
    metric: str, steps: np.ndarray, values: np.ndarray, label: str, width: int, *, dashed=True
) -> dict[str, Any]:
    ok = np.isfinite(values)
    xs, ys = minmax(steps[ok], values[ok], width)
    return {
        "metric": metric,
        "kind": "line",
        "steps": xs,
        "values": ys,
        "label": label,
        "dashed": dashed,
    }


def collect(
    frame: Any,
    rules: Any,
    verdicts: list[Any],
    *,
    width: int = WIDTH,
    extra: tuple[str, ...] = KEY_METRICS,
) -> dict[str, dict[str, Any]]:
    """Per run: the curves of the metrics fired rules read plus the key metrics, and the
    overlays of every fired rule. Costs one pass over each wanted metric's rows."""

    by_code = {r.code: r for r in rules.rules}
    out: dict[str, dict[str, Any]] = {}
    for run in frame.runs:
        fired = [v for v in verdicts if v.run == run and v.fired and v.code in by_code]
        wanted = list(dict.fromkeys([m for v in fired for m in v.metrics] + list(extra)))
        d = frame.run_data(run)
        cats = d["metric"].cat.categories
        codes = d["metric"].cat.codes.to_numpy()
        all_steps, all_values = d["step"].to_numpy(), d["value"].to_numpy()
        scales = frame.runs[run].scales
        metrics: dict[str, Any] = {}
        arrays: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for metric in wanted:
            if metric not in cats:
                continue
            rows = np.flatnonzero(codes == cats.get_loc(metric))
            if rows.size == 0:
                continue
            steps = all_steps[rows]
            values = all_values[rows] * scales.get(metric, 1.0)
            arrays[metric] = steps, values
            metrics[metric] = curve(steps, values, width)
        lines: dict[str, Any] = {}
        if fired:
            ctx = _context(frame, run, arrays)
            for v in fired:
                lines[v.code] = overlays(ctx, by_code[v.code], width)
        out[run] = {"metrics": metrics, "overlays": lines}
    return out


def _context(frame: Any, run: str, arrays: dict[str, tuple[np.ndarray, np.ndarray]]) -> Any:
    """An evaluation context of the metrics already extracted (no second pass over the run)."""
    import pandas as pd

    from rlwatch.engine.conditions import build_context

    cols = {}
    for metric, (steps, values) in arrays.items():
        ok = np.isfinite(values)
        s = pd.Series(values[ok], index=steps[ok])
        cols[metric] = s[~s.index.duplicated(keep="last")]
    wide = pd.DataFrame(cols).sort_index() if cols else pd.DataFrame()
    wide.index = wide.index.astype(np.int64)
    info = frame.runs[run]

    def wall() -> pd.Series:
        w = frame.run_data(run)[["step", "wall_time"]]
        return w.groupby("step")["wall_time"].max().dropna()

    return build_context(
        wide,
        restarts=frame.segment_starts(run),
        decimals=getattr(info, "decimals", None),
        tags=dict(info.metrics),
        wall=wall,
    )
