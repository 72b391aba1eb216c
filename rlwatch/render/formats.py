"""Machine formats of a Report: json, junit, github, markdown (pure: Report in, str out).

The gate decision is read from the Report (`verdict.failing`, `report.status`), never re-made.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rlwatch.engine.evaluate import Episode, Verdict
    from rlwatch.report import Report


def render_json(report: Report) -> str:
    return (
        json.dumps(report.to_dict(), indent=2, sort_keys=True, allow_nan=False, default=str) + "\n"
    )


def span(episodes: list[Episode]) -> str:
    first, last = episodes[0].first_step, episodes[-1].last_step
    return f"step {first}" if first == last else f"steps {first}-{last}"


def render_junit(report: Report) -> str:
    """One testcase per (run, rule): failure when it fired at or above --fail-on."""
    from xml.sax.saxutils import escape, quoteattr  # deferred: start-up

    vs = report.verdicts
    failures = sum(v.failing for v in vs)
    skipped = sum(v.state == "skipped" for v in vs)
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<testsuites name="rlwatch" tests="{len(vs)}" failures="{failures}" skipped="{skipped}">',
    ]
    for run in report.runs:
        mine = report.run_verdicts(run["name"])
        out.append(
            f'  <testsuite name={quoteattr(run["name"])} tests="{len(mine)}" '
            f'failures="{sum(v.failing for v in mine)}" '
            f'skipped="{sum(v.state == "skipped" for v in mine)}">'
        )
        for v in mine:
            name = quoteattr(f"{v.code} {v.name}")
            out.append(f"    <testcase classname={quoteattr(run['name'])} name={name}>")
            if v.state == "skipped":
                out.append(f"      <skipped message={quoteattr(v.reason)}/>")
            elif v.failing:
                eps = "; ".join(span([e]) for e in v.episodes)
                out.append(
                    f"      <failure type={quoteattr(str(v.severity))} "
                    f"message={quoteattr(v.summary)}>{escape(eps)}</failure>"
                )
            elif v.episodes:
                out.append(f"      <system-out>{escape(f'{v.severity}: {v.summary}')}</system-out>")
            out.append("    </testcase>")
        out.append("  </testsuite>")
    if report.skipped:  # files that looked like runs but could not be read
        out.append(
            f'  <testsuite name="rlwatch: unreadable runs" tests="{len(report.skipped)}" '
            f'failures="0" skipped="{len(report.skipped)}">'
        )
        for s in report.skipped:
            out.append(f'    <testcase classname={quoteattr(s["path"])} name="read">')
            out.append(f"      <skipped message={quoteattr(s['reason'])}/>")
            out.append("    </testcase>")
        out.append("  </testsuite>")
    out.append(f"<!-- rlwatch: {_counts(report)} -->")
    out.append("</testsuites>")
    return "\n".join(out) + "\n"


def _counts(report: Report) -> str:
    return f"{len(report.runs)} run(s) read, {len(report.skipped)} skipped"


def _escape_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_prop(s: str) -> str:
    return _escape_data(s).replace(":", "%3A").replace(",", "%2C")


LEVEL = {"error": "error", "warning": "warning", "info": "notice"}  # GitHub's annotation levels
ICON = {"error": "🔴", "warning": "🟡", "info": "🔵"}


def render_github(report: Report) -> str:
    """GitHub Actions workflow annotations, one per fired verdict."""
    lines = []
    for v in report.verdicts:
        if not v.episodes:
            continue
        title = _escape_prop(f"{v.code} {v.name} ({v.run}, {span(v.episodes)})")
        lines.append(f"::{LEVEL[str(v.severity)]} title={title}::{_escape_data(v.summary)}")
    fired = len(lines)
    if report.html_report:  # diagnose --html FILE: point at the page (a CI artifact)
        lines.append(f"::notice title=rlwatch HTML report::{_escape_data(report.html_report)}")
    for s in report.skipped:
        lines.append(
            f"::warning title={_escape_prop('rlwatch: run not read')}::"
            f"{_escape_data(s['path'] + ': ' + s['reason'])}"
        )
    lines.append(
        f"rlwatch: {report.status} ({fired} verdict(s) fired; --fail-on {report.fail_on}; "
        f"{_counts(report)})"
    )
    return "\n".join(lines) + "\n"


def fired_in_order(verdicts: list[Verdict]) -> list[Verdict]:
    """The fired verdicts, most severe first, then by first step."""
    return sorted(
        (v for v in verdicts if v.episodes),
        key=lambda v: (-v.severity, v.episodes[0].first_step),
    )


def render_markdown(report: Report) -> str:
    """A step-summary / PR-comment table."""
    out = [
        f"## rlwatch: {report.status}",
        "",
        f"{len(report.runs)} run(s), {len(report.skipped)} skipped, {report.rules} rules, "
        f"failing at `{report.fail_on}` or above.",
        "",
    ]
    for s in report.skipped:
        out += [f"> skipped `{s['path']}`: {s['reason']}", ""]
    if report.html_report:
        out += [f"Curves and checks: HTML report `{report.html_report}`.", ""]
    for run in report.runs:
        fw = run["framework"] or "unknown framework"
        s = run["steps"]
        out += [
            f"### {run['name']}",
            "",
            f"{fw}, {s['count']} steps ({s['first']}-{s['last']})",
            "",
        ]
        fired = sorted(
            (v for v in report.run_verdicts(run["name"]) if v.episodes), key=lambda v: -v.severity
        )
        if fired:
            out += ["| | rule | steps | summary |", "|---|---|---|---|"]
            for v in fired:
                summary = v.summary.replace("|", "\\|")
                out.append(
                    f"| {ICON[str(v.severity)]} {v.severity} | `{v.code}` "
                    f"{v.name} | {span(v.episodes)} | {summary} |"
                )
            out += ["", "| symptom | check first | then check |", "|---|---|---|"]
            for row in report.symptoms.get(run["name"], []):
                cells = [
                    ("⚠️ " if c["problem"] else "") + f"{c['metric']}: {c['value']}"
                    for c in row["checks"]
                ]
                sym = f"**{row['symptom']}**" if row["present"] else row["symptom"]
                out.append(f"| {sym} | {cells[0]} | {cells[1]} |")
        else:
            out.append("No rule fired.")
        for w in run["warnings"]:
            out.append(f"\n> warning: {w}")
        out.append("")
    return "\n".join(out)


def render_html(report: Report) -> str:
    """The self-contained HTML page (rlwatch/render/html.py, imported when asked for)."""
    from rlwatch.render.html import render_html as page

    return page(report)


RENDERERS = {
    "json": render_json,
    "html": render_html,
    "junit": render_junit,
    "github": render_github,
    "markdown": render_markdown,
}
