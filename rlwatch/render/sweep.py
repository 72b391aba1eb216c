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


class _Table:
    """The many-run table as a rich renderable, with the output of rich's table row by row.

    When every cell fits its column on one line (a table no wider than the console, no markup,
    no control characters) the rows are written as segments here: rich's per-cell work (~0.8
    ms a row) was most of the cost of a 2,000-run table; the header is still rich's, at the
    same column widths. Otherwise rich lays the table out row by row."""

    def __init__(self, table_rows: list[dict[str, Any]], keys: list[str]) -> None:
        self.rows, self.keys = table_rows, keys

    def _cells(self) -> list[list[tuple[str, str]]]:
        """Per row, (text, style) per column."""
        out = []
        for r in self.rows:
            first = (
                f"{r['first_error_code']} @{r['first_error_step']}" if r["first_error_code"] else ""
            )
            out.append(
                [
                    (r["run"], ""),
                    (r["worst"], STYLE[r["worst"]]),
                    (first, ""),
                    (str(r["steps"]), ""),
                    *((_num(r["last"].get(k)), "") for k in self.keys),
                ]
            )
        return out

    def _headers(self) -> list[tuple[str, dict[str, Any]]]:
        return [
            ("run", {"overflow": "fold", "min_width": 16}),
            ("worst", {"no_wrap": True}),
            ("first error", {"no_wrap": True}),
            ("steps", {"justify": "right", "no_wrap": True}),
            *((SHORT[k], {"justify": "right", "no_wrap": True}) for k in self.keys),
        ]

    def _table(self, fixed: list[int] | None = None) -> Any:
        from rich.table import Table

        t = Table(box=None, pad_edge=False, header_style="bold", collapse_padding=True)
        for j, (name, opts) in enumerate(self._headers()):
            t.add_column(name, **opts, **({"width": fixed[j]} if fixed else {}))
        return t

    def _by_rows(self, cells: list[list[tuple[str, str]]]) -> Any:
        from rich.text import Text

        t = self._table()
        for row in cells:
            t.add_row(*(Text(text, style=style) if style else text for text, style in row))
        return t

    def __rich_console__(self, console: Any, options: Any) -> Any:
        from rich.cells import cell_len
        from rich.segment import Segment
        from rich.style import Style

        cells = self._cells()
        if not cells or not all(
            text.isprintable() and "[" not in text for row in cells for text, _ in row
        ):  # markup, control characters: rich's own path
            yield self._by_rows(cells)
            return
        # each cell as rich shows it (emoji codes replaced), and each column's width
        texts = [[console.render_str(t).plain if ":" in t else t for t, _ in row] for row in cells]
        lengths = [[cell_len(t) for t in row] for row in texts]
        headers = self._headers()
        widths = [
            max(cell_len(name), opts.get("min_width", 0), *(row[j] for row in lengths))
            for j, (name, opts) in enumerate(headers)
        ]
        if sum(widths) + len(widths) - 1 > options.max_width:  # a cell would wrap: rich's path
            yield self._by_rows(cells)
            return
        head = self._table(fixed=widths)  # the header row, rendered by rich at these widths
        yield from console.render(head, options)
        right = [opts.get("justify") == "right" for _, opts in headers]
        styles = {style: Style.parse(style) for row in cells for _, style in row if style}
        new_line = Segment.line()
        for row, text, length in zip(cells, texts, lengths, strict=True):
            last = len(row) - 1
            for j, ((_, style), t, n) in enumerate(zip(row, text, length, strict=True)):
                pad = " " * (widths[j] - n)
                if style:  # a styled cell is padded in its style (as rich pads a Text)
                    yield Segment(t + pad, styles[style])
                else:
                    yield Segment(pad + t if right[j] else t + pad)
                if j < last:
                    yield Segment(" ")
            yield new_line


def table_renderable(report: Report) -> Any:
    from rich.console import Group
    from rich.text import Text

    table_rows = rows(report)
    keys = _columns(table_rows)[:3]  # 80 columns: the three first key metrics the runs have
    t = _Table(table_rows, keys)
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
