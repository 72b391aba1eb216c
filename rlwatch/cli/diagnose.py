"""`rlwatch diagnose`: read runs and report on them."""

from __future__ import annotations

import typer

from rlwatch.cli._common import TARGETS_HELP, Format, echo_json, stdout_console, user_errors


def diagnose(
    targets: list[str] = typer.Argument(..., metavar="TARGET...", help=TARGETS_HELP),
    fmt: Format = typer.Option(Format.text, "--format", "-f", help="Output format."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Also list each canonical "
                                 "metric with the raw key it was read from."),
) -> None:
    """Read runs and report what is in them: runs, steps, restarts, metrics recognised,
    reader warnings.

    Example: rlwatch diagnose runs/grpo_qwen7b
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
