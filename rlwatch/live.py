"""Following runs live: followers from `sources.follow`, the incremental evaluator, state changes.

Each poll asks every follower for the rows written since the last poll and hands each run's
rows to its `Evaluator` (rlwatch.engine.incremental), which judges every new step the way
`diagnose` judges the whole run: an episode that starts and ends between two polls is still
reported, with its first and last step, and an ongoing episode keeps its first step. A poll
costs in proportion to what was appended; an idle poll evaluates nothing. Per run only what
the rules look back on is kept, plus the last values and a downsampled history of the key
metrics for the dashboard.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rlwatch.engine.evaluate import Verdict
from rlwatch.engine.incremental import Evaluator, _codes
from rlwatch.engine.rules import RuleSet
from rlwatch.errors import RlwatchError
from rlwatch.frame import RunInfo
from rlwatch.render.dashboard import ago
from rlwatch.severity import Severity

KEY_METRICS = (
    "entropy",
    "kl_ref",
    "grad_norm",
    "reward_mean",
    "truncation_rate",
    "response_length_mean",
    "val_score",
)
HISTORY = 64  # sparkline buckets kept per key metric (older steps merged pairwise)


@dataclass
class Event:
    """A state change: a run appeared, stalled or went stale, a verdict fired or resolved, a
    file moved, a source failed."""

    kind: str  # appeared | stale | active | fired | resolved | file | source-error | waiting
    run: str
    message: str
    verdict: Verdict | None = None
    at: float = field(default_factory=time.time)

    def line(self) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(self.at))
        return f"{stamp} {self.run}: {self.message}"


class History:
    """A metric's whole run in at most 2 x HISTORY buckets (means), for a sparkline whose
    scale is the run's own range, so a collapsed metric's noise stays flat at the bottom."""

    def __init__(self) -> None:
        self.width = 1
        self.sums: list[float] = []
        self.counts: list[int] = []
        self.last = float("nan")
        self.last_step = -1
        self.lo = float("inf")
        self.hi = float("-inf")

    def add(self, steps: np.ndarray, values: np.ndarray) -> None:
        for s, v in zip(steps.tolist(), values.tolist(), strict=True):
            self.last, self.last_step = v, s
            if not np.isfinite(v):
                continue
            self.lo, self.hi = min(self.lo, v), max(self.hi, v)
            if self.counts and self.counts[-1] < self.width:
                self.sums[-1] += v
                self.counts[-1] += 1
            else:
                self.sums.append(v)
                self.counts.append(1)
            if len(self.sums) > 2 * HISTORY:
                self.sums = [a + b for a, b in zip(self.sums[::2], self.sums[1::2], strict=False)]
                self.counts = [
                    a + b for a, b in zip(self.counts[::2], self.counts[1::2], strict=False)
                ]
                self.width *= 2

    def points(self, n: int) -> list[float]:
        pts = [s / c for s, c in zip(self.sums, self.counts, strict=True)]
        return pts[-n:]


@dataclass
class RunState:
    name: str
    info: RunInfo
    evaluator: Evaluator
    first_seen: float = field(default_factory=time.time)
    last_change: float = field(default_factory=time.time)
    last_step: int | None = None
    steps_seen: list[tuple[float, int]] = field(default_factory=list)  # (time, last step)
    walls: list[float] = field(default_factory=list)  # wall time of the recent last steps
    history: dict[str, History] = field(default_factory=dict)
    stale: bool = False
    new_at: float = 0.0  # when (our clock) the last new step arrived
    # how old the steps found at tail's start already were, when their writer is known to be
    # alive (a process here holds a file open for writing); None: not known, so the time since
    # they were written is not counted (a finished or copied run is not stalled)
    lag: float | None = 0.0
    rows_kept: list[pd.DataFrame] = field(default_factory=list)  # only with keep_rows

    def rate(self) -> float | None:
        """Steps per minute over the last polls that brought steps."""
        pts = self.steps_seen[-20:]
        if len(pts) < 2 or pts[-1][0] <= pts[0][0]:
            return None
        return (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0]) * 60

    def judge_stall(self, now: float, idle: bool = False) -> list:
        """The clock rules (`stalled`) judged now: on the run's wall clock (the last step's
        wall time plus the time since it arrived, or since it was written when it was already
        there at tail's start), or on tail's clock of step arrivals for a source without
        wall times."""
        ev = self.evaluator
        if not ev.clock_rules:
            return []
        # no step arrived while following and no writer seen (lag None): the run is judged
        # at its latest record, as diagnose judges files
        since = 0.0 if self.lag is None else now - self.new_at + self.lag
        if idle and since < ev.clock_floor and not ev.clock_firing():
            return []  # an idle poll before any stall could be due judges nothing
        if ev.wall.steps.size:
            at = float(np.nanmax(ev.wall.values)) + since
            return ev.at(at)
        pts = self.steps_seen
        steps = np.asarray([p[1] for p in pts], dtype=np.int64)
        times = np.asarray([p[0] for p in pts], dtype=float)
        return ev.at(now, (steps, times))


class Watch:
    """Follows targets; `poll()` returns the state changes since the last poll."""

    def __init__(
        self,
        targets: list[str],
        rules: RuleSet,
        *,
        log_format: str | None = None,
        tracking_uri: str | None = None,
        stale_after: float = 300.0,
        stall_factor: float | None = None,
        stall_floor: float | None = None,
        keep_rows: bool = False,
        clock: Any = time.time,
    ):
        from rlwatch.sources.follow import follow

        self.rules = stall_overrides(rules, stall_factor, stall_floor)
        self.stale_after = stale_after
        self.keep_rows = keep_rows
        self.clock = clock
        self.followers = [(t, follow(t, log_format, tracking_uri)) for t in targets]
        self.runs: dict[str, RunState] = {}
        self.failing: dict[str, str] = {}  # target -> error, while it fails
        self.started = clock()

    @property
    def evaluations(self) -> int:
        """Rule evaluations so far over every run (an idle poll adds none)."""
        return sum(st.evaluator.evaluations for st in self.runs.values())

    @property
    def waiting(self) -> bool:
        """Nothing readable yet in any target."""
        return not self.runs

    # -- polling ------------------------------------------------------------------------
    def poll(self) -> list[Event]:
        events: list[Event] = []
        now = self.clock()
        for target, follower in self.followers:
            events += self._poll_one(target, follower, now)
        for state in self.runs.values():
            events += self._idle(state, now)
        _give_back(collect=False)  # the poll's freed heap back to the system (~0.1 ms)
        return events

    def _poll_one(self, target: str, follower: Any, now: float) -> list[Event]:
        """Everything a follower has, a budget at a time (a big run is caught up in pieces,
        each evaluated before the next is read)."""
        events: list[Event] = []
        pieces = 0
        while True:
            pieces += 1
            events += self._poll_piece(target, follower, now)
            if not getattr(follower, "more", False):
                break
        if pieces > 1:
            _give_back()  # the catch-up's transient buffers go back to the system
        return events

    def sleep(self, interval: float, tick: float = 0.1) -> None:
        """Wait up to `interval` seconds, less when a followed file changes (its size or
        modification time, checked every `tick`): a verdict shows within a tick of the write."""
        end = time.monotonic() + interval
        before = self._stamp()
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(tick, left))
            if before is not None and self._stamp() != before:
                return

    def _stamp(self) -> tuple | None:
        """(size, mtime) of every file and folder the followers read, or None if unknown."""
        paths = [p for _, f in self.followers for p in _paths(f)]
        if not paths:
            return None
        out = []
        for p in paths:
            try:
                st = os.stat(p)
                out.append((st.st_size, st.st_mtime_ns, st.st_ino))
            except OSError:
                out.append(None)
        return tuple(out)

    def _poll_piece(self, target: str, follower: Any, now: float) -> list[Event]:
        events: list[Event] = []
        try:
            delta = follower.poll()
        except (RlwatchError, OSError) as exc:
            msg = str(exc)
            if self.failing.get(target) != msg:
                self.failing[target] = msg
                why = msg.removeprefix(f"{target}: ")  # the event names the target already
                events.append(Event("source-error", target, f"cannot read: {why}"))
            return events
        finally:
            for note in _notices(follower):
                events.append(Event("file", target, note))
        if target in self.failing:
            del self.failing[target]
            events.append(Event("active", target, "readable again"))
        dropped = getattr(follower, "dropped", None)
        while dropped:  # a run found to be a copy of another (the follower said so)
            self.runs.pop(dropped.popitem()[0], None)
        renames = getattr(follower, "renames", None)
        if renames:  # all at once: a swap or a chain of names must not lose a run
            moved = {old: self.runs.pop(old) for old in renames if old in self.runs}
            for old, state in moved.items():
                new = renames[old]
                if new in self.runs:
                    continue
                state.name = state.evaluator.run = state.info.name = new
                self.runs[new] = state
                events.append(Event("file", new, f"now named {new} (was {old})"))
            renames.clear()
        for name, info in delta.runs.items():
            rows = delta.run_data(name) if len(delta.runs) > 1 else delta.data
            # the whole run again, renumbered (a console's steps given back by its summary):
            # evaluated afresh, as diagnose reads it
            replaced = info.replaces and self.runs.pop(name, None) is not None
            if replaced:
                steps = info.hparams.get("steps")
                why = f"steps now {steps}" if steps is not None else f"read as {info.source} now"
                msg = f"{why}: evaluated again from the first log"
                events.append(Event("file", name, msg))
            absorbed = self._absorb(name, info, rows, now)
            events += [e for e in absorbed if not (replaced and e.kind == "appeared")]
        return events

    def _absorb(self, name: str, info: RunInfo, rows: pd.DataFrame, now: float) -> list[Event]:
        events: list[Event] = []
        state = self.runs.get(name)
        if state is None:
            if rows.empty:
                return events
            ev = Evaluator(self.rules, run=name, info=info)
            state = self.runs[name] = RunState(name, info, ev, now, now)
            fw = f" ({info.framework})" if info.framework else ""
            events.append(Event("appeared", name, f"appeared{fw}: {info.address}"))
        if rows.empty:
            return events
        state.info = _merge_info(state.info, info)
        if self.keep_rows:
            state.rows_kept.append(rows)
        step = rows["step"].to_numpy()
        last = int(step.max())
        new_step = state.last_step is None or last > state.last_step
        state.last_step = last if state.last_step is None else max(last, state.last_step)
        state.last_change = now
        if new_step:
            wall = rows["wall_time"].to_numpy(dtype=float)
            at = wall[step == last]
            state.walls.append(float(np.nanmax(at)) if np.isfinite(at).any() else now)
            state.new_at = now
            first = len(state.steps_seen) == 0
            state.lag = _found_lag(state.info, state.walls[-1], now) if first else 0.0
            del state.walls[:-80]
            state.steps_seen.append((now, state.last_step))
            del state.steps_seen[:-40]
        codes, names = _codes(rows["metric"])
        for m in KEY_METRICS:
            if m not in names:
                continue
            sel = codes == names.index(m)
            if sel.any():
                f = state.info.scales.get(m, 1.0)
                state.history.setdefault(m, History()).add(
                    step[sel], rows["value"].to_numpy(dtype=float)[sel] * f
                )
        if state.stale:
            state.stale = False
            events.append(Event("active", name, f"active again at step {state.last_step}"))
        events += self._changes(state, state.evaluator.update(rows, state.info))
        if new_step:
            events += self._changes(state, state.judge_stall(now))
        return events

    def _changes(self, state: RunState, changes: list) -> list[Event]:
        """Events for the evaluator's changes: a verdict fired (since a step, or for the steps
        of an episode that already ended) or resolved."""
        events = []
        for ch in changes:
            v, ep = ch.verdict, ch.episode
            if ch.kind == "fired":
                ongoing = v.state == "firing" and ep is v.episodes[-1]
                when = (
                    f"since step {ep.first_step}"
                    if ongoing
                    else f"steps {ep.first_step}-{ep.last_step}"
                )
                summary = _human(ep.summary)
                msg = f"{str(v.severity).upper()} {v.code} {v.name} {when}: {summary}"
            else:
                msg = (
                    f"resolved {v.code} {v.name}: steps {ep.first_step}-{ep.last_step} "
                    f"(at step {state.last_step})"
                )
            events.append(Event(ch.kind, state.name, msg, v))
        return events

    def _idle(self, state: RunState, now: float) -> list[Event]:
        events = self._changes(state, state.evaluator.tick())
        idle = now - state.last_change
        if not state.stale and idle >= self.stale_after:
            state.stale = True
            events.append(
                Event(
                    "stale",
                    state.name,
                    f"stale: no update for {ago(idle)} (last step {state.last_step})",
                )
            )
        # from when the last step arrived; a step already there when tail started counts
        # from its own wall time (the run may have stalled before tail was started)
        events += self._changes(state, state.judge_stall(now, idle=True))
        return events

    # -- views --------------------------------------------------------------------------
    def rows(self) -> pd.DataFrame:
        """Every row seen so far, as the polls delivered them (only with keep_rows=True)."""
        cats = {c: str for c in ("run", "metric", "tag", "source")}
        parts = [p.astype(cats) for st in self.runs.values() for p in st.rows_kept]
        return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()

    def verdicts(self) -> list[Verdict]:
        """Every run's verdicts with all their episodes (the shape diagnose reports)."""
        return [v for st in self.runs.values() for v in st.evaluator.verdicts()]

    def snapshot(self) -> dict[str, Any]:
        """Plain data for the dashboard (one serialisation; the renderer uses only this)."""
        now = self.clock()
        runs = []
        for st in self.runs.values():
            metrics = {}
            for m in KEY_METRICS:
                h = st.history.get(m)
                if h is not None:
                    metrics[m] = {
                        "last": h.last,
                        "values": h.points(40),
                        "lo": h.lo if np.isfinite(h.lo) else None,
                        "hi": h.hi if np.isfinite(h.hi) else None,
                    }
            firing = [v for v in st.evaluator.verdicts(settle=False) if v.state == "firing"]
            firing.sort(key=lambda v: -int(Severity.parse(str(v.severity))))
            runs.append(
                {
                    "name": st.name,
                    "framework": st.info.framework,
                    "step": st.last_step,
                    "rate": st.rate(),
                    "age": now - st.last_change,
                    "stale": st.stale,
                    "metrics": metrics,
                    "firing": [
                        {
                            "code": v.code,
                            "name": v.name,
                            "severity": str(v.severity),
                            "since": v.episodes[-1].first_step,
                            "summary": _human(v.episodes[-1].summary),
                            "checks": v.checks,
                        }
                        for v in firing
                    ],
                }
            )
        waiting = [t for t, f in self.followers if getattr(f, "waiting", False)]
        return {"runs": runs, "errors": dict(self.failing), "time": now, "waiting": waiting}


