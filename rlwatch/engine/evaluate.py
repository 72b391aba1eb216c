"""Evaluate rules on runs: condition masks -> `for` / `keep_firing_for` -> episodes -> verdicts."""

from __future__ import annotations

import math
import string
import types
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from rlwatch.engine.conditions import Context, Signal, Skip, build_context, evaluate, held_in_logs
from rlwatch.engine.registry import walk
from rlwatch.engine.robust import short_run_for
from rlwatch.engine.rules import Rule, RuleSet, at_resolution
from rlwatch.severity import Severity


@dataclass
class Episode:
    first_step: int
    last_step: int
    peak_step: int
    observed: dict[str, float]
    summary: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "first_step": self.first_step,
            "last_step": self.last_step,
            "peak_step": self.peak_step,
            "summary": self.summary,
            "observed": {k: _num(v) for k, v in sorted(self.observed.items())},
        }


@dataclass
class Verdict:
    run: str
    code: str
    name: str
    severity: Severity
    state: str  # firing (at the last step) | resolved (fired earlier) | ok | skipped
    episodes: list[Episode] = field(default_factory=list)
    reason: str = ""  # why skipped
    metrics: dict[str, str] = field(default_factory=dict)  # canonical -> raw tag read
    checks: list[dict[str, Any]] = field(default_factory=list)
    context: dict[str, Any] = field(default_factory=dict)  # the metric around the first episode
    failing: bool = False  # fails the gate: set once by the Report (rlwatch/report.py)
    gate: str = "any"  # the rule's gate: "last" = only an episode still firing fails

    @property
    def fired(self) -> bool:
        return bool(self.episodes)

    @property
    def summary(self) -> str:
        if not self.episodes:
            return self.reason
        first = self.episodes[0]
        more = len(self.episodes) - 1
        return first.summary + (f" (+{more} more episode{'s' if more > 1 else ''})" if more else "")

    def to_dict(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "code": self.code,
            "name": self.name,
            "severity": str(self.severity),
            "state": self.state,
            "gate": self.gate,
            "summary": self.summary,
            "reason": self.reason,
            "metrics": self.metrics,
            "checks": self.checks,
            "episodes": [e.to_dict() for e in self.episodes],
            "context": self.context,
        }


def _num(v: float) -> float | str | None:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    if isinstance(v, float) and math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def context(frame: Any, run: str, metrics: list[str] | None = None) -> Context:
    """The evaluation context of one run of a RunFrame (only `metrics`, when given).

    This is the run's one pivot: the report's symptom table reads the same `ctx.wide`.
    """
    d = frame.run_data(run)
    fast = _pivot(frame, run, d, metrics) if metrics is not None else None
    if fast is not None:
        wide, nonfinite = fast
    else:
        if metrics is not None:
            d = d[d["metric"].isin(metrics)]
        wide = frame.wide(run, metrics) if metrics is None or len(d) else frame.wide(run, [])
        values = d["value"].to_numpy()
        bad = ~np.isfinite(values)
        nonfinite = {}
        if bad.any():
            sub = d[bad]
            for metric, steps in sub.groupby("metric", observed=True)["step"]:
                nonfinite[str(metric)] = steps.to_numpy()
    info = frame.runs[run]

    def wall() -> pd.Series:
        """step -> the latest wall time logged at it (steps without one left out)."""
        d = frame.run_data(run)
        t = d["wall_time"].to_numpy()
        ok = ~np.isnan(t)
        if not ok.any():
            return pd.Series(dtype=float)
        steps, row = np.unique(d["step"].to_numpy()[ok], return_inverse=True)
        latest = np.full(steps.size, -np.inf)
        np.maximum.at(latest, row, t[ok])
        return pd.Series(latest, index=pd.Index(steps, name="step"), name="wall_time")

    def now() -> tuple[float, str] | None:
        """When a stall is judged: see rlwatch/sources/activity.py (never a file's mtime alone)."""
        from rlwatch.sources.activity import judged_at

        w = frame.run_data(run)["wall_time"]
        latest = float(w.max()) if w.notna().any() else None
        return judged_at(getattr(info, "files", []) or [], latest)

    return build_context(
        wide,
        nonfinite,
        restarts=frame.segment_starts(run),
        decimals=getattr(info, "decimals", None),
        tags=info.metrics,
        wall=wall,
        now=now,
    )


