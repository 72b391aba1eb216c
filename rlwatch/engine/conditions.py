"""Condition kinds: a closed set of vectorised checks over one run's step x metric table.

Every kind returns a `Signal`: a boolean mask over logged steps plus the observed values that
explain it, as numpy arrays. Baselines look backwards only (the current step excluded) and never
reach across a restart boundary; warm-up (`min_periods`) never fires. NaN/inf values are left to
`nonfinite`. Identical leaf conditions of several rules are computed once per run.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from numpy.lib.stride_tricks import sliding_window_view

from rlwatch.engine import robust
from rlwatch.engine.registry import Node, kind, param

SHORT_RUN = 6  # fewer logs than this are too few for an early-vs-late comparison


class Skip(Exception):
    """The condition cannot be evaluated on this run (missing metric, too few steps)."""


@dataclass
class Series:
    """A metric's logged finite values: `steps` (int64) and `values` (float64), step order."""

    steps: np.ndarray
    values: np.ndarray

    def __len__(self) -> int:
        return int(self.steps.size)


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
    memo: dict[Any, Any] = field(default_factory=dict)  # leaf signals and series, per context
    # the time the run is judged at, on its wall clock (None: no clock; `stalled` skips)
    # (or a (time, note) pair: the note, how the time was chosen, is added to the verdict)
    now: Callable[[], Any] = field(default=lambda: None)
    # the run's logs: every step at which a metric the rules read was logged (a rule's `for`
    # counts these, whatever its own metric's cadence); None: the steps of `wide`
    grid: np.ndarray | None = None
    # `wide` is a recent window of a long run followed live (it does not start at the run's
    # first log): what is judged from a run's first logs is not judged from the window's
    window: bool = False

    def run_logs(self) -> np.ndarray:
        """The steps of the run's logs, ascending (see `grid`)."""
        if self.grid is None:
            self.grid = self.wide.index.to_numpy(dtype=np.int64)
        return self.grid

    def resolution(self) -> int:
        """Training steps between the run's logs (the median interval; 1 until 3 logs are in,
        and for a run that logs every step): TRL logs every 10 steps by default."""
        r = self.memo.get("resolution")
        if r is None:
            g = self.run_logs()
            r = self.memo["resolution"] = logging_interval(g)
        return int(r)

    def _arrays(self, frame: pd.DataFrame, metric: str) -> Series:
        """A column's logged values, from the table turned into one numpy matrix once."""
        key = f"matrix:{id(frame)}"
        cached = self.memo.get(key)
        if cached is None:
            cached = self.memo[key] = (
                {str(c): i for i, c in enumerate(frame.columns)},
                frame.to_numpy(dtype=np.float64),
                frame.index.to_numpy(dtype=np.int64),
                frame,
            )
        cols, matrix, steps, _ = cached
        col = matrix[:, cols[metric]]
        ok = ~np.isnan(col)
        return Series(steps[ok], col[ok])

    def logged(self, metric: str) -> bool:
        """`metric in self.wide.columns`, from a set made once (an Index lookup costs ~20 us)."""
        cols = self.memo.get("columns")
        if cols is None:
            cols = self.memo["columns"] = frozenset(self.wide.columns)
        return metric in cols

    def series(self, metric: str, needs: int = 1) -> Series:
        key = f"series:{metric}"
        s = self.memo.get(key)
        if s is None:
            if not self.logged(metric) and metric not in self.nonfinite:
                raise Skip(f"metric {metric!r} not logged")
            s = self.memo[key] = (
                self._arrays(self.wide, metric)
                if self.logged(metric)
                else Series(np.empty(0, np.int64), np.empty(0))
            )
        if len(s) < needs:
            raise Skip(f"too few steps of {metric!r}: {len(s)} logged, needs {needs}")
        return s

    def prior_sigma(self, metric: str, s: Series, window: int, min_periods: int) -> np.ndarray:
        """The robust spread of a metric's previous `window` values at each log, per restart
        segment (`robust.prior_median_mad`); computed once per run for the rules sharing it."""
        key = ("prior_sigma", metric, window, min_periods)
        hit = self.memo.get(key)
        if hit is None:
            hit = self.memo[key] = self.by_segment(
                s.values, s.steps, lambda x: robust.prior_median_mad(x, window, min_periods)[1]
            )
        return hit

    def first_step(self, metrics: Iterable[str]) -> int:
        """The first step any of these metrics was logged at in the run (its early table when
        `wide` is a recent window)."""
        firsts = []
        for frame in (self.early, self.wide):
            if frame is None:
                continue
            for m in metrics:
                if m in frame.columns:
                    col = self._arrays(frame, m)
                    if len(col):
                        firsts.append(int(col.steps[0]))
            if firsts:
                return min(firsts)
        raise Skip(f"none of {list(metrics)} logged")

    def per_metric(
        self, key: tuple[Any, ...], s: Series, fn: Callable[[np.ndarray], np.ndarray]
    ) -> np.ndarray:
        """`by_segment(s.values, s.steps, fn)` once per run for `key` (the computation, the
        metric of `s` and its parameters): rules share trailing and prior medians of a metric.
        The array is read-only (every rule that asks gets the same one)."""
        hit = self.memo.get(key)
        if hit is None:
            hit = self.by_segment(s.values, s.steps, fn)
            hit.flags.writeable = False
            self.memo[key] = hit
        return hit

    def wall_series(self) -> Series:
        hit = self.memo.get("wall")  # once per run (the clock rules each ask)
        if hit is None:
            w = self.wall_of()
            hit = Series(w.index.to_numpy(dtype=np.int64), w.to_numpy(dtype=np.float64))
            self.memo["wall"] = hit
        return hit

    def segments(self, steps: np.ndarray) -> list[slice]:
        """Slices of `steps` that lie within one restart segment each."""
        if not self.segment_starts or steps.size == 0:
            return [slice(0, steps.size)]
        cuts = np.searchsorted(steps, np.asarray(self.segment_starts), side="left")
        bounds = [0, *sorted(set(int(c) for c in cuts if 0 < c < steps.size)), steps.size]
        return [slice(a, b) for a, b in itertools.pairwise(bounds)]

    def by_segment(
        self, values: np.ndarray, steps: np.ndarray, fn: Callable[[np.ndarray], np.ndarray]
    ) -> np.ndarray:
        """Apply a windowed computation within each restart segment separately."""
        parts = self.segments(steps)
        if len(parts) == 1:
            return fn(values)
        return np.concatenate([fn(values[p]) for p in parts])


def build_context(
    wide: pd.DataFrame,
    nonfinite: Mapping[str, Iterable[int]] | None = None,
    *,
    restarts: Iterable[int] = (),
    decimals: int | None = None,
    tags: Mapping[str, str] | None = None,
    wall: Callable[[], pd.Series] | None = None,
    early: pd.DataFrame | None = None,
    now: Callable[[], Any] | float | None = None,
    grid: np.ndarray | None = None,
    window: bool = False,
) -> Context:
    """The one way to make an evaluation Context: diagnose, tail and the rule-test runner.

    `wide`: step x canonical metric (int64 step index, ascending), NaN where nothing was logged;
    +-inf cells may be left in (they are masked here and counted as non-finite). `nonfinite`:
    metric -> steps logged as NaN or +-inf (a logged NaN cannot be told from "not logged" in
    `wide`, so name it here). `restarts`: steps where a new segment begins. `wall`: step -> wall
    time, computed when a rule needs it. `early`: the run's first steps when `wide` is a recent
    window (live following; `relative` conditions take their early level from it). `now`: the
    time the run is judged at, on the clock of its wall times (a number, or a callable computed
    when a rule needs it; `stalled` reads it). `grid`: the steps of the run's logs (every step
    a metric the rules read was logged at, ascending; default: the steps of `wide`). `window`:
    `wide` starts after the run's first log (a long run followed live). Non-finite
    steps and restarts before the first step of `wide` are dropped (they are outside the view).
    """
    first = int(wide.index[0]) if len(wide) else None
    bad: dict[str, set[int]] = {m: set(map(int, s)) for m, s in (nonfinite or {}).items()}
    if len(wide.columns):
        values = wide.to_numpy(dtype=np.float64)
        inf = np.isinf(values)
        if inf.any():
            steps = wide.index.to_numpy(dtype=np.int64)
            for j in np.flatnonzero(inf.any(axis=0)):
                bad.setdefault(str(wide.columns[j]), set()).update(steps[inf[:, j]].tolist())
            wide = wide.where(~inf)
    if first is not None:
        bad = {m: {s for s in v if s >= first} for m, v in bad.items()}
    return Context(
        wide,
        {m: pd.Index(sorted(v), dtype="int64") for m, v in bad.items() if v},
        wall if wall is not None else _no_wall,
        sorted({int(r) for r in restarts if first is None or r > first}),
        decimals,
        dict(tags or {}),
        early,
        now=now if callable(now) else (lambda: now),
        grid=None if grid is None else np.asarray(grid, dtype=np.int64),
        window=window,
    )


