"""`--format html`: one self-contained HTML page of a Report (pure: dict in, str out).

Hand-made inline SVG and CSS, no script and nothing fetched: a Content-Security-Policy of
`default-src 'none'` makes the browser refuse any request the page could make. The curves come
from the Report's downsampled `series` (rlwatch/series.py); a report without them still renders,
with the verdicts' short context windows as curves.

Layout: header (status, counts); many runs: a summary table, then small multiples per key
metric with the runs overlaid; per run: facts (source, steps, restarts, warnings), one card per
fired verdict (curve(s) with the firing episodes shaded, thresholds / baselines drawn, the
verdict text, observed values, the checks), the symptom -> check table with the run's values,
and the quiet and skipped rules. A `diff` block overlays baseline and candidate when present.
"""

from __future__ import annotations

import math
from html import escape
from typing import Any

from rlwatch.severity import Severity

ORDER = {str(s): i for i, s in enumerate(sorted(Severity, reverse=True))}  # most severe first
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
SEV_COLOR = {"error": "#c62828", "warning": "#b26a00", "info": "#1565c0"}

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#1d232a;
background:#f6f7f9}
main{max-width:1080px;margin:0 auto;padding:16px 24px 48px}
h1{font-size:22px;margin:8px 0}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #d0d5dc}
h3{font-size:15px;margin:0 0 4px}
.status{display:inline-block;padding:2px 10px;border-radius:12px;color:#fff;font-weight:600}
.healthy{background:#2e7d32}.unhealthy{background:#c62828}
table{border-collapse:collapse;margin:6px 0 12px;background:#fff}
th,td{border:1px solid #d8dde3;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#eef1f4;font-weight:600}td.num{text-align:right;font-variant-numeric:tabular-nums}
.card{background:#fff;border:1px solid #d8dde3;border-left:5px solid #888;border-radius:4px;
padding:10px 14px;margin:12px 0}
.card.error{border-left-color:#c62828}.card.warning{border-left-color:#e0a000}
.card.info{border-left-color:#1565c0}
.sev{font-weight:700;text-transform:uppercase;font-size:12px;margin-right:6px}
.code{font-family:ui-monospace,Menlo,Consolas,monospace;font-weight:700}
.muted{color:#5f6b76}.problem{color:#c62828;font-weight:600}
.facts{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:6px 0}
.facts dt{color:#5f6b76}.facts dd{margin:0}
svg.plot{display:block;background:#fff;margin:6px 0}
svg text{font:11px system-ui,sans-serif;fill:#4a5560}
.multiples{display:grid;grid-template-columns:repeat(auto-fill,minmax(340px,1fr));gap:8px}
.legend span{display:inline-block;margin-right:12px}
.legend i{display:inline-block;width:14px;height:3px;vertical-align:middle;margin-right:4px}
details{margin:8px 0}summary{cursor:pointer;color:#3b4650}
.warn{color:#8a5a00}
"""


# -- numbers and scales ----------------------------------------------------------------------
def _fmt(x: Any) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, str):
        return x
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, int) or (isinstance(x, float) and x.is_integer() and abs(x) < 1e15):
        return f"{int(x):,}"
    return f"{x:.4g}"


def _nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    ticks = []
    t = first
    while t <= hi + step * 1e-9 and len(ticks) < 2 * n + 2:
        ticks.append(round(t, 12))
        t += step
    return ticks


def _tick_label(v: float) -> str:
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1e5 or a < 1e-3:
        return f"{v:.0e}".replace("e+0", "e").replace("e-0", "e-")
    return f"{v:.4g}"


class _Scale:
    def __init__(self, lo: float, hi: float, a: float, b: float, log: bool = False) -> None:
        self.log = log
        if log:
            lo, hi = math.log10(lo), math.log10(hi)
        if hi <= lo:
            pad = abs(lo) * 0.05 or 1.0
            lo, hi = lo - pad, hi + pad
        self.lo, self.hi, self.a, self.b = lo, hi, a, b

    def __call__(self, v: float) -> float:
        if self.log:
            v = math.log10(max(v, 1e-300))
        return self.a + (v - self.lo) * (self.b - self.a) / (self.hi - self.lo)

    def ticks(self) -> list[float]:
        if self.log:
            return [10.0**e for e in range(math.ceil(self.lo), math.floor(self.hi) + 1)]
        return [t for t in _nice_ticks(self.lo, self.hi) if self.lo <= t <= self.hi]


# -- one SVG plot ---------------------------------------------------------------------------
def svg_plot(
    curves: list[dict[str, Any]],
    *,
    shades: list[tuple[float, float, str]] = (),
    levels: list[dict[str, Any]] = (),
    lines: list[dict[str, Any]] = (),
    vlines: list[tuple[float, str]] = (),
    width: int = 680,
    height: int = 190,
    title: str = "",
    xlabel: str = "step",
) -> str:
    """A line plot. `curves`: [{"steps","values","color","label","nonfinite"}]; `shades`: x
    spans (firing episodes); `levels`: horizontal lines {"y","label","dashed"}; `lines`: extra
    dashed curves (baselines) {"steps","values","label","dashed"}; `vlines`: restarts."""
    ml, mr, mt, mb = 58, 12, 18 if title else 8, 24
    xs = [x for c in (*curves, *lines) for x in c["steps"]]
    xs += [x for c in curves for x in c.get("nonfinite", [])]
    xs += [x for a, b, _ in shades for x in (a, b)]
    ys = [y for c in curves for y in c["values"]]
    ys_extra = [y for c in lines for y in c["values"]] + [lv["y"] for lv in levels]
    if not xs or not ys:
        return (
            f'<svg class="plot empty" width="{width}" height="40" role="img">'
            f'<text x="8" y="24">{escape(title)}: no finite values to draw</text></svg>'
        )
    x0, x1 = min(xs), max(xs)
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1
    ylo, yhi = min(ys), max(ys)
    # thresholds and baselines widen the range, but not beyond 3x the data's own span
    span = (yhi - ylo) or abs(yhi) or 1.0
    for y in ys_extra:
        if math.isfinite(y) and ylo - 3 * span <= y <= yhi + 3 * span:
            ylo, yhi = min(ylo, y), max(yhi, y)
    log = ylo > 0 and yhi / ylo > 100
    if not log:
        pad = (yhi - ylo) * 0.06 or abs(yhi) * 0.05 or 1.0
        ylo, yhi = ylo - pad, yhi + pad
    else:
        ylo, yhi = ylo / 1.3, yhi * 1.3
    sx = _Scale(x0, x1, ml, width - mr)
    sy = _Scale(ylo, yhi, height - mb, mt, log=log)
    top, bottom = mt, height - mb
    out = [
        f'<svg class="plot" xmlns="http://www.w3.org/2000/svg" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{escape(title or "plot")}">'
    ]
    if title:
        out.append(
            f'<text x="{ml}" y="12" font-weight="600">{escape(title)}'
            f"{' (log scale)' if log else ''}</text>"
        )
    for a, b, label in shades:
        xa, xb = sx(a), sx(b)
        out.append(
            f'<rect class="episode" x="{xa - 1:.1f}" y="{top}" width="{max(xb - xa, 0) + 2:.1f}" '
            f'height="{bottom - top}" fill="#e53935" fill-opacity="0.16">'
            f"<title>{escape(label)}</title></rect>"
        )
    for t in sy.ticks():
        y = sy(t)
        out.append(
            f'<line x1="{ml}" x2="{width - mr}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e6e9ed"/>'
            f'<text x="{ml - 4}" y="{y + 4:.1f}" text-anchor="end">{_tick_label(t)}</text>'
        )
    for t in _nice_ticks(x0, x1, 6):
        if x0 <= t <= x1:
            x = sx(t)
            out.append(
                f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{bottom}" y2="{bottom + 4}" '
                f'stroke="#8a949e"/><text x="{x:.1f}" y="{bottom + 16}" '
                f'text-anchor="middle">{_tick_label(t)}</text>'
            )
    out.append(
        f'<rect x="{ml}" y="{top}" width="{width - mr - ml}" height="{bottom - top}" '
        'fill="none" stroke="#b9c1c9"/>'
    )
    for x, label in vlines:
        if x0 <= x <= x1:
            out.append(
                f'<line class="restart" x1="{sx(x):.1f}" x2="{sx(x):.1f}" y1="{top}" '
                f'y2="{bottom}" stroke="#6d4c41" stroke-dasharray="2 3">'
                f"<title>{escape(label)}</title></line>"
            )
    for lv in levels:
        y = lv["y"]
        if not (math.isfinite(y) and (not log or y > 0)) or not ylo <= y <= yhi:
            continue
        py = sy(y)
        dash = ' stroke-dasharray="6 4"' if lv.get("dashed", True) else ""
        out.append(
            f'<line class="level" x1="{ml}" x2="{width - mr}" y1="{py:.1f}" y2="{py:.1f}" '
            f'stroke="#455a64" stroke-width="1.2"{dash}><title>{escape(lv["label"])}</title>'
            f"</line>"
        )
        if lv["label"]:
            out.append(
                f'<text x="{width - mr - 4}" y="{py - 3:.1f}" text-anchor="end">'
                f"{escape(lv['label'])}</text>"
            )
    for ln in lines:
        pts = _points(ln["steps"], ln["values"], sx, sy, log)
        if pts:
            dash = ' stroke-dasharray="5 3"' if ln.get("dashed", True) else ""
            out.append(
                f'<polyline class="baseline" fill="none" stroke="{ln.get("color", "#ef6c00")}" '
                f'stroke-width="1.2"{dash} points="{pts}"><title>{escape(ln["label"])}</title>'
                "</polyline>"
            )
    for c in curves:
        pts = _points(c["steps"], c["values"], sx, sy, log)
        color = c.get("color", PALETTE[0])
        if pts:
            out.append(
                f'<polyline class="curve" fill="none" stroke="{color}" stroke-width="1.4" '
                f'stroke-linejoin="round" points="{pts}"><title>{escape(c.get("label", ""))}'
                "</title></polyline>"
            )
        for x in c.get("nonfinite", [])[:400]:
            px = sx(x)
            out.append(
                f'<line class="nonfinite" x1="{px:.1f}" x2="{px:.1f}" y1="{bottom - 10}" '
                f'y2="{bottom}" stroke="#b71c1c" stroke-width="2"><title>non-finite at step '
                f"{x}</title></line>"
            )
    out.append(
        f'<text x="{width - mr}" y="{height - 2}" text-anchor="end">{escape(xlabel)}</text></svg>'
    )
    return "".join(out)


def _points(steps: list, values: list, sx: _Scale, sy: _Scale, log: bool) -> str:
    parts = []
    for x, y in zip(steps, values, strict=False):
        if y is None or not isinstance(y, int | float) or not math.isfinite(y):
            continue
        if log and y <= 0:
            continue
        parts.append(f"{sx(x):.1f},{sy(y):.1f}")
    return " ".join(parts) if len(parts) > 1 else (f"{parts[0]} {parts[0]}" if parts else "")


# -- pieces of the page ----------------------------------------------------------------------
def _table(head: list[str], rows: list[list[str]], num: set[int] = frozenset()) -> str:
    h = "".join(f"<th>{escape(c)}</th>" for c in head)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="num">{c}</td>' if i in num else f"<td>{c}</td>" for i, c in enumerate(r)
        )
        + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{h}</tr></thead><tbody>{body}</tbody></table>"


def _span(v: dict[str, Any]) -> str:
    first, last = v["episodes"][0]["first_step"], v["episodes"][-1]["last_step"]
    return f"step {first}" if first == last else f"steps {first}-{last}"


def _fired(report: dict[str, Any], run: str) -> list[dict[str, Any]]:
    return sorted(
        (v for v in report["verdicts"] if v["run"] == run and v["episodes"]),
        key=lambda v: (ORDER[v["severity"]], v["episodes"][0]["first_step"], v["code"]),
    )


def _facts(run: dict[str, Any]) -> str:
    s = run["steps"]
    fw = run.get("framework") or "not detected"
    if run.get("framework_version"):
        fw += f" {run['framework_version']}"
    rows = [
        ("source", f"{run.get('source', '')}: {run.get('address', '')}"),
        ("framework", fw),
        ("steps", f"{_fmt(s['count'])} ({s['first']}-{s['last']})"),
        ("scalars", f"{_fmt(run.get('scalars', 0))} in {_fmt(run.get('tags', 0))} tags"),
    ]
    span = run.get("wall_time_span_s")
    if span:
        rows.append(("wall time", f"{span / 3600:.2f} h"))
    restarts = run.get("restarts") or []
    rows.append(
        (
            "restarts",
            "; ".join(f"at step {r['step']} (after step {r['previous_step']})" for r in restarts)
            or "none",
        )
    )
    if run.get("duplicates_dropped"):
        rows.append(("re-logged rows", f"{_fmt(run['duplicates_dropped'])} replaced"))
    warns = run.get("warnings") or []
    rows.append(("warnings", "; ".join(warns) or "none"))
    return (
        '<dl class="facts">'
        + "".join(f"<dt>{escape(k)}</dt><dd>{escape(str(v))}</dd>" for k, v in rows)
        + "</dl>"
    )


def _verdict_card(v: dict[str, Any], run: dict[str, Any], series: dict[str, Any]) -> str:
    sev = v["severity"]
    metrics = list(v.get("metrics") or {}) or ([v["context"]["metric"]] if v.get("context") else [])
    curves = series.get("metrics", {}) if series else {}
    over = (series.get("overlays", {}) if series else {}).get(v["code"], [])
    shades = [
        (e["first_step"], e["last_step"], f"firing: steps {e['first_step']}-{e['last_step']}")
        for e in v["episodes"]
    ]
    vlines = [(r["step"], f"restart at step {r['step']}") for r in run.get("restarts") or []]
    plots = []
    for m in metrics[:3]:
        tag = (v.get("metrics") or {}).get(m, m)
        title = m if tag == m else f"{m} ({tag})"
        if m in curves:
            c = curves[m]
            curve = {**c, "color": PALETTE[0], "label": m}
        elif v.get("context", {}).get("metric") == m:
            c = v["context"]
            curve = {"steps": c["steps"], "values": c["values"], "label": m, "color": PALETTE[0]}
            title += " (around the first episode)"
        else:
            continue
        mine = [o for o in over if o["metric"] == m]
        plots.append(
            svg_plot(
                [curve],
                shades=shades,
                levels=[o for o in mine if o["kind"] == "level"],
                lines=[o for o in mine if o["kind"] == "line"],
                vlines=vlines,
                title=title,
            )
        )
    legend = ""
    if any(o["metric"] in metrics for o in over):
        labels = list(dict.fromkeys(o["label"] for o in over if o["label"]))
        legend = (
            '<div class="muted">red band: firing; orange and dashed lines: '
            + escape(", ".join(labels))
            + "</div>"
        )
    eps = []
    for e in v["episodes"]:
        seen = e["observed"]
        if any("." in k for k in seen):  # cross-metric rules: the per-metric keys say it all
            seen = {k: x for k, x in seen.items() if "." in k or k == "held"}
        obs = ", ".join(f"{k}={_fmt(x)}" for k, x in seen.items())
        eps.append(
            [
                str(e["first_step"]),
                str(e["last_step"]),
                str(e["peak_step"]),
                escape(e["summary"]),
                escape(obs),
            ]
        )
    checks = [
        [
            f'<span class="code">{escape(c["metric"])}</span>'
            + (f' <span class="muted">({escape(c["tag"])})</span>' if c.get("tag") else ""),
            _fmt(c.get("before")),
            _fmt(c.get("during")),
            escape(c.get("hint", "")),
        ]
        for c in v.get("checks") or []
    ]
    state = "firing now" if v["state"] == "firing" else "resolved"
    return (
        f'<section class="card verdict {sev}" id="{escape(run["name"])}-{v["code"]}" '
        f'data-code="{v["code"]}" data-run="{escape(run["name"])}">'
        f'<h3><span class="sev" style="color:{SEV_COLOR[sev]}">{sev}</span>'
        f'<span class="code">{v["code"]}</span> {escape(v["name"])} '
        f'<span class="muted">{_span(v)}, {state}</span></h3>'
        f"<p>{escape(v['summary'])}</p>"
        + ("".join(plots) or '<p class="muted">no curve of this metric in the report</p>')
        + legend
        + _table(["first step", "last step", "peak step", "verdict", "observed"], eps, {0, 1, 2})
        + (
            "<div>what to check next:</div>"
            + _table(["metric", "before", "during", "why"], checks, {1, 2})
            if checks
            else ""
        )
        + "</section>"
    )


def _symptoms(rows: list[dict[str, Any]]) -> str:
    body = []
    for row in rows:
        cells = []
        for c in row["checks"]:
            cls = ' class="problem"' if c["problem"] else ""
            mark = "! " if c["problem"] else ""
            cells.append(
                f"<span{cls}>{mark}{escape(c['metric'])}: {escape(str(c['value']))}</span>"
                f'<br><span class="muted">{escape(c["question"])}</span>'
            )
        sym = escape(row["symptom"])
        if row["present"]:
            sym = f"<b>{sym}</b> ({escape(', '.join(row['rules']))})"
        body.append([sym, *cells])
    return _table(["symptom", "check first", "then check"], body)


def _quiet(report: dict[str, Any], run: str) -> str:
    ok = [v for v in report["verdicts"] if v["run"] == run and v["state"] == "ok"]
    skipped = [v for v in report["verdicts"] if v["run"] == run and v["state"] == "skipped"]
    parts = []
    if ok:
        parts.append(
            f"<details><summary>{len(ok)} rule(s) evaluated and quiet</summary>"
            + _table(
                ["rule", "severity"],
                [
                    [f'<span class="code">{v["code"]}</span> {escape(v["name"])}', v["severity"]]
                    for v in ok
                ],
            )
            + "</details>"
        )
    if skipped:
        parts.append(
            f"<details><summary>{len(skipped)} rule(s) skipped</summary>"
            + _table(
                ["rule", "why"],
                [
                    [
                        f'<span class="code">{v["code"]}</span> {escape(v["name"])}',
                        escape(v["reason"]),
                    ]
                    for v in skipped
                ],
            )
            + "</details>"
        )
    return "".join(parts)


def _summary_table(report: dict[str, Any]) -> str:
    rows = []
    for run in report["runs"]:
        fired = _fired(report, run["name"])
        by = {s: [v["code"] for v in fired if v["severity"] == s] for s in ORDER}
        failing = any(v.get("failing") for v in fired)  # the Report's gate decision
        rows.append(
            [
                f'<a href="#run-{escape(run["name"])}">{escape(run["name"])}</a>',
                escape(run.get("framework") or "?"),
                _fmt(run["steps"]["count"]),
                f'<span class="problem">{escape(" ".join(by["error"]))}</span>',
                escape(" ".join(by["warning"])),
                escape(" ".join(by["info"])),
                '<span class="problem">unhealthy</span>' if failing else "healthy",
            ]
        )
    return _table(["run", "framework", "steps", "errors", "warnings", "info", "status"], rows, {2})


def _multiples(report: dict[str, Any], metrics: list[str] | None = None) -> str:
    series = report.get("series") or {}
    runs = [r["name"] for r in report["runs"]]
    names = metrics or list(
        dict.fromkeys(m for r in runs for m in (series.get(r, {}).get("metrics") or {}))
    )
    cells = []
    for m in names:
        curves = []
        for i, r in enumerate(runs):
            c = (series.get(r, {}).get("metrics") or {}).get(m)
            if c:
                curves.append({**c, "color": PALETTE[i % len(PALETTE)], "label": r})
        if curves:
            cells.append(svg_plot(curves, width=340, height=170, title=m))
    if not cells:
        return ""
    legend = "".join(
        f'<span><i style="background:{PALETTE[i % len(PALETTE)]}"></i>{escape(r)}</span>'
        for i, r in enumerate(runs)
    )
    return f'<div class="legend">{legend}</div><div class="multiples">{"".join(cells)}</div>'


def _diff(report: dict[str, Any]) -> str:
    d = report.get("diff")
    if not d:
        return ""
    from rlwatch.render.diff import diff_html

    return diff_html(d, report)


def render_html(report: Any) -> str:
    """The whole page, from a Report (or its `to_dict(with_gate=True)`)."""
    if not isinstance(report, dict):
        report = report.to_dict(with_gate=True)
    status = report["status"]
    counts = report.get("counts", {})
    runs = report["runs"]
    series = report.get("series") or {}
    title = "rlwatch: " + (runs[0]["name"] if len(runs) == 1 else f"{len(runs)} runs")
    body = [
        f"<h1>rlwatch report <span class='status {status}'>{status}</span></h1>",
        f'<p class="muted">{len(runs)} run(s), {report["rules"]} rules, failing at '
        f"{escape(report['fail_on'])} or above; {counts.get('firing', 0)} firing, "
        f"{counts.get('resolved', 0)} resolved, {counts.get('ok', 0)} quiet, "
        f"{counts.get('skipped', 0)} skipped. rlwatch {escape(report['rlwatch_version'])}.</p>",
    ]
    body.append(_diff(report))
    if len(runs) > 1:
        body.append("<h2>Runs</h2>" + _summary_table(report))
        multiples = _multiples(report)
        if multiples:
            body.append("<h2>Key metrics, runs overlaid</h2>" + multiples)
    for run in runs:
        name = run["name"]
        fired = _fired(report, name)
        body.append(f'<h2 id="run-{escape(name)}">{escape(name)}</h2>' + _facts(run))
        if fired:
            body.append(
                f"<p>{len(fired)} rule(s) fired:</p>"
                + "".join(_verdict_card(v, run, series.get(name, {})) for v in fired)
            )
        else:
            body.append("<p>No rule fired.</p>")
        if run.get("symptoms"):
            body.append("<h3>symptom &rarr; check, with this run's values</h3>")
            body.append(_symptoms(run["symptoms"]))
        body.append(_quiet(report, name))
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; "
        "style-src 'unsafe-inline'; img-src data:\">"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body><main>"
        + "".join(body)
        + "</main></body></html>\n"
    )