def category_codes(column: pd.Series) -> tuple[list[Any], np.ndarray]:
    """(categories as a list, codes as a read-only numpy array) of a categorical column."""
    arr = column.array
    if not isinstance(arr, pd.Categorical):
        arr = column.cat  # not categorical: pandas' own error
    return arr.categories.tolist(), np.asarray(arr.codes)


def _pivot(
    frame: Any, run: str, d: pd.DataFrame, metrics: list[str]
) -> tuple[pd.DataFrame, dict[str, np.ndarray]] | None:
    """`frame.wide(run, metrics)` and the non-finite steps per metric, by numpy on the
    categorical codes (a run's frame is small: pandas' pivot costs more than the work).

    The same table as the pivot (columns in category order, steps ascending, scales applied);
    None where the pivot must decide (a missing metric name, two rows of one metric at one
    step: the pivot's own error is then raised by the caller)."""
    # the Categorical itself: `.cat.codes` builds an indexed Series of the codes (~0.1 ms)
    cats, codes = category_codes(d["metric"])
    if codes.size and codes.min() < 0:
        return None
    want = set(metrics)  # not Index.isin: ~1 ms on a short Arrow string index
    wanted = np.fromiter((c in want for c in cats), dtype=bool, count=len(cats))
    sel = wanted[codes] if codes.size else np.zeros(0, dtype=bool)
    codes = codes[sel]
    steps = d["step"].to_numpy()[sel]
    values = d["value"].to_numpy()[sel]
    if not codes.size:
        return pd.DataFrame(index=pd.Index([], dtype="int64", name="step")), {}
    used = np.flatnonzero(np.bincount(codes, minlength=len(cats)))  # category order
    col = np.searchsorted(used, codes)
    uniq, row = np.unique(steps, return_inverse=True)
    cell = row.astype(np.int64) * used.size + col
    if np.unique(cell).size != cell.size:
        return None
    matrix = np.full((uniq.size, used.size), np.nan)
    matrix[row, col] = values
    names = [str(cats[i]) for i in used.tolist()]
    for name, factor in frame.runs[run].scales.items():
        if name in names:
            j = names.index(name)
            matrix[:, j] = matrix[:, j] * factor
    wide = pd.DataFrame(
        matrix,
        index=pd.Index(uniq.astype(np.int64), name="step"),
        columns=pd.Index(names, name="metric"),
    )
    nonfinite: dict[str, np.ndarray] = {}
    bad = ~np.isfinite(values)
    if bad.any():
        for c in np.unique(codes[bad]):
            nonfinite[str(cats[c])] = steps[bad & (codes == c)]
    return wide, nonfinite


