"""The many-run table (pure: a Report in, rows / rich renderable / markdown out).

One row per run: worst severity that fired, the first error verdict and the step it began, the
number of steps, and the last value of the key metrics the runs have. Worst first; within a
severity, natural order of names (run2 before run10). Runs that could not be read follow.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from rlwatch.severity import Severity

if TYPE_CHECKING:
    from rlwatch.engine.evaluate import Verdict
    from rlwatch.report import Report

RANK = {str(s): i for i, s in enumerate(sorted(Severity, reverse=True))} | {"ok": 3, "skipped": 4}
STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan", "ok": "green", "skipped": "dim"}
KEYS = ("reward_mean", "entropy", "kl_ref", "grad_norm", "response_length_mean")
SHORT = {
    "reward_mean": "reward",
    "entropy": "entropy",
    "kl_ref": "kl",
    "grad_norm": "grad_norm",
    "response_length_mean": "resp_len",
}


def natural_key(name: str) -> tuple[Any, ...]:
    return tuple(
        (0, int(p), "") if p.isdigit() else (1, 0, p.lower()) for p in re.split(r"(\d+)", name)
    )


def rows(report: Report) -> list[dict[str, Any]]:
    """The table's rows, sorted worst first, natural order within."""
    by_run: dict[str, list[Verdict]] = {}
    evaluated: set[str] = set()
    for v in report.verdicts:
        if v.fired:
            by_run.setdefault(v.run, []).append(v)
        if v.state != "skipped":
            evaluated.add(v.run)
    out = []
    for run in report.runs:
        fired = by_run.get(run["name"], [])
        none = RANK["ok"] if run["name"] in evaluated else RANK["skipped"]
        worst = min((RANK[str(v.severity)] for v in fired), default=none)
        errors = sorted(
            (v for v in fired if str(v.severity) == "error"),
            key=lambda v: (v.episodes[0].first_step, v.code),
        )
        first = errors[0] if errors else None
        out.append(
            {
                "run": run["name"],
                "worst": next(k for k, r in RANK.items() if r == worst),
                "fired": len(fired),
                "first_error": f"{first.code} {first.name}" if first else None,
                "first_error_code": first.code if first else None,
                "first_error_step": first.episodes[0].first_step if first else None,
                "steps": run["steps"]["count"],
                "last_step": run["steps"]["last"],
                "last": dict(run.get("last_values") or {}),
            }
        )
    out.sort(key=lambda r: (RANK[r["worst"]], natural_key(r["run"])))
    return out


def _num(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.3g}" if abs(x) < 1e4 else f"{x:.2e}"
    return str(x)


def _columns(table: list[dict[str, Any]]) -> list[str]:
    have = {k for r in table for k in r["last"]}
    return [k for k in KEYS if k in have]


def table_renderable(report: Report) -> Any:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table_rows = rows(report)
    keys = _columns(table_rows)[:3]  # 80 columns: the three first key metrics the runs have
    t = Table(box=None, pad_edge=False, header_style="bold", collapse_padding=True)
    t.add_column("run", overflow="fold", min_width=16)
    t.add_column("worst", no_wrap=True)
    t.add_column("first error", no_wrap=True)
    t.add_column("steps", justify="right", no_wrap=True)
    for k in keys:
        t.add_column(SHORT[k], justify="right", no_wrap=True)
    for r in table_rows:
        first = f"{r['first_error_code']} @{r['first_error_step']}" if r["first_error_code"] else ""
        t.add_row(
            r["run"],
            Text(r["worst"], style=STYLE[r["worst"]]),
            first,
            str(r["steps"]),
            *(_num(r["last"].get(k)) for k in keys),
        )
    counts = {k: 0 for k in RANK}
    for r in table_rows:
        counts[r["worst"]] += 1
    unread = report.skipped
    parts: list[Any] = [t]
    runs = {r["name"]: r for r in report.runs}
    for row in table_rows:
        run = runs[row["run"]]
        for r in run.get("restarts", []):
            parts.append(
                Text(
                    f"{run['name']}: restart at step {r['step']} after step {r['previous_step']}"
                    + (f" ({r['where']})" if r.get("where") else ""),
                    style="dim",
                )
            )
        for w in run.get("warnings", []):
            parts.append(Text(f"warning: {w}", style="yellow"))
    for u in unread:
        parts.append(Text(f"skipped {u['path']}: {u['reason']}", style="yellow"))
    parts.append(
        Text(
            f"{len(table_rows)} run(s): {counts['error']} error, {counts['warning']} warning, "
            f"{counts['info']} info, {counts['ok']} ok"
            + (f", {counts['skipped']} with no rule evaluable" if counts["skipped"] else "")
            + (f"; {len(unread)} skipped (could not be read)" if unread else "")
            + f". status: {report.status} (--fail-on {report.fail_on}). first error = "
            "the earliest error verdict @ its first step; last values of key metrics; "
            "--detail shows each run's verdicts.",
            style="dim",
        )
    )
    return Group(*parts)


def table_markdown(report: Report) -> str:
    table_rows = rows(report)
    keys = _columns(table_rows)
    icon = {"error": "🔴", "warning": "🟡", "info": "🔵", "ok": "🟢", "skipped": "⚪"}
    out = [
        "| run | worst | first error | at step | steps | " + " | ".join(keys) + " |",
        "|---|---|---|---:|---:|" + "---:|" * len(keys),
    ]
    for r in table_rows:
        cells = [
            r["run"].replace("|", "\\|"),
            f"{icon[r['worst']]} {r['worst']}",
            r["first_error"] or "",
            _num(r["first_error_step"]) if r["first_error"] else "",
            str(r["steps"]),
            *(_num(r["last"].get(k)) for k in keys),
        ]
        out.append("| " + " | ".join(cells) + " |")

    return "\n".join(out) + "\n"


def split(report: Report) -> list[Report]:
    """One Report per run (for --detail), in the table's order."""
    from rlwatch.report import Report

    verdicts: dict[str, list[Verdict]] = {}
    for v in report.verdicts:
        verdicts.setdefault(v.run, []).append(v)
    runs = {r["name"]: r for r in report.runs}
    return [
        Report(
            [runs[r["run"]]],
            verdicts.get(r["run"], []),
            {r["run"]: report.symptoms.get(r["run"], [])},
            report.fail_on,
            report.rules,
        )
        for r in rows(report)
    ]