def _found_lag(info: RunInfo, wall: float, now: float) -> float | None:
    """How long ago the last step found at tail's start was written, counted only when a
    process on this machine still holds one of the run's files open for writing (see
    rlwatch/sources/activity.py); else None (for all tail knows the run has finished)."""
    from rlwatch.sources.activity import judged_at

    files = info.files or []
    at = judged_at(files, wall) if files and np.isfinite(wall) else None
    if at is None or at[0] == wall:
        return None
    return max(0.0, now - wall)


def stall_overrides(rules: RuleSet, factor: float | None, floor: float | None) -> RuleSet:
    """The rules with `--stall-factor` / `--stall-floor` set on their `stalled` conditions
    (flags override the rule files, which rlwatch.toml / [tool.rlwatch] may replace by code)."""
    import dataclasses

    given = {k: v for k, v in (("factor", factor), ("floor", floor)) if v is not None}
    if not given:
        return rules

    def swap(node: Any) -> Any:
        if node.KIND == "stalled":
            return dataclasses.replace(node, **given)
        changes = {}
        for p in node.PARAMS:
            v = getattr(node, p.name)
            if p.type == "cond" and v is not None:
                changes[p.name] = swap(v)
            elif p.type == "conds":
                changes[p.name] = tuple(swap(c) for c in v)
        return dataclasses.replace(node, **changes) if changes else node

    return RuleSet([dataclasses.replace(r, when=swap(r.when)) for r in rules.rules])


