"""The incremental evaluator: rows in, episodes out, every step evaluated once it is complete.

`Evaluator.update(rows)` takes the rows appended to one run since the last call, keeps per
metric only what its rules look back on (each kind's look-back, plus `for`/`keep_firing_for`),
and re-evaluates the rules that read a metric with new rows over a window that starts far
enough back that every new step is judged exactly as a whole-run evaluation judges it. The
previous last step is judged again (its rows may have arrived in two polls), and so is
everything after a restart or an out-of-order write. Episodes are kept whole: an ongoing
episode keeps its first step however long it lasts, and one that starts and ends between two
calls is still reported with both steps.

`diagnose` (one call with the whole run), `tail` (one call per poll) and the transformers
callback (one call per `on_log`) share this path; `tests/test_tail_parity.py` checks that tail
and diagnose agree on every fixture and corpus run.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from rlwatch.engine.conditions import (
    Context,
    Signal,
    Skip,
    build_context,
    evaluate,
    held_in_logs,
    logging_interval,
    metrics_of,
)
from rlwatch.engine.evaluate import (
    MIN_LOGS,
    Episode,
    Verdict,
    _checks,
    _episode,
    _fire_without_values,
    render_summary,
    too_few_logs,
)
from rlwatch.engine.registry import Node, walk
from rlwatch.engine.robust import short_run_for
from rlwatch.engine.rules import Rule, RuleSet, at_resolution
from rlwatch.frame import RunInfo

MARGIN = 8  # extra logged values kept beyond the computed look-back
KEEP_WHOLE = 2048  # logs of a run before its rules' columns are trimmed to their look-back
WHOLE_SHARE = 9.0  # whole-history rules wait this many times their last cost between turns


def lookback(node: Node) -> int | None:
    """Logged values before the current one that a condition reads (None: the whole history),
    as each kind declares it in the registry."""
    return node.lookback()


def rule_lookback(rule: Rule) -> int | None:
    """A rule's look-back: its condition's, plus `for` and `keep_firing_for` (signal steps)."""
    lb = rule.when.lookback()
    return None if lb is None else lb + 1 + rule.for_ + rule.keep_firing_for + 2


def _head_of(node: Node) -> dict[str, int]:
    """metric -> first logged values a condition keeps for the run's early level."""
    out: dict[str, int] = {}
    for n in walk(node):
        if n.KIND == "within":  # the run's first step of its metrics
            for m in n.metrics():
                out[m] = max(out.get(m, 0), 1)
        if n.KIND == "unless_logged":  # the run's first step of the better judge
            out[n.metric] = max(out.get(n.metric, 0), 1)
        if not any(True for _ in n.children()) and n.head() > 0:
            for m in n.metrics():
                out[m] = max(out.get(m, 0), n.head())
    return out


def _uses_wall(node: Node) -> bool:
    return any(n.KIND == "stall" for n in walk(node))


def _uses_clock(node: Node) -> bool:
    """Judged at a time, not at a step (`stalled`): see `Evaluator.at`."""
    return any(n.KIND == "stalled" for n in walk(node))


