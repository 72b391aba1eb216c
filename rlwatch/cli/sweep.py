"""`rlwatch diagnose` over many runs: units -> executor -> one Report -> the table (or a format)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from rlwatch.cli._common import report_skipped, report_warnings, stdout_console


def run_sweep(
    units: list[Any],
    cfg: Any,
    *,
    fmt: str,
    output: Path | None,
    rules: list[str] | None,
    select: list[str] | None,
    ignore: list[str] | None,
    fail_on: str | None,
    require: list[str] | None,
    detail: bool,
    verbose: bool,
    jobs: int | None,
    executor: str,
) -> int:
    """Diagnose every unit, print the result; returns the exit code."""
    import typer

    from rlwatch.errors import UsageError
    from rlwatch.executor import Settings, _ruleset, diagnose_many
    from rlwatch.names import catalogue
    from rlwatch.render import sweep as table
    from rlwatch.render.formats import RENDERERS
    from rlwatch.severity import Severity

    try:
        level = str(Severity.parse(cfg.get("fail_on", fail_on) or "error"))
    except ValueError as exc:
        raise UsageError(f"fail_on: {exc}") from None
    need = tuple(cfg.get("require", require) or ())
    unknown = [m for m in need if m not in catalogue().metrics]
    if unknown:
        raise UsageError(f"--require {unknown[0]!r} is not a canonical metric")
    if fmt == "html":
        raise UsageError("--format html shows one run; many runs: use text, json or markdown")
    settings = Settings(
        rules=tuple(cfg.get("rules", rules) or ()),
        select=tuple(cfg.get("select", select) or ()),
        ignore=tuple(cfg.get("ignore", ignore) or ()),
        fail_on=level,
        require=need,
        # the text table alone shows no checks, contexts or symptom tables: not computed
        explain=detail or output is not None or fmt != "text",
    )
    _ruleset(settings)  # a bad rule file or selection fails before any reading
    result = diagnose_many(units, settings, executor=executor, jobs=jobs, progress=True)
    report = result.report
    machine = fmt if fmt != "text" else ("json" if output else None)

    def render(kind: str) -> str:
        text = RENDERERS[kind](report)
        if kind == "markdown":  # the table first, then each run's section
            head, _, rest = text.partition("\n\n")
            return f"{head}\n\n{table.table_markdown(report)}\n{rest}"
        return text

    if output is not None:
        try:
            output.write_text(render(machine or "json"), encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"--output {output}: cannot write ({exc.strerror})") from None
    report_skipped(report.skipped)
    report_warnings(report)
    if output is None and machine is not None:
        typer.echo(render(machine), nl=False)
    else:
        console = stdout_console()
        console.print(table.table_renderable(report))
        if detail:
            from rlwatch.render.text import report_renderable

            for one in table.split(report):
                console.print(report_renderable(one, verbose=verbose))
    if fmt == "github" and os.environ.get("GITHUB_STEP_SUMMARY"):
        with open(os.environ["GITHUB_STEP_SUMMARY"], "a", encoding="utf-8") as f:
            f.write(render("markdown"))
    return result.exit_code
