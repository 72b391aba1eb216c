"""`rlwatch diff BASELINE CANDIDATE`: a run against a known-good one; gate on regressions."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated

import typer

from rlwatch.cli._common import (
    LOG_FORMAT_HELP,
    TRACKING_URI_HELP,
    ExitCode,
    SeverityChoice,
    user_errors,
)


class DiffFormat(str, enum.Enum):
    text = "text"
    json = "json"
    markdown = "markdown"
    html = "html"


class Align(str, enum.Enum):
    auto = "auto"
    step = "step"
    fraction = "fraction"


def diff(
    baseline: Annotated[str, typer.Argument(help="The known-good run (any TARGET form).")],
    candidate: Annotated[str, typer.Argument(help="The run to judge against it.")],
    fmt: Annotated[
        DiffFormat,
        typer.Option(
            "--format",
            "-f",
            help="text, json, markdown, or html (the candidate's report with both runs overlaid).",
        ),
    ] = DiffFormat.text,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write the --format output to FILE.")
    ] = None,
    fail_on: Annotated[
        SeverityChoice,
        typer.Option(
            "--fail-on",
            help="Exit 1 when a new verdict or a worse metric at or above this severity.",
        ),
    ] = SeverityChoice["error"],
    metric_severity: Annotated[
        SeverityChoice,
        typer.Option("--metric-severity", help="The severity of a metric worse than baseline."),
    ] = SeverityChoice["error"],
    align: Annotated[
        Align,
        typer.Option(
            "--align",
            help="auto: by step when the runs have the same length (within 10%), else by "
            "fraction of training.",
        ),
    ] = Align.auto,
    tolerance: Annotated[
        float,
        typer.Option(
            "--tolerance",
            min=0.0,
            help="How many robust spreads of the baseline's own noise count as a change.",
        ),
    ] = 3.0,
    min_change: Annotated[
        float,
        typer.Option(
            "--min-change",
            min=0.0,
            help="...and at least this fraction of the baseline's value (runs of one recipe with "
            "another seed differ by more than their noise).",
        ),
    ] = 0.25,
    rules: Annotated[list[str] | None, typer.Option("--rules", help="Extra rule file.")] = None,
    select: Annotated[list[str] | None, typer.Option("--select", help="Only these rules.")] = None,
    ignore: Annotated[list[str] | None, typer.Option("--ignore", help="Leave these out.")] = None,
    exit_zero: Annotated[
        bool, typer.Option("--exit-zero", help="Exit 0 even on a regression.")
    ] = False,
    log_format: Annotated[str | None, typer.Option("--log-format", help=LOG_FORMAT_HELP)] = None,
    tracking_uri: Annotated[
        str | None, typer.Option("--tracking-uri", help=TRACKING_URI_HELP)
    ] = None,
) -> None:
    """Compare CANDIDATE with a known-good BASELINE run: verdicts new in the candidate, key
    metrics worse beyond the baseline's own noise (and from which step), metrics better.

    Exit codes: 0 no regression, 1 a new verdict or worse metric at or above --fail-on,
    2 rlwatch could not read or compare the runs.

    Example: rlwatch diff runs/nightly-2024-06-01 runs/nightly-today --format markdown
    """
    with user_errors():
        from rlwatch.diff import Options, run_diff
        from rlwatch.render import diff as render

        opts = Options(
            align=align.value,
            tolerance=tolerance,
            min_change=min_change,
            metric_severity=metric_severity.value,
            fail_on=fail_on.value,
        )
        result, report = run_diff(
            baseline,
            candidate,
            rules=rules,
            select=select,
            ignore=ignore,
            log_format=log_format,
            tracking_uri=tracking_uri,
            opts=opts,
        )
        if fmt is DiffFormat.html:
            text = render.render_diff_html(result, report.to_dict())
        else:
            text = render.RENDERERS[fmt.value](result)
        if output is not None:
            try:
                output.write_text(text, encoding="utf-8")
            except OSError as exc:
                from rlwatch.errors import UsageError

                raise UsageError(f"--output {output}: cannot write ({exc.strerror})") from None
    if output is None:
        typer.echo(text, nl=False)
    elif fmt is not DiffFormat.text:
        typer.echo(render.render_diff_text(result), nl=False)
    if result["status"] == "regressed" and not exit_zero:
        raise typer.Exit(ExitCode.UNHEALTHY)