def _codes(col: pd.Series) -> tuple[np.ndarray, list[str]]:
    """Integer codes and their names for a column (categorical, or any values)."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        return col.cat.codes.to_numpy(), [str(c) for c in col.cat.categories]
    names, codes = np.unique(col.astype(str).to_numpy(), return_inverse=True)
    return codes, [str(n) for n in names]


def _release(ctx: Context) -> None:
    """Free a context now: a skipped condition's exception, kept in the memo, holds the frames
    that hold the context (a cycle only the garbage collector would break, some time later:
    meanwhile a whole-history window of the run stays resident)."""
    ctx.memo.clear()


@dataclass
class Change:
    """A rule started or stopped firing during an update."""

    kind: str  # fired | resolved
    code: str
    verdict: Verdict
    episode: Episode


@dataclass
class _Col:
    """One metric's kept values in step order (NaN/inf kept: they are evidence)."""

    steps: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    values: np.ndarray = field(default_factory=lambda: np.empty(0))
    dropped: bool = False  # older values were let go
    n_dropped: int = 0  # how many finite values were let go (a run's length for short-run rules)

    def merge(self, steps: np.ndarray, values: np.ndarray) -> None:
        if self.steps.size and steps.size and steps[0] <= self.steps[-1]:
            s = np.concatenate([self.steps, steps])
            v = np.concatenate([self.values, values])
            order = np.argsort(s, kind="stable")
            s, v = s[order], v[order]
            last = np.concatenate([s[1:] != s[:-1], [True]])  # the last write of a step wins
            self.steps, self.values = s[last], v[last]
        else:
            self.steps = np.concatenate([self.steps, steps]) if self.steps.size else steps
            self.values = np.concatenate([self.values, values]) if self.values.size else values

    def start(self, end: int, keep: int | None) -> int:
        """The index from which values[:end] holds its last `keep` finite values (conditions
        count logged finite values; NaN/inf between them are kept as evidence)."""
        if keep is None or end <= keep:
            return 0
        finite = np.flatnonzero(np.isfinite(self.values[:end]))
        return int(finite[-keep]) if finite.size >= keep else 0

    def trim(self, keep: int | None) -> None:
        lo = self.start(self.steps.size, keep)
        if lo > 0:
            self.n_dropped += int(np.count_nonzero(np.isfinite(self.values[:lo])))
            self.steps, self.values = self.steps[lo:].copy(), self.values[lo:].copy()
            self.dropped = True


@dataclass
class _Ep:
    first: int
    last: int
    n: int  # signal steps in the episode
    peak: int
    rank: float  # the peak key's value at the peak (NaN: unranked)
    observed: dict[str, float]


@dataclass
class _RuleState:
    episodes: list[_Ep] = field(default_factory=list)
    firing: bool = False
    skipped: str = ""
    metrics: dict[str, str] = field(default_factory=dict)
    evaluated: bool = False
    judged: int | None = None  # the last signal step judged
    n_run: int = 0  # signal steps of the run when last judged
    # a metric the rule needs logged with no finite value at all: the rule fires, as in
    # diagnose (no value is not healthy); (episode, metrics), None once it has a value
    void: tuple[Episode, dict[str, str]] | None = None
    void_told = False  # its "fired" was reported (once NaN/inf on MIN_LOGS logs)


