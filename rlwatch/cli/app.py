"""The `rlwatch` command: one small module per command, composed here."""

from __future__ import annotations

import typer

from rlwatch import __version__
from rlwatch.cli import diagnose, metrics, rules, tail

app = typer.Typer(
    name="rlwatch",
    help="Run monitor and health diagnoser for RL post-training runs (PPO, GRPO, DPO, ...).\n\n"
         "Reads TensorBoard event files written by verl, TRL, OpenRLHF, NeMo RL and others, "
         "maps their metric names to canonical ones, and reports what it found.\n\n"
         "Exit codes: 0 healthy, 1 unhealthy, 2 rlwatch could not do its job "
         "(bad arguments, unreadable source, nothing to evaluate).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"rlwatch {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    """Run monitor and health diagnoser for RL post-training runs."""


app.command("diagnose")(diagnose.diagnose)
app.command("metrics")(metrics.metrics)
app.command("tail")(tail.tail)
app.add_typer(rules.app, name="rules")


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:  # pragma: no cover - interactive
        raise SystemExit(130) from None
