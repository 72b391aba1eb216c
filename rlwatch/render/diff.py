"""Renderers of a diff (plain data from rlwatch/diff.py): text, json, markdown, html (pure)."""

from __future__ import annotations

import json
from html import escape
from typing import Any

ICON = {"error": "🔴", "warning": "🟡", "info": "🔵"}


def _num(x: Any) -> str:
    return "n/a" if x is None else f"{x:.4g}"


def _span(v: dict[str, Any]) -> str:
    first, last = v["episodes"][0]["first_step"], v["episodes"][-1]["last_step"]
    return f"step {first}" if first == last else f"steps {first}-{last}"


def _head(d: dict[str, Any]) -> list[str]:
    b, c = d["baseline"], d["candidate"]
    how = "by step" if d["align"] == "step" else "by fraction of training (lengths differ)"
    return [
        f"baseline  {b['name']}: {b['steps']['count']} steps ({b['steps']['first']}-"
        f"{b['steps']['last']})",
        f"candidate {c['name']}: {c['steps']['count']} steps ({c['steps']['first']}-"
        f"{c['steps']['last']})",
        f"aligned {how}; tolerance {d['tolerance_k']:g} x the baseline's robust noise",
    ]


def _worse_line(r: dict[str, Any]) -> str:
    why = " (non-finite values)" if r.get("why") == "non-finite values" else ""
    return (
        f"{r['metric']} worse from step {r['from_step']}{why}: {_num(r['candidate_value'])} vs "
        f"baseline {_num(r['baseline_value'])} (its step {r['baseline_step']}; tolerance "
        f"{_num(r['tolerance'])}, {r['direction']}; {r['bins_worse']}/{r['bins']} bins)"
    )


def render_diff_text(d: dict[str, Any]) -> str:
    out = [f"rlwatch diff: {d['status']}", *("  " + h for h in _head(d)), ""]
    if d["new_verdicts"]:
        out.append("new in the candidate:")
        for v in d["new_verdicts"]:
            out.append(
                f"  {v['severity'].upper():7} {v['code']} {v['name']}  {_span(v)}: {v['summary']}"
            )
    else:
        out.append("no verdict new in the candidate")
    if d["worse"]:
        out.append("worse than the baseline:")
        out += [f"  {r['severity'].upper():7} {_worse_line(r)}" for r in d["worse"]]
    if d.get("changed"):
        out.append("changed (no better or worse):")
        out += [
            f"  {r['metric']} from step {r['from_step']}: {_num(r['candidate_value'])} vs "
            f"{_num(r['baseline_value'])}"
            for r in d["changed"]
        ]
    if d["better"]:
        out.append("better than the baseline:")
        out += [
            f"  {r['metric']} better from step {r['from_step']}: {_num(r['candidate_value'])} vs "
            f"{_num(r['baseline_value'])}"
            for r in d["better"]
        ]
    if d["same"]:
        out.append("within tolerance: " + ", ".join(d["same"]))
    if d["gone_verdicts"]:
        out.append("fired in the baseline only: " + ", ".join(d["gone_verdicts"]))
    out.append(
        f"\n{d['status']}: {d['regressions']} regression(s) at or above {d['fail_on']} "
        f"(worse metrics count as {d['metric_severity']})"
    )
    return "\n".join(out) + "\n"


def render_diff_json(d: dict[str, Any]) -> str:
    return json.dumps(d, indent=2, sort_keys=True, allow_nan=False, default=str) + "\n"


def render_diff_markdown(d: dict[str, Any]) -> str:
    out = [f"## rlwatch diff: {d['status']}", "", *(f"- {h}" for h in _head(d)), ""]
    if d["new_verdicts"]:
        out += ["| | new in the candidate | steps | summary |", "|---|---|---|---|"]
        for v in d["new_verdicts"]:
            s = v["summary"].replace("|", "\\|")
            out.append(
                f"| {ICON[v['severity']]} {v['severity']} | `{v['code']}` {v['name']} | "
                f"{_span(v)} | {s} |"
            )
        out.append("")
    else:
        out += ["No verdict new in the candidate.", ""]
    rows = d["worse"] + d["better"] + d.get("changed", [])
    if rows:
        out += [
            "| metric | | from step | candidate | baseline | tolerance |",
            "|---|---|---|---|---|---|",
        ]
        for r in rows:
            mark = {"worse": "⚠️ worse", "better": "✅ better", "changed": "↔ changed"}[r["state"]]
            out.append(
                f"| `{r['metric']}` | {mark} | {r['from_step']} | {_num(r['candidate_value'])} "
                f"| {_num(r['baseline_value'])} | {_num(r['tolerance'])} |"
            )
        out.append("")
    if d["same"]:
        out += ["Within tolerance: " + ", ".join(f"`{m}`" for m in d["same"]) + ".", ""]
    out.append(
        f"**{d['regressions']} regression(s)** at or above `{d['fail_on']}` "
        f"(worse metrics count as `{d['metric_severity']}`)."
    )
    return "\n".join(out) + "\n"


