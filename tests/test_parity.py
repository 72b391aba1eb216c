"""The same metrics logged by the real clients to TensorBoard, MLflow and W&B (offline) give
equal frames. Values are exactly representable in float32, as TensorBoard stores them."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from conftest import write_tbx
from test_mlflow import log_run  # noqa: F401 - the same real client helper
from test_wandb import write_offline_run

from rlwatch.sources import load

pytest.importorskip("mlflow")
pytest.importorskip("wandb")

SERIES = {
    "actor/entropy": [0.5 - 0.015625 * s for s in range(20)],
    "actor/grad_norm": [0.25 + (4.0 if s == 12 else 0.0) for s in range(20)],
    "critic/score/mean": [0.125 * (s % 8) for s in range(20)],
}


def _canon(frame) -> pd.DataFrame:
    d = frame.data[["metric", "tag", "step", "value"]].astype({"metric": str, "tag": str})
    return d.sort_values(["tag", "step"]).reset_index(drop=True)


def test_tensorboard_mlflow_and_wandb_give_equal_frames(tmp_path: Path) -> None:
    write_tbx(tmp_path / "tb", SERIES)
    from mlflow import MlflowClient
    from mlflow.entities import Metric

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(uri)
    run = client.create_run(client.create_experiment("parity"), run_name="parity")
    client.log_batch(
        run.info.run_id,
        metrics=[
            Metric(tag, values[s], 1_700_000_000_000 + s, s)
            for tag, values in SERIES.items()
            for s in range(20)
        ],
    )
    wb = write_offline_run(
        tmp_path / "wb",
        f"""
        series = {SERIES!r}
        run = wandb.init(project="parity", name="parity")
        for s in range(20):
            wandb.log({{tag: values[s] for tag, values in series.items()}}, step=s)
        wandb.finish()
    """,
    )
    tb = _canon(load([str(tmp_path / "tb")]))
    ml = _canon(load(["mlflow:parity/parity"], tracking_uri=uri))
    wl = _canon(load([str(wb)]))
    assert len(tb) == 60
    pd.testing.assert_frame_equal(tb, ml)
    pd.testing.assert_frame_equal(tb, wl)
    assert set(tb["metric"]) == {"entropy", "grad_norm", "reward_mean"}
