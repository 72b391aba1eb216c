"""`rlwatch diff BASELINE CANDIDATE`: is a change worse than a known-good run?

The two runs are aligned by step, or by fraction of training when their lengths differ (more
than 10% by default). Each key metric's trajectory is compared bin by bin (bin medians over the
overlap) with a tolerance taken from the baseline's own noise: `k` x the robust spread (1.4826 x
the median absolute deviation) of the baseline's residuals around its rolling median, never less
than 1% of its typical level nor `min_change` (25%) of the baseline's value in the bin (runs of
one recipe with another seed differ by more than their step-to-step noise). A metric is *worse*
from the first bin of the first run of at least `min_bins` consecutive bins beyond tolerance in
its bad direction; *better* likewise the other way; metrics without a direction (length, loss)
are *changed*, not worse; a metric the candidate logs as NaN/inf where the baseline never did is
worse from the first such step. Verdicts fired in the candidate but not in the baseline are
*new*. The result is plain data; renderers live in rlwatch/render/diff.py.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlwatch.series import KEY_METRICS, curve
from rlwatch.severity import Severity

SCHEMA_VERSION = 1
# +1: higher is better, -1: lower is better, 0: no better or worse (a change is reported; only
# non-finite values make it worse)
DIRECTION: dict[str, int] = {
    "reward_mean": +1,
    "entropy": +1,
    "kl_ref": -1,
    "kl_ppo": -1,
    "grad_norm": -1,
    "clip_frac": -1,
    "response_length_mean": 0,
    "loss": 0,
    "truncation_rate": -1,
    "step_time": -1,
}


@dataclass(frozen=True)
class Options:
    align: str = "auto"  # auto | step | fraction
    tolerance: float = 3.0  # k: robust spreads of the baseline's noise
    min_change: float = 0.25  # and at least this fraction of the baseline's value (seed spread)
    min_bins: int = 3  # consecutive bins beyond tolerance that make a trend
    bins: int = 60  # at most this many bins over the overlap
    metric_severity: str = "error"  # the severity of a worse metric
    fail_on: str = "error"


def _finite(frame: Any, run: str, metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(steps, values) of the finite values, and the steps of non-finite ones, step order."""
    d = frame.run_data(run)
    rows = d[d["metric"] == metric]
    steps = rows["step"].to_numpy()
    values = rows["value"].to_numpy() * frame.runs[run].scales.get(metric, 1.0)
    order = np.argsort(steps, kind="stable")
    steps, values = steps[order], values[order]
    ok = np.isfinite(values)
    return steps[ok], values[ok], steps[~ok]


def noise(values: np.ndarray, window: int = 9) -> float:
    """Robust per-step spread of a curve around its own rolling median (trend removed)."""
    if values.size < 3:
        return 0.0
    w = min(window, values.size)
    pad = w // 2
    padded = np.concatenate([np.full(pad, values[0]), values, np.full(w - 1 - pad, values[-1])])
    windows = np.lib.stride_tricks.sliding_window_view(padded, w)
    resid = values - np.median(windows, axis=1)
    return float(1.4826 * np.median(np.abs(resid - np.median(resid))))


def _runs_of(flags: np.ndarray, n: int) -> int | None:
    """Index of the first run of at least `n` consecutive True, else None."""
    count = 0
    for i, f in enumerate(flags):
        count = count + 1 if f else 0
        if count >= n:
            return i - n + 1
    return None


