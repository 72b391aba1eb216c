"""verl's rollout-correction metrics, as verl's FileLogger writes them, reach MM07-MM12.

Two eras of keys: `mismatch/...` (v0.6.0, mismatch_helper.py) and `rollout_corr/...` (v0.6.1+,
rollout_corr_helper.py). Lines are `{"step": N, "data": {...}}` as verl/utils/tracking.py's
FileLogger writes them (orjson, NaN as null).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlwatch.cli.app import app

KEYS = {
    "v0.6.1": {
        "mean": "rollout_corr/rollout_is_mean",
        "ess": "rollout_corr/rollout_is_eff_sample_size",
        "std": "rollout_corr/rollout_is_std",
        "kl": "rollout_corr/kl",
        "chi2": "rollout_corr/chi2_token",
    },
    "v0.6.0": {
        "mean": "mismatch/rollout_is_mean",
        "ess": "mismatch/rollout_is_eff_sample_size",
        "std": "mismatch/rollout_is_std",
        "kl": "mismatch/mismatch_kl",
    },
}
NEW = ("MM07", "MM08", "MM09", "MM10", "MM11", "MM12")


def _write(path: Path, era: str, broken_from: int | None, steps: int = 30) -> None:
    keys = KEYS[era]
    with path.open("w", encoding="utf-8") as fh:
        for step in range(1, steps + 1):
            bad = broken_from is not None and step >= broken_from
            wobble = 0.002 * (-1) ** step
            corr = {
                "mean": 0.35 if bad else 1.0 + wobble,
                "ess": 0.9 if bad else 0.96,
                "std": 0.4 if bad else 0.05,
                "kl": 0.45 if bad else 0.001 + wobble / 2,
                "chi2": 0.6 if bad else 0.01,
            }
            data = {
                "critic/score/mean": 0.4 + 0.005 * step,
                "critic/rewards/mean": 0.4 + 0.005 * step,
                "actor/entropy": 0.5 - 0.002 * step,
                "actor/pg_loss": 0.01,
                "actor/grad_norm": 0.3,
                "actor/pg_clipfrac": 0.002,
                "actor/ppo_kl": 0.0005,
                "response_length/mean": 300.0,
                "response_length/clip_ratio": 0.01,
                "timing_s/gen": 20.0,
                "perf/mfu/actor_infer": 0.3,
            }
            data.update({keys[k]: v for k, v in corr.items() if k in keys})
            fh.write(json.dumps({"step": step, "data": data}) + "\n")


def _diagnose(path: Path) -> tuple[int, dict[str, dict]]:
    r = CliRunner().invoke(app, ["diagnose", str(path), "--format", "json"])
    assert r.exit_code in (0, 1), r.output[-2000:]
    report = json.loads(r.stdout)
    return r.exit_code, {v["code"]: v for v in report["verdicts"]}


@pytest.mark.parametrize("era", sorted(KEYS))
def test_healthy_rollout_correction_is_quiet(tmp_path: Path, era: str) -> None:
    path = tmp_path / "verl.jsonl"
    _write(path, era, broken_from=None)
    code, verdicts = _diagnose(path)
    assert code == 0
    for rule in NEW:
        assert verdicts[rule]["state"] in ("ok", "skipped"), (rule, verdicts[rule]["summary"])
    assert verdicts["MM07"]["state"] == "ok"  # evaluated, not skipped: the keys were mapped
    assert verdicts["MM07"]["metrics"]["rollout_is_ratio"] == KEYS[era]["mean"]


@pytest.mark.parametrize("era", sorted(KEYS))
def test_weights_off_with_a_large_kl_is_an_error(tmp_path: Path, era: str) -> None:
    path = tmp_path / "verl.jsonl"
    _write(path, era, broken_from=12)
    code, verdicts = _diagnose(path)
    assert code == 1
    assert verdicts["MM12"]["state"] == "firing"
    assert verdicts["MM07"]["state"] == verdicts["MM10"]["state"] == "firing"
    assert verdicts["MM07"]["episodes"][0]["first_step"] == 14  # 3 logs from step 12
    assert verdicts["MM08"]["state"] == "ok"  # ESS 0.9 stays above 0.3