def diff_html(d: dict[str, Any], report: dict[str, Any] | None = None) -> str:
    """The diff block of the HTML page: the verdict, the tables, baseline and candidate
    overlaid per key metric (worse spans shaded)."""
    from rlwatch.render.html import _table, svg_plot

    cls = "unhealthy" if d["status"] == "regressed" else "healthy"
    parts = [
        f"<h2>Diff against the baseline <span class='status {cls}'>{escape(d['status'])}</span>"
        "</h2>",
        "<ul>" + "".join(f"<li>{escape(h)}</li>" for h in _head(d)) + "</ul>",
    ]
    if d["new_verdicts"]:
        parts.append(
            "<p>New in the candidate:</p>"
            + _table(
                ["severity", "rule", "steps", "summary"],
                [
                    [
                        escape(v["severity"]),
                        f'<span class="code">{v["code"]}</span> {escape(v["name"])}',
                        _span(v),
                        escape(v["summary"]),
                    ]
                    for v in d["new_verdicts"]
                ],
            )
        )
    else:
        parts.append("<p>No verdict new in the candidate.</p>")
    rows = d["worse"] + d["better"] + d.get("changed", [])
    if rows:
        parts.append(
            _table(
                ["metric", "", "from step", "candidate", "baseline", "tolerance"],
                [
                    [
                        f'<span class="code">{escape(r["metric"])}</span>',
                        '<span class="problem">worse</span>' if r["state"] == "worse" else "better",
                        str(r["from_step"]),
                        _num(r["candidate_value"]),
                        _num(r["baseline_value"]),
                        _num(r["tolerance"]),
                    ]
                    for r in rows
                ],
                {2, 3, 4, 5},
            )
        )
    state = {r["metric"]: r for r in rows}
    cells = []
    for m, pair in d.get("overlays", {}).items():
        r = state.get(m)
        shades = []
        if r and r["state"] == "worse":
            last = d["candidate"]["steps"]["last"]
            shades = [(r["from_step"], last, f"worse from step {r['from_step']}")]
        title = m + (f" — {r['state']} from step {r['from_step']}" if r else " — within tolerance")
        cells.append(
            '<div class="diffplot" data-metric="'
            + escape(m)
            + '">'
            + svg_plot(
                [
                    {**pair["baseline"], "color": "#7f8c8d", "label": "baseline"},
                    {**pair["candidate"], "color": "#d62728", "label": "candidate"},
                ],
                shades=shades,
                width=340,
                height=170,
                title=title,
                xlabel="candidate step",
            )
            + "</div>"
        )
    if cells:
        parts.append(
            '<div class="legend"><span><i style="background:#7f8c8d"></i>baseline '
            f'{escape(d["baseline"]["name"])}</span><span><i style="background:#d62728"></i>'
            f"candidate {escape(d['candidate']['name'])}</span></div>"
            f'<div class="multiples">{"".join(cells)}</div>'
        )
    return "".join(parts)


def render_diff_html(d: dict[str, Any], candidate_report: dict[str, Any]) -> str:
    """The whole page: the diff first, then the candidate's own report."""
    from rlwatch.render.html import render_html

    return render_html({**candidate_report, "diff": d})


def github_lines(d: dict[str, Any]) -> str:
    """Workflow annotations for the regressions (new verdicts are annotated by the report)."""
    from rlwatch.render.formats import _escape_data, _escape_prop

    level = {"error": "error", "warning": "warning", "info": "notice"}
    lines = [
        f"::{level[r['severity']]} title={_escape_prop('rlwatch diff: ' + r['metric'] + ' worse')}"
        f"::{_escape_data(_worse_line(r))}"
        for r in d["worse"]
    ]
    lines.append(f"rlwatch diff: {d['status']} ({d['regressions']} regression(s))")
    return "\n".join(lines) + "\n"


RENDERERS = {"text": render_diff_text, "json": render_diff_json, "markdown": render_diff_markdown}
