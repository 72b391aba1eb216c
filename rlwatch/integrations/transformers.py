"""A guard inside training: `RLWatchCallback`, a `transformers.TrainerCallback`.

    from rlwatch.integrations.transformers import RLWatchCallback
    trainer = GRPOTrainer(..., callbacks=[RLWatchCallback(stop_on="error", html=True)])

On every `on_log` the logged scalars are appended to an in-memory run and fed to the same
incremental evaluator `rlwatch tail` uses (rlwatch/engine/incremental.py): each verdict that
fires or resolves is printed once through the Trainer's logger (`transformers.trainer`, so
transformers' verbosity settings apply); with `stop_on` (default
"error") a verdict at or above it sets `control.should_training_stop`, and the Trainer ends the
run after the current step (a `gate: last` rule -- a state a healthy run may pass through, such as
a reward model at chance during a slow warm-up -- is announced but judged at the end: it never
stops training). At the end of training (stopped or not) the report of the whole run
is written to `output_dir` (default `<args.output_dir>/rlwatch`): `rlwatch-report.txt`,
`rlwatch-report.json` and, with `html=True`, `rlwatch-report.html`. Rules, --select/--ignore
and fail_on follow the same configuration as the CLI (arguments > rlwatch.toml >
[tool.rlwatch] > defaults). Only the main process (world rank 0) evaluates and writes.

Cost: the rules are evaluated inline in `on_log`, so a stop lands on the step that fired.
`overhead` (default 0.01) is a budget: when one evaluation costs more than that fraction of the
time between two logs (a small model's fast steps), logs are evaluated N at a time (N adapts;
every log when steps are slow, as in real RL runs; a NaN/inf in a log is judged at once, before
the next step samples from broken weights); `None` evaluates every log. `background=True`
evaluates in a worker thread instead (off the loop's path, but the stop lands later: too late
when the next step crashes on NaN weights).

This module imports transformers; nothing else in rlwatch imports it, so `rlwatch --help`
stays instant.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from transformers import TrainerCallback
from transformers.utils import logging as hf_logging

__all__ = ["RLWatchCallback"]

# the Trainer's end-of-training summary and bookkeeping values: not training metrics
_SKIP = {
    "train_runtime",
    "train_samples_per_second",
    "train_steps_per_second",
    "total_flos",
    "train_loss",
    "epoch",
    "num_tokens",
    "num_input_tokens_seen",
}


class RLWatchCallback(TrainerCallback):
    """Evaluate rlwatch's health rules as the trainer logs; stop on trouble; write a report."""

    def __init__(
        self,
        *,
        stop_on: str | None = "error",
        alert_on: str = "warning",
        rules: list[str] | None = None,
        select: list[str] | None = None,
        ignore: list[str] | None = None,
        fail_on: str | None = None,
        output_dir: str | Path | None = None,
        html: bool = False,
        run_name: str | None = None,
        logger: Any = None,
        background: bool = False,
        overhead: float | None = 0.01,
    ) -> None:
        from rlwatch import config
        from rlwatch.engine.rules import load_rules
        from rlwatch.engine.select import select as choose
        from rlwatch.severity import Severity

        cfg = config.find()
        self.ruleset = choose(
            load_rules(cfg.get("rules", rules)),
            cfg.get("select", select),
            cfg.get("ignore", ignore),
        )
        self.stop_on = Severity.parse(stop_on) if stop_on else None
        self.alert_on = Severity.parse(alert_on)
        self.fail_on = Severity.parse(cfg.get("fail_on", fail_on) or "error")
        self.output_dir = Path(output_dir) if output_dir is not None else None
        self.html = html
        self.run_name = run_name
        self.logger = logger or hf_logging.get_logger("transformers.trainer")
        self.evaluator: Any = None
        self.stopped_by: Any = None  # the verdict that stopped training, if one did
        self.changes: list[Any] = []  # every fired/resolved change, in order
        self.report: Any = None
        self.report_paths: list[Path] = []
        self.seconds = 0.0  # time the training loop spent in this callback
        self.eval_seconds = 0.0  # time spent evaluating (in the worker thread when background)
        self.background = background
        self.overhead = overhead
        self.every = 1  # logs per evaluation (grows when one costs more than the budget)
        self.evaluations = 0
        self._pending: list[tuple[int, dict[str, float], float]] = []
        self._last_wall: float | None = None
        self._interval: float | None = None  # seconds between logs (moving average)
        self.stop_step: int | None = None
        self.errors: list[str] = []
        self._queue: Any = None
        self._thread: Any = None
        self._tags: dict[str, int] = {}
        self._rows: tuple[list[int], list[int], list[float], list[float]] = ([], [], [], [])

    # -- the training loop's events ------------------------------------------------------------
    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        from rlwatch.engine.incremental import Evaluator

        self.run_name = self.run_name or getattr(args, "run_name", None) or "train"
        self.evaluator = Evaluator(self.ruleset, run=self.run_name)
        if self.output_dir is None:
            self.output_dir = Path(args.output_dir) / "rlwatch"

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any
    ) -> None:
        if not logs or not state.is_world_process_zero:
            return
        t0 = time.perf_counter()
        if "train_runtime" in logs:  # the end-of-training summary, not a step
            return
        step = int(state.global_step)
        wall = time.time()
        scalars = {}
        tag_rows, step_rows, value_rows, wall_rows = self._rows
        for key, value in logs.items():
            if key in _SKIP or isinstance(value, bool) or not isinstance(value, int | float):
                continue
            v = float(value)
            scalars[key] = v
            code = self._tags.setdefault(key, len(self._tags))
            tag_rows.append(code)
            step_rows.append(step)
            value_rows.append(v)
            wall_rows.append(wall)
        if scalars:
            if self.evaluator is None:  # on_train_begin was not called (a bare loop)
                self.on_train_begin(args, state, control)
            if self._last_wall is not None:
                gap = wall - self._last_wall
                self._interval = gap if self._interval is None else 0.8 * self._interval + 0.2 * gap
            self._last_wall = wall
            self._pending.append((step, scalars, wall))
            finite = all(v == v and abs(v) != float("inf") for v in scalars.values())
            if len(self._pending) >= self.every or not finite:  # NaN/inf: judge it now
                self._flush()
        self._maybe_stop(control)
        self.seconds += time.perf_counter() - t0

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._maybe_stop(control)

    def _maybe_stop(self, control: Any) -> None:
        if self.stopped_by is not None and not control.should_training_stop:
            control.should_training_stop = True
            v = self.stopped_by
            self.logger.warning(
                f"rlwatch: stopping training: {v.code} ({v.severity}) fired at step "
                f"{self.stop_step}; report in {self.output_dir}"
            )

    # -- evaluation (inline, or in one worker thread off the training loop's path) ----------
    def _flush(self) -> None:
        batch, self._pending = self._pending, []
        if not batch:
            return
        if self.background:
            self._submit(batch)
        else:
            self._process(batch)

    def _submit(self, item: list[tuple[int, dict[str, float], float]]) -> None:
        import queue
        import threading

        if self._thread is None:
            self._queue = queue.SimpleQueue()
            self._thread = threading.Thread(target=self._work, name="rlwatch", daemon=True)
            self._thread.start()
        self._queue.put(item)

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            self._process(item)

    def _drain(self) -> None:
        """Wait until every submitted log has been evaluated."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None

    def _process(self, batch: list[tuple[int, dict[str, float], float]]) -> None:
        from rlwatch.report import fails

        t0 = time.perf_counter()
        step = batch[-1][0]
        try:
            if len(batch) == 1:
                changes = self.evaluator.log(step, batch[0][1], wall_time=batch[0][2])
            else:
                changes = self.evaluator.update(self._rows_of(batch))
            # the whole-history rules too (tail defers them to ~10% of its time; here the
            # overhead budget sets the pace, and a stop must land on the step that fired)
            changes += self.evaluator.tick(force=True)
        except Exception as exc:  # a guard must never take the training run down
            self.errors.append(f"step {step}: {exc!r}")
            self.logger.warning(f"rlwatch: could not evaluate step {step}: {exc!r}")
            return
        finally:
            cost = time.perf_counter() - t0
            self.eval_seconds += cost
            self.evaluations += 1
            self._adapt(cost)
        for ch in changes:
            self.changes.append(ch)
            self._announce(ch, step)
            if (
                ch.kind == "fired"
                and self.stop_on is not None
                and self.stopped_by is None
                and fails(ch.verdict, self.stop_on, final=False)
            ):
                self.stop_step = step
                self.stopped_by = ch.verdict

    def _adapt(self, cost: float) -> None:
        """Evaluate every N logs when one evaluation costs more than `overhead` x the time
        between logs (fast steps of a small model); every log when steps are slow."""
        if self.overhead is None or not self._interval:
            return
        import math

        need = cost / (self.overhead * self._interval)
        self.every = int(min(max(math.ceil(need), 1), 50))

    def _rows_of(self, batch: list[tuple[int, dict[str, float], float]]) -> Any:
        """Several logging calls as rows for Evaluator.update (raw keys resolved as in log)."""
        import numpy as np
        import pandas as pd

        from rlwatch import names
        from rlwatch.frame import RunInfo

        keys = list(dict.fromkeys(k for _, scalars, _ in batch for k in scalars))
        res = names.resolve(keys)
        ev = self.evaluator
        if ev.info is None:
            ev.info = RunInfo(ev.run or "run", "callback", "callback")
        ev.info.metrics.update(res.canonical)
        ev.info.scales.update(res.scales)
        if res.framework and not ev.info.framework:
            ev.info.framework, ev.info.framework_version = res.framework, res.version
        step, tag, value, wall = [], [], [], []
        for s, scalars, w in batch:
            for k, v in scalars.items():
                step.append(s)
                tag.append(k)
                value.append(v)
                wall.append(w)
        return pd.DataFrame(
            {
                "step": np.asarray(step, dtype=np.int64),
                "metric": [res.metric_of.get(k, k) for k in tag],
                "tag": tag,
                "value": np.asarray(value, dtype=float),
                "wall_time": np.asarray(wall, dtype=float),
            }
        )

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._flush()
        self._drain()
        if state.is_world_process_zero and self._rows[0]:
            self.write_report()

    # -- output ----------------------------------------------------------------------------------
    def _announce(self, ch: Any, step: int) -> None:
        v = ch.verdict
        if ch.kind == "fired" and v.severity >= self.alert_on:
            ep = ch.episode
            self.logger.warning(
                f"rlwatch: {str(v.severity).upper()} {v.code} {v.name} since step "
                f"{ep.first_step}: {ep.summary}"
            )
        elif ch.kind == "resolved" and v.severity >= self.alert_on:
            self.logger.warning(f"rlwatch: {v.code} {v.name} resolved at step {step}")

    def frame(self) -> Any:
        """The logged scalars so far as a RunFrame (the whole run, as `diagnose` reads it)."""
        import numpy as np

        from rlwatch.frame import RunFrame, RunInfo

        tag, step, value, wall = self._rows
        info = RunInfo(self.run_name or "train", "callback", str(self.output_dir or ""))
        return RunFrame.from_arrays(
            info,
            list(self._tags),
            np.asarray(tag, dtype=np.int32),
            np.asarray(step, dtype=np.int64),
            np.asarray(value, dtype=np.float64),
            np.asarray(wall, dtype=np.float64),
        )

    def write_report(self) -> list[Path]:
        """Write the report of the run so far: text and JSON (and HTML when asked)."""
        from io import StringIO

        from rich.console import Console

        from rlwatch.render.formats import RENDERERS
        from rlwatch.render.text import report_renderable
        from rlwatch.report import build

        self.report = build(self.frame(), self.ruleset, fail_on=str(self.fail_on), series=self.html)
        out = Path(self.output_dir or ".")
        out.mkdir(parents=True, exist_ok=True)
        buf = StringIO()
        Console(file=buf, width=100, color_system=None, highlight=False).print(
            report_renderable(self.report)
        )
        text = buf.getvalue()
        if self.stopped_by is not None:
            v = self.stopped_by
            text = (
                f"rlwatch stopped training: {v.code} {v.name} ({v.severity}) fired at step "
                f"{self.stop_step}.\n\n" + text
            )
        paths = {"rlwatch-report.txt": text, "rlwatch-report.json": RENDERERS["json"](self.report)}
        if self.html:
            paths["rlwatch-report.html"] = RENDERERS["html"](self.report)
        self.report_paths = []
        for name, content in paths.items():
            p = out / name
            p.write_text(content, encoding="utf-8")
            self.report_paths.append(p)
        self.logger.warning(f"rlwatch: {self.report.status}; report written to {out}")
        return self.report_paths