def evaluate_rule(
    ctx: Context, rule: Rule, run: str = "", *, detail: bool = True, explain: bool = True
) -> tuple[Verdict, tuple[np.ndarray, np.ndarray] | None, Signal | None]:
    """The verdict of one rule, the per-step firing mask (steps, firing) and its signal.

    `detail=False` (live following) keeps only the last episode and skips checks and context;
    `explain=False` (the many-run table) keeps every episode and skips checks and context.
    """
    base = Verdict(run, rule.code, rule.name, rule.severity, "ok", gate=rule.gate)
    asked = rule
    rule = at_resolution(rule, ctx.resolution())  # a run that logs every r steps
    try:
        sig = evaluate(ctx, rule.when)
    except Skip as exc:
        base.state, base.reason = "skipped", str(exc)
        _fire_without_values(ctx, rule, base)
        return base, None, None
    base.metrics = {m: ctx.tags.get(m, m) for m in dict.fromkeys(sig.metrics)}
    mask = sig.mask
    # `for` counts the run's logs a hold spans, whatever the cadence of the rule's metric;
    # minimum evidence on short runs: in a run's first 2 x `for` logs, half the logs so far
    # (at least 3, spanning `for` // 2 training steps) in a row is enough; the verdict says so
    held, position = held_in_logs(mask, sig.steps, ctx.run_logs())
    need = short_run_for(rule.for_, position, resolution=rule.resolution)
    need = np.broadcast_to(need, mask.shape)
    idx = np.arange(mask.size)
    active = held >= need
    last_active = np.maximum.accumulate(np.where(active, idx, -1))  # -1: never active yet
    firing = (last_active >= 0) & (idx - last_active <= rule.keep_firing_for)
    steps = sig.steps
    fire = (steps, firing)
    if firing.any():
        edges = np.flatnonzero(np.diff(np.concatenate([[0], firing.astype(np.int8), [0]])))
        spans = list(zip(edges[::2], edges[1::2] - 1, strict=True))
        for a, b in spans if detail else spans[-1:]:
            base.episodes.append(_episode(rule, sig, steps, int(a), int(b), held))
            short = int(need[int(a)])
            if short < rule.for_:
                note = f" [early in the run: held for {short} logs of the {rule.for_} asked]"
                base.episodes[-1].summary += note
            if rule.when is not asked.when:
                r = ctx.resolution()
                note = (
                    f" [logged every {r} steps, the median gap between its logs: counts of"
                    f" logs are {r}x fewer]"
                )
                base.episodes[-1].summary += note
        base.state = "firing" if firing[-1] else "resolved"
        note = ctx.memo.get("stalled:clock")  # how a stall's "now" was chosen (diagnose)
        if note and any(n.KIND == "stalled" for n in walk(rule.when)):
            base.episodes[-1].summary += f" [{note}]"
        if detail and explain:
            base.checks = _checks(ctx, rule, base.episodes[0])
            base.context = _context(ctx, sig.metrics[0], base.episodes[0])
    return base, fire, sig


def _fire_without_values(ctx: Context, rule: Rule, verdict: Verdict) -> None:
    """No value is not healthy: a metric the rule needs that was logged but has no finite
    value at all (NaN/inf at every step) makes the rule fire instead of being skipped -- a
    rule the run could be judged by, were those values numbers: one of its alternatives
    (`needs`) reads that metric and only metrics the run logged (a reward-model rule does not
    fire on a PPO run's NaN loss: the run logs no accuracy)."""
    from rlwatch.engine.conditions import metrics_of, needs
    from rlwatch.names import nan_when_off_metrics

    if not ctx.nonfinite:  # nothing was logged as NaN/inf: nothing to fire on
        return
    wanted = dict.fromkeys(metrics_of(rule.when))
    valued = {m for m in wanted if m in ctx.wide.columns and ctx.wide[m].notna().any()}
    off = nan_when_off_metrics()  # NaN at every log: not computed (`nan_when_off`)
    void = {m for m in wanted if len(ctx.nonfinite.get(m, ())) and m not in valued | off}
    if not void:
        return
    alts = [alt for alt in needs(rule.when) if alt & void and alt <= void | valued]
    for metric in wanted:
        if metric not in void or not any(metric in alt for alt in alts):
            continue
        steps = ctx.nonfinite[metric]
        first, last = int(steps.min()), int(steps.max())
        summary = (
            f"{metric} has no finite value at all: NaN/inf at all {len(steps)} logged step(s) "
            f"({first}-{last}); {verdict.reason}"
        )
        verdict.episodes.append(
            Episode(first, last, last, {"nonfinite_steps": float(len(steps))}, summary)
        )
        verdict.state, verdict.reason = "firing", ""
        verdict.metrics = {metric: ctx.tags.get(metric, metric)}
        return


