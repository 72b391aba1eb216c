"""W&B: offline run folders written by the real wandb client (WANDB_MODE=offline), the real
Tinker run's .wandb against its metrics.jsonl, damaged files, and the API path against a local
stand-in for the W&B service (tests/fake_wandb.py: no W&B server can run here)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
from conftest import FIXTURES
from typer.testing import CliRunner

from rlwatch.cli.app import app
from rlwatch.errors import SourceError
from rlwatch.sources import load, logs, wandb_local

pytest.importorskip("wandb", reason="the wandb extra is part of rlwatch[test]")
runner = CliRunner()
TINKER = FIXTURES / "tinker-rlvr-qwen3-4b-rubric"


def wandb_env(tmp: Path) -> dict[str, str]:
    return {
        **os.environ,
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "WANDB_DIR": str(tmp),
        "WANDB_CACHE_DIR": str(tmp / "cache"),
        "WANDB_CONFIG_DIR": str(tmp / "config"),
        "WANDB_DATA_DIR": str(tmp / "data"),
    }


def write_offline_run(tmp: Path, body: str) -> Path:
    """Run the real wandb client offline in a child process; returns the .wandb file."""
    tmp.mkdir(parents=True, exist_ok=True)
    script = tmp / "log.py"
    script.write_text("import math, wandb\n" + textwrap.dedent(body))
    subprocess.run(
        [sys.executable, str(script)],
        check=True,
        env=wandb_env(tmp),
        cwd=tmp,
        timeout=120,
        capture_output=True,
    )
    (f,) = tmp.rglob("*.wandb")
    return f


@pytest.fixture(scope="module")
def offline_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_offline_run(
        tmp_path_factory.mktemp("wb"),
        """
        run = wandb.init(project="rlwatch", name="grpo-offline", config={"lr": 1e-6, "beta": 0.04})
        run.define_metric("train/global_step")
        run.define_metric("train/*", step_metric="train/global_step")
        for s in range(40):
            wandb.log({"train/global_step": 5 * s, "train/reward": 0.25 * (s % 4),
                       "train/kl": math.nan if s == 39 else 0.5, "train/entropy": 0.75,
                       "train/frac_reward_zero_std": 1.0 if s > 2 else 0.25,
                       "samples": wandb.Table(columns=["a"], data=[[1]]) if s == 0 else 0.5})
        wandb.finish()
    """,
    )


def test_an_offline_run_reads_completely_with_its_step_metric(offline_run: Path) -> None:
    frame = load([str(offline_run.parent)])
    (info,) = frame.runs.values()
    assert info.name == "grpo-offline" and info.source == "wandb-local"
    assert info.hparams == {"lr": 1e-6, "beta": 0.04}
    reward = frame.wide(info.name)["reward_mean"].dropna()
    assert reward.index.tolist() == list(range(0, 200, 5))  # train/global_step, not _step
    assert reward.tolist() == [0.25 * (s % 4) for s in range(40)]
    kl = frame.data[frame.data["tag"] == "train/kl"]["value"]
    assert math.isnan(kl.iloc[-1]) and (kl.iloc[:-1] == 0.5).all()
    assert not [t for t in frame.data["tag"].unique() if str(t).startswith("samples/")]


def test_diagnose_an_offline_run_folder(offline_run: Path) -> None:
    r = runner.invoke(app, ["diagnose", str(offline_run.parent.parent)])  # the wandb/ folder
    assert r.exit_code == 1 and "RW03 reward.zero_variance_groups" in r.output


def test_the_real_tinker_run_file_equals_its_metrics_jsonl() -> None:
    ours = wandb_local.load(TINKER / "run-8zwal4ai.wandb").data
    truth = logs.load_file(TINKER / "metrics.jsonl").data
    key = ["tag", "step"]

    def canon(d: pd.DataFrame) -> pd.DataFrame:
        return d[[*key, "value"]].astype({"tag": str}).sort_values(key).reset_index(drop=True)

    assert len(ours) == 190
    pd.testing.assert_frame_equal(canon(ours), canon(truth))


def test_a_truncated_run_file_gives_every_readable_record(tmp_path: Path) -> None:
    data = (TINKER / "run-8zwal4ai.wandb").read_bytes()
    f = tmp_path / "run-x.wandb"
    f.write_bytes(data[: len(data) * 2 // 3])
    frame = wandb_local.load(f)
    (info,) = frame.runs.values()
    assert 0 < len(frame.data) < 190
    assert any("truncated" in w and "bytes unread" in w for w in info.warnings)


def test_a_corrupt_block_is_skipped_and_reported(tmp_path: Path) -> None:
    data = bytearray((TINKER / "run-8zwal4ai.wandb").read_bytes())
    data[40_000] ^= 0xFF
    f = tmp_path / "run-y.wandb"
    f.write_bytes(bytes(data))
    frame = wandb_local.load(f)
    (info,) = frame.runs.values()
    assert any("corrupt record(s) (bad CRC)" in w for w in info.warnings)
    assert len(frame.data) > 0


def test_a_file_that_is_not_a_wandb_file(tmp_path: Path) -> None:
    f = tmp_path / "run-z.wandb"
    f.write_bytes(b"hello world" * 10)
    with pytest.raises(SourceError, match="not a W&B run file"):
        wandb_local.load(f)


@pytest.fixture
def service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    pytest.importorskip("pyarrow", reason="the stand-in serves parquet like W&B does")
    from fake_wandb import FakeWandb

    rows = [
        {
            "_step": s,
            "_timestamp": 1.7e9 + s,
            "train/reward": 0.1 + 0.01 * s,
            "train/entropy": 0.5 if s < 30 else 0.01,
            "train/completions/clipped_ratio": 0.02,
        }
        for s in range(60)
    ]
    fake = FakeWandb(
        {"team/rl/abc123": {"name": "grpo-cloud", "config": {"lr": 1e-6}, "rows": rows}}
    )
    for k, v in wandb_env(tmp_path).items():
        if k.startswith("WANDB_") and k != "WANDB_MODE":
            monkeypatch.setenv(k, v)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_BASE_URL", fake.url)
    monkeypatch.setenv("WANDB_API_KEY", fake.api_key)
    yield fake
    fake.close()


def test_api_run_full_history_by_path_and_url(service) -> None:
    frame = load(["wandb:team/rl/abc123"])
    (info,) = frame.runs.values()
    assert info.name == "grpo-cloud" and info.hparams == {"lr": 1e-6}
    assert len(frame.data) == 60 * 3
    assert any("parquet" in r for r in service.requests)  # the full export, not sampled
    again = load([f"{service.url}/team/rl/runs/abc123"])
    assert len(again.data) == 60 * 3


def test_api_missing_run_and_bad_key_are_one_line_errors(service, monkeypatch) -> None:
    r = runner.invoke(app, ["diagnose", "wandb:team/rl/nope"])
    assert r.exit_code == 2 and "W&B run team/rl/nope" in r.output
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    r = runner.invoke(app, ["diagnose", "wandb:team/rl/abc123"])
    assert r.exit_code == 2 and "refused the credentials" in r.output


def test_a_malformed_wandb_target() -> None:
    r = runner.invoke(app, ["diagnose", "wandb:only"])
    assert r.exit_code == 2 and "expected wandb:<entity>/<project>/<run_id>" in r.output


# a hand-written GRPO loop's W&B run: six optimizer steps logged per GRPO step, on its step
CROWDED = """
run = wandb.init(project="rlwatch", name="grpo-crowded", config={"steps": 20})
run.define_metric("grpo_step")
run.define_metric("train/*", step_metric="grpo_step")
for g in range(1, 21):
    wandb.log({"grpo_step": g, "train/reward_mean": 0.1 + g / 100})
    for k in range(6):
        wandb.log({"grpo_step": g, "train/entropy": 1.0 - (6 * g + k) / 200})
