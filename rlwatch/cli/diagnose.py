"""`rlwatch diagnose`: read runs and report on them."""

from __future__ import annotations

from typing import Annotated

import typer

from rlwatch.cli._common import TARGETS_HELP, Format, echo_json, stdout_console, user_errors


def diagnose(
    targets: Annotated[list[str], typer.Argument(metavar="TARGET...", help=TARGETS_HELP)],
    fmt: Annotated[Format, typer.Option("--format", "-f", help="Output format.")] = Format.text,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Also list each canonical "
                                          "metric with the raw key it was read from.")] = False,
) -> None:
    """Read runs and report what is in them.

    Runs, steps, restarts, canonical metrics recognised and reader warnings, per run.

    Example: rlwatch diagnose runs/grpo_qwen7b --format json
    """
    with user_errors():
        from rlwatch.errors import SourceError
        from rlwatch.render.summary import summarise, summary_renderable
        from rlwatch.sources import load

        frame = load(targets)
        if frame.data.empty:
            raise SourceError(f"no scalars found in {', '.join(targets)}: nothing to diagnose")
        summary = summarise(frame)
    if fmt is Format.json:
        echo_json(summary)
    else:
        stdout_console().print(summary_renderable(summary, verbose=verbose))
