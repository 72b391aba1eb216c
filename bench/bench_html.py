"""Benchmark: the HTML report of a 3,000,000-scalar run: hand-made SVG against plotly offline.

    python bench/bench_html.py                   # 150 tags x 20,000 steps, in memory
    python bench/bench_html.py --steps 100000 --tags 30

The run is built in memory (RunFrame.from_arrays) with verl names and GRPO-shaped curves that
fire rules (a grad_norm spike, an entropy collapse, NaN at the end). Prints, each the median of
3: the report without curves (the baseline), the extra cost of the downsampled curves (min/max
per pixel column), rendering the page, the page's size; then the same plots drawn with plotly's
offline bundle inlined (when plotly is installed); then the time headless Chromium takes to
load each page (when /usr/bin/chromium exists).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bench_tensorboard import tags as tag_names


def make_frame(n_tags: int, steps: int):
    from rlwatch.frame import RunFrame, RunInfo

    rng = np.random.default_rng(0)
    names = tag_names(n_tags)
    x = np.arange(steps, dtype=float)
    t = x / steps
    curves = {
        "actor/entropy": np.where(t < 0.6, 0.6, 0.6 * np.exp(-(t - 0.6) * 40) + 0.01),
        "actor/grad_norm": np.full(steps, 0.4),
        "actor/kl_loss": 0.001 + 0.02 * t,
        "actor/pg_clipfrac": np.where(t < 0.65, 0.05, 0.25),
        "critic/score/mean": 0.2 + 0.5 * t,
        "response_length/mean": np.where(t < 0.7, 500.0, 40.0),
    }
    values = np.empty((n_tags, steps))
    for j, name in enumerate(names):
        base = curves.get(name, (j % 7) + np.sin(x / 500.0))
        values[j] = base * (1 + rng.normal(0, 0.05, steps))
    g = names.index("actor/grad_norm")
    values[g, int(steps * 0.75)] = 60.0  # a one-step spike min/max must keep
    values[g, -3:] = np.nan
    tag = np.repeat(np.arange(n_tags, dtype=np.int32)[None, :], steps, 0).ravel()
    step = np.repeat(np.arange(1, steps + 1, dtype=np.int64), n_tags)
    value = values.T.ravel()
    wall = np.repeat(1.75e9 + np.arange(steps) * 30.0, n_tags)
    info = RunInfo(name="bench-run", source="memory", address="bench")
    return RunFrame.from_arrays(info, names, tag, step, value, wall)


def _median(fn, n: int = 3):
    times, out = [], None
    for _ in range(n):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def plotly_page(report: dict) -> str | None:
    """The same plots (one per fired verdict's metric, plus the key metrics) with plotly."""
    try:
        import plotly.graph_objects as go
    except ImportError:
        return None
    series = report["series"]
    parts = []
    first = True
    for run, s in series.items():
        fired = [v for v in report["verdicts"] if v["run"] == run and v["episodes"]]
        plots = [(v, m) for v in fired for m in list(v["metrics"])[:3]]
        plots += [(None, m) for m in s["metrics"]]
        for v, m in plots:
            c = s["metrics"].get(m)
            if not c:
                continue
            fig = go.Figure(go.Scatter(x=c["steps"], y=c["values"], mode="lines", name=m))
            for e in v["episodes"] if v else []:
                fig.add_vrect(x0=e["first_step"], x1=e["last_step"], fillcolor="red", opacity=0.15)
            for o in s["overlays"].get(v["code"], []) if v else []:
                if o["metric"] == m and o["kind"] == "line":
                    fig.add_trace(go.Scatter(x=o["steps"], y=o["values"], name=o["label"]))
                elif o["metric"] == m:
                    fig.add_hline(y=o["y"], line_dash="dash")
            fig.update_layout(width=680, height=190, margin=dict(l=40, r=10, t=10, b=20))
            parts.append(fig.to_html(full_html=False, include_plotlyjs=first))
            first = False
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'></head><body>"
        + "".join(parts)
        + "</body></html>"
    )


def chromium_load(path: Path) -> float | None:
    exe = Path("/usr/bin/chromium")
    if not exe.exists():
        return None
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    args = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
        "--disable-sync",
    ]
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(exe), args=args)
        times = []
        for _ in range(3):
            page = b.new_page()
            t0 = time.perf_counter()
            page.goto(path.resolve().as_uri(), wait_until="load")
            page.evaluate("() => new Promise(r => requestAnimationFrame(() => r(1)))")
            times.append(time.perf_counter() - t0)
            page.close()
        b.close()
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tags", type=int, default=150)
    ap.add_argument("--steps", type=int, default=20_000)
    args = ap.parse_args()

    from rlwatch.engine.rules import load_rules
    from rlwatch.render.html import render_html
    from rlwatch.report import build

    frame = make_frame(args.tags, args.steps)
    rules = load_rules()
    base, report = _median(lambda: build(frame, rules))
    with_series, report = _median(lambda: build(frame, rules, series=True))
    data = report.to_dict()
    render, page = _median(lambda: render_html(data))
    fired = sum(v.fired for v in report.verdicts)
    curves = sum(len(s["metrics"]) for s in data["series"].values())
    points = sum(len(c["steps"]) for s in data["series"].values() for c in s["metrics"].values())
    print(
        f"run: {len(frame.data):,} scalars ({args.tags} tags x {args.steps:,} steps); "
        f"{fired} rules fired; {curves} curves kept as {points:,} points (min/max per column)"
    )
    print(f"report without curves (baseline):  {base:7.3f} s")
    print(
        f"report with curves:                {with_series:7.3f} s   "
        f"(+{with_series - base:.3f} s, {with_series / base:.2f}x the baseline)"
    )
    print(f"render_html (SVG):                 {render:7.3f} s")
    print(f"page size (SVG):                   {len(page.encode()) / 1e3:7.1f} kB")
    tmp = Path(tempfile.mkdtemp(prefix="rlwatch-bench-html-"))
    svg_file = tmp / "svg.html"
    svg_file.write_text(page, encoding="utf-8")
    plotly_file = None
    t_plotly, ppage = _median(lambda: plotly_page(data), 1)
    if ppage is None:
        print("plotly: not installed (pip install plotly to compare)")
    else:
        plotly_file = tmp / "plotly.html"
        plotly_file.write_text(ppage, encoding="utf-8")
        size = len(ppage.encode())
        print(
            f"plotly offline, same plots:        {t_plotly:7.3f} s to render, "
            f"{size / 1e3:7.1f} kB ({size / len(page.encode()):.0f}x the SVG page)"
        )
    t_svg = chromium_load(svg_file)
    if t_svg is None:
        print("chromium: not available, load times not measured")
    else:
        print(f"chromium load + first paint (SVG): {t_svg:7.3f} s")
        if plotly_file is not None:
            t_pl = chromium_load(plotly_file)
            print(f"chromium load + first paint (plotly): {t_pl:7.3f} s ({t_pl / t_svg:.1f}x)")


if __name__ == "__main__":
    main()
