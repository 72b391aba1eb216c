"""`rlwatch diagnose`: read runs, evaluate the rule pack, report, and gate on the result."""

from __future__ import annotations

import enum
import os
from pathlib import Path
from typing import Annotated

import typer

from rlwatch.cli._common import (
    LOG_FORMAT_HELP,
    TARGETS_HELP,
    TIMEOUT_HELP,
    TRACKING_URI_HELP,
    ExitCode,
    SeverityChoice,
    report_skipped,
    report_warnings,
    stdout_console,
    user_errors,
)


class ReportFormat(str, enum.Enum):
    text = "text"
    json = "json"
    junit = "junit"
    github = "github"
    markdown = "markdown"
    html = "html"


def diagnose(
    targets: Annotated[list[str], typer.Argument(metavar="TARGET...", help=TARGETS_HELP)],
    fmt: Annotated[
        ReportFormat,
        typer.Option(
            "--format",
            "-f",
            help="text for people; json, junit, github (workflow annotations; "
            "also appends a table to $GITHUB_STEP_SUMMARY) or markdown for machines; html: "
            "one self-contained page with the curves (opens offline).",
        ),
    ] = ReportFormat.text,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Write the --format report (json when --format is text) to FILE; "
            "the human view still goes to the terminal.",
        ),
    ] = None,
    html: Annotated[
        Path | None,
        typer.Option(
            "--html",
            help="Also write the HTML report (curves, episodes, checks) to FILE; "
            "--format github and markdown then link it.",
        ),
    ] = None,
    baseline: Annotated[
        str | None,
        typer.Option(
            "--baseline",
            help="Also compare the (one) TARGET with this known-good run, as `rlwatch diff` "
            "does; a regression fails the gate too.",
        ),
    ] = None,
    rules: Annotated[
        list[str] | None,
        typer.Option(
            "--rules",
            help="A rule file to add; its rules override shipped ones with the same "
            "code. Repeatable.",
        ),
    ] = None,
    select: Annotated[
        list[str] | None,
        typer.Option(
            "--select",
            help="Only these rules: a code (EX01), a prefix (EX) or a name / family "
            "(exploration). Repeatable.",
        ),
    ] = None,
    ignore: Annotated[
        list[str] | None,
        typer.Option(
            "--ignore", help="Leave these rules out (same forms as --select). Repeatable."
        ),
    ] = None,
    fail_on: Annotated[
        SeverityChoice | None,
        typer.Option(
            "--fail-on", help="Exit 1 when a rule at or above this severity fired [default: error]."
        ),
    ] = None,
    require: Annotated[
        list[str] | None,
        typer.Option(
            "--require", help="A canonical metric every run must have (else exit 2). Repeatable."
        ),
    ] = None,
    exit_zero: Annotated[
        bool, typer.Option("--exit-zero", help="Exit 0 even when rules fired (report-only jobs).")
    ] = False,
    log_format: Annotated[str | None, typer.Option("--log-format", help=LOG_FORMAT_HELP)] = None,
    tracking_uri: Annotated[
        str | None, typer.Option("--tracking-uri", help=TRACKING_URI_HELP)
    ] = None,
    timeout: Annotated[float, typer.Option("--timeout", min=0.1, help=TIMEOUT_HELP)] = 60.0,
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose", "-v", help="Also list skipped rules and each canonical metric's raw key."
        ),
    ] = False,
    filters: Annotated[
        list[str] | None,
        typer.Option(
            "--filter",
            help="Many-run targets: keep runs where status=..., tag=..., tags.<key>=... or "
            "params.<key>=... (!= negates). Repeatable; all must hold.",
        ),
    ] = None,
    detail: Annotated[
        bool,
        typer.Option("--detail", help="Many runs: after the table, each run's verdicts."),
    ] = False,
    jobs: Annotated[
        int | None,
        typer.Option(
            "--jobs",
            "-j",
            min=1,
            help="Many runs: processes (or Ray tasks in flight) [default: the number of cores].",
        ),
    ] = None,
    executor: Annotated[
        str,
        typer.Option(
            "--executor",
            help="Many runs: process (a local process pool) or ray (tasks on the cluster in "
            "RAY_ADDRESS, else a local Ray; needs rlwatch[ray]).",
        ),
    ] = "process",
) -> None:
    """Read runs, evaluate the training-health rules, and say what is wrong.

    Exit codes: 0 healthy, 1 a rule at or above --fail-on fired, 2 rlwatch could not do its
    job (bad arguments, unreadable source, invalid rule file, or no rule could be evaluated).
    Settings can live in [tool.rlwatch] of pyproject.toml or in rlwatch.toml; flags win.

    Example: rlwatch diagnose runs/grpo_qwen7b --fail-on warning --format github
    """
    with user_errors():
        from rlwatch import config
        from rlwatch.api import diagnose as run_diagnosis
        from rlwatch.render.formats import RENDERERS

        cfg = config.find()
        from rlwatch.executor import expand

        units = expand(
            targets,
            log_format=cfg.get("log_format", log_format),
            tracking_uri=tracking_uri,
            filters=filters,
            timeout=timeout,
        )
        if len(units) > 1 or units[0].kind != "target":  # many runs, or a many-run target
            from rlwatch.cli.sweep import run_sweep

            code = run_sweep(
                units,
                cfg,
                fmt=fmt.value,
                output=output,
                rules=rules,
                select=select,
                ignore=ignore,
                fail_on=fail_on.value if fail_on else None,
                require=require,
                detail=detail,
                verbose=verbose,
                jobs=jobs,
                executor=executor,
            )
            if code == ExitCode.UNHEALTHY and exit_zero:
                code = ExitCode.HEALTHY
            raise typer.Exit(code)
        report = run_diagnosis(
            targets,
            rules=cfg.get("rules", rules),
            select=cfg.get("select", select),
            ignore=cfg.get("ignore", ignore),
            fail_on=cfg.get("fail_on", fail_on.value if fail_on else None) or "error",
            require=cfg.get("require", require),
            log_format=cfg.get("log_format", log_format),
            tracking_uri=tracking_uri,
            progress=True,
            series=fmt is ReportFormat.html or html is not None,
            timeout=timeout,
        )
        if baseline is not None:
            report.diff = _baseline_diff(
                baseline, targets, str(report.fail_on), rules, select, ignore
            )
        report_skipped(report.skipped)
        report_warnings(report)
        machine = fmt.value if fmt is not ReportFormat.text else ("json" if output else None)
        for path, kind in ((html, "html"), (output, machine)):
            if path is None:
                continue
            try:
                path.write_text(RENDERERS[kind](report), encoding="utf-8")
            except OSError as exc:
                from rlwatch.errors import UsageError

                flag = "--html" if kind == "html" and path is html else "--output"
                raise UsageError(f"{flag} {path}: cannot write ({exc.strerror})") from None
            if path is html:
                report.html_report = str(html)
    if output is None and machine is not None:
        typer.echo(RENDERERS[machine](report) + _diff_text(report, machine), nl=False)
    else:
        from rlwatch.render.text import report_renderable

        stdout_console().print(report_renderable(report, verbose=verbose))
        typer.echo(_diff_text(report, "text"), nl=False)
    if fmt is ReportFormat.github and os.environ.get("GITHUB_STEP_SUMMARY"):
        with open(os.environ["GITHUB_STEP_SUMMARY"], "a", encoding="utf-8") as f:
            f.write(RENDERERS["markdown"](report) + _diff_text(report, "markdown"))
    regressed = bool(report.diff) and report.diff["status"] == "regressed"
    if (not report.healthy or regressed) and not exit_zero:
        raise typer.Exit(ExitCode.UNHEALTHY)


def _baseline_diff(baseline, targets, fail_on, rules, select, ignore) -> dict:
    """`--baseline RUN`: the diff of the one target against it (plain data)."""
    from rlwatch.diff import Options, run_diff
    from rlwatch.errors import UsageError

    if len(targets) != 1:
        raise UsageError("--baseline compares one TARGET with the baseline; got several")
    result, _ = run_diff(
        baseline,
        targets[0],
        rules=rules,
        select=select,
        ignore=ignore,
        opts=Options(fail_on=fail_on),
    )
    return result


def _diff_text(report, fmt: str | None) -> str:
    """The diff's own rendering to follow the report (json and html carry it inside)."""
    d = report.diff
    if not d or fmt in ("json", "html", "junit"):
        return ""
    from rlwatch.render import diff as render

    if fmt == "github":
        return render.github_lines(d)
    if fmt == "markdown":
        return "\n" + render.render_diff_markdown(d)
    return "\n" + render.render_diff_text(d)
