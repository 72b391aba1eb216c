"""`rlwatch diagnose`: read runs, evaluate the rule pack, report, and gate on the result."""

from __future__ import annotations

import enum
from typing import Annotated

import typer

from rlwatch.cli._common import (
    LOG_FORMAT_HELP,
    TARGETS_HELP,
    Format,
    echo_json,
    stdout_console,
    user_errors,
)


class Severity(str, enum.Enum):
    info = "info"
    warning = "warning"
    error = "error"


def diagnose(
    targets: Annotated[list[str], typer.Argument(metavar="TARGET...", help=TARGETS_HELP)],
    fmt: Annotated[Format, typer.Option("--format", "-f", help="Output format.")] = Format.text,
    log_format: Annotated[str | None, typer.Option("--log-format", help=LOG_FORMAT_HELP)] = None,
    rules: Annotated[list[str] | None, typer.Option(
        "--rules", help="A rule file to add; its rules override shipped ones with the same "
        "code. Repeatable.")] = None,
    select: Annotated[list[str] | None, typer.Option(
        "--select", help="Only these rules: a code (EX01), a prefix (EX) or a name / family "
        "(exploration). Repeatable.")] = None,
    ignore: Annotated[list[str] | None, typer.Option(
        "--ignore", help="Leave these rules out (same forms as --select). Repeatable.")] = None,
    fail_on: Annotated[Severity, typer.Option(
        "--fail-on", help="Exit 1 when a rule at or above this severity fired.")] = Severity.error,
    exit_zero: Annotated[bool, typer.Option(
        "--exit-zero", help="Exit 0 even when rules fired (report-only jobs).")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Also list skipped rules "
                                          "and each canonical metric's raw key.")] = False,
) -> None:
    """Read runs, evaluate the training-health rules, and say what is wrong.

    Exit codes: 0 healthy, 1 a rule at or above --fail-on fired, 2 rlwatch could not do its
    job (bad arguments, unreadable source, invalid rule file, or no rule could be evaluated).

    Example: rlwatch diagnose runs/grpo_qwen7b --fail-on warning
    """
    with user_errors():
        from rlwatch.engine.evaluate import evaluate_frame
        from rlwatch.engine.rules import SEVERITIES, load_rules
        from rlwatch.engine.select import select as choose
        from rlwatch.errors import SourceError
        from rlwatch.render.summary import summarise, summary_renderable
        from rlwatch.sources import load

        ruleset = choose(load_rules(rules), select, ignore)
        frame = load(targets, log_format=log_format)
        if frame.data.empty:
            raise SourceError(f"no scalars found in {', '.join(targets)}: nothing to diagnose")
        verdicts = [v.to_dict() for v in evaluate_frame(frame, ruleset)]
        if not any(v["state"] != "skipped" for v in verdicts):
            raise SourceError("no rule could be evaluated: none of the metrics the selected "
                              "rules need were found (see `rlwatch metrics TARGET`)")
        summary = summarise(frame)
        threshold = SEVERITIES.index(fail_on.value)
        failing = [v for v in verdicts if v["episodes"]
                   and SEVERITIES.index(v["severity"]) >= threshold]
    if fmt is Format.json:
        echo_json({**summary, "verdicts": verdicts,
                   "status": "unhealthy" if failing else "healthy",
                   "fail_on": fail_on.value})
    else:
        from rlwatch.render.verdicts import verdicts_renderable

        console = stdout_console()
        console.print(summary_renderable(summary, verbose=verbose))
        console.print(verdicts_renderable(verdicts, verbose=verbose))
        console.print(f"\n{'unhealthy' if failing else 'healthy'}: {len(failing)} verdict(s) at "
                      f"or above {fail_on.value}", highlight=False)
    if failing and not exit_zero:
        raise typer.Exit(1)
