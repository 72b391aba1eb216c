"""Robust, backward-looking building blocks that the condition kinds share.

Each helper works on one metric's logged values (numpy arrays in step order, the points present,
whatever the logging cadence) and looks backwards only: the value at position i depends on
positions <= i (or < i for baselines, which exclude the current point). Each one is computable
from a bounded look-back window plus O(1) running aggregates, so the live evaluator can size its
window from the parameters (`lookback`).

- `window_fraction`: the share of the last `window` points where a condition held ("sustained"
  as a fraction, so a metric that is exactly 0 on every other log still counts as sustained).
- `prior_spread`: a robust scale (1.4826 x MAD) of the previous `window` values, the current
  excluded: the unit in which a change is measured when the level is near zero or changes sign.
- `best_so_far`: the best smoothed level reached so far (running max, or min): a baseline a
  collapse cannot absorb, so a crash that never recovers stays firing.
- `k_of_n`: at least k of several symptoms at once (escalation).
- `short_run_for`: how many logs in a row a rule's `for` needs early in a run (short runs).
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

MAD_TO_SIGMA = 1.4826
MEAN_AD_TO_SIGMA = 1.2533
IQR_TO_SIGMA_DIV = 1.349  # the IQR of normal noise in standard deviations


def window_fraction(mask: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray]:
    """(fraction, count): the share of True among the last `window` points (current included)
    and how many points that window holds (fewer at the start of a run)."""
    m = np.asarray(mask, dtype=float)
    c = np.cumsum(m)
    prev = np.concatenate([np.zeros(min(window, c.size)), c[: max(c.size - window, 0)]])
    hits = c - prev
    n = np.minimum(np.arange(1, m.size + 1), window).astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = np.where(n > 0, hits / n, np.nan)
    return frac, n


def _prior_windows(v: np.ndarray, window: int) -> np.ndarray:
    padded = np.concatenate([np.full(window, np.nan), v[:-1]])
    return sliding_window_view(padded, window)


def _row_median(w: np.ndarray, counts: np.ndarray | None = None) -> np.ndarray:
    """`np.nanmedian(w, axis=1)` for rows holding at least one number, by one sort (NaN sorts
    last), without the masked-array path numpy takes for rows shorter than 600 (~10x slower
    on a run's small windows). The same values: numpy's short-row path is (low + high) / 2
    of the middle pair (low = high for an odd count, which overflows as numpy's does), its
    long-row path the middle value itself for an odd count. `counts`: each row's number of
    non-NaN values, when the caller has them."""
    ordered = np.sort(w, axis=1)
    if counts is None:
        counts = np.sum(~np.isnan(w), axis=1)
    rows = np.arange(ordered.shape[0])
    lo = ordered[rows, (counts - 1) // 2]
    hi = ordered[rows, counts // 2]
    with np.errstate(over="ignore", invalid="ignore"):
        mid = (0.0 + lo + hi) / 2  # numpy's sum of the pair starts at 0.0
    return mid if w.shape[1] < 600 else np.where(counts % 2 == 1, 0.0 + lo, mid)


def prior_median_mad(v: np.ndarray, window: int, min_periods: int) -> tuple[np.ndarray, np.ndarray]:
    """(median, sigma) of the previous `window` values, the current excluded; NaN during warm-up.

    sigma = 1.4826 x the median absolute deviation (the standard deviation for normal noise),
    or 1.2533 x the mean absolute deviation when the MAD is 0; 0 only for a constant window."""
    if v.size == 0:
        return v.copy(), v.copy()
    w = _prior_windows(np.asarray(v, dtype=float), window)
    counts = np.sum(~np.isnan(w), axis=1)
    ok = counts >= max(min_periods, 1)
    med = np.full(v.size, np.nan)
    mad = np.full(v.size, np.nan)
    if ok.any():
        every = bool(ok.all())
        rows = w if every else w[ok]
        with np.errstate(all="ignore"):
            m = _row_median(rows, counts if every else counts[ok])
            dev = np.abs(rows - m[:, None])
            gone = np.isnan(dev)
            n_dev = np.sum(~gone, axis=1, dtype=np.intp)
            d = MAD_TO_SIGMA * _row_median(dev, n_dev)
            # more than half the window on one value (a reward that is mostly 0): the MAD
            # is 0; the mean absolute deviation (x 1.2533 = sigma for normal noise) still
            # sees the spread of the rest (`np.nanmean(dev, axis=1)`, its arithmetic: the
            # row sum with NaN as 0, divided by the count)
            mean_ad = np.sum(np.where(gone, 0.0, dev), axis=1) / n_dev
            d = np.where(d > 0, d, MEAN_AD_TO_SIGMA * mean_ad)
        med[ok] = m
        mad[ok] = d
    return med, mad


def prior_iqr_sigma(v: np.ndarray, window: int, min_periods: int) -> np.ndarray:
    """The interquartile range of the previous `window` values / 1.349 (the standard deviation
    for normal noise), the current excluded; NaN during warm-up.

    For symmetric noise it equals the MAD's sigma. It differs for a skewed metric: a reward
    that is 0 on most logs and 0.4-0.8 on the rest has a MAD of its zeros (tiny) but an IQR
    that spans both, so a change in its level is not taken for a many-sigma fall.
    Quartiles: the order statistics at (n - 1) / 4 and 3 (n - 1) / 4, interpolated."""
    if v.size == 0:
        return v.copy()
    ordered = np.sort(_prior_windows(np.asarray(v, dtype=float), window), axis=1)
    counts = np.sum(~np.isnan(ordered), axis=1)
    rows = np.arange(ordered.shape[0])
    top = np.maximum(counts - 1, 0)

    def quantile(q: float) -> np.ndarray:
        pos = q * top
        lo = np.floor(pos).astype(np.intp)
        hi = np.minimum(lo + 1, top)
        a, b = ordered[rows, lo], ordered[rows, hi]
        with np.errstate(invalid="ignore"):
            return a + (b - a) * (pos - lo)

    with np.errstate(invalid="ignore"):
        sigma = (quantile(0.75) - quantile(0.25)) / IQR_TO_SIGMA_DIV
    return np.where(counts >= max(min_periods, 1), sigma, np.nan)


def median(x: np.ndarray) -> float:
    """`np.median` of a 1-D float array without its ~20 us of dispatch (it is called per log
    on a run's first logs): numpy's partition (the same indexes, so the same element where
    -0.0 and 0.0 tie) and its arithmetic (the middle value, or (low + high) / 2)."""
    n = x.size
    if n == 0:
        return float(np.median(x))
    h = n // 2
    part = np.partition(x, [h - 1, h, -1] if n % 2 == 0 else [h, -1])
    if np.isnan(part[-1]):
        return float("nan")
    if n % 2:  # numpy's mean of one value: 0.0 + x (so -0.0 is 0.0)
        return float(0.0 + part[h])
    with np.errstate(over="ignore"):
        return float((0.0 + part[h - 1] + part[h]) / 2)


def head_sigma(v: np.ndarray, n: int) -> np.ndarray:
    """At each position, the robust sigma of the first `n` values logged so far (the values up
    to that position, at most `n`): the noise of the run's first logs."""
    x = np.asarray(v, dtype=float)
    out = np.full(x.size, np.nan)
    for i in range(min(n, x.size)):
        head = x[: i + 1]
        head = head[~np.isnan(head)]
        if head.size < 2:
            continue
        dev = np.abs(head - median(head))
        d = MAD_TO_SIGMA * median(dev)
        out[i] = d if d > 0 else MEAN_AD_TO_SIGMA * float(np.mean(dev))
    if x.size > n and n > 0:
        out[n:] = out[n - 1]
    return out


def best_so_far(level: np.ndarray, higher_is_better: bool = True) -> np.ndarray:
    """The best finite `level` reached at or before each position (NaN before the first)."""
    x = np.asarray(level, dtype=float)
    fill = -np.inf if higher_is_better else np.inf
    y = np.where(np.isnan(x), fill, x)
    acc = np.maximum.accumulate(y) if higher_is_better else np.minimum.accumulate(y)
    return np.where(np.isinf(acc), np.nan, acc)


def k_of_n(masks: list[np.ndarray], k: int) -> tuple[np.ndarray, np.ndarray]:
    """(mask, count): at least `k` of the aligned masks hold at each position."""
    stacked = np.vstack([np.asarray(m, dtype=bool) for m in masks])
    count = stacked.sum(axis=0)
    return count >= k, count.astype(float)


def short_run_for(
    for_: int, position: np.ndarray | int, minimum: int = 3, resolution: int = 1
) -> np.ndarray | int:
    """How many logs in a row a rule's `for` needs at the log with 0-based index `position`.

    Minimum evidence for short runs, judged with what was logged so far (so a live follower
    and a batch diagnosis agree): in the first 2 x `for` logs of a run the hold needed is half
    the logs so far, but never less than `for` // 2 training steps (nor `minimum` logs, nor
    more than `for`). A run of 12 logs cannot show a condition held for 10 logs after a
    warm-up; held for 5 of them is still more evidence than one bad log. On a run that logs
    every `resolution` steps the floor counts steps: 5 logs of a run that logs every 10 steps
    (TRL's default) are 50 steps, so 3 of them held is no weaker than 5 single steps. From log
    2 x `for` on, `for` applies."""
    n = np.asarray(position) + 1
    floor = max(minimum, -(-(for_ // 2) // max(1, resolution)))
    need = np.where(n >= 2 * for_, for_, np.minimum(for_, np.maximum(floor, n // 2)))
    need = np.where(for_ <= minimum, for_, need)
    return int(need) if np.ndim(need) == 0 else need


def lookback(window: int = 0, min_periods: int = 0, first_steps: int = 0) -> int:
    """How many trailing logged points (plus the run's first `first_steps`) a kind needs."""
    return max(window, min_periods) + 1 + first_steps
