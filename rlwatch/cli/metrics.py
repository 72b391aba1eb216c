"""`rlwatch metrics`: which canonical metrics were recognised in a run, from which raw keys."""

from __future__ import annotations

import typer

from rlwatch.cli._common import TARGETS_HELP, Format, echo_json, stdout_console, user_errors


def metrics(
    targets: list[str] = typer.Argument(..., metavar="TARGET...", help=TARGETS_HELP),
    fmt: Format = typer.Option(Format.text, "--format", "-f", help="Output format."),
) -> None:
    """Show, per run, the framework detected, each canonical metric found with the raw key
    it was read from, and the raw keys left unmapped.

    Rules are written against canonical names (rules/metrics.yaml); this is how to check that
    rlwatch understood your run.
    """
    with user_errors():
        from rlwatch.names import catalogue
        from rlwatch.render.summary import metrics_renderable, summarise
        from rlwatch.sources import load

        summary = summarise(load(targets))
        descriptions = {m.name: m.description for m in catalogue().metrics.values()}
    if fmt is Format.json:
        echo_json({"schema_version": summary["schema_version"],
                   "runs": [{k: r[k] for k in ("name", "framework", "framework_version",
                                               "metrics", "unmapped")}
                            for r in summary["runs"]]})
    else:
        stdout_console().print(metrics_renderable(summary, descriptions))
