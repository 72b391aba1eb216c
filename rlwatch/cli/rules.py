"""`rlwatch rules`: list, explain, check and test rule packs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rlwatch.cli._common import ExitCode, stdout_console, user_errors

app = typer.Typer(
    help="List, explain, check and test the rule packs.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


@app.command("list")
def list_rules(
    rules: Annotated[list[str] | None, typer.Option("--rules", help="Extra rule file.")] = None,
) -> None:
    """List every rule: code, severity, name, what it detects."""
    with user_errors():
        from rich.table import Table

        from rlwatch.engine.rules import load_rules

        table = Table(box=None, pad_edge=False, header_style="bold")
        for col in ("code", "severity", "name", "detects"):
            table.add_column(col, overflow="fold", no_wrap=col != "detects")
        for r in sorted(load_rules(rules).rules, key=lambda r: r.code):
            table.add_row(r.code, str(r.severity), r.name, r.description)
    stdout_console().print(table)


@app.command("explain")
def explain(code: Annotated[str, typer.Argument(help="A rule code, e.g. EX01.")]) -> None:
    """Show one rule: its condition, checks and runbook."""
    with user_errors():
        import yaml

        from rlwatch.engine.registry import describe, walk
        from rlwatch.engine.rules import load_rules
        from rlwatch.errors import UsageError

        ruleset = load_rules()
        rule = ruleset.get(code.upper())
        if rule is None:
            raise UsageError(
                f"no rule {code!r} (codes: {', '.join(sorted(r.code for r in ruleset.rules))})"
            )
    out = [
        f"{rule.code} {rule.name} ({rule.severity})",
        rule.description,
        "",
        "condition:",
        yaml.safe_dump(rule.when.to_spec(defaults=True), sort_keys=False).rstrip(),
        f"for: held across {rule.for_} of the run's logs; keep_firing_for: {rule.keep_firing_for}",
        "gate: last (fails the run only if still firing at its last step)"
        if rule.gate == "last"
        else "gate: any (an episode anywhere in the run fails it)",
        "",
        "condition kinds used (parameters: type, default, bounds):",
    ]
    for name in dict.fromkeys(n.KIND for n in walk(rule.when)):
        kind = describe(name)
        out.append(f"  {name}: {kind['doc'].splitlines()[0]}")
        for p in kind["params"]:
            if p["type"] == "conds":
                continue
            bits = [p["type"], "required" if p["required"] else f"default {p['default']}"]
            if p["low"] is not None or p["high"] is not None:
                bits.append(f"{p['low'] if p['low'] is not None else ''}..{p['high'] or ''}")
            if p.get("per_log") is not None:
                bits.append(f"logs: r x fewer every r steps, at least {p['per_log']}")
            out.append(f"    {p['name']} ({', '.join(bits)}): {p['doc']}")
    out += [
        "",
        f"summary: {rule.summary}",
        "",
        "checks:",
    ]
    out += [f"  - {c.metric}: {c.hint}" for c in rule.checks] or ["  (none)"]
    out += ["", "runbook:", rule.runbook.rstrip(), "", f"defined in {rule.file}:{rule.line}"]
    typer.echo("\n".join(out))


@app.command("check")
def check(files: Annotated[list[Path], typer.Argument(help="Rule files to validate.")]) -> None:
    """Validate rule files without data (schema, kinds, metrics, duplicate codes)."""
    with user_errors():
        from rlwatch.engine.rules import load_rules

        ruleset = load_rules(list(files), with_builtin=False)
    typer.echo(f"{len(files)} file(s), {len(ruleset.rules)} rule(s): OK")


@app.command("test")
def test(
    files: Annotated[
        list[Path] | None,
        typer.Argument(help="Rule test files (*.test.yaml). Default: the shipped pack's tests."),
    ] = None,
    run: Annotated[
        list[str] | None,
        typer.Option(
            "--run",
            help="Only the tests whose name (or file::name) matches this regular expression. "
            "Repeatable.",
        ),
    ] = None,
    junit: Annotated[
        Path | None, typer.Option("--junit", help="Also write the results as JUnit XML to FILE.")
    ] = None,
) -> None:
    """Run promtool-style rule tests. Exit 0 all pass, 1 a case failed, 2 an invalid file.

    Example: rlwatch rules test my.test.yaml --run 'spike' --junit rule-tests.xml
    """
    with user_errors():
        import re

        from rlwatch.engine.testing import builtin_test_files, junit_xml, load_cases
        from rlwatch.errors import UsageError

        try:
            patterns = [re.compile(p) for p in run or []]
        except re.error as exc:
            raise UsageError(f"--run: bad regular expression ({exc})") from None
        paths = list(files) if files else builtin_test_files()
        cases = [c for p in paths for c in load_cases(p)]
        if patterns:
            cases = [c for c in cases if any(p.search(c.id) for p in patterns)]
            if not cases:
                raise UsageError(f"--run {' '.join(run or [])!r} matches no test")
    results = []
    for case in cases:
        problems = case.run()
        results.append((case, problems))
        if problems:
            typer.echo(f"FAILED {case.id}")
            for p in problems:
                typer.echo(f"    {p}")
    failed = sum(bool(p) for _, p in results)
    if junit is not None:
        with user_errors():
            try:
                junit.write_text(junit_xml(results), encoding="utf-8")
            except OSError as exc:
                from rlwatch.errors import UsageError

                raise UsageError(f"--junit {junit}: cannot write ({exc.strerror})") from None
    typer.echo(f"{len(cases) - failed} passed, {failed} failed")
    if failed:
        raise typer.Exit(ExitCode.UNHEALTHY)