def _context(
    ctx: Context, metric: str, ep: Episode, before: int = 30, after: int = 10, points: int = 40
) -> dict[str, Any]:
    """The metric's values around an episode (at most `points`), for a sparkline."""
    if metric not in ctx.wide.columns:
        return {}
    s = ctx.wide[metric].dropna()
    i0 = int(np.searchsorted(s.index.to_numpy(), ep.first_step))
    i1 = int(np.searchsorted(s.index.to_numpy(), ep.last_step, side="right"))
    part = s.iloc[max(0, i0 - before) : i1 + after]
    if len(part) > points:
        part = part.iloc[np.linspace(0, len(part) - 1, points).round().astype(int)]
    return {
        "metric": metric,
        "steps": [int(x) for x in part.index],
        "values": [_num(float(x)) for x in part.to_numpy()],
    }


def _episode(
    rule: Rule, sig: Signal, steps: np.ndarray, a: int, b: int, held: np.ndarray
) -> Episode:
    peak_values = np.asarray(sig.observed[sig.peak][a : b + 1], dtype=float)
    cond = sig.mask[a : b + 1]
    ranked = np.where(cond & ~np.isnan(peak_values), peak_values, np.nan)
    if np.isnan(ranked).all():
        k = int(np.argmax(cond)) if cond.any() else 0
    else:
        k = int(np.nanargmax(ranked) if sig.peak_max else np.nanargmin(ranked))
    at = a + k
    observed = {name: float(v[at]) for name, v in sig.observed.items()}
    summary = render_summary(
        rule.summary,
        observed,
        step=int(steps[at]),
        first_step=int(steps[a]),
        last_step=int(steps[b]),
        steps=int(b - a + 1),
    )
    observed["held"] = float(held[at])
    return Episode(int(steps[a]), int(steps[b]), int(steps[at]), observed, summary)


class _NotLogged:
    """A template field of a metric the run did not log (one branch of an `any`): "n/a"."""

    def __format__(self, spec: str) -> str:
        return "n/a"

    def __getattr__(self, name: str) -> _NotLogged:
        return self


class _SummaryFormatter(string.Formatter):
    def get_field(self, field_name: str, args: Any, kwargs: Any) -> Any:
        try:
            return super().get_field(field_name, args, kwargs)
        except (KeyError, AttributeError):
            return _NotLogged(), field_name


_SUMMARY = _SummaryFormatter()


def render_summary(template: str, observed: dict[str, float], **extra: int) -> str:
    """Fill a rule's summary template; dotted names (kl_ref.value) address cross-metric values."""
    flat: dict[str, Any] = {}
    nested: dict[str, dict[str, float]] = {}
    for key, value in observed.items():
        if "." in key:
            root, leaf = key.split(".", 1)
            nested.setdefault(root, {})[leaf] = value
        else:
            flat[key] = value
    ns = {k: types.SimpleNamespace(**v) for k, v in nested.items()}
    try:
        return _SUMMARY.vformat(template, (), {**extra, **flat, **ns})
    except (KeyError, AttributeError, ValueError, TypeError) as exc:
        return f"{template} [summary could not be filled: {exc}]"


def _checks(ctx: Context, rule: Rule, episode: Episode) -> list[dict[str, Any]]:
    """What to look at next, with this run's values around the first episode."""
    out = []
    for c in rule.checks:
        row: dict[str, Any] = {"metric": c.metric, "hint": c.hint}
        if c.metric in ctx.wide.columns:
            s = ctx.wide[c.metric].dropna()
            before = s[s.index < episode.first_step].tail(10)
            during = s[(s.index >= episode.first_step) & (s.index <= episode.last_step)]
            row.update(
                tag=ctx.tags.get(c.metric, c.metric),
                before=_num(float(before.median())) if len(before) else None,
                during=_num(float(during.median())) if len(during) else None,
            )
        else:
            row["tag"] = None
        out.append(row)
    return out


