"""RunFrame: schema, restarts (last write kept, boundaries exposed), wide view."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import FIXTURES, write_tbx

from rlwatch.frame import RunFrame, RunInfo
from rlwatch.sources import load, tensorboard


def test_frame_schema_is_validated() -> None:
    frame = tensorboard.load(FIXTURES / "grpo-healthy")
    frame.validate()
    assert [str(t) for t in frame.data.dtypes] == [
        "category",
        "int64",
        "category",
        "category",
        "float64",
        "float64",
        "category",
    ]
    broken = RunFrame(frame.data.drop(columns="source"), frame.runs)
    with pytest.raises(ValueError, match="columns"):
        broken.validate()


def test_restart_keeps_the_last_write_and_records_the_boundary() -> None:
    frame = tensorboard.load(FIXTURES / "grpo-restart")
    frame.validate()
    info = frame.runs["grpo-restart"]
    (restart,) = info.restarts
    assert (restart.step, restart.previous_step) == (100, 119)
    assert restart.where.endswith("events.out.tfevents.1750007200.rlwatch-fixtures")
    assert info.duplicates_dropped == 20 * 5  # steps 100-119 of five tags were re-logged
    score = frame.wide("grpo-restart")["reward_mean"]
    # the second file logged reward + 0.05: its values win on the overlap
    assert score.loc[105] == pytest.approx(0.3 + 0.002 * 105 + 0.05, abs=1e-6)
    assert score.loc[99] == pytest.approx(0.3 + 0.002 * 99, abs=1e-6)
    assert frame.segment_starts("grpo-restart") == [100]
    assert frame.segment_of("grpo-restart", np.array([0, 99, 100, 199])).tolist() == [0, 0, 1, 1]


def test_a_log_that_starts_again_in_the_same_file_is_a_restart(tmp_path: Path) -> None:
    write_tbx(
        tmp_path, {"actor/entropy": [1.0, 2.0, 3.0, 4.0, 9.0, 10.0, 11.0]}, [0, 1, 2, 3, 2, 3, 4]
    )
    frame = tensorboard.load(tmp_path)
    info = next(iter(frame.runs.values()))
    assert [(r.step, r.previous_step) for r in info.restarts] == [(2, 3)]
    assert frame.data["value"].tolist() == [1.0, 2.0, 9.0, 10.0, 11.0]


def test_two_restarts_back_to_the_same_step_are_two_boundaries(tmp_path: Path) -> None:
    write_tbx(tmp_path, {"a": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], "b": [0.0] * 6}, [0, 1, 2, 1, 2, 1])
    info = next(iter(tensorboard.load(tmp_path).runs.values()))
    assert [(r.step, r.previous_step) for r in info.restarts] == [(1, 2), (1, 2)]


def test_a_repeated_write_of_the_same_step_is_not_a_restart(tmp_path: Path) -> None:
    write_tbx(tmp_path, {"a": [1.0, 2.0, 3.0]}, [0, 1, 1])
    frame = tensorboard.load(tmp_path)
    info = next(iter(frame.runs.values()))
    assert info.restarts == [] and info.duplicates_dropped == 1
    assert frame.data["value"].tolist() == [1.0, 3.0]


def test_wide_view_is_step_by_canonical_metric() -> None:
    frame = tensorboard.load(FIXTURES / "grpo-healthy")
    wide = frame.wide("grpo-healthy")
    assert wide.index.name == "step" and wide.index.is_monotonic_increasing
    assert {"reward_mean", "entropy", "kl_ref", "grad_norm", "truncation_rate"} <= set(wide.columns)
    assert wide.shape == (300, 13)
    sub = frame.wide("grpo-healthy", ["entropy"])
    assert list(sub.columns) == ["entropy"]


def test_nan_and_inf_are_kept_as_evidence() -> None:
    frame = tensorboard.load(FIXTURES / "grpo-broken")
    grad = frame.wide("grpo-broken")["grad_norm"]
    assert grad.isna().sum() == 3 and grad.iloc[-3:].isna().all()


def test_units_are_scaled_to_the_canonical_metric(tmp_path: Path) -> None:
    write_tbx(
        tmp_path, {"actor/lr(1e-4)": [0.1, 0.1], "critic/kl": [0.0, 0.1], "timing/gen": [1.0, 1.0]}
    )
    frame = tensorboard.load(tmp_path)
    (info,) = frame.runs.values()
    assert info.framework == "verl" and info.framework_version == "v0.1"
    assert frame.wide(info.name)["lr"].iloc[0] == pytest.approx(1e-5)


def test_same_run_names_from_two_targets_are_made_unique(tmp_path: Path) -> None:
    write_tbx(tmp_path / "a" / "run", {"x": [1.0]})
    write_tbx(tmp_path / "b" / "run", {"x": [2.0]})
    frame = load([str(tmp_path / "a" / "run"), str(tmp_path / "b" / "run")])
    assert len(frame.runs) == 2
    assert set(frame.data["run"].astype(str)) == set(frame.runs)


def test_from_arrays_with_no_rows() -> None:
    info = RunInfo("empty", "test", "-")
    frame = RunFrame.from_arrays(
        info, [], np.empty(0, np.int32), np.empty(0, np.int64), np.empty(0), np.empty(0)
    )
    frame.validate()
    assert frame.steps("empty") == (0, 0, 0)


def test_run_facts_serialise_to_valid_json() -> None:
    import json

    info = RunInfo(
        "r",
        "test",
        "-",
        hparams={"lr": float("nan"), "beta": float("inf"), "layers": [1, 2], "name": "x", "n": 3},
    )
    doc = json.loads(json.dumps(info.to_dict(), allow_nan=False))
    assert doc["hparams"] == {"lr": "nan", "beta": "inf", "layers": "[1, 2]", "name": "x", "n": 3}