wandb.finish()
"""


def test_a_step_metric_many_logs_share_gives_way_to_wandbs_own_step(tmp_path: Path) -> None:
    """A hand-written GRPO loop (the shape of Stanford CS336 runs) declares
    `define_metric("train/*", step_metric="grpo_step")` and logs six optimizer steps per GRPO
    step: read by the step metric, the last write of each step would keep one log in six (an
    entropy collapse seen on a sixth of its logs). The run is read at W&B's `_step`, and says
    so, without losing the run's own config entry `steps`; a run whose step metric advances at
    every log keeps it (the module's run above)."""
    f = write_offline_run(tmp_path / "wb", CROWDED)
    frame = wandb_local.load(f)
    (info,) = frame.runs.values()
    entropy = frame.data[frame.data["tag"] == "train/entropy"]
    assert len(entropy) == 120 and entropy["step"].is_unique
    assert entropy["value"].iloc[-1] == pytest.approx(1.0 - 125 / 200)
    assert len(frame.data[frame.data["tag"] == "train/reward_mean"]) == 20
    assert "W&B's _step" in info.hparams["steps"] and "grpo_step" in info.hparams["steps"]
    assert info.hparams["config/steps"] == 20


def test_tail_reads_a_crowded_step_metric_as_diagnose_does(tmp_path: Path) -> None:
    """The run above followed while its file grows: once its step metric is seen crowded, the
    run is read again at `_step` (evaluated afresh), and tail ends with diagnose's rows."""
    from rlwatch.api import load_rules
    from rlwatch.live import Watch

    f = write_offline_run(tmp_path / "wb", CROWDED)
    data = f.read_bytes()
    live = tmp_path / "live" / f.parent.name
    live.mkdir(parents=True)
    out = live / f.name
    out.write_bytes(data[:3000])  # the first records: too few logs to see the crowding
    watch = Watch([str(live)], load_rules(), keep_rows=True, stale_after=1e9, stall_floor=1e9)
    watch.poll()
    out.write_bytes(data)
    watch.poll()
    want = wandb_local.load(f).data
    got = watch.rows()
    assert sorted(zip(got["step"], got["value"], strict=True)) == sorted(
        zip(want["step"], want["value"], strict=True)
    )
