"""Following runs live: incremental readers, rules re-evaluated on what changed, state changes.

Each poll asks every follower for the rows written since the last poll, appends them to the
run's step x metric table, and re-evaluates the rules of the runs that changed on a bounded
window: its last `WINDOW` steps, with early levels taken from its first steps. A poll therefore
costs in proportion to what was appended, not to the run's size; an idle poll reads nothing and
evaluates nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rlwatch.engine.conditions import Context, build_context, metrics_of
from rlwatch.engine.evaluate import Verdict, evaluate_rule
from rlwatch.engine.rules import RuleSet
from rlwatch.errors import RlwatchError
from rlwatch.frame import RunFrame, RunInfo
from rlwatch.render.dashboard import ago

WINDOW = 120  # recent logged steps the rules look at (the longest rule window is 50 + 20)
HEAD = 20  # first logged steps kept for early levels (relative conditions)
KEY_METRICS = (
    "reward_mean",
    "entropy",
    "kl_ref",
    "grad_norm",
    "response_length_mean",
    "truncation_rate",
    "val_score",
)


@dataclass
class Event:
    """A state change: a run appeared or went stale, a verdict fired or resolved, a source
    failed."""

    kind: str  # appeared | stale | active | fired | resolved | source-error
    run: str
    message: str
    verdict: Verdict | None = None
    at: float = field(default_factory=time.time)

    def line(self) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(self.at))
        return f"{stamp} {self.run}: {self.message}"


@dataclass
class RunState:
    name: str
    info: RunInfo
    chunks: list[pd.DataFrame]  # the step x metric table, in pieces appended per poll
    nonfinite: dict[str, set[int]] = field(default_factory=dict)
    parts: list[pd.DataFrame] = field(default_factory=list)  # every row seen, as delivered
    first_seen: float = field(default_factory=time.time)
    last_change: float = field(default_factory=time.time)
    steps_seen: list[tuple[float, int]] = field(default_factory=list)  # (time, last step)
    verdicts: dict[str, Verdict] = field(default_factory=dict)
    stale: bool = False

    @property
    def wide(self) -> pd.DataFrame:
        """The whole table (joined once, when asked)."""
        if len(self.chunks) > 1:
            self.chunks = [pd.concat(self.chunks)]
        return self.chunks[0] if self.chunks else pd.DataFrame()

    def window(self, head: int, tail: int) -> tuple[pd.DataFrame | None, pd.DataFrame]:
        """(first `head` rows or None, last `tail` rows), joining only the pieces needed."""
        total = sum(len(c) for c in self.chunks)
        if total <= head + tail:
            return None, self.wide
        picked, n = [], 0
        for c in reversed(self.chunks):
            picked.append(c)
            n += len(c)
            if n >= tail:
                break
        recent = pd.concat(picked[::-1]) if len(picked) > 1 else picked[0]
        first, n = [], 0
        for c in self.chunks:
            first.append(c)
            n += len(c)
            if n >= head:
                break
        early = pd.concat(first) if len(first) > 1 else first[0]
        return early.iloc[:head], recent.iloc[-tail:]

    @property
    def last_step(self) -> int | None:
        return int(self.chunks[-1].index[-1]) if self.chunks else None

    def rate(self) -> float | None:
        """Steps per minute over the last polls that brought steps."""
        pts = self.steps_seen[-20:]
        if len(pts) < 2 or pts[-1][0] <= pts[0][0]:
            return None
        return (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0]) * 60


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
    ):
        self.rules = rules
        self.stale_after = stale_after
        self.needed = sorted(
            {m for r in rules.rules for m in metrics_of(r.when)}
            | {c.metric for r in rules.rules for c in r.checks}
            | set(KEY_METRICS)
        )
        self.followers = [(t, _follower(t, log_format, tracking_uri)) for t in targets]
        self.runs: dict[str, RunState] = {}
        self.failing: dict[str, str] = {}  # target -> error, while it fails

    # -- polling ------------------------------------------------------------------------
    def poll(self) -> list[Event]:
        events: list[Event] = []
        now = time.time()
        for target, follower in self.followers:
            try:
                delta = follower.poll()
            except (RlwatchError, OSError) as exc:
                msg = str(exc)
                if self.failing.get(target) != msg:
                    self.failing[target] = msg
                    events.append(Event("source-error", target, f"cannot read: {msg}"))
                continue
            if target in self.failing:
                del self.failing[target]
                events.append(Event("active", target, "readable again"))
            for name, info in delta.runs.items():
                rows = delta.run_data(name) if len(delta.runs) > 1 else delta.data
                events += self._absorb(name, info, rows, now)
        for state in self.runs.values():
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
        return events

    def _absorb(self, name: str, info: RunInfo, rows: pd.DataFrame, now: float) -> list[Event]:
        events: list[Event] = []
        state = self.runs.get(name)
        if state is None:
            if rows.empty:
                return events
            state = self.runs[name] = RunState(name, info, [])
            fw = f" ({info.framework})" if info.framework else ""
            events.append(Event("appeared", name, f"appeared{fw}: {info.address}"))
        if rows.empty:
            return events
        state.info = _merge_info(state.info, info)
        state.parts.append(rows)
        sub = rows[rows["metric"].isin(self.needed)]
        if len(sub):
            values = sub["value"].to_numpy()
            bad = ~np.isfinite(values)
            metrics = sub["metric"].astype(str).to_numpy()
            steps = sub["step"].to_numpy()
            for metric, step in zip(metrics[bad], steps[bad], strict=True):
                state.nonfinite.setdefault(metric, set()).add(int(step))
            w = pd.DataFrame(
                {"step": steps, "metric": metrics, "value": np.where(bad, np.nan, values)}
            )
            if w.duplicated(["step", "metric"]).any():
                w = w.drop_duplicates(["step", "metric"], keep="last")
            delta = w.pivot(index="step", columns="metric", values="value")
            for m, f in state.info.scales.items():
                if m in delta.columns:
                    delta[m] = delta[m] * f
            if not state.chunks or delta.index[0] > state.chunks[-1].index[-1]:
                state.chunks.append(delta)  # the usual case: new steps only
                if len(state.chunks) > 64:
                    state.chunks = [pd.concat(state.chunks)]
            else:  # re-logged or out-of-order steps: the last write wins
                state.chunks = [pd.concat([state.wide, delta]).groupby(level=0).last()]
        state.last_change = now
        if state.stale:
            state.stale = False
            events.append(Event("active", name, f"active again at step {state.last_step}"))
        if state.last_step is not None:
            state.steps_seen.append((now, state.last_step))
        events += self._evaluate(state)
        return events

    def _evaluate(self, state: RunState) -> list[Event]:
        events = []
        ctx = self._context(state)
        for rule in self.rules.rules:
            if rule.frameworks and state.info.framework not in rule.frameworks:
                continue
            verdict = evaluate_rule(ctx, rule, state.name, detail=False)[0]
            before = state.verdicts.get(rule.code)
            was = before is not None and before.state == "firing"
            now = verdict.state == "firing"
            if now and not was:
                verdict = evaluate_rule(ctx, rule, state.name)[0]  # checks for the alert
                ep = verdict.episodes[-1]
                events.append(
                    Event(
                        "fired",
                        state.name,
                        f"{str(verdict.severity).upper()} "
                        f"{rule.code} {rule.name} since step {ep.first_step}: "
                        f"{ep.summary}",
                        verdict,
                    )
                )
            elif now and before is not None:
                verdict.checks = before.checks
            elif was and not now:
                events.append(
                    Event(
                        "resolved",
                        state.name,
                        f"resolved {rule.code} {rule.name} at step {state.last_step}",
                        verdict,
                    )
                )
            state.verdicts[rule.code] = verdict
        return events

    def _context(self, state: RunState) -> Context:
        """The recent window; early levels come from the run's first steps (`early`)."""
        early, wide = state.window(HEAD, WINDOW)
        return build_context(
            wide,
            state.nonfinite,
            restarts=(r.step for r in state.info.restarts),
            decimals=state.info.decimals,
            tags=state.info.metrics,
            early=early,
        )

    # -- views --------------------------------------------------------------------------
    def rows(self) -> pd.DataFrame:
        """Every row seen so far, as the polls delivered them (for checks and tests)."""
        cats = {c: str for c in ("run", "metric", "tag", "source")}
        parts = [p.astype(cats) for st in self.runs.values() for p in st.parts]
        return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()

    def snapshot(self) -> dict[str, Any]:
        """Plain data for the dashboard (one serialisation; the renderer uses only this)."""
        now = time.time()
        runs = []
        for st in self.runs.values():
            metrics = {}
            for m in KEY_METRICS:
                if m in st.wide.columns:
                    s = st.wide[m].dropna()
                    if len(s):
                        metrics[m] = {
                            "last": float(s.iloc[-1]),
                            "values": [float(x) for x in s.iloc[-40:]],
                        }
            firing = sorted(
                (v for v in st.verdicts.values() if v.state == "firing"),
                key=lambda v: -v.severity,
            )
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
                            "summary": v.episodes[-1].summary,
                            "checks": v.checks,
                        }
                        for v in firing
                    ],
                }
            )
        return {"runs": runs, "errors": dict(self.failing), "time": now}


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


