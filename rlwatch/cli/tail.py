"""`rlwatch tail`: follow runs live; a dashboard on a terminal, one line per change elsewhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Annotated

import typer

from rlwatch.cli._common import (
    LOG_FORMAT_HELP,
    TARGETS_HELP,
    TRACKING_URI_HELP,
    ExitCode,
    SeverityChoice,
    user_errors,
)


def tail(
    targets: Annotated[list[str], typer.Argument(metavar="TARGET...", help=TARGETS_HELP)],
    interval: Annotated[
        float, typer.Option("--interval", "-n", min=0.1, help="Seconds between polls.")
    ] = 2.0,
    once: Annotated[bool, typer.Option("--once", help="Poll once, print one frame, exit.")] = False,
    exit_on: Annotated[
        SeverityChoice | None,
        typer.Option(
            "--exit-on",
            help="Watchdog: exit 1 as soon as a verdict at or above this severity fires.",
        ),
    ] = None,
    on_alert: Annotated[
        str | None,
        typer.Option(
            "--on-alert",
            help="Run this shell command when a verdict at or above --alert-on fires; "
            "it gets the verdict as JSON on stdin and RLWATCH_RUN, RLWATCH_CODE, RLWATCH_SEVERITY, "
            "RLWATCH_STEP, RLWATCH_SUMMARY in its environment.",
        ),
    ] = None,
    alert_on: Annotated[
        SeverityChoice, typer.Option("--alert-on", help="Severity that triggers --on-alert.")
    ] = SeverityChoice["warning"],
    stale_after: Annotated[
        float,
        typer.Option(
            "--stale-after", help="Seconds without an update before a run is called stale."
        ),
    ] = 300.0,
    plain: Annotated[
        bool, typer.Option("--plain", help="One line per state change even on a terminal.")
    ] = False,
    rules: Annotated[list[str] | None, typer.Option("--rules", help="Extra rule file.")] = None,
    select: Annotated[list[str] | None, typer.Option("--select", help="Only these rules.")] = None,
    ignore: Annotated[list[str] | None, typer.Option("--ignore", help="Leave these out.")] = None,
    log_format: Annotated[str | None, typer.Option("--log-format", help=LOG_FORMAT_HELP)] = None,
    tracking_uri: Annotated[
        str | None, typer.Option("--tracking-uri", help=TRACKING_URI_HELP)
    ] = None,
) -> None:
    """Follow runs as they are written and say, within one poll, when something goes wrong.

    On a terminal: a live dashboard (step, steps/min, last update, key metrics with sparklines,
    firing verdicts and their checks). Without one, or with NO_COLOR or --plain: one line per
    state change (a run appears or goes stale, a verdict fires or resolves), flushed at once.
    Ctrl-C stops it (exit 0). With --exit-on it is a watchdog: exit 1 when a verdict fires.

    Example: rlwatch tail runs/ --exit-on error --on-alert 'scancel $SLURM_JOB_ID'
    """
    from rlwatch.severity import Severity

    with user_errors():
        from rlwatch.engine.rules import load_rules
        from rlwatch.engine.select import select as choose
        from rlwatch.live import Watch

        watch = Watch(
            targets,
            choose(load_rules(rules), select, ignore),
            log_format=log_format,
            tracking_uri=tracking_uri,
            stale_after=stale_after,
        )
    tty = sys.stdout.isatty() and not os.environ.get("NO_COLOR") and not plain
    exit_rank = Severity.parse(exit_on.value) if exit_on else None
    alert_rank = Severity.parse(alert_on.value)

    def handle(events: list) -> bool:
        """Alerts and the watchdog; True when the watchdog says stop."""
        stop = False
        for ev in events:
            if not tty:
                print(ev.line(), flush=True)
            v = ev.verdict
            if ev.kind != "fired" or v is None:
                continue
            rank = v.severity
            if on_alert and rank >= alert_rank:
                _alert(on_alert, v)
            if exit_rank is not None and rank >= exit_rank:
                stop = True
        return stop

    try:
        if once or not tty:
            while True:
                stop = handle(watch.poll())
                if once:
                    if tty:
                        _print_dashboard(watch, interval)
                    raise typer.Exit(ExitCode.UNHEALTHY if stop else ExitCode.HEALTHY)
                if stop:
                    print(
                        f"rlwatch: watchdog: a verdict at or above {exit_on.value} fired",
                        file=sys.stderr,
                        flush=True,
                    )
                    raise typer.Exit(ExitCode.UNHEALTHY)
                time.sleep(interval)
        from rich.console import Console
        from rich.live import Live

        from rlwatch.render.dashboard import dashboard

        console = Console()
        with Live(console=console, auto_refresh=False, screen=False) as live:
            while True:
                stop = handle(watch.poll())
                live.update(
                    dashboard(watch.snapshot(), interval=interval, width=console.size.width),
                    refresh=True,
                )
                if stop:
                    break
                time.sleep(interval)
        console.print(f"watchdog: a verdict at or above {exit_on.value} fired", style="bold red")
        raise typer.Exit(ExitCode.UNHEALTHY)
    except KeyboardInterrupt:
        raise typer.Exit(ExitCode.HEALTHY) from None


def _print_dashboard(watch, interval: float) -> None:
    from rich.console import Console

    from rlwatch.render.dashboard import dashboard

    console = Console()
    console.print(dashboard(watch.snapshot(), interval=interval, width=console.size.width))


def _alert(command: str, verdict) -> None:
    data = verdict.to_dict()
    ep = verdict.episodes[-1]
    env = {
        **os.environ,
        "RLWATCH_RUN": verdict.run,
        "RLWATCH_CODE": verdict.code,
        "RLWATCH_SEVERITY": str(verdict.severity),
        "RLWATCH_STEP": str(ep.first_step),
        "RLWATCH_SUMMARY": ep.summary,
    }
    try:
        subprocess.run(
            command,
            shell=True,
            input=json.dumps(data, default=str),
            text=True,
            env=env,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        print(f"rlwatch: --on-alert command failed: {exc}", file=sys.stderr, flush=True)