def _no_wall() -> pd.Series:
    return pd.Series(dtype=float)


def logging_interval(grid: np.ndarray) -> int:
    """The median number of training steps between a run's logs (1 below 3 logs)."""
    if grid.size < 3:
        return 1
    return max(1, int(np.median(np.diff(grid))))


@dataclass
class Signal:
    steps: np.ndarray  # int64, the logged steps the mask speaks of
    mask: np.ndarray  # bool
    observed: dict[str, np.ndarray]  # name -> values at those steps
    peak: str = "value"  # observed key that ranks the steps of an episode
    peak_max: bool = True  # the worst step has the largest (else smallest) peak value
    metrics: tuple[str, ...] = ()


# -- windows ------------------------------------------------------------------------------
def _nanmedian_rows(windows: np.ndarray, min_periods: int) -> np.ndarray:
    """Median of each row's non-NaN values (NaN where fewer than `min_periods`), by sorting:
    NaN sorts last, so the middle of the first `count` values is the median."""
    if windows.size == 0:
        return np.empty(windows.shape[0])
    ordered = np.sort(windows, axis=1)
    counts = np.sum(~np.isnan(windows), axis=1)
    rows = np.arange(ordered.shape[0])
    lo = ordered[rows, np.maximum((counts - 1) // 2, 0)]
    hi = ordered[rows, np.minimum(counts // 2, ordered.shape[1] - 1)]
    return np.where(counts >= max(min_periods, 1), (lo + hi) / 2, np.nan)


def _prior_windows(v: np.ndarray, window: int) -> np.ndarray:
    """Each position's previous `window` values (the current one excluded; NaN before the run)."""
    return sliding_window_view(np.concatenate([np.full(window, np.nan), v[:-1]]), window)


def _prior_median(v: np.ndarray, window: int, min_periods: int) -> np.ndarray:
    """Median of the previous `window` values (the current one excluded)."""
    if v.size == 0:
        return v
    return _nanmedian_rows(_prior_windows(v, window), min_periods)


def _prior_quantile(v: np.ndarray, window: int, min_periods: int, q: float) -> np.ndarray:
    """The q-quantile (linear, as numpy's default) of the previous `window` values: the
    median's own rows when q is 1/2."""
    if q == 0.5 or v.size == 0:
        return _prior_median(v, window, min_periods)
    ordered = np.sort(_prior_windows(v, window), axis=1)  # NaN sorts last
    counts = np.sum(~np.isnan(ordered), axis=1)
    pos = np.maximum(counts - 1, 0) * q
    lo, frac = np.floor(pos).astype(int), pos - np.floor(pos)
    hi = np.minimum(lo + 1, np.maximum(counts - 1, 0))
    rows = np.arange(ordered.shape[0])
    a, b = ordered[rows, lo], ordered[rows, hi]
    return np.where(counts >= max(min_periods, 1), a + (b - a) * frac, np.nan)


HEAD_SMOOTH = 5  # a threshold's `smooth` up to this many logs has a level from half of them


def _trailing_median(
    v: np.ndarray, window: int, first: int | None = None, side: int = 0
) -> np.ndarray:
    """Median of the last `window` values, the current one included (needs all of them).
    `first`: at the run's start, the median of the first i values once there are `first` of
    them (all finite), so a short run's first logs have a level too; of an even count, the
    lower middle value (`side` -1), the upper (1) or their mean (0): a bound the level must
    pass is passed by at least half the logs so far."""
    if v.size == 0:
        return v
    padded = np.concatenate([np.full(window - 1, np.nan), v])
    out = _nanmedian_rows(sliding_window_view(padded, window), window)
    if first is not None and first < window:
        for i in range(first - 1, min(window - 1, v.size)):
            head = np.sort(v[: i + 1])
            if np.isnan(head[-1]):
                continue
            lo, hi = head[i // 2], head[(i + 1) // 2]
            out[i] = lo if side < 0 else hi if side > 0 else (lo + hi) / 2
    return out


def _prior_expanding_median(x: np.ndarray, min_periods: int) -> np.ndarray:
    """`pd.Series(x).shift(1).expanding(min_periods).median()` for finite x, min_periods >= 1:
    the median of every value before each position, kept in one sorted list."""
    import bisect

    out = np.full(x.size, np.nan)
    seen: list[float] = []
    for i, value in enumerate(x.tolist()):
        n = len(seen)
        if n >= min_periods:
            h = n // 2
            out[i] = seen[h] if n % 2 else (seen[h - 1] + seen[h]) / 2
        bisect.insort(seen, value)
    return out


def _shift(v: np.ndarray, k: int) -> np.ndarray:
    out = np.full(v.shape, np.nan)
    if k < v.size:
        out[k:] = v[: v.size - k]
    return out


def _ratio(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(b != 0, a / np.where(b != 0, b, 1.0), np.nan)


# -- kinds ------------------------------------------------------------------------------
# Each kind is declared once: its parameters (types, defaults, bounds), what it observes, its
# examples (the docstring) and its function (`signal`). See rlwatch/engine/registry.py.


@kind(
    "threshold",
    observed=("value", "numerator", "denominator", "level", "other", "deviation"),
    one_of=("above", "below", "outside", "inside", "at_least", "at_most"),
)
@dataclass(frozen=True)
class Threshold(Node):
    """The value (or value / `divided_by`, or value - `minus`) is above, below, outside or
    inside fixed bounds.

    Unhealthy: `rollout_kl: 9.97` with `above: 1.0`. Healthy: `rollout_kl: 0.001`.

    >>> state("threshold: {metric: rollout_kl, above: 1.0}", rollout_kl="0.001 9.97")
    'firing'
    >>> state("threshold: {metric: rollout_kl, above: 1.0}", rollout_kl="0.001 0.001")
    'ok'

    `divided_by` and `minus` read the other metric's last value at or before each step (the
    two may be logged at different cadences): the batch's best and worst reward equal.

    >>> when = "threshold: {metric: hi, minus: lo, at_most: 0}"
    >>> state(when, hi="1 0.5", lo="0 0.5")
    'firing'
    >>> state(when, hi="1 0.9", lo="0 0.5")
    'ok'

    `at_least`/`at_most` compare with >= / <= (a metric that sits exactly on the edge, 0.9 vs
    0.900, counts); `smooth: k` compares the trailing median of the last k logs, so one noisy
    log neither fires nor hides a level.

    >>> state("threshold: {metric: clip_frac, at_least: 0.9}", clip_frac="0.9")
    'firing'
    >>> state("threshold: {metric: loss, at_most: 0.6, smooth: 3}", loss="0.5 0.9 0.5")
    'firing'
    >>> state("threshold: {metric: loss, at_most: 0.6, smooth: 3}", loss="0.9 0.5 0.9")
    'ok'

    A run's first logs have a level once half a short window (up to 5 logs) is in: the median
    of the logs so far; of an even count, the middle value on the bound's safe side (at least
    half the logs pass the bound). A run truncated from its first log is so at its third.

    >>> state("threshold: {metric: t, at_least: 0.5, smooth: 5}", t="1 1 1")
    'firing'
    >>> state("threshold: {metric: t, at_least: 0.5, smooth: 5}", t="0 0.1 1 1")
    'ok'

    `min_z` (with `above`/`below`): the value must be past the bound by min_z x the robust
    spread of the run's first `spread_of_first` logs, so a metric that wanders round the
    bound from the start (an implicit reward near 0 while nothing is learnt yet) is no
    crossing of it.

    >>> when = "threshold: {metric: m, below: 0, min_z: 3}"
    >>> state(when, m="0.01 -0.02 0.03 -0.01 0.02 -0.03 0.01 -0.02 0.02 -0.01 -0.04")
    'ok'
    >>> state(when, m="0.01 -0.02 0.03 -0.01 0.02 -0.03 0.01 -0.02 0.02 -0.01 -0.4")
    'firing'
    """

    metric: str = param("metric", doc="the metric compared")
    above: float | None = param("num", doc="fires when value > above")
    below: float | None = param("num", doc="fires when value < below")
    outside: tuple[float, float] | None = param("range", doc="fires outside [low, high]")
    inside: tuple[float, float] | None = param("range", doc="fires inside [low, high]")
    divided_by: str | None = param("metric", required=False, doc="compare value / this metric")
    minus: str | None = param("metric", required=False, doc="compare value - this metric")
    at_least: float | None = param("num", doc="fires when value >= at_least")
    at_most: float | None = param("num", doc="fires when value <= at_most")
    smooth: int | None = param(
        "int", doc="compare the trailing median of the last k logs", per_log=1
    )
    min_z: float | None = param(
        "pos", doc="past the bound by min_z x the robust spread of the first logs"
    )
    spread_of_first: int = param(
        "int", 10, doc="logs whose robust spread min_z is counted in", per_log=3
    )

    def check(self) -> tuple[str, str] | None:
        if self.divided_by is not None and self.minus is not None:
            return "minus", "minus and divided_by do not go together"
        if self.min_z is not None and (
            self.divided_by is not None
            or self.minus is not None
            or (self.above is None) == (self.below is None)
        ):
            return "min_z", "min_z goes with one of above or below, without divided_by or minus"
        return None

    def lookback(self) -> int | None:
        return 0 if self.smooth is None else self.smooth

    def head(self) -> int:
        return self.spread_of_first if self.min_z is not None else 0

    def signal(self, ctx: Context) -> Signal:
        metric = self.metric
        s = ctx.series(metric)
        steps, v = s.steps, s.values
        observed: dict[str, np.ndarray] = {}
        other = self.divided_by if self.divided_by is not None else self.minus
        if other is not None:
            d = ctx.series(other)
            # as of each step: the last value of either metric at or before it (cadences differ)
            steps = np.union1d(s.steps, d.steps)
            ia = np.searchsorted(s.steps, steps, side="right") - 1
            ib = np.searchsorted(d.steps, steps, side="right") - 1
            both = (ia >= 0) & (ib >= 0)
            steps, num, den = steps[both], s.values[ia[both]], d.values[ib[both]]
            v = _ratio(num, den) if self.divided_by is not None else num - den
            ok = ~np.isnan(v)
            steps, v, num, den = steps[ok], v[ok], num[ok], den[ok]
            if self.divided_by is not None:
                observed = {"numerator": num, "denominator": den}
            else:
                observed = {"level": num, "other": den}
        if self.smooth is not None:
            k = self.smooth
            # a run's first logs: the median of the logs so far, from half the window on, for a
            # window against noise (up to HEAD_SMOOTH logs); a longer one is asked as evidence
            half = None if ctx.window or k > HEAD_SMOOTH else (k + 1) // 2
            up = self.above is not None or self.at_least is not None
            down = self.below is not None or self.at_most is not None
            side = -1 if up and not down else 1 if down and not up else 0

            def level(x: np.ndarray) -> np.ndarray:
                return _trailing_median(x, k, half, side)

            v = (
                ctx.per_metric(("head", metric, k, side), s, level)
                if other is None
                else ctx.by_segment(v, steps, level)
            )
            ok = ~np.isnan(v)
            steps, v = steps[ok], v[ok]
            observed = {key: val[ok] for key, val in observed.items()}
        read = (metric,) if other is None else (metric, other)
        mask = np.ones(v.size, dtype=bool)
        peak_max = True
        margin: Any = 0.0
        if self.min_z is not None:  # the noise of the first logs (the raw values), as of each log
            spread = robust.head_sigma(s.values, self.spread_of_first)
            at = np.searchsorted(s.steps, steps, side="right") - 1
            margin = self.min_z * np.where(np.isnan(spread[at]), np.inf, spread[at])
        if self.above is not None:
            mask &= v > self.above + margin
        if self.below is not None:
            mask &= v < self.below - margin
            peak_max = self.above is not None
        if self.at_least is not None:
            mask &= v >= self.at_least
        if self.at_most is not None:
            mask &= v <= self.at_most
            peak_max = self.above is not None or self.at_least is not None
        if self.outside is not None:
            lo, hi = self.outside
            mask &= (v < lo) | (v > hi)
        if self.inside is not None:
            lo, hi = self.inside
            mask &= (v >= lo) & (v <= hi)
        observed["value"] = v
        if self.outside is not None:
            observed["deviation"] = np.abs(v - (self.outside[0] + self.outside[1]) / 2)
            return Signal(steps, mask, observed, "deviation", True, read)
        return Signal(steps, mask, observed, "value", peak_max, read)


@kind("spike", observed=("value", "baseline", "ratio", "change", "z"), one_of=("factor", "drop"))
@dataclass(frozen=True)
class Spike(Node):
    """The value jumps against a robust rolling baseline of the previous `window` logged steps.

    `factor: k` fires when value >= k x baseline (baseline = rolling median, current step
    excluded); `drop: d` fires when the value falls by d x |baseline| or more. `min_delta` is the
    smallest absolute change that counts. Unhealthy: grad_norm `1x20 25`. Healthy: `1x20 1.5`.

    >>> state("spike: {metric: grad_norm, factor: 10}", grad_norm="1x20 25")
    'firing'
    >>> state("spike: {metric: grad_norm, factor: 10}", grad_norm="1x20 1.5")
    'ok'

    `min_z`: the change must also reach min_z x the robust spread (1.4826 x MAD) of the
    baseline window: a level near zero or changing sign is measured in its own noise.

    >>> when = "spike: {metric: reward_mean, drop: 0.5, min_z: 4}"
    >>> state(when, reward_mean="0.1 -0.1x3 0.1x3 -0.1x3 -0.15")
    'ok'
    >>> state(when, reward_mean="0.1 -0.1x3 0.1x3 -0.1x3 -2")
    'firing'

    `quantile: q`: the baseline is the window's q-quantile instead of its median. A GRPO
    gradient norm is near 0 on every batch whose groups all got one reward (no advantage) and
    at its working level on the others: the median of such a window is the idle mode, and the
    working level looks like a spike against it.

    >>> when = "spike: {metric: grad_norm, factor: 10, quantile: 0.75}"
    >>> state(when, grad_norm="0.5 0.001 0.4 0.002 0.001 0.6 0.001 0.002 0.5 0.001 0.001 0.7")
    'ok'
    >>> state(when, grad_norm="0.5 0.001 0.4 0.002 0.001 0.6 0.001 0.002 0.5 0.001 0.001 9")
    'firing'

    `wide_window: n`: nor is a level the last n logs reached on a tenth of them (their
    `wide_quantile`, 0.9) a spike: after a stretch of idle batches longer than the window, the
    working level the run keeps coming back to stays what it is.

    >>> grad = "1.2 0.01 0.01 1.3 0.01 0.01 1.1 0.01x7 1.4"
    >>> state("spike: {metric: grad_norm, factor: 10, window: 5, quantile: 0.75}", grad_norm=grad)
    'firing'
    >>> when = "spike: {metric: grad_norm, factor: 10, window: 5, quantile: 0.75, wide_window: 30}"
    >>> state(when, grad_norm=grad), state(when, grad_norm="0.5x20 0.01x7 9")
    ('ok', 'firing')
    """

    metric: str = param("metric", doc="the metric watched")
    factor: float | None = param("pos", doc="fires when value >= factor x baseline")
    drop: float | None = param("pos", doc="fires when value falls by drop x |baseline|")
    window: int = param("int", 20, doc="logged steps in the rolling baseline", per_log=3)
    min_periods: int = param("int", 5, doc="values the baseline needs before it counts", per_log=3)
    min_delta: float = param("num", 0.0, doc="smallest absolute change that counts")
    min_z: float | None = param("pos", doc="smallest change in robust sigmas of the window")
    quantile: float = param(
        "num", 0.5, low=0.0, high=1.0, doc="the window's quantile taken as baseline"
    )
    wide_window: int | None = param(
        "int", doc="also no spike: below factor x this many logs' wide_quantile", per_log=3
    )
    wide_quantile: float = param(
        "num", 0.9, low=0.0, high=1.0, doc="the wide window's quantile (a level seen often)"
    )

    def check(self) -> tuple[str, str] | None:
        if self.min_periods > self.window:
            return "", "min_periods must not exceed window"
        if self.wide_window is not None and self.wide_window < self.window:
            return "", "wide_window must not be shorter than window"
        return None

    def lookback(self) -> int | None:
        return self.window if self.wide_window is None else self.wide_window

    def signal(self, ctx: Context) -> Signal:
        metric, window, min_periods = self.metric, self.window, self.min_periods
        s = ctx.series(metric, needs=min_periods + 1)
        v = s.values
        q = self.quantile
        base = ctx.per_metric(
            ("prior_quantile", metric, window, min_periods, q),
            s,
            lambda x: _prior_quantile(x, window, min_periods, q),
        )
        if self.wide_window is not None and self.factor is not None:
            wide, wq = self.wide_window, self.wide_quantile
            seen = ctx.per_metric(
                ("prior_quantile", metric, wide, min_periods, wq),
                s,
                lambda x: _prior_quantile(x, wide, min_periods, wq),
            )
            base = np.where(np.isnan(base), base, np.fmax(base, seen))
        delta = v - base
        has = ~np.isnan(base)
        sigma = ctx.prior_sigma(metric, s, window, min_periods)
        with np.errstate(invalid="ignore", divide="ignore"):
            z = np.where(sigma > 0, delta / np.where(sigma > 0, sigma, 1.0), np.nan)
        with np.errstate(invalid="ignore"):
            mask = has & (np.abs(delta) >= self.min_delta)
            if self.min_z is not None:  # a constant window: any change is out of its noise
                mask &= (np.abs(z) >= self.min_z) | ((sigma == 0) & (delta != 0))
            if self.factor is not None:
                mask &= (v >= self.factor * base) & (base > 0)
            else:
                mask &= -delta >= self.drop * np.abs(base)
        observed = {
            "value": v,
            "baseline": base,
            "ratio": _ratio(v, base),
            "change": _ratio(delta, np.abs(base)),
            "z": z,
        }
        rising = self.factor is not None
        return Signal(s.steps, mask, observed, "ratio" if rising else "change", rising, (metric,))


@kind("relative", observed=("value", "reference", "ratio"), one_of=("below_factor", "above_factor"))
@dataclass(frozen=True)
class Relative(Node):
    """The value against the run's own early level (median of its first `first_steps` values).

    Unhealthy (`below_factor: 0.1`): entropy 0.35 early, 0.012 now. Healthy: 0.35 -> 0.06.

    >>> state("relative: {metric: entropy, below_factor: 0.1}", entropy="0.35x10 0.012")
    'firing'
    >>> state("relative: {metric: entropy, below_factor: 0.1}", entropy="0.35x10 0.06")
    'ok'

    The early level is checked for sanity: when the metric already collapses (or runs away)
    inside the warm-up, the median of the first 3 logs is the reference. A run shorter than
    `first_steps` + 1 logs (but at least 6) takes its first third as the early level.

    >>> state("relative: {metric: entropy, below_factor: 0.1}", entropy="3.3x2 0.3 0.01x20")
    'firing'
    >>> state("relative: {metric: entropy, below_factor: 0.5}", entropy="1x3 0.2x4")
    'firing'

    A level at or below zero has no multiples: Online DPO's sequence KL estimate starts at
    -0.17, and "20x its early level" would hold for any positive KL.

    >>> when = "relative: {metric: kl_ref, above_factor: 20, first_steps: 3}"
    >>> state(when, kl_ref="0 -0.17 -0.77 5")
    'skipped'

    With `nonzero`, a value of exactly 0 is no level: the early level is the median of the
    non-zero values among the first `first_steps`. A GRPO run whose batches mostly carry no
    advantage logs a gradient norm of 0 on them, and its updates' norms are the level.

    >>> when = "relative: {metric: grad_norm, above_factor: 10, first_steps: 4, nonzero: true}"
    >>> state(when, grad_norm="0.2 0 0 0.2 0 0 5")
    'firing'
    >>> state(when, grad_norm="0.2 0 0 0.2 0 0 1")
    'ok'
    >>> state("relative: {metric: grad_norm, above_factor: 10, first_steps: 4}",
    ...       grad_norm="0.2 0 0 0.2 0 0 5")
    'skipped'

    A value inside the early window is not judged, unless `early_counts` (a blow-up that
    begins there: the early level is the median, which one spike does not move):

    >>> when = ("count: {of: {relative: {metric: grad_norm, above_factor: 10, first_steps: 4, "
    ...         "early_counts: true}}, at_least: 1, within: 20}")
    >>> state(when, grad_norm="0.2 0.2 5 0.2 0.2 0.2")
    'firing'
    >>> state(when.replace("true", "false"), grad_norm="0.2 0.2 5 0.2 0.2 0.2")
    'ok'
    """

    metric: str = param("metric", doc="the metric watched")
    below_factor: float | None = param("pos", doc="fires when value < below_factor x early")
    above_factor: float | None = param("pos", doc="fires when value > above_factor x early")
    first_steps: int = param("int", 10, doc="logged steps that make the early level", per_log=1)
    min_delta: float | None = param("num", doc="smallest |value - early| that counts")
    nonzero: bool = param("bool", False, doc="the early level leaves out values of exactly 0")
    early_counts: bool = param("bool", False, doc="values inside the early window are judged too")

    def lookback(self) -> int | None:
        return 0

    def head(self) -> int:
        return self.first_steps

    def signal(self, ctx: Context) -> Signal:
        metric, first = self.metric, self.first_steps
        if ctx.early is None or metric not in ctx.early.columns:
            n = len(ctx.series(metric))
            if first + 1 > n >= SHORT_RUN:  # a short run: its first third is the early level
                first = max(2, n // 3)
        if ctx.early is not None and metric in ctx.early.columns:
            s = ctx.series(metric)
            head = ctx._arrays(ctx.early, metric)
            hv, hs = head.values, head.steps
        else:
            s = ctx.series(metric, needs=first + 1)
            hv, hs = s.values, s.steps
        if len(hv) < first:
            raise Skip(f"too few steps of {metric!r}: {len(hv)} logged, needs {first + 1}")
        early = hv[:first]
        after = s.steps > hs[first - 1] if not self.early_counts else np.ones(len(s), bool)
        if self.nonzero:
            early = early[early != 0]
            if not len(early):
                raise Skip(f"{metric!r} is exactly 0 on its first {first} logs: no early level")
        # the medians of a metric's first logs, once per run for the rules that share them
        key = (
            "early",
            metric,
            first,
            ctx.early is not None and metric in ctx.early.columns,
            self.nonzero,
        )
        medians = ctx.memo.get(key)
        if medians is None:
            # a warm-up that is not sane (the metric collapses or runs away inside it) must
            # not be the reference: the first logs' level counts where it is further from
            # the failure
            medians = ctx.memo[key] = (robust.median(early), robust.median(early[:3]))
        ref, start = medians
        if self.below_factor is not None:
            ref = max(ref, start)
        elif self.above_factor is not None:
            ref = min(ref, start)
        if not ref > 0:  # a multiple of a level at or below zero (or of none) means nothing
            raise Skip(
                f"the early level of {metric!r} is {ref:.3g}: a relative change needs a "
                "positive one (a sample estimate, such as a KL, can start below zero)"
            )
        v = s.values
        mask = after.copy()
        if self.below_factor is not None:
            mask &= v < self.below_factor * ref
        if self.above_factor is not None:
            mask &= v > self.above_factor * ref
        if self.min_delta is not None:
            mask &= np.abs(v - ref) >= self.min_delta
        observed = {
            "value": v,
            "reference": np.full(v.size, ref),
            "ratio": v / ref if ref != 0 else np.full(v.size, np.nan),
        }
        return Signal(s.steps, mask, observed, "value", self.above_factor is not None, (metric,))


@kind(
    "trend",
    observed=("value", "start", "end", "pct_change"),
    one_of=("above", "below", "abs_below"),
)
@dataclass(frozen=True)
class Trend(Node):
    """Relative change over the last `window` logged steps, with robust endpoints: the median
    of the first and of the last `edge` values of the window (default a tenth, at least 3).

    Unhealthy (`below: -0.4`): length 500 -> 100 over 30 steps. Healthy: 500 -> 480.

    >>> state("trend: {metric: response_length_mean, window: 30, below: -0.4}",
    ...       response_length_mean="500-13.8x29")
    'firing'
    >>> state("trend: {metric: response_length_mean, window: 30, below: -0.4}",
    ...       response_length_mean="500-0.7x29")
    'ok'

    `from_start`: the change since the run's early level (the median of its first `edge` logs),
    once `window` logs are in. A reward that climbed 0.03 -> 1.3 and then plateaued is flat
    over its last 20 logs, but not since its start:

    >>> when = "trend: {metric: reward_mean, window: 20, abs_below: 0.1, from_start: true}"
    >>> state(when, reward_mean="0.03x3 0.03+0.1x12 1.3x30")
    'ok'
    >>> state(when, reward_mean="0.7x3 0.72x12 0.71x30")
    'firing'
    """

    metric: str = param("metric", doc="the metric watched")
    window: int = param(
        "int", required=True, doc="logged steps the change is measured over", per_log=3
    )
    edge: int | None = param("int", doc="values in each robust endpoint (default window/10, >= 3)")
    above: float | None = param("num", doc="fires when the relative change > above")
    below: float | None = param("num", doc="fires when the relative change < below")
    abs_below: float | None = param("pos", doc="fires when |relative change| < abs_below")
    from_start: bool = param("bool", False, doc="the change since the run's first `edge` logs")

    def _edge(self) -> int:
        return self.edge if self.edge is not None else max(3, self.window // 10)

    def lookback(self) -> int | None:
        return self.window

    def head(self) -> int:
        return self.window if self.from_start else 0

    def signal(self, ctx: Context) -> Signal:
        metric, window, edge = self.metric, self.window, self._edge()
        s = ctx.series(metric, needs=window)
        end = ctx.per_metric(("trailing", metric, edge), s, lambda x: _trailing_median(x, edge))
        if self.from_start:  # the run's first logs, kept by the incremental engine (head)
            early = ctx.early is not None and metric in ctx.early.columns
            head = ctx._arrays(ctx.early, metric) if early else s
            n = len(head.values)
            if n < window:
                raise Skip(f"too few steps of {metric!r}: {n} logged, needs {window}")
            start = np.full(s.values.shape, robust.median(head.values[:edge]))
            start[s.steps < head.steps[window - 1]] = np.nan  # judged from the window-th log
        else:
            start = ctx.by_segment(end, s.steps, lambda x: _shift(x, window - edge))
        change = _ratio(end - start, np.abs(start))
        mask = ~np.isnan(change)
        with np.errstate(invalid="ignore"):
            if self.above is not None:
                mask &= change > self.above
            if self.below is not None:
                mask &= change < self.below
            if self.abs_below is not None:
                mask &= np.abs(change) < self.abs_below
        observed = {"value": s.values, "start": start, "end": end, "pct_change": change}
        return Signal(s.steps, mask, observed, "pct_change", self.below is None, (metric,))


@kind("nonfinite", observed=("value", "count"))
@dataclass(frozen=True)
class Nonfinite(Node):
    """The metric was logged as NaN or +-inf. Unhealthy: `grad_norm: 1 1 nan`.

    >>> state("nonfinite: {metric: grad_norm}", grad_norm="1 1 nan")
    'firing'
    >>> state("nonfinite: {metric: grad_norm}", grad_norm="1 1 1")
    'ok'
    """

    metric: str = param("metric", doc="the metric watched")

    def lookback(self) -> int | None:
        return 0

    def signal(self, ctx: Context) -> Signal:
        metric = self.metric
        if not ctx.logged(metric) and metric not in ctx.nonfinite:
            raise Skip(f"metric {metric!r} not logged")
        logged_bad = ctx.nonfinite.get(metric)
        bad = np.asarray(logged_bad if logged_bad is not None else [], dtype=np.int64)
        s = ctx.series(metric) if ctx.logged(metric) else Series(np.empty(0, np.int64), np.empty(0))
        steps = np.union1d(s.steps, bad)
        mask = np.isin(steps, bad)
        value = np.full(steps.size, np.nan)
        value[np.isin(steps, s.steps)] = s.values[np.isin(s.steps, steps)]
        value[mask] = np.nan
        observed = {"value": value, "count": np.cumsum(mask).astype(float)}
        return Signal(steps, mask, observed, "count", True, (metric,))


@kind("stuck", observed=("value", "held"))
@dataclass(frozen=True)
class Stuck(Node):
    """Exactly constant (or exactly `value`) for `steps` logged steps in a row.

    Values printed rounded (verl <= 0.4 console logs: 3 decimals) make a tiny KL print 0.000:
    there, a zero means "below resolution" and does not count as stuck.

    >>> state("stuck: {metric: kl_ref, steps: 5}", kl_ref="0.01x5")
    'firing'
    >>> state("stuck: {metric: kl_ref, steps: 5}", kl_ref="0.01+0.001x5")
    'ok'
    """

    metric: str = param("metric", doc="the metric watched")
    steps: int = param("int", required=True, doc="logged steps in a row", per_log=2)
    value: float | None = param("num", doc="the exact value held (default: any constant)")

    def lookback(self) -> int | None:
        return self.steps

    def signal(self, ctx: Context) -> Signal:
        metric, n = self.metric, self.steps
        s = ctx.series(metric, needs=n)
        v = s.values
        if self.value is not None:
            same = v == self.value
        else:
            eq = np.concatenate([[False], v[1:] == v[:-1]])
            same = eq | np.concatenate([eq[1:], [False]])
        if ctx.decimals is not None:
            same &= np.abs(v) >= 0.5 * 10.0**-ctx.decimals
        held = _held(same)
        observed = {"value": v, "held": held.astype(float)}
        return Signal(s.steps, held >= n, observed, "held", True, (metric,))


@kind("stall", observed=("value", "baseline", "ratio"))
@dataclass(frozen=True)
class Stall(Node):
    """A step whose duration is >= `factor` x the median duration of the steps before it.

    Duration: the `metric` (default step_time) where logged, else the wall-time gap between
    consecutive steps. Unhealthy: 350 s steps, then one of 22,544 s. Healthy: 350, 420, 380.

    >>> state("stall: {factor: 10}", step_time="350x5 22544")
    'firing'
    >>> state("stall: {factor: 10}", step_time="350x5 420")
    'ok'
    """

    def lookback(self) -> int | None:
        return None  # the median of every step before

    factor: float = param("pos", required=True, doc="fires when duration >= factor x median")
    metric: str = param("metric", "step_time", doc="the duration metric")
    min_periods: int = param("int", 5, doc="steps before the median counts")

    def signal(self, ctx: Context) -> Signal:
        metric, min_periods = self.metric, self.min_periods
        if ctx.logged(metric):
            s = ctx.series(metric, needs=min_periods + 1)
            steps, d = s.steps, s.values
        else:
            w = ctx.wall_series()
            if len(w) == 0:
                raise Skip(f"metric {metric!r} not logged and the source has no wall times")
            d = ctx.by_segment(w.values, w.steps, lambda x: x - _shift(x, 1))
            ok = ~np.isnan(d)
            steps, d = w.steps[ok], d[ok]
            if d.size < min_periods + 1:
                raise Skip(f"too few steps with wall times: {d.size}, needs {min_periods + 1}")

        def expanding(x: np.ndarray) -> np.ndarray:  # the median of every step before
            if x.size <= 2000 and min_periods >= 1 and not np.isnan(x).any():
                return _prior_expanding_median(x, min_periods)  # pandas' own costs more here
            return pd.Series(x).shift(1).expanding(min_periods=min_periods).median().to_numpy()

        base = ctx.by_segment(d, steps, expanding)
        with np.errstate(invalid="ignore"):
            mask = ~np.isnan(base) & (d >= self.factor * base) & (base > 0)
        observed = {"value": d, "baseline": base, "ratio": _ratio(d, base)}
        return Signal(steps, mask, observed, "ratio", True, (metric,))


@kind("count", observed=("count",))
@dataclass(frozen=True)
class Count(Node):
    """At least `at_least` steps of the inner condition within the last `within` logged steps.

    Unhealthy: three grad-norm spikes in 20 steps. Healthy: one spike every few hundred steps.

    >>> when = "count: {of: {threshold: {metric: grad_norm, above: 10}}, at_least: 3, within: 20}"
    >>> state(when, grad_norm="1 25 1 25 1 25")
    'firing'
    >>> state(when, grad_norm="1 25 1x20")
    'ok'
    """

    def lookback(self) -> int | None:
        inner = self.of.lookback()
        return None if inner is None else inner + self.within

    of: Node = param("cond", doc="the inner condition")  # noqa: RUF009
    at_least: int = param("int", required=True, doc="steps of the inner condition", per_log=2)
    within: int = param("int", required=True, doc="the last logged steps counted", per_log=2)

    def signal(self, ctx: Context) -> Signal:
        inner = evaluate(ctx, self.of)
        c = np.cumsum(inner.mask.astype(float))
        hits = c - _shift(c, self.within)
        hits = np.where(np.isnan(hits), c, hits)
        observed = {**inner.observed, "count": hits}
        return Signal(inner.steps, hits >= self.at_least, observed, "count", True, inner.metrics)


@kind("sustained", observed=("fraction",))
@dataclass(frozen=True)
class Sustained(Node):
    """The inner condition held on at least `fraction` of the last `window` logs of its metric
    (the points present, whatever the cadence), once `min_points` logs (default `window`) are in.

    "Sustained" as a share, not a streak: with GRPO num_iterations=2 the clip ratio is exactly 0
    on the first update of every generation batch, so 10 logs in a row above 20% never happen
    while half of the logs are far above.

    >>> when = ("sustained: {of: {threshold: {metric: clip_frac, above: 0.2}}, "
    ...         "fraction: 0.4, window: 10}")
    >>> state(when, clip_frac="0 0.3 0 0.3 0 0.3 0 0.3 0 0.3")
    'firing'
    >>> state(when, clip_frac="0 0.3 0 0.01 0 0.02 0 0.3 0 0.01")
    'ok'

    `among`: count only the logs where that condition holds (the points that measured
    something): with num_iterations=3, clip ratios above 20% on half of the non-zero logs.

    >>> when = ("sustained: {of: {threshold: {metric: clip_frac, above: 0.2}}, fraction: 0.5, "
    ...         "window: 6, among: {threshold: {metric: clip_frac, above: 0}}}")
    >>> state(when, clip_frac="0 0.3 0.1 0 0.25 0.3 0 0.1 0.3 0 0.3 0.1")
    'firing'
    >>> state(when, clip_frac="0 0.3 0.1 0 0.05 0.1 0 0.1 0.3 0 0.02 0.1")
    'ok'
    """

    of: Node = param("cond", doc="the inner condition")  # noqa: RUF009
    fraction: float = param("pos", required=True, high=1.0, doc="share of the window's logs")
    window: int = param("int", required=True, doc="the last logs counted", per_log=3)
    min_points: int | None = param(
        "int", doc="logs needed before it counts (default window)", per_log=3
    )
    among: Node | None = param(  # noqa: RUF009
        "cond", required=False, doc="count only the logs where this holds (e.g. measured, > 0)"
    )

    def lookback(self) -> int | None:
        inner = self.of.lookback()
        return None if inner is None else inner + self.window

    def signal(self, ctx: Context) -> Signal:
        inner = evaluate(ctx, self.of)
        steps, hit = inner.steps, inner.mask
        if self.among is not None:  # a log that measured nothing (exactly 0) is not present
            sel = evaluate(ctx, self.among)
            pos = np.searchsorted(sel.steps, steps)
            ok = (pos < sel.steps.size) & (sel.steps[np.minimum(pos, sel.steps.size - 1)] == steps)
            present = np.zeros(steps.size, bool)
            present[ok] = sel.mask[pos[ok]]
        else:
            present = np.ones(steps.size, bool)
        idx = np.flatnonzero(present)
        f_sub, n_sub = robust.window_fraction(hit[idx], self.window)
        # each log carries the share of its latest present window (nothing before the first)
        last = np.searchsorted(idx, np.arange(steps.size), side="right") - 1
        valid = last >= 0
        frac = np.where(valid, f_sub[np.maximum(last, 0)] if idx.size else np.nan, np.nan)
        n = np.where(valid, n_sub[np.maximum(last, 0)] if idx.size else 0.0, 0.0)
        need = min(self.window, self.min_points or self.window)
        with np.errstate(invalid="ignore"):
            mask = (n >= need) & (frac >= self.fraction - 1e-12) & present
        observed = {**inner.observed, "fraction": frac}
        return Signal(steps, mask, observed, inner.peak, inner.peak_max, inner.metrics)


@kind("within")
@dataclass(frozen=True)
class Within(Node):
    """The inner condition, counted only in the run's first `steps` steps (from the first
    logged step of the metrics it reads): what is normal late in a run can be a failure early.

    "Low entropy later is normal (commitment). But if entropy collapses too early, you often
    get premature convergence": entropy at 5% of its early level by step 40 is a collapse; the
    same level reached after 300 steps of a long healthy run is commitment.

    >>> when = "within: {steps: 20, of: {relative: {metric: entropy, below_factor: 0.1}}}"
    >>> state(when, entropy="1x10 0.05x5")
    'firing'
    >>> state(when, entropy="1x10 0.5x20 0.05x5")
    'ok'
    """

    of: Node = param("cond", doc="the inner condition")  # noqa: RUF009
    steps: int = param("int", required=True, doc="steps from the run's first log counted")

    def head(self) -> int:
        return max(1, self.of.head())

    def signal(self, ctx: Context) -> Signal:
        inner = evaluate(ctx, self.of)
        first = ctx.first_step(self.of.metrics())
        mask = inner.mask & (inner.steps - first <= self.steps)
        return Signal(inner.steps, mask, inner.observed, inner.peak, inner.peak_max, inner.metrics)


@kind("unless_logged")
@dataclass(frozen=True)
class UnlessLogged(Node):
    """The inner condition, at the steps before `metric` is first logged: once the run logs
    a better judge, it replaces this one. A reward model evaluated on held-out pairs is judged
    by them from its first evaluation on, not by its noisy training batches (RM01). Causal: a
    step is judged by what was logged up to it, so `tail` and `diagnose` agree.

    >>> when = "unless_logged: {metric: val_score, of: {threshold: {metric: loss, above: 1}}}"
    >>> state(when, loss="2 2 2 2")
    'firing'
    >>> state(when, loss="2 2 2 2", val_score="_ _ 0.9 _")
    'ok'
    """

    of: Node = param("cond", doc="the inner condition")  # noqa: RUF009
    metric: str = param("metric", doc="the metric whose first log ends the inner condition")

    def head(self) -> int:
        return max(1, self.of.head())

    def signal(self, ctx: Context) -> Signal:
        inner = evaluate(ctx, self.of)
        try:
            first = ctx.first_step([self.metric])
        except Skip:  # not logged (yet): the inner condition alone
            return inner
        mask = inner.mask & (inner.steps < first)
        return Signal(inner.steps, mask, inner.observed, inner.peak, inner.peak_max, inner.metrics)


@kind("unless")
@dataclass(frozen=True)
class Unless(Node):
    """The inner condition, at the steps where `excuse` does not hold at that same step (an
    excuse whose metrics are not logged excuses nothing). A grad-norm spike at the log where a
    sparse reward shows (the batches around it all scored 0, this one held a success) is the
    gradient of that reward, the run's only signal, not an instability (ST02).

    >>> when = ("unless: {of: {threshold: {metric: grad_norm, above: 10}}, "
    ...         "excuse: {threshold: {metric: reward_max, above: 0}}}")
    >>> state(when, grad_norm="1 1 25", reward_max="0 0 10")
    'ok'
    >>> state(when, grad_norm="1 1 25", reward_max="0 0 0")
    'firing'
    >>> state(when, grad_norm="1 1 25")
    'firing'
    """

    of: Node = param("cond", doc="the inner condition")  # noqa: RUF009
    excuse: Node = param("cond", doc="a condition that excuses the inner one at its steps")  # noqa: RUF009

    def signal(self, ctx: Context) -> Signal:
        inner = evaluate(ctx, self.of)
        try:
            ex = evaluate(ctx, self.excuse)
        except Skip:  # not logged: nothing is excused
            return inner
        excused = np.isin(inner.steps, ex.steps[ex.mask])
        mask = inner.mask & ~excused
        return Signal(inner.steps, mask, inner.observed, inner.peak, inner.peak_max, inner.metrics)


@kind("off_best", observed=("value", "level", "best", "change", "z"), one_of=("drop", "rise"))
@dataclass(frozen=True)
class OffBest(Node):
    """The smoothed level fell (`drop`) or rose (`rise`) from the best level reached so far.

    Level: the trailing median of the last `smooth` logs; best: the running max (for `drop`) or
    min (for `rise`) of the levels before. A collapse cannot be absorbed by this baseline, so a
    crash that never recovers stays firing. The change must reach `drop` x |best|, `min_delta`,
    and (with `min_z`) min_z x the metric's own robust spread over `window` logs before the
    best was left: a level near zero or changing sign is measured in its noise, never "% of 0".
    A metric that reached its best across zero has its change measured against the way it came
    (best minus the worst level before it), not |best|.

    >>> when = "off_best: {metric: reward_mean, drop: 0.5, min_z: 3}"
    >>> state(when, reward_mean="0.2+0.02x20 0.1x30")
    'firing'
    >>> state(when, reward_mean="0.2+0.02x20 0.5x30")
    'ok'
    >>> state(when, reward_mean="0.1 -0.1 0.05 -0.05 0.1 0 -0.1 0.08 -0.06 0.02 -0.1x5")
    'ok'

    `best_of_first: N`: the raw values of the first N logs count as levels too, so a run
    broken by its very first update (reward 0.71 on the initial policy, then 0) has a baseline.

    >>> when = "off_best: {metric: reward_mean, drop: 0.5, min_z: 3, best_of_first: 10}"
    >>> state(when, reward_mean="0.71 0.08 0.21 0 0 0 0 0 0 0 0 0.05 0.1 0.05x10")
    'firing'
    >>> state(when, reward_mean="0.4 0.2 0.3 0.25 0.1 0.3 0.2 0.35 0.15 0.3 0.2 0.3 0.25 0.35")
    'ok'
    """

    metric: str = param("metric", doc="the metric watched")
    drop: float | None = param("pos", doc="fires when the level falls by drop x |best|")
    rise: float | None = param("pos", doc="fires when the level rises by rise x |best|")
    smooth: int = param("int", 5, doc="logs in the trailing median (the level)", per_log=1)
    window: int = param("int", 20, doc="logs in the robust spread", per_log=3)
    min_periods: int = param("int", 5, doc="logs before it may fire", per_log=3)
    min_delta: float = param("num", 0.0, doc="smallest absolute change that counts")
    min_z: float | None = param("pos", doc="smallest change in robust sigmas")
    best_of_first: int | None = param(
        "int",
        doc="the raw values of the first N logs count as levels too (the initial policy)",
        per_log=1,
    )

    def lookback(self) -> int | None:
        return None  # the best level so far: a running aggregate over the whole run

    def head(self) -> int:
        return self.best_of_first or 0

    def signal(self, ctx: Context) -> Signal:
        metric, k, window, min_periods = self.metric, self.smooth, self.window, self.min_periods
        s = ctx.series(metric, needs=min_periods + 1)
        v = s.values
        falls = self.drop is not None
        level = ctx.per_metric(("trailing", metric, k), s, lambda x: _trailing_median(x, k))
        prior = _shift(level, 1)
        if self.best_of_first is not None:  # a run broken by its first update: the first logs
            first = np.full(v.size, np.nan)  # (rollouts of the initial policy) are a level too
            first[: self.best_of_first] = v[: self.best_of_first]
            prior = np.fmax(prior, _shift(first, 1)) if falls else np.fmin(prior, _shift(first, 1))
        best = ctx.by_segment(prior, s.steps, lambda x: robust.best_so_far(x, falls))
        sigma = ctx.prior_sigma(metric, s, window, min_periods)
        # a skewed metric (a reward that is 0 on most logs) has a MAD of its mode: its IQR
        # says its spread (the same as the MAD's for symmetric noise)
        iqr = ctx.per_metric(
            ("prior_iqr", metric, window, min_periods),
            s,
            lambda x: robust.prior_iqr_sigma(x, window, min_periods),
        )
        sigma = np.fmax(sigma, iqr)
        # the spread around the best level (when it was reached), not the spread of the fall
        idx = np.arange(v.size)
        at_best = np.maximum.accumulate(np.where(prior == best, idx, 0))
        sigma = np.fmin(sigma, sigma[at_best])
        if self.best_of_first is not None:  # a raw early value is judged in the early noise
            sigma = np.fmax(sigma, robust.head_sigma(v, self.best_of_first))
        gap = (best - level) if falls else (level - best)
        rel = self.drop if falls else self.rise
        # the scale of a relative change: |best|, or, of a metric that came to its best across
        # zero (a reward of -1..1 climbing from -0.4 to +0.4), the way it came: a fall of half
        # the climb, not "half of +0.4" as if zero were a level of its own
        with np.errstate(invalid="ignore"):
            worst = (np.fmin if falls else np.fmax).accumulate(prior)[at_best]
            scale = np.fmax(np.abs(best), (best - worst) if falls else (worst - best))
        with np.errstate(invalid="ignore", divide="ignore"):
            z = np.where(sigma > 0, gap / np.where(sigma > 0, sigma, 1.0), np.nan)
            mask = (np.arange(v.size) >= min_periods) & ~np.isnan(best) & ~np.isnan(level)
            mask &= (gap > 0) & (gap >= rel * scale) & (gap >= self.min_delta)
            if self.min_z is not None:
                mask &= (z >= self.min_z) | (sigma == 0)
        observed = {
            "value": v,
            "level": level,
            "best": best,
            "change": _ratio(-gap if falls else gap, scale),
            "z": z,
        }
        return Signal(s.steps, mask, observed, "level", not falls, (metric,))


@kind("all")
@dataclass(frozen=True)
class All(Node):
    """Every condition holds at the step (a sparse metric keeps its state until its next log).

    Template names: each sub-condition's observed names, and `<metric>.<name>` per metric.

    >>> when = ("all: [{threshold: {metric: kl_ref, above: 0.1}}, "
    ...         "{threshold: {metric: entropy, below: 0.1}}]")
    >>> state(when, kl_ref="0.01 0.5", entropy="0.5 0.05")
    'firing'
    >>> state(when, kl_ref="0.01 0.5", entropy="0.5 0.5")
    'ok'
    """

    items: tuple[Node, ...] = param("conds", doc="the conditions")

    def signal(self, ctx: Context) -> Signal:
        return _combine(ctx, self.items, "all")


@kind("any")
@dataclass(frozen=True)
class Any_(Node):
    """At least one condition holds at the step (skipped sub-conditions are left out).

    >>> when = ("any: [{threshold: {metric: kl_ref, above: 0.1}}, "
    ...         "{threshold: {metric: entropy, below: 0.1}}]")
    >>> state(when, kl_ref="0.01 0.5", entropy="0.5 0.5")
    'firing'
    >>> state(when, kl_ref="0.01 0.01", entropy="0.5 0.5")
    'ok'
    """

    items: tuple[Node, ...] = param("conds", doc="the conditions")

    def signal(self, ctx: Context) -> Signal:
        return _combine(ctx, self.items, "any")


def _combine(ctx: Context, nodes: tuple[Node, ...], how: str) -> Signal:
    signals, skipped = [], []
    for node in nodes:
        try:
            signals.append(evaluate(ctx, node))
        except Skip as exc:
            if how == "all":
                raise
            skipped.append(str(exc))
    if not signals:  # each reason once (two branches may miss the same metric)
        raise Skip("; ".join(dict.fromkeys(skipped)))
    steps = signals[0].steps
    # signals of one metric share its steps array: compared by identity before by value
    same = all(s.steps is steps or np.array_equal(s.steps, steps) for s in signals[1:])
    if not same:
        steps = np.unique(np.concatenate([s.steps for s in signals]))
    observed: dict[str, np.ndarray] = {}
    masks = []
    for s in signals:
        if same:
            pos, valid = None, None
        else:  # a sparse metric (validation every k steps) keeps its state until its next log
            pos = np.searchsorted(s.steps, steps, side="right") - 1
            valid = pos >= 0
            pos = np.maximum(pos, 0)
        masks.append(
            s.mask if same else (s.mask[pos] & valid) if s.mask.size else np.zeros(steps.size, bool)
        )
        leaf = len(set(s.metrics)) == 1
        for key, values in s.observed.items():
            aligned = (
                values
                if same
                else np.where(valid, values[pos], np.nan)
                if values.size
                else np.full(steps.size, np.nan)
            )
            observed.setdefault(key, aligned)
            if leaf and "." not in key:
                observed.setdefault(f"{s.metrics[0]}.{key}", aligned)
    stacked = np.vstack(masks)
    mask = stacked.all(axis=0) if how == "all" else stacked.any(axis=0)
    first = signals[0]
    return Signal(
        steps,
        mask,
        observed,
        first.peak,
        first.peak_max,
        tuple(m for s in signals for m in s.metrics),
    )


_COMPOSITE = ("all", "any", "count", "sustained", "within")


def evaluate(ctx: Context, node: Node) -> Signal:
    """Evaluate a condition; identical leaf conditions of several rules are computed once."""
    if node.KIND in _COMPOSITE:
        return node.signal(ctx)
    hit = ctx.memo.get(node)
    if hit is None:
        try:
            hit = node.signal(ctx)
        except Skip as exc:
            # the reason only: the exception's traceback holds frames that hold ctx, and ctx
            # would hold it (a cycle that keeps the run's tables until the collector runs)
            hit = _Skipped(str(exc))
        ctx.memo[node] = hit
    if isinstance(hit, _Skipped):
        raise Skip(hit.reason)
    return hit


@dataclass(frozen=True)
class _Skipped:
    reason: str


def metrics_of(node: Node) -> list[str]:
    """Every canonical metric a condition reads."""
    return node.metrics()


MAX_NEEDS = 64  # alternatives worked out per condition (`all` of `any`s multiplies them)


def needs(node: Node) -> list[frozenset[str]]:
    """The sets of metrics with which a condition can be evaluated, one per alternative: an
    `any` can be judged on any one branch, an `all` needs one of each of its conditions', an
    `unless_logged` or an `unless` its inner condition's (the metric that ends it, the excuse,
    is optional). Past MAX_NEEDS alternatives, each metric alone is one: any of them may judge
    the rule (a rule too tangled to tell is never left quiet by it)."""
    try:
        return _needs(node)
    except OverflowError:
        return [frozenset({m}) for m in dict.fromkeys(node.metrics())]


def _needs(node: Node) -> list[frozenset[str]]:
    if isinstance(node, Any_):
        alts = [alt for item in node.items for alt in _needs(item)]
    elif isinstance(node, (UnlessLogged, Unless)):
        alts = _needs(node.of)
    else:
        alts = [frozenset()]
        for p in node.PARAMS:
            v = getattr(node, p.name)
            if v is None:
                continue
            if p.type == "metric":
                alts = [a | {v} for a in alts]
            elif p.type in ("cond", "conds"):
                for c in [v] if p.type == "cond" else v:
                    alts = [a | b for a in alts for b in _needs(c)]
                    if len(alts) > MAX_NEEDS:
                        raise OverflowError
    if len(alts) > MAX_NEEDS:
        raise OverflowError
    return alts


def _held(mask: np.ndarray) -> np.ndarray:
    """For each position, how many consecutive True values end there (0 where False)."""
    idx = np.arange(mask.size)
    last_false = np.maximum.accumulate(np.where(mask, -1, idx))
    return np.where(mask, idx - last_false, 0)


def held_in_logs(
    mask: np.ndarray, steps: np.ndarray, grid: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(held, position) of each point of a signal: how many of the run's logs (`grid`) its
    current hold spans, from the step of the hold's first point to its own (0 where the
    condition is false), and how many of the run's logs come before it. A metric logged on
    every 4th log (GRPO's rollout metrics with num_iterations 4) that holds on 3 points in a
    row has held for 9 logs, as a metric logged on every log holding 9 times would."""
    held = _held(mask)
    idx = np.arange(mask.size)
    steps = np.asarray(steps, dtype=np.int64)
    start = np.where(mask, idx - held + 1, idx)
    hi = np.searchsorted(grid, steps, side="right")
    lo = np.searchsorted(grid, steps[start], side="left")
    position = np.maximum(hi - 1, 0)
    return np.where(mask, np.maximum(hi - lo, held), 0), position


@kind("stalled", observed=("value", "baseline", "ratio", "limit"))
@dataclass(frozen=True)
class Stalled(Node):
    """No new step for `factor` x the run's median step interval (and at least `floor` seconds)
    at the time the run is judged (`now`, on the clock of its wall times).

    Median: the wall-time gaps between the last `window` steps of the current segment. Fires
    only at the last step (the one no step has followed); a step that arrives ends it. `now`
    is supplied by the caller: `tail`, its own clock since the last step arrived; `diagnose`,
    the latest record of the run (so a finished run read later is not stalled), or the
    current time while a process on this machine still holds one of the run's files open for
    writing. Unhealthy: 60 s steps, nothing for 30 min. Healthy: the last step 10 min ago.

    >>> state("stalled: {factor: 10, floor: 120}", wall_time="0+60x10", now="2400")
    'firing'
    >>> state("stalled: {factor: 10, floor: 120}", wall_time="0+60x10", now="900")
    'ok'
    """

    factor: float = param("pos", 10.0, doc="fires after factor x the median step interval")
    floor: float = param("num", 120.0, low=0, doc="... and never before this many seconds")
    window: int = param("int", 64, doc="the last step intervals the median is taken over")
    min_periods: int = param("int", 3, doc="step intervals needed before it may fire")

    def lookback(self) -> int | None:
        return 0  # reads wall times and the clock, no metric values

    def signal(self, ctx: Context) -> Signal:
        w = ctx.wall_series()
        if len(w) == 0:
            raise Skip("the source has no wall times to measure step intervals with")
        parts = ctx.segments(w.steps)
        seg = w.values[parts[-1]]
        gaps = np.diff(seg)
        gaps = gaps[np.isfinite(gaps) & (gaps > 0)][-self.window :]
        if gaps.size < self.min_periods:
            raise Skip(
                f"too few step intervals with wall times: {gaps.size}, needs {self.min_periods}"
            )
        now = ctx.now()
        if isinstance(now, tuple):  # (time, how it was chosen): said in the verdict
            now, ctx.memo["stalled:clock"] = now
        if now is None:
            raise Skip("no clock to judge a stall at (only tail and diagnose supply one)")
        median = float(np.median(gaps))
        limit = max(self.factor * median, self.floor)
        idle = max(0.0, float(now) - float(np.nanmax(w.values)))
        n = w.steps.size
        mask = np.zeros(n, bool)
        mask[-1] = idle >= limit
        value = np.full(n, np.nan)
        value[-1] = idle
        observed = {
            "value": value,
            "baseline": np.full(n, median),
            "ratio": value / median,
            "limit": np.full(n, limit),
        }
        return Signal(w.steps, mask, observed, "value", True, ("wall_time",))