class Evaluator:
    """The rules of one run, evaluated as its rows arrive."""

    def __init__(self, rules: RuleSet, *, run: str = "", info: RunInfo | None = None):
        self.rules = list(rules.rules)
        self.run = run
        self.info = info
        self.evaluations = 0  # rule evaluations so far (an idle update adds none)
        self.reads: dict[str, list[Rule]] = {}
        self.keep: dict[str, int | None] = {}
        self.bounded: dict[str, int] = {}
        self.head_n: dict[str, int] = {}
        self.wall_rules: list[Rule] = []
        self.clock_rules: list[Rule] = []  # judged at a time (Evaluator.at), not at a step
        self.clock_keep = 4  # wall times kept when no rule reads the whole wall history
        self.clock_floor = float("inf")  # no clock rule fires before this many idle seconds
        for rule in self.rules:
            lb = rule_lookback(rule)
            for m in dict.fromkeys(metrics_of(rule.when)):
                self.reads.setdefault(m, []).append(rule)
                old = self.keep.get(m, 0)
                self.keep[m] = None if lb is None or old is None else max(old, lb + MARGIN)
                if lb is not None:  # what the bounded rules alone need of it
                    self.bounded[m] = max(self.bounded.get(m, 0), lb + MARGIN)
            for m, n in _head_of(rule.when).items():
                self.head_n[m] = max(self.head_n.get(m, 0), n)
            if _uses_clock(rule.when):
                self.clock_rules.append(rule)
                for n in walk(rule.when):
                    if n.KIND == "stalled":
                        self.clock_keep = max(self.clock_keep, int(n.window) + 2)
                        self.clock_floor = min(self.clock_floor, float(n.floor))
            elif _uses_wall(rule.when):
                self.wall_rules.append(rule)
        self.checked = {c.metric for r in self.rules for c in r.checks}
        self.needed = set(self.reads) | self.checked
        self.cols: dict[str, _Col] = {}
        self.heads: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # metric -> first finite values
        self.check_cols: dict[str, _Col] = {}  # metrics only checks read: recent values
        self.wall = _Col()
        # the run's logs (steps at which a metric the rules read was logged): `for` counts them
        self._grid = np.empty(64, np.int64)
        self._grid_n = 0
        self.tag_last: dict[str, int] = {}
        self.restarts: list[int] = []
        self.last_step: int | None = None
        self.state = {r.code: _RuleState() for r in self.rules}
        self.by_code = {r.code: r for r in self.rules}
        self.whole = {r.code for r in self.rules if rule_lookback(r) is None}
        self.pending: dict[str, int] = {}  # whole-history rule -> the first step to judge
        self.interval: int | None = None  # the run's logging interval when last judged
        self.rescaled = False  # it moved since: judge every rule again from the run's start
        self.due = 0.0

    # -- input ---------------------------------------------------------------------------
    def log(self, step: int, scalars: dict[str, float], wall_time: float | None = None) -> list:
        """One logging call of a training loop (raw keys, resolved to canonical names)."""
        from rlwatch import names

        res = names.resolve(list(scalars))
        if self.info is None:
            self.info = RunInfo(self.run or "run", "callback", "callback")
        self.info.metrics.update(res.canonical)
        self.info.scales.update(res.scales)
        if res.framework and not self.info.framework:
            self.info.framework, self.info.framework_version = res.framework, res.version
        rows = pd.DataFrame(
            {
                "step": np.full(len(scalars), int(step), np.int64),
                "metric": [res.metric_of.get(k, k) for k in scalars],
                "tag": list(scalars),
                "value": np.asarray([float(v) for v in scalars.values()], dtype=float),
                "wall_time": np.full(len(scalars), np.nan if wall_time is None else wall_time),
            }
        )
        return self.update(rows)

    def update(self, rows: pd.DataFrame, info: RunInfo | None = None) -> list[Change]:
        """Absorb the rows appended since the last call; the rules' state changes."""
        if info is not None:
            self.info = info
        if rows is None or not len(rows):
            return []
        step = rows["step"].to_numpy(dtype=np.int64)
        cutoff = int(step.min())
        if self.last_step is not None:
            cutoff = min(cutoff, self.last_step)
        self._restarts(rows, step)
        if "wall_time" in rows:
            w = rows["wall_time"].to_numpy(dtype=float)
            ok = ~np.isnan(w)
            if ok.any():
                ws = pd.Series(w[ok]).groupby(step[ok]).max()
                self.wall.merge(ws.index.to_numpy(np.int64), ws.to_numpy(float))
        mcodes, mnames = _codes(rows["metric"])
        wanted = [i for i, m in enumerate(mnames) if m in self.needed]
        sel = np.isin(mcodes, wanted) if wanted else np.zeros(len(rows), bool)
        touched: set[str] = set()
        if sel.any():
            scales = self.info.scales if self.info is not None else {}
            c, st, v = mcodes[sel], step[sel], rows["value"].to_numpy(dtype=float)[sel]
            self._add_logs(st)
            order = np.lexsort((st, c))  # by metric, then step; write order kept within a step
            c, st, v = c[order], st[order], v[order]
            # the last write of a (metric, step) wins
            last = np.concatenate([(c[1:] != c[:-1]) | (st[1:] != st[:-1]), [True]])
            c, st, v = c[last], st[last], v[last]
            bounds = np.flatnonzero(np.concatenate([[True], c[1:] != c[:-1], [True]]))
            for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
                m = mnames[int(c[a])]
                s_, v_ = st[a:b], v[a:b] * scales.get(m, 1.0)
                col = (self.cols if m in self.reads else self.check_cols).setdefault(m, _Col())
                col.merge(s_, v_)
                if m in self.head_n:
                    self._grow_head(m, s_, v_)
                touched.add(m)
        self.last_step = max(int(step.max()), self.last_step or int(step.max()))
        rules = [r for r in self.rules if any(m in touched for m in metrics_of(r.when))]
        # the run's logging interval (the median gap between its logs) scales the rules' counts
        # of logs: when a new log moves it (a W&B history sampled at irregular steps), every
        # rule is judged again from the run's start while its columns are whole (the first
        # KEEP_WHOLE logs; past them the median of so many gaps has settled), as diagnose
        # judges the whole run at its final interval
        if self._grid_n <= KEEP_WHOLE:
            interval = logging_interval(self.run_logs())
            if self.interval is not None and interval != self.interval:
                self.rescaled = True
                rules += [r for r in self.rules if r not in rules]
            self.interval = interval
        if self.wall_rules and "wall_time" in rows:
            rules += [r for r in self.wall_rules if r not in rules]
        # whole-history rules (a running best, an expanding median) cost what the run costs:
        # they are judged when due (at most ~10% of the time), from their own last judged
        # step, so no step is skipped -- only judged a little later
        for r in rules:
            if r.code in self.whole:
                self.pending.setdefault(r.code, cutoff)
                self.pending[r.code] = min(self.pending[r.code], cutoff)
        rules = [r for r in rules if r.code not in self.whole]
        changes = self._evaluate(rules, cutoff) if rules else []
        changes += self.tick()
        self._trim()
        return changes

    def _add_logs(self, steps: np.ndarray) -> None:
        """Merge steps into the run's logs: appended in place when they come after the last
        (a followed run), a sorted union otherwise (a restart re-logs lower steps)."""
        new = np.unique(steps)
        n = self._grid_n
        if n and new.size and new[0] <= self._grid[n - 1]:
            merged = np.union1d(self._grid[:n], new)
            self._grid = np.empty(max(64, 2 * merged.size), np.int64)
            self._grid[: merged.size] = merged
            self._grid_n = merged.size
            return
        if n + new.size > self._grid.size:
            grown = np.empty(max(2 * self._grid.size, n + new.size), np.int64)
            grown[:n] = self._grid[:n]
            self._grid = grown
        self._grid[n : n + new.size] = new
        self._grid_n = n + new.size

    def run_logs(self) -> np.ndarray:
        """The steps of the run's logs so far, ascending (a view: valid until the next update)."""
        return self._grid[: self._grid_n]

    def _grow_head(self, m: str, s: np.ndarray, v: np.ndarray) -> None:
        n = self.head_n[m]
        hs, hv = self.heads.get(m, (np.empty(0, np.int64), np.empty(0)))
        if hs.size >= n and (not s.size or s[0] > hs[-1]):
            return
        ok = np.isfinite(v)
        hs, hv = np.concatenate([hs, s[ok]]), np.concatenate([hv, v[ok]])
        order = np.argsort(hs, kind="stable")
        hs, hv = hs[order], hv[order]
        last = np.concatenate([hs[1:] != hs[:-1], [True]]) if hs.size else hs.astype(bool)
        # copies: a slice would keep the whole concatenation alive
        self.heads[m] = (hs[last][: n + 1].copy(), hv[last][: n + 1].copy())

    def _restarts(self, rows: pd.DataFrame, step: np.ndarray) -> None:
        """A tag written at a lower step than its last write starts a new segment."""
        key = "tag" if "tag" in rows else "metric"
        codes, names = _codes(rows[key])
        order = np.argsort(codes, kind="stable")
        c = codes[order]
        starts = np.flatnonzero(np.concatenate([[True], c[1:] != c[:-1]]))
        ends = np.concatenate([starts[1:], [c.size]]) - 1
        back = []
        for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
            t = names[int(c[a])]
            prev = self.tag_last.get(t)
            first = int(step[order[a]])
            if prev is not None and first < prev:
                back.append(first)
            self.tag_last[t] = int(step[order[b]])
        if self.info is not None:
            back += [r.step for r in self.info.restarts]
        for b in back:
            if b not in self.restarts:
                self.restarts.append(b)
        self.restarts.sort()

    def _trim(self) -> None:
        # the rules' columns are kept whole for a run's first KEEP_WHOLE logs: its logging
        # interval settles then, and a move of it is judged again from the run's start
        for m, col in self.cols.items() if self._grid_n >= KEEP_WHOLE else ():
            col.trim(self.keep.get(m))
        # metrics logged at the same steps share one steps array (arrays are never changed in
        # place: merge and trim make new ones): a run's whole history is kept once, not per metric
        shared: dict[tuple[int, int, int], np.ndarray] = {}
        for col in self.cols.values():
            st = col.steps
            if st.size < 256:
                continue
            k = (st.size, int(st[0]), int(st[-1]))
            other = shared.setdefault(k, st)
            if other is not st and np.array_equal(other, st):
                col.steps = other
        for col in self.check_cols.values():
            col.trim(64)
        if not self.wall_rules:
            self.wall.trim(self.clock_keep)

    # -- evaluation ----------------------------------------------------------------------
    def _context(self, cutoff: int, whole: bool = False, only: set[str] | None = None) -> Context:
        """Every kept metric (or `only` these) from `keep` values before the cutoff to the end."""
        parts: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        cut = False
        for m, col in {**self.check_cols, **self.cols}.items():
            if only is not None and m not in only:
                continue
            i = int(np.searchsorted(col.steps, cutoff, side="left"))
            if m not in self.cols:
                lo = 0
            elif whole:  # whole-history rules: every kept value
                lo = col.start(i, self.keep.get(m))
            else:  # bounded rules: only what they look back on, even of a fully kept metric
                lo = col.start(i, self.bounded.get(m, MARGIN))
            parts[m] = (col.steps[lo:], col.values[lo:])
            if lo > 0 and m in self.head_n:
                cut = True  # the window starts after the run's first values
        union = (
            np.unique(np.concatenate([s for s, _ in parts.values()]))
            if parts
            else np.empty(0, np.int64)
        )
        matrix = np.full((union.size, len(parts)), np.nan)
        nonfinite: dict[str, np.ndarray] = {}
        for j, (m, (s, v)) in enumerate(parts.items()):
            pos = np.searchsorted(union, s)
            bad = ~np.isfinite(v)
            matrix[pos, j] = np.where(bad, np.nan, v)
            if bad.any():
                nonfinite[m] = s[bad]
        wide = pd.DataFrame(matrix, index=pd.Index(union, name="step"), columns=list(parts))
        trimmed = cut or any(c.dropped for c in self.cols.values())
        early = None
        if trimmed and self.heads:
            early = self._early()
        ws, wv = self.wall.steps, self.wall.values

        def wall() -> pd.Series:
            return pd.Series(wv, index=ws, dtype=float)

        info = self.info
        return build_context(
            wide,
            nonfinite,
            restarts=self.restarts,
            decimals=info.decimals if info is not None else None,
            tags=info.metrics if info is not None else None,
            wall=wall,
            early=early,
            grid=self.run_logs(),
            window=trimmed,
        )

    def _early(self) -> pd.DataFrame:
        steps = np.unique(np.concatenate([s for s, _ in self.heads.values()]))
        out = pd.DataFrame(index=pd.Index(steps, name="step"))
        for m, (s, v) in self.heads.items():
            col = np.full(steps.size, np.nan)
            col[np.searchsorted(steps, s)] = v
            out[m] = col
        return out

    def _evaluate(self, rules: list[Rule], cutoff: int) -> list[Change]:
        cuts = {
            r.code: min(cutoff, j) if (j := self.state[r.code].judged) is not None else cutoff
            for r in rules
        }
        rescaled, self.rescaled = self.rescaled, False
        for r in rules:  # early in a run verdicts depend on its length so far: judged again
            cols = [self.cols[m] for m in r.when.metrics() if m in self.cols]
            whole_run = cols and not any(c.dropped for c in cols)
            early = self.state[r.code].n_run < 2 * max(r.for_, r.when.head() + 1) + 2
            if whole_run and (early or rescaled):
                cuts[r.code] = -(2**62)
        again = [r for r in rules if cuts[r.code] == -(2**62)]
        if again and len(again) < len(rules):
            # rules judged again from the run's start (a sparse metric early in its logging)
            # read only their own metrics from the start: the others keep their windows, so a
            # poll of a long run does not become a whole-run evaluation of every rule
            rest = [r for r in rules if cuts[r.code] != -(2**62)]
            return self._judge(again, cuts) + self._judge(rest, cuts)
        return self._judge(rules, cuts)

    def _judge(self, rules: list[Rule], cuts: dict[str, int]) -> list[Change]:
        only = None
        if min(cuts[r.code] for r in rules) == -(2**62):
            only = {m for r in rules for m in r.when.metrics()}
            only |= {c.metric for r in rules for c in r.checks}
        ctx = self._context(
            min(cuts[r.code] for r in rules),
            whole=any(r.code in self.whole for r in rules),
            only=only,
        )
        framework = self.info.framework if self.info is not None else None
        changes = []
        r = ctx.resolution()
        for rule in rules:
            if rule.frameworks and framework not in rule.frameworks:
                continue
            self.evaluations += 1
            rule = at_resolution(rule, r)  # as diagnose: a run that logs every r steps
            st = self.state[rule.code]
            sig = self._signal(ctx, rule)
            if sig is None:
                changes += self._void(ctx, rule, st)
                continue
            if st.void is not None:  # its metric has a value now: judged as any rule
                changes += self._void(ctx, rule, st, gone=True)
            was = st.firing
            before = {e.first for e in st.episodes}
            ongoing = st.episodes[-1].first if was and st.episodes else None
            self._merge(rule, st, sig, cuts[rule.code])
            fresh = [i for i, e in enumerate(st.episodes) if e.first not in before]
            ended = (
                ongoing is not None
                and (not st.firing or st.episodes[-1].first != ongoing)
                and any(e.first == ongoing for e in st.episodes)
            )
            if not fresh and not ended:
                continue
            v = self._verdict(rule, ctx)
            last = len(st.episodes) - 1
            if ended:
                i = next(i for i, e in enumerate(st.episodes) if e.first == ongoing)
                changes.append(Change("resolved", rule.code, v, v.episodes[i]))
            for i in fresh:  # an episode that began (and maybe ended) since the last update
                changes.append(Change("fired", rule.code, v, v.episodes[i]))
                if i != last or not st.firing:
                    changes.append(Change("resolved", rule.code, v, v.episodes[i]))
        _release(ctx)
        return changes

    def _merge(self, rule: Rule, st: _RuleState, sig: Any, cutoff: int) -> None:
        mask = sig.mask
        steps = sig.steps
        # as diagnose: a hold and the short-run minimum evidence count the run's logs (all of
        # them are kept, as steps), not the window's points
        held, position = held_in_logs(mask, steps, self.run_logs())
        active = held >= short_run_for(rule.for_, position, resolution=rule.resolution)
        idx = np.arange(mask.size)
        last_active = np.maximum.accumulate(np.where(active, idx, -(10**9)))
        firing = idx - last_active <= rule.keep_firing_for
        k0 = int(np.searchsorted(steps, cutoff, side="left"))
        # forget what was concluded about the steps being judged again
        while st.episodes and st.episodes[-1].first >= cutoff:
            st.episodes.pop()
        if st.episodes and st.episodes[-1].last >= cutoff:
            ep = st.episodes[-1]
            gone = int(np.count_nonzero((steps >= cutoff) & (steps <= ep.last)))
            ep.last = int(steps[k0 - 1]) if k0 > 0 else ep.first
            ep.n = max(1, ep.n - gone)
        if firing.any():
            edges = np.flatnonzero(np.diff(np.concatenate([[0], firing.astype(np.int8), [0]])))
            for a, b in zip(edges[::2], edges[1::2] - 1, strict=True):
                a, b = int(a), int(b)
                if b < k0:
                    continue
                start = max(a, k0)
                e = _episode(rule, sig, steps, start, b, held)
                rank = float(e.observed.get(sig.peak, math.nan))
                new = _Ep(e.first_step, e.last_step, b - start + 1, e.peak_step, rank, e.observed)
                prev = st.episodes[-1] if st.episodes else None
                if a < k0 and prev is not None and k0 > 0 and prev.last == int(steps[k0 - 1]):
                    prev.last, prev.n = new.last, prev.n + new.n
                    worse = math.isnan(prev.rank) or (
                        (not math.isnan(new.rank))
                        and (new.rank > prev.rank if sig.peak_max else new.rank < prev.rank)
                    )
                    if worse and not math.isnan(new.rank):
                        prev.peak, prev.rank, prev.observed = new.peak, new.rank, new.observed
                else:
                    if a < k0:  # began before the re-judged steps: keep its real first step
                        new.first = int(steps[a])
                        new.n = b - a + 1
                    st.episodes.append(new)
        st.firing = bool(firing[-1]) if firing.size else False
        if steps.size:
            st.judged = int(steps[-1])
        cols = [self.cols[m] for m in sig.metrics if m in self.cols]
        st.n_run = max(
            (c.n_dropped + int(np.count_nonzero(np.isfinite(c.values))) for c in cols), default=0
        )

    def _signal(self, ctx: Context, rule: Rule) -> Signal | None:
        """A rule's signal on `ctx`, its state marked evaluated (None: skipped, reason kept)."""
        st = self.state[rule.code]
        st.evaluated = True
        try:
            sig = evaluate(ctx, rule.when)
        except Skip as exc:
            st.skipped = str(exc)
            return None
        st.skipped = ""
        st.metrics = {m: ctx.tags.get(m, m) for m in dict.fromkeys(sig.metrics)}
        return sig

    def _void(self, ctx: Context, rule: Rule, st: _RuleState, gone: bool = False) -> list[Change]:
        """A skipped rule whose metric was logged with no finite value at all fires (as
        `evaluate_rule` does): one episode over its NaN/inf steps, resolved when the metric
        gets a value. Its verdict fires at once (a run judged now, `tail --once`, fails as in
        diagnose), but it is reported -- and can stop a watched run -- only once the metric was
        NaN/inf on MIN_LOGS logs: a metric a trainer logs as NaN at its first log or two (a
        loss scaler's first overflows) is not yet evidence."""
        was = st.void
        if gone:
            st.void = None
        else:
            v = Verdict(self.run, rule.code, rule.name, rule.severity, "skipped", reason=st.skipped)
            _fire_without_values(ctx, rule, v)
            st.void = (v.episodes[0], v.metrics) if v.state == "firing" else None
        if st.void is not None:
            if st.void_told or st.void[0].observed["nonfinite_steps"] < MIN_LOGS:
                return []
            st.void_told = True
            v = self._verdict(rule)
            return [Change("fired", rule.code, v, v.episodes[-1])]
        if was is not None and st.void_told:
            st.void_told = False
            v = self._verdict(rule)
            v.episodes, v.state = [was[0]], "resolved"
            return [Change("resolved", rule.code, v, was[0])]
        return []

    # -- output --------------------------------------------------------------------------
    def _ep(self, rule: Rule, e: _Ep) -> Episode:
        observed = {k: v for k, v in e.observed.items() if k != "held"}
        summary = render_summary(
            rule.summary, observed, step=e.peak, first_step=e.first, last_step=e.last, steps=e.n
        )
        return Episode(e.first, e.last, e.peak, dict(e.observed), summary)

    def _verdict(self, rule: Rule, ctx: Context | None = None) -> Verdict:
        st = self.state[rule.code]
        v = Verdict(self.run, rule.code, rule.name, rule.severity, "ok", gate=rule.gate)
        v.metrics = dict(st.metrics)
        if rule.frameworks and (self.info is None or self.info.framework not in rule.frameworks):
            v.state, v.reason = "skipped", f"applies to {', '.join(rule.frameworks)} only"
            return v
        v.episodes = [self._ep(rule, e) for e in st.episodes]
        if st.void is not None and not v.episodes:  # as diagnose: no value is not healthy
            v.episodes, v.metrics = [st.void[0]], dict(st.void[1])
            v.state = "firing"
        elif v.episodes:
            v.state = "firing" if st.firing else "resolved"
            if ctx is not None:
                v.checks = _checks(ctx, rule, v.episodes[0])
        elif st.skipped or not st.evaluated:
            why = "no rows for its metrics yet"
            if rule in self.clock_rules:
                why = "judged at a time, by tail (its clock) and diagnose (the run's files)"
            v.state, v.reason = "skipped", st.skipped or why
        elif 0 < self._grid_n < MIN_LOGS:  # as evaluate_run: no evidence of health yet
            v.state, v.reason = "skipped", too_few_logs(self._grid_n)
        return v

    def tick(self, *, force: bool = False) -> list[Change]:
        """Judge the whole-history rules that have new steps, if due (or `force`)."""
        if not self.pending or (not force and time.monotonic() < self.due):
            return []
        pending, self.pending = self.pending, {}
        t0 = time.monotonic()
        rules = [self.by_code[c] for c in pending]
        changes = self._evaluate(rules, min(pending.values()))
        cost = time.monotonic() - t0
        self.due = time.monotonic() + WHOLE_SHARE * cost
        return changes

    def clock_firing(self) -> bool:
        return any(self.state[r.code].firing for r in self.clock_rules)

    def at(self, now: Any, arrivals: tuple[np.ndarray, np.ndarray] | None = None) -> list[Change]:
        """Judge the clock rules (`stalled`) at `now`, on the clock of the run's wall times
        (or a (time, note) pair). A source without wall times is judged on `arrivals` (step,
        when it arrived on the follower's clock) with `now` on that clock. An episode is the
        last step no step has followed: it fires once and resolves when a step arrives."""
        if not self.clock_rules or self.last_step is None:
            return []
        if self.wall.steps.size:
            ws, wv = self.wall.steps, self.wall.values
        elif arrivals is not None:
            ws, wv = arrivals
        else:
            ws, wv = np.empty(0, np.int64), np.empty(0)
        if ws.size > self.clock_keep:  # the kind reads the last `window` intervals only
            ws, wv = ws[-self.clock_keep :], wv[-self.clock_keep :]
        ctx = build_context(
            pd.DataFrame(index=pd.Index(ws, name="step")),
            {},
            restarts=self.restarts,
            wall=lambda: pd.Series(wv, index=ws, dtype=float),
            now=now,
        )
        framework = self.info.framework if self.info is not None else None
        changes: list[Change] = []
        for rule in self.clock_rules:
            if rule.frameworks and framework not in rule.frameworks:
                continue
            st = self.state[rule.code]
            sig = self._signal(ctx, rule)
            if sig is None:
                continue
            last, fire = int(sig.steps[-1]), bool(sig.mask[-1])
            if st.firing and st.episodes and (not fire or st.episodes[-1].first != last):
                st.firing = False
                v = self._verdict(rule)
                changes.append(Change("resolved", rule.code, v, v.episodes[-1]))
            if not fire:
                continue
            observed = {k: float(a[-1]) for k, a in sig.observed.items()}
            rank = observed.get(sig.peak, math.nan)
            if st.firing:  # still stalled: the same episode, its idle time grows
                ep = st.episodes[-1]
                ep.rank, ep.observed = rank, observed
                continue
            st.episodes.append(_Ep(last, last, 1, last, rank, observed))
            st.firing = True
            st.judged = last
            v = self._verdict(rule)
            changes.append(Change("fired", rule.code, v, v.episodes[-1]))
        _release(ctx)
        return changes

    def verdict(self, code: str) -> Verdict:
        return self._verdict(self.by_code[code])

    def verdicts(self, *, settle: bool = True) -> list[Verdict]:
        """Every rule's verdict so far, with all its episodes (the shape diagnose reports);
        `settle` first judges whole-history rules still waiting for their turn."""
        if settle:
            self.tick(force=True)
        return [self._verdict(r) for r in self.rules]

    def memory(self) -> int:
        """Bytes held in kept values (for the benchmark and tests; shared arrays once)."""
        arrays = {
            id(a): a.nbytes
            for c in (*self.cols.values(), *self.check_cols.values(), self.wall)
            for a in (c.steps, c.values)
        }
        arrays.update({id(a): a.nbytes for h in self.heads.values() for a in h})
        arrays[id(self._grid)] = self._grid.nbytes
        return sum(arrays.values())
