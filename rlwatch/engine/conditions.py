"""Condition kinds: a closed set of vectorised checks over one run's step x metric table.

Every kind returns a `Signal`: a boolean mask over logged steps plus the observed values that
explain it. Baselines look backwards only (the current step excluded) and never reach across a
restart boundary; warm-up (`min_periods`) never fires. NaN/inf values are left to `nonfinite`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd


class Skip(Exception):
    """The condition cannot be evaluated on this run (missing metric, too few steps)."""


@dataclass
class Context:
    """What a condition may look at for one run."""

    wide: pd.DataFrame  # step x canonical metric, finite values only (NaN = not logged/non-finite)
    nonfinite: dict[str, pd.Index]  # metric -> steps where it was logged as NaN/inf
    wall_of: Callable[[], pd.Series]  # step -> wall time (s), computed when a rule needs it
    segment_starts: list[int]
    decimals: int | None = None  # values were printed rounded to this many decimals
    tags: dict[str, str] = field(default_factory=dict)  # canonical -> raw tag
    early: pd.DataFrame | None = None  # the run's first steps when `wide` is a recent window
    memo: dict[str, Any] = field(default_factory=dict)  # leaf signals and series, per context

    @property
    def wall(self) -> pd.Series:
        if not hasattr(self, "_wall"):
            self._wall = self.wall_of()
        return self._wall

    def series(self, metric: str, needs: int = 1) -> pd.Series:
        if metric not in self.wide.columns and metric not in self.nonfinite:
            raise Skip(f"metric {metric!r} not logged")
        key = f"series:{metric}"
        s = self.memo.get(key)
        if s is None:
            s = self.memo[key] = (self.wide[metric].dropna() if metric in self.wide.columns
                                  else pd.Series(dtype=float))
        if len(s) < needs:
            raise Skip(f"too few steps of {metric!r}: {len(s)} logged, needs {needs}")
        return s

    def by_segment(self, s: pd.Series, fn: Callable[[pd.Series], pd.Series]) -> pd.Series:
        """Apply a windowed computation within each restart segment separately."""
        if not self.segment_starts or s.empty:
            return fn(s)
        seg = np.searchsorted(np.asarray(self.segment_starts), s.index.to_numpy(), side="right")
        return pd.concat([fn(part) for _, part in s.groupby(seg, sort=True)])


@dataclass
class Signal:
    mask: pd.Series  # bool, indexed by step
    observed: dict[str, pd.Series]  # name -> values by step
    peak: str = "value"  # observed key that ranks the steps of an episode
    peak_max: bool = True  # the worst step has the largest (else smallest) peak value
    metrics: tuple[str, ...] = ()


# -- kinds ------------------------------------------------------------------------------
def threshold(ctx: Context, spec: dict[str, Any]) -> Signal:
    """The value (or value / `divided_by`) is above, below, outside or inside fixed bounds.

    Unhealthy: `rollout_kl: 9.97` with `above: 1.0`. Healthy: `rollout_kl: 0.001`.
    """
    metric = spec["metric"]
    v = ctx.series(metric)
    observed: dict[str, pd.Series] = {}
    if "divided_by" in spec:
        d = ctx.series(spec["divided_by"])
        num, den = v.align(d, join="inner")
        observed = {"numerator": num, "denominator": den}
        v = (num / den.where(den != 0)).dropna()
    mask = pd.Series(True, index=v.index)
    peak_max = True
    if "above" in spec:
        mask &= v > spec["above"]
    if "below" in spec:
        mask &= v < spec["below"]
        peak_max = "above" in spec
    if "outside" in spec:
        lo, hi = spec["outside"]
        mask &= (v < lo) | (v > hi)
    if "inside" in spec:
        lo, hi = spec["inside"]
        mask &= (v >= lo) & (v <= hi)
    observed["value"] = v
    if "outside" in spec:
        mid = (spec["outside"][0] + spec["outside"][1]) / 2
        observed["deviation"] = (v - mid).abs()
        return Signal(mask, observed, "deviation", True, (metric,))
    return Signal(mask, observed, "value", peak_max, (metric,))


def spike(ctx: Context, spec: dict[str, Any]) -> Signal:
    """The value jumps against a robust rolling baseline of the previous `window` logged steps.

    `factor: k` fires when value >= k x baseline (baseline = rolling median, current step
    excluded); `drop: d` fires when the value falls by d x |baseline| or more. `min_delta` is the
    smallest absolute change that counts. Unhealthy: grad_norm `1x20 25`. Healthy: `1x20 1.5`.
    """
    metric = spec["metric"]
    window, min_periods = spec.get("window", 20), spec.get("min_periods", 5)
    v = ctx.series(metric, needs=min_periods + 1)
    base = ctx.by_segment(v, lambda s: s.shift(1).rolling(window, min_periods=min_periods)
                          .median())
    delta = v - base
    mask = base.notna() & (delta.abs() >= spec.get("min_delta", 0.0))
    if "factor" in spec:
        mask &= (v >= spec["factor"] * base) & (base > 0)
        peak_max = True
    else:
        mask &= -delta >= spec["drop"] * base.abs()
        peak_max = False
    ratio = v / base.where(base != 0)
    change = delta / base.abs().where(base != 0)
    return Signal(mask, {"value": v, "baseline": base, "ratio": ratio, "change": change},
                  "ratio" if "factor" in spec else "change", peak_max, (metric,))


def relative(ctx: Context, spec: dict[str, Any]) -> Signal:
    """The value against the run's own early level (median of its first `first_steps` values).

    Unhealthy (`below_factor: 0.1`): entropy 0.35 early, 0.012 now. Healthy: 0.35 -> 0.06.
    """
    metric = spec["metric"]
    first = spec.get("first_steps", 10)
    if ctx.early is not None and metric in ctx.early.columns:
        v = ctx.series(metric)
        head = ctx.early[metric].dropna()
        if len(head) < first:
            raise Skip(f"too few steps of {metric!r}: {len(head)} logged, needs {first + 1}")
        ref = float(head.iloc[:first].median())
        after = pd.Series(v.index > head.index[first - 1], index=v.index)
    else:
        v = ctx.series(metric, needs=first + 1)
        ref = float(v.iloc[:first].median())
        after = pd.Series(np.arange(len(v)) >= first, index=v.index)
    mask = after.copy()
    if "below_factor" in spec:
        mask &= v < spec["below_factor"] * ref
    if "above_factor" in spec:
        mask &= v > spec["above_factor"] * ref
    if "min_delta" in spec:
        mask &= (v - ref).abs() >= spec["min_delta"]
    reference = pd.Series(ref, index=v.index)
    ratio = v / ref if ref != 0 else pd.Series(np.nan, index=v.index)
    return Signal(mask, {"value": v, "reference": reference, "ratio": ratio}, "value",
                  "above_factor" in spec, (metric,))


def trend(ctx: Context, spec: dict[str, Any]) -> Signal:
    """Relative change over the last `window` logged steps, with robust endpoints: the median
    of the first and of the last `edge` values of the window (default a tenth, at least 3).

    Unhealthy (`below: -0.4`): length 500 -> 100 over 30 steps. Healthy: 500 -> 480.
    """
    metric = spec["metric"]
    window = spec["window"]
    edge = spec.get("edge", max(3, window // 10))
    v = ctx.series(metric, needs=window)

    def pct(s: pd.Series) -> pd.DataFrame:
        end = s.rolling(edge, min_periods=edge).median()
        start = end.shift(window - edge)
        return pd.DataFrame({"start": start, "end": end})

    se = ctx.by_segment(v, pct)
    start, end = se["start"], se["end"]
    change = (end - start) / start.abs().where(start != 0)
    mask = change.notna()
    if "above" in spec:
        mask &= change > spec["above"]
    if "below" in spec:
        mask &= change < spec["below"]
    if "abs_below" in spec:
        mask &= change.abs() < spec["abs_below"]
    return Signal(mask, {"value": v, "start": start, "end": end, "pct_change": change},
                  "pct_change", "below" not in spec, (metric,))


def nonfinite(ctx: Context, spec: dict[str, Any]) -> Signal:
    """The metric was logged as NaN or +-inf. Unhealthy: `grad_norm: 1 1 nan`."""
    metric = spec["metric"]
    if metric not in ctx.wide.columns and metric not in ctx.nonfinite:
        raise Skip(f"metric {metric!r} not logged")
    bad = ctx.nonfinite.get(metric, pd.Index([], dtype="int64"))
    logged = ctx.wide[metric].dropna().index if metric in ctx.wide.columns else bad[:0]
    index = logged.union(bad)
    mask = pd.Series(index.isin(bad), index=index)
    value = pd.Series(np.where(mask, np.nan, 0.0), index=index)
    if metric in ctx.wide.columns:
        value[~mask] = ctx.wide[metric].reindex(index[~mask.to_numpy()]).to_numpy()
    return Signal(mask, {"value": value, "count": mask.cumsum().astype(float)}, "count", True,
                  (metric,))


def stuck(ctx: Context, spec: dict[str, Any]) -> Signal:
    """Exactly constant (or exactly `value`) for `steps` logged steps in a row.

    Values printed rounded (verl <= 0.4 console logs: 3 decimals) make a tiny KL print 0.000:
    there, a zero means "below resolution" and does not count as stuck.
    """
    metric = spec["metric"]
    n = spec["steps"]
    v = ctx.series(metric, needs=n)
    same = v == spec["value"] if "value" in spec else v.eq(v.shift(1)) | v.eq(v.shift(-1))
    if ctx.decimals is not None:
        same &= v.abs() >= 0.5 * 10.0 ** -ctx.decimals
    held = _held(same.to_numpy())
    return Signal(pd.Series(held >= n, index=v.index),
                  {"value": v, "held": pd.Series(held, index=v.index, dtype=float)},
                  "held", True, (metric,))


def stall(ctx: Context, spec: dict[str, Any]) -> Signal:
    """A step whose duration is >= `factor` x the median duration of the steps before it.

    Duration: the `metric` (default step_time) where logged, else the wall-time gap between
    consecutive steps. Unhealthy: 350 s steps, then one of 22,544 s. Healthy: 350, 420, 380.
    """
    metric = spec.get("metric", "step_time")
    min_periods = spec.get("min_periods", 5)
    if metric in ctx.wide.columns:
        d = ctx.series(metric, needs=min_periods + 1)
    else:
        if ctx.wall.empty:
            raise Skip(f"metric {metric!r} not logged and the source has no wall times")
        d = ctx.by_segment(ctx.wall, lambda s: s.diff()).dropna()
        if len(d) < min_periods + 1:
            raise Skip(f"too few steps with wall times: {len(d)}, needs {min_periods + 1}")
    base = ctx.by_segment(d, lambda s: s.shift(1).expanding(min_periods=min_periods).median())
    mask = base.notna() & (d >= spec["factor"] * base) & (base > 0)
    return Signal(mask, {"value": d, "baseline": base, "ratio": d / base.where(base > 0)},
                  "ratio", True, (metric,))


def count(ctx: Context, spec: dict[str, Any]) -> Signal:
    """At least `at_least` steps of the inner condition within the last `within` logged steps.

    Unhealthy: three grad-norm spikes in 20 steps. Healthy: one spike every few hundred steps.
    """
    inner = evaluate(ctx, spec["of"])
    hits = inner.mask.astype(float).rolling(spec["within"], min_periods=1).sum()
    observed = {**inner.observed, "count": hits}
    return Signal(hits >= spec["at_least"], observed, "count", True, inner.metrics)


def _combine(ctx: Context, specs: list[dict[str, Any]], how: str) -> Signal:
    signals, skipped = [], []
    for spec in specs:
        try:
            signals.append(evaluate(ctx, spec))
        except Skip as exc:
            if how == "all":
                raise
            skipped.append(str(exc))
    if not signals:
        raise Skip("; ".join(skipped))
    index = signals[0].mask.index
    same = all(s.mask.index.equals(index) for s in signals[1:])
    for s in signals[1:]:
        if not same:
            index = index.union(s.mask.index)
    observed: dict[str, pd.Series] = {}
    masks = []
    for s in signals:
        # a sparse metric (validation every k steps) keeps its state until its next log
        masks.append(s.mask if same else
                     s.mask.astype(float).reindex(index).ffill().fillna(0.0).astype(bool))
        leaf = len(set(s.metrics)) == 1
        for key, series in s.observed.items():
            aligned = series if same else series.reindex(index).ffill()
            observed.setdefault(key, aligned)
            if leaf and "." not in key:
                observed.setdefault(f"{s.metrics[0]}.{key}", aligned)
    stacked = np.vstack([m.to_numpy() for m in masks])
    mask = stacked.all(axis=0) if how == "all" else stacked.any(axis=0)
    first = signals[0]
    return Signal(pd.Series(mask, index=index), observed, first.peak, first.peak_max,
                  tuple(m for s in signals for m in s.metrics))


KINDS: dict[str, Callable[[Context, Any], Signal]] = {
    "threshold": threshold, "spike": spike, "relative": relative, "trend": trend,
    "nonfinite": nonfinite, "stuck": stuck, "stall": stall, "count": count,
    "all": lambda ctx, specs: _combine(ctx, specs, "all"),
    "any": lambda ctx, specs: _combine(ctx, specs, "any"),
}


def evaluate(ctx: Context, condition: dict[str, Any]) -> Signal:
    """Evaluate a condition; identical leaf conditions of several rules are computed once."""
    ((kind, spec),) = condition.items()
    if kind in ("all", "any", "count"):
        return KINDS[kind](ctx, spec)
    key = f"{kind}:{sorted(spec.items())!r}"
    hit = ctx.memo.get(key)
    if hit is None:
        try:
            hit = KINDS[kind](ctx, spec)
        except Skip as exc:
            hit = exc
        ctx.memo[key] = hit
    if isinstance(hit, Skip):
        raise hit
    return hit


def metrics_of(condition: dict[str, Any]) -> list[str]:
    """Every canonical metric a condition reads."""
    ((kind, spec),) = condition.items()
    if kind in ("all", "any"):
        return [m for c in spec for m in metrics_of(c)]
    if kind == "count":
        return metrics_of(spec["of"])
    out = [spec.get("metric", "step_time")]
    if "divided_by" in spec:
        out.append(spec["divided_by"])
    return out


def _held(mask: np.ndarray) -> np.ndarray:
    """For each position, how many consecutive True values end there (0 where False)."""
    idx = np.arange(mask.size)
    last_false = np.maximum.accumulate(np.where(mask, -1, idx))
    return np.where(mask, idx - last_false, 0)
