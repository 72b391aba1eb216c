"""The `rlwatch` command: one small module per command, composed here."""

from __future__ import annotations

import contextlib
import gc
import inspect
import os
import sys
from collections.abc import Iterable

import typer
from typer._click.exceptions import ClickException
from typer._click.exceptions import UsageError as ClickUsageError
from typer.core import TyperGroup
from typer.exceptions import Abort, Exit

from rlwatch import __version__
from rlwatch.cli import diagnose, diff, metrics, rules, tail
from rlwatch.errors import ExitCode

DEBUG_ENV = "RLWATCH_DEBUG"


def _debugging() -> bool:
    return os.environ.get(DEBUG_ENV, "") not in ("", "0")


def _ascii_safe_streams() -> None:
    """Never die of a UnicodeEncodeError on an ASCII-only terminal or pipe: replace instead."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            with contextlib.suppress(ValueError, OSError):  # a detached stream
                reconfigure(errors="replace")


def unexpected(exc: BaseException) -> str:
    """The one line for an exception rlwatch did not expect (secrets redacted)."""
    from rlwatch.errors import redact_secrets

    if isinstance(exc, MemoryError):
        what = "ran out of memory reading the input"
    elif isinstance(exc, RecursionError):
        what = "the input is nested too deeply to read"
    else:
        text = (str(exc).strip().splitlines() or [""])[0]
        what = f"unexpected {type(exc).__name__}" + (f": {text}" if text else "")
    what = redact_secrets(what)
    if len(what) > 300:
        what = what[:297] + "..."
    return (
        f"rlwatch: error: {what} — this is not a verdict on the run; rerun with --debug for "
        "the traceback (and report it if the input is valid)"
    )


class GuardedGroup(TyperGroup):
    """The one top-level guard: whatever happens, a crash is exit 2 with one line, never a
    traceback and never exit 1 (which means only "an error verdict fired").

    `--debug` (anywhere on the command line, or RLWATCH_DEBUG=1) shows the traceback instead.
    """

    def main(self, args=None, *a, **kw):  # type: ignore[no-untyped-def,override]
        args = list(sys.argv[1:] if args is None else args)
        if "--debug" in args[: args.index("--") if "--" in args else len(args)]:
            args.remove("--debug")
            os.environ[DEBUG_ENV] = "1"
        _ascii_safe_streams()
        return super().main(args, *a, **kw)

    def invoke(self, ctx):  # type: ignore[no-untyped-def]
        try:
            return super().invoke(ctx)
        except (Exit, ClickUsageError):
            raise
        except Abort:
            raise Exit(130) from None
        except ClickException as exc:
            exc.exit_code = int(ExitCode.FAILED)
            raise
        except KeyboardInterrupt:
            raise Exit(130) from None
        except BrokenPipeError:
            with contextlib.suppress(OSError):
                sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - the reader went away
            raise Exit(int(ExitCode.FAILED)) from None
        except Exception as exc:
            from rlwatch.errors import RlwatchError

            if _debugging():
                import traceback

                traceback.print_exc()
            if isinstance(exc, RlwatchError):
                from rlwatch.errors import one_line

                typer.echo(f"rlwatch: error: {one_line(str(exc))}", err=True)
                raise Exit(int(exc.exit_code)) from None
            typer.echo(unexpected(exc), err=True)
            raise Exit(int(ExitCode.FAILED)) from None


def _light_coercion() -> None:
    """typer >= 0.29 checks every parameter's value with a pydantic TypeAdapter, built on
    first use: pydantic was imported (~0.06 s of start-up) by a `diagnose` of one log even
    with no option given. Values that need no conversion -- an option left unset, a string
    for a `str`, strings for a `list[str]`, an Enum member for its Enum, a number of the
    annotated type within its bounds -- are taken as they are, which is what the adapter
    returns for them; anything else goes to typer's adapter, built then (its messages for
    bad values unchanged). Older typers and unexpected layouts are left alone."""
    import enum
    from typing import get_args, get_origin

    core = sys.modules.get("typer.core")
    param_cls = getattr(core, "_TyperParameter", None)
    build = getattr(core, "build_runtime_param", None)
    original = getattr(param_cls, "get_runtime_param", None)
    if param_cls is None or build is None or original is None:
        return

    class Light:
        def __init__(self, owner: object) -> None:
            self.owner = owner

        def coerce(self, value, param, ctx):  # type: ignore[no-untyped-def]
            multi = param.multiple or param.nargs == -1
            if value is None:  # as typer's RuntimeParam.coerce
                return () if multi else None
            desc = param.type_descriptor
            ann = desc.annotation
            if desc.parameter_info.parser is None and not desc.is_file:
                if ann is str and isinstance(value, str) and not multi:
                    return value
                if (
                    get_origin(ann) is list
                    and get_args(ann) == (str,)
                    and isinstance(value, list | tuple)
                    and all(isinstance(v, str) for v in value)
                ):
                    return list(value)
                if isinstance(ann, type) and issubclass(ann, enum.Enum) and type(value) is ann:
                    return value
                if ann in (int, float) and type(value) is ann:  # a default, in its range
                    lo, hi = desc.parameter_info.min, desc.parameter_info.max
                    if (lo is None or value >= lo) and (hi is None or value <= hi):
                        return value
            return original(self.owner).coerce(value, param=param, ctx=ctx)

    def get_runtime_param(self):  # type: ignore[no-untyped-def]
        if self._runtime_param is not None:
            return self._runtime_param
        return Light(self)

    param_cls.get_runtime_param = get_runtime_param


_light_coercion()

SETTINGS: dict = dict(
    cls=GuardedGroup,
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
    "  rlwatch diff runs/good runs/new     worse than a known-good run?\n\n"
    "  rlwatch metrics train.log     how the metric names were read\n\n"
    "  rlwatch rules explain EX03     what a rule checks and why\n\n"
    "Exit codes: 0 healthy, 1 a verdict at or above --fail-on fired, 2 rlwatch could not do "
    "its job (bad arguments, unreadable source, invalid rule file, nothing to evaluate) or "
    "crashed — a crash is always 2, never 1. Add --debug anywhere to see a traceback.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,  # plain help: rich's help formatter costs ~0.15 s of start-up
    pretty_exceptions_show_locals=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"rlwatch {__version__}")
        raise typer.Exit()


def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Run monitor and health diagnoser for RL post-training runs."""


