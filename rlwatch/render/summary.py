"""What was loaded, rendered from a Report's runs (pure: Report in, rich renderable out).

The summary itself (`summarise`, built from the frame once) lives in rlwatch/report.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlwatch.report import Report


def _steps(run: dict[str, Any]) -> str:
    s = run["steps"]
    return f"{s['count']} ({s['first']}-{s['last']})" if s["count"] else "0"


def summary_renderable(report: Report, *, verbose: bool = False) -> Any:
    """A rich renderable listing the runs, what was recognised and restarts (reader warnings go
    to stderr: `cli._common.report_warnings`)."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table(title=None, box=None, pad_edge=False, header_style="bold")
    for col, justify in (
        ("run", "left"),
        ("framework", "left"),
        ("steps", "right"),
        ("scalars", "right"),
        ("metrics", "right"),
    ):
        table.add_column(col, justify=justify, no_wrap=True)
    lines: list[Any] = []
    for run in report.runs:
        fw = run["framework"] or "unknown"
        if run["framework_version"]:
            fw += f" {run['framework_version']}"
        recognised = f"{len(run['metrics'])}/{run['tags']}"
        table.add_row(run["name"], fw, _steps(run), f"{run['scalars']:,}", recognised)
        for r in run["restarts"]:
            lines.append(
                Text(
                    f"{run['name']}: restart at step {r['step']} after step "
                    f"{r['previous_step']}"
                    + (f" ({r['where']})" if r["where"] else "")
                    + "; the seam is not treated as one curve"
                )
            )
        if verbose:
            for canon, raw in sorted(run["metrics"].items()):
                lines.append(Text(f"  {run['name']}: {canon} <- {raw}", style="dim"))
    n = len(report.runs)
    head = Text(
        f"{n} run{'s' if n != 1 else ''} loaded. metrics = canonical metrics "
        "recognised / tags logged; see `rlwatch metrics TARGET` for the mapping.",
        style="dim",
    )
    return Group(table, *lines, head)


def metrics_renderable(report: Report, descriptions: dict[str, str] | None = None) -> Any:
    """Per run: the framework, each canonical metric with its raw key, and unmapped keys."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    parts: list[Any] = []
    for run in report.runs:
        fw = run["framework"] or "not detected"
        if run["framework_version"]:
            fw += f" ({run['framework_version']})"
        parts.append(Text(f"{run['name']}  framework: {fw}", style="bold"))
        table = Table(box=None, pad_edge=False, header_style="bold")
        table.add_column("canonical", no_wrap=True)
        table.add_column("raw key", overflow="fold")
        if descriptions:
            table.add_column("meaning", overflow="fold", style="dim")
        for canon, raw in run["metrics"].items():
            table.add_row(canon, raw, *([descriptions.get(canon, "")] if descriptions else []))
        parts.append(table)
        unmapped = run["unmapped"]
        parts.append(
            Text(
                f"unmapped raw keys ({len(unmapped)}): "
                + (", ".join(unmapped) if unmapped else "none")
            )
        )
        parts.append(Text(""))
    return Group(*parts)