class _WandbFollower:
    """A .wandb file or folder, re-read when it grows (records are small; runs few)."""

    def __init__(self, target: str):
        self.target = target
        self.sizes: dict[str, int] = {}
        self.sent: dict[tuple[str, str], int] = {}

    def poll(self) -> RunFrame:
        from rlwatch.sources import wandb_local

        frames = []
        for f in wandb_local.run_files(Path(self.target)):
            size = f.stat().st_size
            if self.sizes.get(str(f)) == size:
                continue
            self.sizes[str(f)] = size
            frame = wandb_local.load_file(f)
            (name,) = frame.runs
            last = self.sent.get((str(f), name))
            data = frame.data if last is None else frame.data[frame.data["step"] > last]
            if len(data):
                self.sent[(str(f), name)] = int(frame.data["step"].max())
                frames.append(RunFrame(data.reset_index(drop=True), frame.runs))
        return RunFrame.concat(frames)


class _LogDirFollower:
    """A folder of logs: new log files become new runs."""

    def __init__(self, target: Path, log_format: str | None):
        self.target, self.log_format = target, log_format
        self.followers: dict[Path, Any] = {}

    def poll(self) -> RunFrame:
        from rlwatch.sources import logs

        for f in logs.log_files(self.target):
            if f not in self.followers:
                try:
                    fmt = self.log_format or logs.sniff(f)
                except RlwatchError:
                    continue  # not a log (yet); looked at again next poll
                self.followers[f] = logs.Follower(f, fmt)
        return RunFrame.concat([fol.poll() for fol in self.followers.values()])


