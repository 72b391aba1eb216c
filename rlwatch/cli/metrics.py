"""`rlwatch metrics`: which canonical metrics were recognised in a run, from which raw keys."""

from __future__ import annotations

from typing import Annotated

import typer

from rlwatch.cli._common import (
    LOG_FORMAT_HELP,
    TARGETS_HELP,
    TRACKING_URI_HELP,
    Format,
    echo_json,
    stdout_console,
    user_errors,
)


def metrics(
    targets: Annotated[list[str], typer.Argument(metavar="TARGET...", help=TARGETS_HELP)],
    fmt: Annotated[Format, typer.Option("--format", "-f", help="Output format.")] = Format.text,
    log_format: Annotated[str | None, typer.Option("--log-format", help=LOG_FORMAT_HELP)] = None,
    tracking_uri: Annotated[
        str | None, typer.Option("--tracking-uri", help=TRACKING_URI_HELP)
    ] = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Also say what each canonical metric means.")
    ] = False,
) -> None:
    """Show how rlwatch understood each run's metric names.

    Per run: the framework detected, each canonical metric found with the raw key it was read
    from, and the raw keys left unmapped. Rules are written against the canonical names
    (rules/metrics.yaml).
    """
    with user_errors():
        from rlwatch.names import catalogue
        from rlwatch.render.summary import metrics_renderable
        from rlwatch.report import SCHEMA_VERSION, Report
        from rlwatch.sources import load

        report = Report.of_frame(load(targets, log_format=log_format, tracking_uri=tracking_uri))
        descriptions = {m.name: m.description for m in catalogue().metrics.values()}
    if fmt is Format.json:
        echo_json(
            {
                "schema_version": SCHEMA_VERSION,
                "runs": [
                    {
                        k: r[k]
                        for k in ("name", "framework", "framework_version", "metrics", "unmapped")
                    }
                    for r in report.runs
                ],
            }
        )
    else:
        stdout_console().print(metrics_renderable(report, descriptions if verbose else None))