def logged_steps(ctx: Context, metrics: list[str]) -> np.ndarray:
    """The run's logs as the live evaluator counts them: the steps at which one of `metrics`
    (the rules' conditions and checks) was logged, a non-finite value included."""
    want = set(metrics)
    steps = ctx.wide.index.to_numpy(dtype=np.int64)
    cols = [j for j, c in enumerate(ctx.wide.columns) if str(c) in want]
    if len(cols) == len(ctx.wide.columns):
        return steps  # every row of the table is a step one of them was logged at
    logged = np.zeros(steps.size, dtype=bool)
    if cols:
        logged |= ~np.isnan(ctx.wide.to_numpy(dtype=np.float64)[:, cols]).all(axis=1)
    for m, bad in ctx.nonfinite.items():
        if m in want:
            logged |= np.isin(steps, bad.to_numpy())
    return steps[logged]


_NEEDED: dict[int, tuple[RuleSet, list[str]]] = {}


def _needed(rules: RuleSet) -> list[str]:
    """`needed_metrics(rules)`, once per rule set (a sweep asks for every run)."""
    hit = _NEEDED.get(id(rules))
    if hit is None or hit[0] is not rules:
        if len(_NEEDED) > 16:
            _NEEDED.clear()
        hit = _NEEDED[id(rules)] = (rules, needed_metrics(rules))
    return hit[1]


def needed_metrics(rules: RuleSet) -> list[str]:
    """The canonical metrics the rules read (conditions and checks)."""
    return sorted(
        {m for r in rules.rules for m in r.when.metrics()}
        | {c.metric for r in rules.rules for c in r.checks}
    )


MIN_LOGS = 3  # a run of fewer logs is judged by what fires in them, never called healthy


def too_few_logs(n: int) -> str:
    """Why a rule that found nothing on a run of fewer than MIN_LOGS logs is skipped."""
    return f"too few logs to call the run healthy ({n} logged, {MIN_LOGS} needed)"


def evaluate_run(
    ctx: Context, rules: RuleSet, run: str, framework: str | None, *, explain: bool = True
) -> list[Verdict]:
    """Every rule on one run's context (rules limited by applies_to are skipped); without
    `explain`, fired verdicts carry no checks and no context (see `evaluate_rule`). On a run
    of fewer than MIN_LOGS logs a rule that found nothing is skipped, not ok: one or two logs
    (a run just started, a stray line read from a document) are no evidence of health."""
    if ctx.grid is None:
        ctx.grid = logged_steps(ctx, _needed(rules))
    verdicts = _evaluate_rules(ctx, rules, run, framework, explain)
    if 0 < len(ctx.grid) < MIN_LOGS:  # (no log at all: only clock rules were judged)
        for v in verdicts:
            if v.state == "ok":
                v.state, v.reason = "skipped", too_few_logs(len(ctx.grid))
    return verdicts


def _evaluate_rules(
    ctx: Context, rules: RuleSet, run: str, framework: str | None, explain: bool
) -> list[Verdict]:
    verdicts = []
    for rule in rules.rules:
        if rule.frameworks and framework not in rule.frameworks:
            verdicts.append(
                Verdict(
                    run,
                    rule.code,
                    rule.name,
                    rule.severity,
                    "skipped",
                    reason=f"applies to {', '.join(rule.frameworks)} only",
                )
            )
            continue
        verdicts.append(evaluate_rule(ctx, rule, run, explain=explain)[0])
    return verdicts


def evaluate_frame(frame: Any, rules: RuleSet) -> list[Verdict]:
    """Every rule on every run of a RunFrame (rules limited by applies_to are skipped)."""
    needed = needed_metrics(rules)
    verdicts = []
    for run, info in frame.runs.items():
        verdicts += evaluate_run(context(frame, run, needed), rules, run, info.framework)
    return verdicts