class _DirFollower:
    """A folder: TensorBoard runs, W&B run folders and log files, as they appear."""

    def __init__(self, target: Path, log_format: str | None):
        from rlwatch.sources import tensorboard

        self.tb = tensorboard.Follower(target)
        self.logs = _LogDirFollower(target, log_format)
        self.wandb = _WandbFollower(str(target))

    def poll(self) -> RunFrame:
        return RunFrame.concat([self.tb.poll(), self.logs.poll(), self.wandb.poll()])


def _follower(target: str, log_format: str | None, tracking_uri: str | None) -> Any:
    from rlwatch.errors import UsageError
    from rlwatch.sources import logs, tensorboard, wandb_api

    if target.startswith("mlflow:"):
        from rlwatch.sources import mlflow_source

        return mlflow_source.Follower(
            target[len("mlflow:") :].strip("/"), mlflow_source.tracking_uri(tracking_uri)
        )
    if wandb_api.parse(target) is not None:
        raise UsageError(
            f"{target}: following W&B server runs is not supported; follow the "
            "run's local wandb/ folder instead"
        )
    path = Path(target)
    if not path.exists():
        raise UsageError(f"{target}: no such file or directory")
    if path.is_dir():
        return _DirFollower(path, log_format)
    if tensorboard.is_event_file(path) and log_format is None:
        return tensorboard.Follower(path)
    if path.suffix == ".wandb":
        return _WandbFollower(target)
    return logs.Follower(path, log_format)
