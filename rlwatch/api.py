"""The library API (usable from a notebook): load runs, load rules, diagnose."""

from __future__ import annotations

import os
import sys
from typing import Any

from rlwatch.engine.rules import RuleSet, load_rules
from rlwatch.errors import SourceError, UsageError
from rlwatch.frame import RunFrame
from rlwatch.report import Report, build
from rlwatch.sources import load as load_run

__all__ = ["Report", "RunFrame", "diagnose", "load_rules", "load_run"]


def _progress(message: str, enabled: bool) -> Any:
    import contextlib

    if not enabled or not sys.stderr.isatty():
        return contextlib.nullcontext()
    from rich.console import Console

    return Console(stderr=True).status(message)


def _has_finite(frame: RunFrame, run: str, metric: str) -> bool:
    import numpy as np

    d = frame.run_data(run)
    values = d.loc[d["metric"] == metric, "value"].to_numpy()
    return bool(np.isfinite(values).any())


def diagnose(
    targets: list[str] | str | os.PathLike[str],
    *,
    rules: list[str] | None = None,
    select: list[str] | None = None,
    ignore: list[str] | None = None,
    fail_on: str = "error",
    require: list[str] | None = None,
    log_format: str | None = None,
    tracking_uri: str | None = None,
    progress: bool = False,
    series: bool = False,
    timeout: float | None = None,
) -> Report:
    """Read `targets`, evaluate the rules, and return the Report.

    `series`: carry downsampled curves in the Report (the HTML report, `diff`).
    Raises SourceError when nothing could be read or no rule could be evaluated, UsageError for
    bad selections or a --require'd metric a run does not have.
    """
    from rlwatch.engine.select import select as choose
    from rlwatch.names import catalogue
    from rlwatch.severity import Severity

    try:
        fail_on = str(Severity.parse(fail_on))
    except ValueError as exc:
        raise UsageError(f"fail_on: {exc}") from None
    unknown = [m for m in require or [] if m not in catalogue().metrics]
    if unknown:
        raise UsageError(
            f"--require {unknown[0]!r} is not a canonical metric (see "
            "rules/metrics.yaml or `rlwatch metrics TARGET`)"
        )
    if isinstance(targets, str | os.PathLike):
        targets = [os.fspath(targets)]
    ruleset: RuleSet = choose(load_rules(rules), select, ignore)
    with _progress(f"reading {len(targets)} target(s)", progress):
        frame = load_run(targets, log_format=log_format, tracking_uri=tracking_uri, timeout=timeout)
    if frame.data.empty:
        raise SourceError(
            f"no scalars found in {', '.join(map(str, targets))}: nothing to diagnose "
            "(a run with no scalar logged yet cannot be judged healthy)"
        )
    for metric in require or []:
        missing = [n for n, info in frame.runs.items() if metric not in info.metrics]
        if missing:
            raise SourceError(
                f"required metric {metric!r} not found in run(s) {', '.join(missing)}"
            )
        empty = [n for n in frame.runs if not _has_finite(frame, n, metric)]
        if empty:
            raise SourceError(
                f"required metric {metric!r} has no finite value (only NaN/inf) in run(s) "
                f"{', '.join(empty)}"
            )
    with _progress("evaluating rules", progress):
        report = build(frame, ruleset, fail_on=fail_on, series=series)
    if not any(v.state != "skipped" for v in report.verdicts):
        raise SourceError(unevaluated(report.verdicts, runs=report.runs))
    return report


def unevaluated(verdicts: list[Any], runs: list[dict[str, Any]]) -> str:
    """Why no rule could be evaluated (every verdict skipped): too few logs, or no metric;
    with the first thing a reader warned of (a cut last line may be why the logs are few)."""
    where = f" on any of the {len(runs)} run(s)" if len(runs) > 1 else ""
    few = next((v for v in verdicts if v.reason.startswith("too few logs")), None)
    if few is not None:
        warned = [str(w) for run in runs for w in run.get("warnings", [])]
        more = f" (+{len(warned) - 1} more)" if len(warned) > 1 else ""
        also = f"; the reader warned: {warned[0]}{more}" if warned else ""
        return f"no rule could judge{where}: {few.run}: {few.reason}; nothing fired in them{also}"
    return (
        f"no rule could be evaluated{where}: none of the metrics the selected rules need were "
        "found (see `rlwatch metrics TARGET`)"
    )
