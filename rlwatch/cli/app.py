"""The `rlwatch` command: one small module per command, composed here."""

from __future__ import annotations

import typer

from rlwatch import __version__
from rlwatch.cli import diagnose, diff, metrics, rules, tail

app = typer.Typer(
    name="rlwatch",
    help="Run monitor and health diagnoser for RL post-training runs (PPO, GRPO, RLOO, DAPO, "
    "DPO, reward models) made with verl, TRL, OpenRLHF, NeMo RL, prime-rl, Tinker and "
    "others.\n\n"
    "Reads TensorBoard event files, verl/TRL/JSONL logs, W&B run folders, trackio projects, "
    "SwanLab run folders, MLflow and W&B runs; maps each framework's metric names to canonical "
    "ones; evaluates YAML "
    "training-health rules; says what is wrong, since which step, and what to check.\n\n"
    "Examples:\n\n"
    "  rlwatch diagnose runs/grpo     what went wrong; the CI gate\n\n"
    "  rlwatch tail runs/ --exit-on error     watch live; stop on trouble\n\n"
    "  rlwatch metrics train.log     how the metric names were read\n\n"
    "  rlwatch rules explain EX03     what a rule checks and why\n\n"
    "Exit codes: 0 healthy, 1 a verdict at or above --fail-on fired, 2 rlwatch could not do "
    "its job (bad arguments, unreadable source, invalid rule file, nothing to evaluate).",
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
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Run monitor and health diagnoser for RL post-training runs."""


app.command("diagnose")(diagnose.diagnose)
app.command("metrics")(metrics.metrics)
app.command("tail")(tail.tail)
app.command("diff")(diff.diff)
app.add_typer(rules.app, name="rules")


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:  # pragma: no cover - interactive
        raise SystemExit(130) from None