def _human(text: str) -> str:
    """Long raw floats in a summary (0.036347159785212316) shortened to 4 significant digits."""
    import re

    return re.sub(
        r"(?<![\w.])-?\d+\.\d{5,}(?:e[-+]?\d+)?",
        lambda m: f"{float(m.group(0)):.4g}",
        text,
    )


def _paths(follower: Any) -> list[str]:
    """The files and folders a follower reads (for the cheap change check between polls)."""
    out: list[str] = []
    target = getattr(follower, "target", None)
    if target is not None:
        out.append(str(target))
    for run in getattr(follower, "runs", {}).values():
        found = getattr(run, "found", None)
        files = getattr(run, "files", None) or (found.paths if found is not None else [])
        for p in files:
            out += [str(p), str(Path(p).parent)]
    return list(dict.fromkeys(out))


_LIBC: Any = None  # glibc, once loaded (False where there is none)


def _give_back(collect: bool = True) -> None:
    """Return freed heap to the system (glibc keeps it otherwise); `collect` first breaks the
    reference cycles pandas leaves holding a catch-up's frames and empties Arrow's pool."""
    global _LIBC
    if collect:
        import gc
        import sys

        gc.collect()
        if "pyarrow" in sys.modules:  # pandas' string columns allocate from Arrow's own pool
            with contextlib.suppress(AttributeError, NotImplementedError):
                sys.modules["pyarrow"].default_memory_pool().release_unused()
    if _LIBC is False:
        return
    try:
        if _LIBC is None:
            import ctypes

            _LIBC = ctypes.CDLL("libc.so.6")
        _LIBC.malloc_trim(0)
    except (OSError, AttributeError):
        _LIBC = False


def _notices(follower: Any) -> list[str]:
    fn = getattr(follower, "notices", None)
    return fn() if callable(fn) else []


def _merge_info(old: RunInfo, new: RunInfo) -> RunInfo:
    """Keep what the first delta learnt; add what later deltas add."""
    merged = old
    merged.metrics = {**old.metrics, **new.metrics}
    merged.scales = {**old.scales, **new.scales}
    merged.hparams = {**old.hparams, **new.hparams}
    if new.framework and not old.framework:
        merged.framework, merged.framework_version = new.framework, new.framework_version
    merged.restarts = old.restarts + [r for r in new.restarts if r not in old.restarts]
    merged.warnings = old.warnings + [w for w in new.warnings if w not in old.warnings]
    if new.decimals is not None:
        merged.decimals = new.decimals
    return merged
