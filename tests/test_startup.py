"""Start-up stays light: `rlwatch --help` imports no heavy module, a diagnosis with a warm
cache parses no YAML (the compiled pack and the tables come from the cache)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import ROOT

HEAVY = ("pandas", "numpy", "yaml", "rich", "typer.rich_utils", "pydantic", "mlflow", "wandb")
LOG = "fixtures/verl-filelogger-jsonl-gsm8k-ppo-collapse/gsm8k.jsonl"


def imported(*args: str, env: dict[str, str] | None = None) -> set[str]:
    r = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "rlwatch", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "NO_COLOR": "1", **(env or {})},
        timeout=120,
    )
    return {
        line.split("|")[-1].strip()
        for line in r.stderr.splitlines()
        if line.startswith("import time:")
    }


def test_help_imports_nothing_heavy() -> None:
    mods = imported("--help")
    assert "rlwatch.cli.app" in mods  # the test can fail: it sees the imports
    assert not [m for m in mods if m.split(".")[0] in HEAVY or m in HEAVY]


def test_a_warm_diagnosis_parses_no_yaml(tmp_path: Path) -> None:
    env = {"XDG_CACHE_HOME": str(tmp_path), "RLWATCH_NO_CACHE": ""}
    cold = imported("diagnose", LOG, env=env)
    assert "yaml" in cold and "pandas" in cold  # the first run compiles the pack
    warm = imported("diagnose", LOG, env=env)
    assert "yaml" not in warm and "rlwatch.engine.rules" in warm
    assert not {"mlflow", "wandb", "tbparse", "torch", "ray"} & {m.split(".")[0] for m in warm}


def test_a_diagnosis_of_a_log_imports_no_other_reader_nor_pydantic(tmp_path: Path) -> None:
    """Discovery imports a reader only when sniffing says so; typer's pydantic validation is
    skipped for values that need no conversion (a bad value still gets typer's message)."""
    env = {"XDG_CACHE_HOME": str(tmp_path), "RLWATCH_NO_CACHE": ""}
    mods = imported("diagnose", LOG, env=env)
    assert "rlwatch.sources.logs" in mods
    readers = {"tensorboard", "_tfrecord", "wandb_api", "wandb_local", "swanlab", "mlflow_source"}
    assert not {f"rlwatch.sources.{r}" for r in readers} & mods
    assert "pydantic" not in mods
    r = subprocess.run(
        [sys.executable, "-m", "rlwatch", "diagnose", LOG, "--jobs", "0"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **env},
        timeout=120,
    )
    assert r.returncode == 2 and "--jobs" in r.stderr and "greater than or equal to 1" in r.stderr