COMMANDS = {
    "diagnose": diagnose.diagnose,
    "metrics": metrics.metrics,
    "tail": tail.tail,
    "diff": diff.diff,
    "rules": rules.app,
}


def build(names: Iterable[str] = COMMANDS, *, listing: bool = False) -> typer.Typer:
    """The `rlwatch` app with the commands `names`. typer builds every parameter of every
    command it holds before it parses a word (~0.04 s here), so `main` builds only the command
    a command line names, and for the top-level help (`listing`) only each command's name and
    help: a stand-in that takes no parameter and is never run (no command is on that line)."""
    cli = typer.Typer(**SETTINGS)
    cli.callback()(_root)
    for name in names:
        target = COMMANDS[name]
        if listing:
            help_ = target.info.help if isinstance(target, typer.Typer) else inspect.getdoc(target)

            def stand_in() -> None:  # pragma: no cover - no command word, so never invoked
                raise RuntimeError("a help-listing stand-in was invoked")

            cli.command(name, help=help_)(stand_in)
        elif isinstance(target, typer.Typer):
            cli.add_typer(target, name=name)
        else:
            cli.command(name)(target)
    return cli


app = build()


def _for(args: list[str]) -> typer.Typer:
    """The app for this command line. The root takes flags only, so its first word that is not
    an option is the command: that command alone if it is one, all of them if not (the message
    for an unknown command lists them); with no such word (`--help`, nothing, `--version`) only
    the listing."""
    for arg in args:
        if arg == "--":
            break
        if not arg.startswith("-"):
            return build([arg]) if arg in COMMANDS else app
    else:
        return build(listing=True)
    return app


def main() -> None:
    try:
        _for(sys.argv[1:])()
    except KeyboardInterrupt:  # pragma: no cover - interactive
        raise SystemExit(130) from None
    except SystemExit:
        raise
    except BaseException as exc:  # the guard of last resort (errors outside any command)
        if _debugging():
            raise
        try:
            print(unexpected(exc), file=sys.stderr)
        finally:
            raise SystemExit(int(ExitCode.FAILED)) from None
    finally:
        # The interpreter's last garbage collections walk every object left, pandas' and
        # pyarrow's included: ~0.2-0.3 s after the answer is printed. Nothing rlwatch keeps
        # needs collecting then (files are closed, atexit handlers and finalizers still run),
        # so the objects are moved out of the collector's sight first.
        gc.freeze()
