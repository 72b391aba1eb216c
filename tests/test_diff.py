"""`rlwatch diff` and `diagnose --baseline` on runs written by real TensorBoard writers: the same
recipe with another seed is no regression; a regressed copy and the broken fixture are, with the
right metrics and steps."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from rlwatch.cli.app import app
from rlwatch.diff import noise

ROOT = Path(__file__).resolve().parent.parent
HEALTHY = str(ROOT / "fixtures" / "grpo-healthy")
BROKEN = str(ROOT / "fixtures" / "grpo-broken")


def _make_fixtures():
    spec = importlib.util.spec_from_file_location(
        "make_fixtures", ROOT / "fixtures/make_fixtures.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The healthy recipe again with seed 8, and a copy of it that goes bad from step 200."""
    pytest.importorskip("tensorboardX")
    from tensorboardX import SummaryWriter

    from rlwatch.sources import load

    base = tmp_path_factory.mktemp("diff")
    seed8 = base / "healthy-seed8"
    _make_fixtures().grpo_healthy(seed=8, out=seed8)
    frame = load([str(seed8)])
    bad = base / "regressed"
    w = SummaryWriter(str(bad))
    d = frame.data.sort_values(["step", "tag"])
    for tag, step, value, wall in zip(
        d["tag"].astype(str), d["step"], d["value"], d["wall_time"], strict=True
    ):
        late = max(0, step - 200)
        if tag == "train/entropy" and late:
            value = value * np.exp(-late / 10) + 0.01
        if tag == "train/kl" and late:
            value = value + 0.3 * (1 - np.exp(-late / 10))
        w.add_scalar(tag, float(value), int(step), walltime=float(wall))
    w.close()
    return {"seed8": str(seed8), "regressed": str(bad)}


def _diff(*args):
    res = CliRunner().invoke(app, ["diff", *args, "--format", "json"])
    return res.exit_code, (json.loads(res.stdout) if res.stdout.startswith("{") else res.output)


def test_noise_is_the_spread_around_the_trend_not_the_trend():
    rng = np.random.default_rng(0)
    x = np.arange(2000.0)
    v = 5 + 0.01 * x + rng.normal(0, 0.2, x.size)
    assert 0.17 < noise(v) < 0.23  # the trend (20 units) does not count as noise


def test_same_recipe_another_seed_is_no_regression(runs):
    code, d = _diff(HEALTHY, runs["seed8"])
    assert code == 0, d
    assert d["status"] == "ok" and d["align"] == "step"
    assert d["worse"] == [] and d["regressions"] == 0
    assert {"reward_mean", "entropy", "kl_ref", "grad_norm"} <= set(d["same"])


def test_regressed_copy_names_the_metrics_and_the_step(runs):
    code, d = _diff(HEALTHY, runs["regressed"])
    assert code == 1, d
    worse = {r["metric"]: r for r in d["worse"]}
    assert set(worse) == {"entropy", "kl_ref"}, worse
    for m in ("entropy", "kl_ref"):
        assert 195 <= worse[m]["from_step"] <= 215, (m, worse[m])
    assert "reward_mean" in d["same"]
    new = {v["code"] for v in d["new_verdicts"]}
    assert "EX01" in new  # entropy collapse fires in the candidate only


def test_healthy_vs_broken_exits_1_naming_the_right_metrics_and_steps():
    code, d = _diff(HEALTHY, BROKEN)
    assert code == 1
    assert d["align"] == "fraction"  # 300 vs 240 steps
    new = {v["code"]: v for v in d["new_verdicts"]}
    assert {"ST02", "ST03", "ST05"} <= set(new)
    assert new["ST03"]["episodes"][0]["first_step"] == 238
    worse = {r["metric"]: r for r in d["worse"]}
    assert 140 <= worse["kl_ref"]["from_step"] <= 165  # KL runs away at step 150
    assert worse["loss"]["from_step"] == 238 and worse["loss"]["why"] == "non-finite values"
    assert d["regressions"] >= 3


def test_text_markdown_and_exit_codes():
    r = CliRunner().invoke(app, ["diff", HEALTHY, BROKEN])
    assert r.exit_code == 1
    assert "new in the candidate:" in r.stdout and "ST03" in r.stdout
    assert "kl_ref worse from step" in r.stdout
    r = CliRunner().invoke(app, ["diff", HEALTHY, BROKEN, "--format", "markdown", "--exit-zero"])
    assert r.exit_code == 0
    assert (
        r.stdout.startswith("## rlwatch diff: regressed") and "| `kl_ref` | ⚠️ worse |" in r.stdout
    )
    # a worse metric as a warning does not fail an error gate; the new error verdicts still do
    r = CliRunner().invoke(
        app, ["diff", HEALTHY, BROKEN, "--metric-severity", "warning", "--select", "KL"]
    )
    assert r.exit_code == 0, r.stdout
    r = CliRunner().invoke(app, ["diff", HEALTHY, "fixtures/does-not-exist"])
    assert r.exit_code == 2 and "Traceback" not in r.output


def test_diff_of_a_folder_of_runs_is_a_usage_error(tmp_path):
    r = CliRunner().invoke(app, ["diff", HEALTHY, str(ROOT / "fixtures")])
    assert r.exit_code == 2
    assert "diff compares one run with one run" in r.output and "Traceback" not in r.output


def test_diagnose_with_baseline(runs):
    r = CliRunner().invoke(app, ["diagnose", runs["seed8"], "--baseline", HEALTHY, "-f", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["diff"]["status"] == "ok"
    r = CliRunner().invoke(app, ["diagnose", runs["regressed"], "--baseline", HEALTHY])
    assert r.exit_code == 1  # healthy by the rules' error gate, but worse than the baseline
    assert "entropy worse from step" in r.stdout


def test_html_overlays_baseline_and_candidate(tmp_path, runs):
    out = tmp_path / "diff.html"
    r = CliRunner().invoke(
        app, ["diff", HEALTHY, runs["regressed"], "--format", "html", "-o", str(out)]
    )
    assert r.exit_code == 1
    page = out.read_text()
    assert "Diff against the baseline" in page
    plots = page.split('<div class="diffplot" data-metric="entropy">', 1)[1].split("</svg>")[0]
    assert plots.count('<polyline class="curve"') == 2  # baseline and candidate overlaid
    assert 'class="episode"' in plots  # the worse span shaded
    from test_html import open_in_chromium

    seen = open_in_chromium(out, tmp_path / "diff.png")
    assert not seen["console"] and not seen["errors"]
    assert seen["requests"] == [out.resolve().as_uri()]


CORPUS = ROOT / "fixtures" / "realgen" / "runs"


def _corpus(name: str) -> str:
    path = CORPUS / name / "tb"
    if not path.exists():
        pytest.skip(f"corpus run {name} not in this checkout")
    return str(path)


def test_corpus_real_trl_seeds_are_no_regression():
    """Real GRPOTrainer runs of one recipe with seeds 1 and 2 (fixtures/realgen)."""
    code, d = _diff(_corpus("grpo-healthy-s1"), _corpus("grpo-healthy-s2"))
    assert code == 0, d
    assert d["worse"] == [] and d["new_verdicts"] == []


def test_corpus_real_trl_lr_blowup_is_a_regression():
    code, d = _diff(_corpus("grpo-healthy-s1"), _corpus("grpo-lr-blowup-noclip-s0"))
    assert code == 1
    worse = {r["metric"] for r in d["worse"]}
    assert {"reward_mean", "entropy", "truncation_rate"} <= worse
    assert {"EX03", "LN02"} <= {v["code"] for v in d["new_verdicts"]}