def compare_metric(
    metric: str,
    base: tuple[np.ndarray, np.ndarray, np.ndarray],
    cand: tuple[np.ndarray, np.ndarray, np.ndarray],
    align: str,
    opts: Options,
) -> dict[str, Any] | None:
    """Worse / better / same for one metric, with the step (candidate's) where it starts."""
    bs, bv, bbad = base
    cs, cv, cbad = cand
    if bs.size < 3 or cs.size < 3:
        return None
    direction = DIRECTION.get(metric, 0)
    if align == "step":
        xb, xc = bs.astype(float), cs.astype(float)
        lo, hi = float(max(bs[0], cs[0])), float(min(bs[-1], cs[-1]))
    else:
        xb = (bs - bs[0]) / max(bs[-1] - bs[0], 1)
        xc = (cs - cs[0]) / max(cs[-1] - cs[0], 1)
        lo, hi = 0.0, 1.0
    if hi <= lo:
        return None
    nb = (xb >= lo) & (xb <= hi)
    nc = (xc >= lo) & (xc <= hi)
    n_bins = int(max(1, min(opts.bins, min(nb.sum(), nc.sum()) // 3)))
    edges = np.linspace(lo, hi, n_bins + 1)
    ib = np.clip(np.searchsorted(edges, xb[nb], side="right") - 1, 0, n_bins - 1)
    ic = np.clip(np.searchsorted(edges, xc[nc], side="right") - 1, 0, n_bins - 1)
    mb = _bin_medians(bv[nb], ib, n_bins)
    mc = _bin_medians(cv[nc], ic, n_bins)
    spread = noise(bv)
    level = float(np.median(np.abs(bv)))
    tols = np.maximum(
        max(opts.tolerance * spread, 0.01 * level, 1e-12), opts.min_change * np.abs(mb)
    )
    tols = np.where(np.isnan(tols), np.inf, tols)
    delta = mc - mb
    both = ~np.isnan(delta)
    if direction > 0:
        worse, better = both & (delta < -tols), both & (delta > tols)
    elif direction < 0:
        worse, better = both & (delta > tols), both & (delta < -tols)
    else:  # no better or worse: a change (length, loss) is reported, not a regression
        worse, better = both & (np.abs(delta) > tols), np.zeros(n_bins, bool)
    tol = float(opts.tolerance * spread)
    out: dict[str, Any] = {
        "metric": metric,
        "direction": {1: "higher is better", -1: "lower is better", 0: "no better or worse"}[
            direction
        ],
        "tolerance": tol,  # replaced by the tolerance at the reported bin below
        "noise": spread,
        "bins": n_bins,
        "bins_worse": int(worse.sum()),
        "bins_better": int(better.sum()),
    }
    step_of_bin = _step_of_bin(edges, xc, cs)
    base_step_of_bin = _step_of_bin(edges, xb, bs)
    first_worse = _runs_of(worse, min(opts.min_bins, n_bins))
    new_bad = cbad[(cbad >= cs[0])] if bbad.size == 0 and cbad.size else np.empty(0, np.int64)
    if first_worse is not None or new_bad.size:
        k = first_worse if first_worse is not None else n_bins - 1
        at = step_of_bin[k]
        if new_bad.size and (first_worse is None or int(new_bad[0]) < at):
            out.update(state="worse", from_step=int(new_bad[0]), why="non-finite values")
        else:
            state = "worse" if direction else "changed"
            out.update(state=state, from_step=at, why="beyond tolerance")
        out.update(_values_at(mb, mc, k, base_step_of_bin), tolerance=float(tols[k]))
        return out
    first_better = _runs_of(better, min(opts.min_bins, n_bins))
    if first_better is not None:
        out.update(state="better", from_step=step_of_bin[first_better])
        out.update(_values_at(mb, mc, first_better, base_step_of_bin))
        out.update(tolerance=float(tols[first_better]))
        return out
    out.update(state="same")
    return out


def _bin_medians(values: np.ndarray, idx: np.ndarray, n: int) -> np.ndarray:
    out = np.full(n, np.nan)
    order = np.argsort(idx, kind="stable")
    idx, values = idx[order], values[order]
    bounds = np.searchsorted(idx, np.arange(n + 1))
    for i in range(n):
        a, b = bounds[i], bounds[i + 1]
        if b > a:
            out[i] = float(np.median(values[a:b]))
    return out


def _step_of_bin(edges: np.ndarray, x: np.ndarray, steps: np.ndarray) -> list[int]:
    """The first logged step in each bin (or the nearest after its start)."""
    pos = np.clip(np.searchsorted(x, edges[:-1], side="left"), 0, steps.size - 1)
    return [int(steps[p]) for p in pos]


def _values_at(mb: np.ndarray, mc: np.ndarray, k: int, base_steps: list[int]) -> dict[str, Any]:
    def num(x: float) -> float | None:
        return None if np.isnan(x) else float(x)

    return {
        "baseline_value": num(mb[k]),
        "candidate_value": num(mc[k]),
        "baseline_step": base_steps[k],
    }


def choose_alignment(base_steps: tuple[int, int], cand_steps: tuple[int, int], align: str) -> str:
    if align in ("step", "fraction"):
        return align
    (b0, b1), (c0, c1) = base_steps, cand_steps
    span = max(b1 - b0, c1 - c0, 1)
    same = abs((b1 - b0) - (c1 - c0)) <= 0.1 * span and abs(b0 - c0) <= 0.1 * span
    return "step" if same else "fraction"


def compare(
    base_frame: Any,
    base_report: Any,
    cand_frame: Any,
    cand_report: Any,
    opts: Options = Options(),
    metrics: tuple[str, ...] = KEY_METRICS,
) -> dict[str, Any]:
    """The diff of two single-run frames and their Reports, as plain data."""
    (brun,) = list(base_frame.runs)
    (crun,) = list(cand_frame.runs)
    _, b0, b1 = base_frame.steps(brun)
    _, c0, c1 = cand_frame.steps(crun)
    align = choose_alignment((b0, b1), (c0, c1), opts.align)
    base_fired = {v.code for v in base_report.verdicts if v.fired}
    new = [
        v.to_dict()
        for v in sorted(cand_report.verdicts, key=lambda v: (-int(v.severity), v.code))
        if v.fired and v.code not in base_fired
    ]
    cand_fired = {v.code for v in cand_report.verdicts if v.fired}
    gone = sorted(base_fired - cand_fired)
    compared, overlays = [], {}
    names = [m for m in metrics if m in base_frame.runs[brun].metrics or _has(base_frame, brun, m)]
    for m in names:
        if not _has(cand_frame, crun, m):
            continue
        b, c = _finite(base_frame, brun, m), _finite(cand_frame, crun, m)
        res = compare_metric(m, b, c, align, opts)
        if res is None:
            continue
        if res["state"] == "worse":
            res["severity"] = opts.metric_severity
        compared.append(res)
        # the baseline drawn on the candidate's step axis
        bsteps = b[0].astype(float)
        bbad = b[2].astype(float)
        if align == "fraction" and b[0].size > 1:
            scale = (c1 - c0) / max(b1 - b0, 1)
            bsteps = c0 + (bsteps - b0) * scale
            bbad = c0 + (bbad - b0) * scale
        overlays[m] = {
            "baseline": curve(np.round(bsteps).astype(np.int64), b[1]),
            "candidate": curve(
                np.concatenate([c[0], c[2]]), np.concatenate([c[1], np.full(c[2].size, np.nan)])
            ),
        }
        overlays[m]["baseline"]["nonfinite"] = [round(float(x)) for x in bbad[:200]]
    fail = Severity.parse(opts.fail_on)
    regressions = [v for v in new if Severity.parse(v["severity"]) >= fail] + [
        r for r in compared if r["state"] == "worse" and Severity.parse(r["severity"]) >= fail
    ]
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "diff",
        "status": "regressed" if regressions else "ok",
        "fail_on": opts.fail_on,
        "metric_severity": opts.metric_severity,
        "align": align,
        "tolerance_k": opts.tolerance,
        "baseline": _run_facts(base_report, brun),
        "candidate": _run_facts(cand_report, crun),
        "new_verdicts": new,
        "gone_verdicts": gone,
        "worse": [r for r in compared if r["state"] == "worse"],
        "better": [r for r in compared if r["state"] == "better"],
        "changed": [r for r in compared if r["state"] == "changed"],
        "same": [r["metric"] for r in compared if r["state"] == "same"],
        "regressions": len(regressions),
        "overlays": overlays,
    }


def _has(frame: Any, run: str, metric: str) -> bool:
    return metric in frame.runs[run].metrics or metric in set(
        frame.run_data(run)["metric"].cat.categories
    )


def _run_facts(report: Any, run: str) -> dict[str, Any]:
    r = next(x for x in report.runs if x["name"] == run)
    return {
        "name": r["name"],
        "address": r.get("address", ""),
        "framework": r.get("framework"),
        "steps": r["steps"],
    }


def _one_run(frame: Any, target: str) -> Any:
    from rlwatch.errors import SourceError, UsageError

    if frame.data.empty:
        raise SourceError(f"no scalars found in {target}: nothing to compare")
    if len(frame.runs) != 1:
        raise UsageError(
            f"{target} holds {len(frame.runs)} runs ({', '.join(list(frame.runs)[:5])}); "
            "diff compares one run with one run: point at the run itself"
        )
    return frame


def _one_folder(target: str, addresses: list[str]) -> None:
    """A folder holding several runs is refused from its walk (discovery reads only each
    file's head), not after every run in it is loaded."""
    from rlwatch.errors import UsageError

    if len(addresses) > 1:
        names = [os.path.relpath(a, target) if os.path.isdir(target) else a for a in addresses]
        raise UsageError(
            f"{target} holds {len(addresses)} runs ({', '.join(names[:5])}); "
            "diff compares one run with one run: point at the run itself"
        )


def run_diff(
    baseline: str,
    candidate: str,
    *,
    rules: list[str] | None = None,
    select: list[str] | None = None,
    ignore: list[str] | None = None,
    log_format: str | None = None,
    tracking_uri: str | None = None,
    opts: Options = Options(),
) -> tuple[dict[str, Any], Any]:
    """Read both runs, evaluate the rules on each, compare. Returns (diff, candidate Report)."""
    from rlwatch.engine.rules import load_rules
    from rlwatch.engine.select import select as choose
    from rlwatch.errors import UsageError
    from rlwatch.report import build
    from rlwatch.sources import load

    for s in (opts.fail_on, opts.metric_severity):
        Severity.parse(s)
    if opts.align not in ("auto", "step", "fraction"):
        raise UsageError(f"--align {opts.align!r}: use auto, step or fraction")
    ruleset = choose(load_rules(rules), select, ignore)
    # a folder of several runs is said before anything is read
    bframe = _one_run(
        load([baseline], log_format=log_format, tracking_uri=tracking_uri, before_read=_one_folder),
        baseline,
    )
    cframe = _one_run(
        load(
            [candidate], log_format=log_format, tracking_uri=tracking_uri, before_read=_one_folder
        ),
        candidate,
    )
    breport = build(bframe, ruleset, fail_on=opts.fail_on)
    creport = build(cframe, ruleset, fail_on=opts.fail_on, series=True)
    return compare(bframe, breport, cframe, creport, opts), creport
