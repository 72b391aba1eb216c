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
STALL_FACTOR = 10.0  # a run with no new step for this many median step intervals is stalled
STALL_FLOOR = 120.0  # ... and for at least this many seconds
STALL_CODE = "TM00"
STALL_NAME = "throughput.stalled"


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
    stalled: Verdict | None = None
    new_at: float = 0.0  # when (our clock) the last new step arrived
    lag: float = 0.0  # how old that step already was then (first poll only)
    rows_kept: list[pd.DataFrame] = field(default_factory=list)  # only with keep_rows

    def rate(self) -> float | None:
        """Steps per minute over the last polls that brought steps."""
        pts = self.steps_seen[-20:]
        if len(pts) < 2 or pts[-1][0] <= pts[0][0]:
            return None
        return (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0]) * 60

    def median_interval(self) -> float | None:
        w = np.diff(np.asarray(self.walls[-65:], dtype=float))
        w = w[np.isfinite(w) & (w > 0)]
        return float(np.median(w)) if w.size >= 3 else None


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
        stall_factor: float = STALL_FACTOR,
        stall_floor: float = STALL_FLOOR,
        keep_rows: bool = False,
        clock: Any = time.time,
    ):
        from rlwatch.sources.follow import follow

        self.rules = rules
        self.stale_after = stale_after
        self.stall_factor, self.stall_floor = stall_factor, stall_floor
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
                events.append(Event("source-error", target, f"cannot read: {msg}"))
            return events
        finally:
            for note in _notices(follower):
                events.append(Event("file", target, note))
        if target in self.failing:
            del self.failing[target]
            events.append(Event("active", target, "readable again"))
        renames = getattr(follower, "renames", None)
        while renames:
            old, new = renames.popitem()
            state = self.runs.pop(old, None)
            if state is not None and new not in self.runs:
                state.name = state.evaluator.run = state.info.name = new
                self.runs[new] = state
                events.append(Event("file", new, f"now named {new} (was {old})"))
        for name, info in delta.runs.items():
            rows = delta.run_data(name) if len(delta.runs) > 1 else delta.data
            events += self._absorb(name, info, rows, now)
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
            state.lag = max(0.0, now - state.walls[-1]) if first else 0.0
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
        if state.stalled is not None and new_step:
            state.stalled = None
            events.append(
                Event(
                    "resolved",
                    name,
                    f"resolved {STALL_CODE} {STALL_NAME}: step {state.last_step} arrived",
                )
            )
        events += self._changes(state, state.evaluator.update(rows, state.info))
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
        med = state.median_interval()
        if state.stalled is None and med is not None:
            # from when the last step arrived; a step already there when tail started counts
            # from its own wall time (the run may have stalled before tail was started)
            since = now - state.new_at + state.lag
            if since >= max(self.stall_factor * med, self.stall_floor):
                v = stall_verdict(state.name, state.last_step, since, med, self.stall_factor)
                state.stalled = v
                events.append(
                    Event(
                        "fired",
                        state.name,
                        f"{str(v.severity).upper()} {v.code} {v.name} since step "
                        f"{state.last_step}: {v.episodes[0].summary}",
                        v,
                    )
                )
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
            if st.stalled is not None:
                firing.append(st.stalled)
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


def stall_verdict(run: str, step: int | None, idle: float, median: float, factor: float):
    """The `throughput.stalled` verdict: no new step for `idle` seconds, `idle / median` times
    the run's median step interval."""
    from rlwatch.engine.evaluate import Episode

    s = int(step or 0)
    summary = (
        f"no new step for {ago(idle)} after step {s}, {idle / median:.0f}x the run's median "
        f"step interval ({ago(median)}): stalled or hung"
    )
    ep = Episode(s, s, s, {"idle": idle, "median": median, "ratio": idle / median}, summary)
    return Verdict(run, STALL_CODE, STALL_NAME, Severity.WARNING, "firing", [ep])


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


def _give_back() -> None:
    """Return freed heap to the system (glibc keeps it otherwise); a no-op elsewhere."""
    import gc

    gc.collect()  # pandas leaves reference cycles holding the catch-up's frames
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


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
