"""The HTML report: downsampling keeps spikes, the page is self-contained, and it draws in a real
headless Chromium (playwright + the system chromium) with no console error and no request."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from rlwatch.api import diagnose
from rlwatch.cli.app import app
from rlwatch.render.html import render_html
from rlwatch.series import curve, minmax

ROOT = Path(__file__).resolve().parent.parent
BROKEN = str(ROOT / "fixtures" / "grpo-broken")
HEALTHY = str(ROOT / "fixtures" / "grpo-healthy")
CHROMIUM = os.environ.get("RLWATCH_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


def test_minmax_keeps_a_one_step_spike_and_bounds_the_points():
    rng = np.random.default_rng(0)
    steps = np.arange(1_000_000)
    values = rng.normal(0, 1, steps.size)
    values[654_321] = 1e4
    values[123_456] = -1e4
    xs, ys = minmax(steps, values, width=500)
    assert len(xs) <= 1000
    assert 1e4 in ys and -1e4 in ys
    assert xs[ys.index(1e4)] == 654_321
    assert xs == sorted(xs)
    # short series pass through untouched
    assert minmax(np.arange(5), np.arange(5.0), width=500) == ([0, 1, 2, 3, 4], [0, 1, 2, 3, 4])


def test_curve_keeps_nonfinite_steps_apart():
    c = curve(np.array([3, 1, 2, 4]), np.array([1.0, np.nan, 2.0, np.inf]))
    assert c["steps"] == [2, 3] and c["values"] == [2.0, 1.0]
    assert c["nonfinite"] == [1, 4]


@pytest.fixture(scope="module")
def broken_report():
    return diagnose([BROKEN], series=True).to_dict()


@pytest.fixture(scope="module")
def two_runs_report():
    return diagnose([BROKEN, HEALTHY], series=True).to_dict()


def _fired(report):
    return [v for v in report["verdicts"] if v["episodes"]]


def test_page_is_self_contained_and_has_every_fired_verdict(broken_report):
    page = render_html(broken_report)
    fired = _fired(broken_report)
    assert fired, "the broken fixture must fire rules"
    assert "default-src 'none'" in page  # the browser may fetch nothing
    assert "<script" not in page and " src=" not in page
    assert not re.search(r"(href|src)=[\"']?(https?:)?//", page)
    for v in fired:
        card = re.search(
            rf'<section class="card verdict [a-z]+" id="[^"]*" data-code="{v["code"]}".*?</section>',
            page,
            re.S,
        )
        assert card, v["code"]
        assert '<polyline class="curve"' in card.group(0), v["code"]
        assert 'class="episode"' in card.group(0), v["code"]  # the firing span is shaded
    # the symptom table with the run's values, and the run facts
    assert "symptom &rarr; check" in page and "did entropy drop suddenly?" in page
    assert "restarts" in page and "fixtures/grpo-broken" in page


def test_overlays_draw_the_rule_baselines_and_thresholds(broken_report):
    over = broken_report["series"]["grpo-broken"]["overlays"]
    labels = {o["label"] for o in over["ST01"]}
    assert "rolling median" in labels and any("x rolling median" in x for x in labels)
    assert any(o["kind"] == "level" for o in over["PO02"])  # clip_frac above 0.2
    assert any("early level" in o["label"] for o in over["EX01"])


def test_many_runs_summary_table_and_small_multiples(two_runs_report):
    page = render_html(two_runs_report)
    assert page.index("<h2>Runs</h2>") < page.index('id="run-grpo-broken"')
    assert "Key metrics, runs overlaid" in page
    multiples = page.split('<div class="multiples">', 1)[1].split("</div>", 1)[0]
    # each small multiple overlays both runs: two curves in the reward plot
    reward = next(s for s in multiples.split("</svg>") if "reward_mean" in s)
    assert reward.count('<polyline class="curve"') == 2


def test_cli_html_to_file_and_stdout(tmp_path):
    out = tmp_path / "r.html"
    res = CliRunner().invoke(app, ["diagnose", BROKEN, "--format", "html", "-o", str(out)])
    assert res.exit_code == 1, res.output
    assert out.read_text().startswith("<!DOCTYPE html>")
    res = CliRunner().invoke(app, ["diagnose", HEALTHY, "--format", "html"])
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith("<!DOCTYPE html>") and res.stdout.rstrip().endswith("</html>")


def test_github_format_links_the_html_report(tmp_path):
    out = tmp_path / "report.html"
    summary = tmp_path / "summary.md"
    res = CliRunner().invoke(
        app,
        ["diagnose", BROKEN, "--format", "github", "--html", str(out)],
        env={"GITHUB_STEP_SUMMARY": str(summary)},
    )
    assert res.exit_code == 1
    assert f"::notice title=rlwatch HTML report::{out}" in res.stdout
    assert str(out) in summary.read_text()
    assert "<svg" in out.read_text()


def _chromium_or_skip():
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        pytest.skip(f"no chromium at {CHROMIUM} (install the OS package `chromium`)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:  # pragma: no cover - playwright is a test extra
        pytest.skip("the playwright package is not installed")
    return sync_playwright


def open_in_chromium(path: Path, screenshot: Path, *, full_page: bool = True) -> dict:
    """Load a page in headless Chromium; return console messages, requests and what was drawn."""
    sync_playwright = _chromium_or_skip()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            console, requests, errors = [], [], []
            page.on("console", lambda m: console.append((m.type, m.text)))
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: requests.append(r.url))
            page.goto(path.resolve().as_uri(), wait_until="load")
            drawn = page.evaluate(
                """() => [...document.querySelectorAll('section.verdict')].map(s => ({
                    code: s.dataset.code, run: s.dataset.run,
                    plots: [...s.querySelectorAll('svg.plot polyline.curve')]
                        .filter(p => { const b = p.getBBox(); return b.width > 50
                                       && p.points.numberOfItems > 1; }).length}))"""
            )
            text = page.inner_text("body")
            page.screenshot(path=str(screenshot), full_page=full_page)
        finally:
            browser.close()
    return {
        "console": console,
        "requests": requests,
        "errors": errors,
        "drawn": drawn,
        "text": text,
    }


def test_report_in_real_headless_chromium(tmp_path, two_runs_report, monkeypatch):
    html = tmp_path / "report.html"
    html.write_text(render_html(two_runs_report), encoding="utf-8")
    shot = tmp_path / "report.png"
    seen = open_in_chromium(html, shot)
    assert not [c for c in seen["console"] if c[0] in ("error", "warning")], seen["console"]
    assert not seen["errors"]
    assert seen["requests"] == [html.resolve().as_uri()], seen["requests"]  # the page only
    drawn = {(d["run"], d["code"]): d["plots"] for d in seen["drawn"]}
    for v in _fired(two_runs_report):
        assert v["code"] in seen["text"]
        assert drawn.get((v["run"], v["code"]), 0) >= 1, (v["run"], v["code"])
    assert shot.stat().st_size > 10_000  # a screenshot artifact, kept under tmp_path
    if os.environ.get("RLWATCH_UPDATE_DOCS"):  # regenerate docs/report.png (the README's)
        one = tmp_path / "one.html"
        monkeypatch.chdir(ROOT)  # the page shows the fixture's relative path
        page = render_html(diagnose(["fixtures/grpo-broken"], series=True).to_dict())
        one.write_text(page, encoding="utf-8")
        docs = ROOT / "docs"
        docs.mkdir(exist_ok=True)
        open_in_chromium(one, docs / "report.png", full_page=False)
