"""The human view of a Report (pure: Report in, rich renderable out; fits 80 columns)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlwatch.engine.evaluate import Verdict
    from rlwatch.report import Report

STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}
BARS = "▁▂▃▄▅▆▇█"


def sparkline(values: list[Any]) -> str:
    nums = [v for v in values if isinstance(v, int | float)]
    if not nums:
        return ""
    lo, hi = min(nums), max(nums)
    span = hi - lo
    out = []
    for v in values:
        if not isinstance(v, int | float):
            out.append("×" if v in ("inf", "-inf") else " ")
        else:
            out.append(BARS[0 if span == 0 else min(7, int((v - lo) / span * 7.999))])
    return "".join(out)


def _fmt(x: Any) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x)


def report_renderable(report: Report, *, verbose: bool = False) -> Any:
    from rich.console import Group
    from rich.text import Text

    from rlwatch.render.formats import fired_in_order
    from rlwatch.render.summary import summary_renderable

    parts: list[Any] = [summary_renderable(report, verbose=verbose)]
    for run in report.runs:
        name = run["name"]
        mine = report.run_verdicts(name)
        fired = fired_in_order(mine)
        skipped = [v for v in mine if v.state == "skipped"]
        ok = len(mine) - len(fired) - len(skipped)
        parts.append(Text(f"\n{name}", style="bold"))
        for v in fired:
            parts.extend(_verdict(v))
        parts.append(
            Text(
                f"  {len(fired)} fired, {ok} ok, {len(skipped)} skipped (metric not "
                f"logged or too few steps{'' if verbose else '; -v lists them'})",
                style="dim",
            )
        )
        if verbose:
            for v in skipped:
                parts.append(Text(f"    skipped {v.code} {v.name}: {v.reason}", style="dim"))
        if fired:
            parts.append(symptom_renderable(report.symptoms.get(name, [])))
    failing = report.failing
    style = "bold red" if failing else "bold green"
    parts.append(
        Text(
            f"\n{report.status}: {len(failing)} verdict(s) at or above "
            f"{report.fail_on} in {len(report.runs)} run(s)"
            f"{_skipped_note(report)}",
            style=style,
        )
    )
    for s in report.skipped:
        parts.append(Text(f"  skipped {s['path']}: {s['reason']}", style="yellow"))
    return Group(*parts)


def _skipped_note(report: Report) -> str:
    n = len(report.skipped)
    return f", {n} skipped (not readable; listed below)" if n else ", 0 skipped"


def _indented(text: Any, left: int = 10) -> Any:
    from rich.padding import Padding

    return Padding(text, (0, 0, 0, left), expand=False)


def _verdict(v: Verdict) -> list[Any]:
    from rich.text import Text

    from rlwatch.render.formats import span

    sev = str(v.severity)
    head = Text("  ")
    head.append(f"{sev.upper():<7}", style=STYLE[sev])
    head.append(
        f" {v.code} {v.name}  {span(v.episodes)}"
        + ("" if v.state == "firing" else " (resolved)")
        + ("" if v.failing or v.state == "firing" or v.gate == "any" else ", not failing")
    )
    out = [head, _indented(Text(v.summary))]
    ctx = v.context or {}
    if ctx.get("values"):
        line = Text()
        line.append(sparkline(ctx["values"]), style=STYLE[sev])
        line.append(f"  {ctx['metric']}, steps {ctx['steps'][0]}-{ctx['steps'][-1]}", style="dim")
        out.append(_indented(line))
    for c in v.checks:
        if c["tag"] is not None:
            out.append(
                _indented(
                    Text(
                        f"check {c['metric']}: {_fmt(c['before'])} before -> "
                        f"{_fmt(c['during'])} during; {c['hint']}",
                        style="dim",
                    )
                )
            )
    return out


def symptom_renderable(rows: list[dict[str, Any]]) -> Any:
    """The glossary's symptom -> check table with this run's values; ! marks a problem."""
    from rich.table import Table

    table = Table(
        box=None,
        pad_edge=False,
        header_style="bold",
        title_justify="left",
        title="  symptom -> check (! = this check points at a problem)",
        title_style="dim",
    )
    table.add_column("  symptom", no_wrap=True)
    table.add_column("check first", overflow="fold", ratio=1)
    table.add_column("then check", overflow="fold", ratio=1)
    for row in rows:
        mark = "* " if row["present"] else "  "
        cells = []
        for c in row["checks"]:
            flag = "! " if c["problem"] else ""
            cells.append(f"{flag}{c['metric']}: {c['value']}")
        style = "bold" if row["present"] else "dim"
        table.add_row(f"{mark}{row['symptom']}", *cells, style=style)
    return table
