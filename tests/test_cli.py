"""The command line: help and version at once, summaries, the one-line errors and exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES
from typer.testing import CliRunner

from rlwatch.cli.app import app

runner = CliRunner()


def rlwatch(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rlwatch", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_startup_imports_nothing_heavy() -> None:
    code = (
        "import sys, rlwatch.cli.app; heavy = ('pandas', 'numpy', 'tbparse', 'mlflow', "
        "'wandb', 'tensorboard', 'yaml'); print([m for m in heavy if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--help"],
        ["-h"],
        ["--version"],
        ["--bogus"],
        ["bogus"],
        ["diagnose", "--help"],
        ["tail", "-h"],
        ["diff"],
        ["rules", "--help"],
        ["rules", "explain", "--help"],
        ["rules", "explain", "KL02"],
        ["--", "diagnose"],
    ],
)
def test_a_command_line_gets_the_same_answer_from_the_app_main_builds(args: list[str]) -> None:
    """`main` builds only the command a line names (the listing alone for `--help`): the
    output and exit code must be what the whole app gives."""
    from rlwatch.cli.app import _for

    built = _for(args)
    if args[:1] == ["--help"]:  # the top-level help: a listing, not every command's parameters
        assert all(c.callback.__name__ == "stand_in" for c in built.registered_commands)
    if args[:1] == ["diagnose"]:
        assert [c.name for c in built.registered_commands] == ["diagnose"]
    want = runner.invoke(app, args, prog_name="rlwatch")
    got = runner.invoke(built, args, prog_name="rlwatch")
    assert (got.exit_code, got.output) == (want.exit_code, want.output)


def test_help_teaches_commands_and_exit_codes() -> None:
    r = runner.invoke(app, ["--help"])
    assert r.exit_code == 0
    for word in ("diagnose", "metrics", "Exit codes"):
        assert word in r.output


def test_version() -> None:
    from rlwatch import __version__

    r = rlwatch("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"rlwatch {__version__}"


def test_diagnose_summarises_every_fixture_run() -> None:
    r = runner.invoke(app, ["diagnose", str(FIXTURES), "--exit-zero"])
    assert r.exit_code == 0, r.output
    for run in (
        "grpo-broken",
        "grpo-healthy",
        "grpo-restart",
        "nemo-tensor-scalars",
        "truncated",
        "verl-gpg-math-qwen2-7b-fsdp",
    ):
        assert run in r.output
    assert "restart at step 100 after step 119" in r.output
    assert "last record truncated" in r.output


def test_diagnose_json_is_valid_on_its_own_and_stderr_is_separate() -> None:
    r = rlwatch(
        "diagnose", str(FIXTURES / "truncated"), str(FIXTURES / "grpo-restart"), "--format", "json"
    )
    assert r.returncode == 0
    doc = json.loads(r.stdout)
    assert doc["schema_version"] == 1
    runs = {run["name"]: run for run in doc["runs"]}
    assert runs["grpo-restart"]["restarts"][0]["step"] == 100
    assert runs["truncated"]["steps"] == {"count": 50, "first": 0, "last": 49}
    assert runs["truncated"]["warnings"][0].endswith("was the writer killed mid-write?)")


@pytest.mark.parametrize(
    ("run", "args", "code"),
    [
        ("grpo-broken", [], 1),
        ("grpo-broken", ["--exit-zero"], 0),
        # only warnings remain (PO03: the clip fraction holds 25% over the last 80 steps)
        ("grpo-broken", ["--ignore", "ST", "--ignore", "EX", "--ignore", "PO03"], 0),
        ("grpo-broken", ["--select", "EX01"], 0),  # a warning: below the default --fail-on
        ("grpo-broken", ["--select", "EX01", "--fail-on", "warning"], 1),
        ("grpo-healthy", [], 0),
        ("grpo-healthy", ["--fail-on", "info"], 1),  # reward.flat (info) fires near the end
        ("grpo-healthy", ["--select", "DP"], 2),  # no DPO metrics: nothing could be evaluated
        ("grpo-healthy", ["--select", "ZZ"], 2),  # matches no rule
    ],
)
def test_exit_codes_gate_on_health(run: str, args: list[str], code: int) -> None:
    r = runner.invoke(app, ["diagnose", str(FIXTURES / run), *args])
    assert r.exit_code == code, r.output


def test_metrics_shows_framework_mapping_and_unmapped_keys() -> None:
    r = runner.invoke(app, ["metrics", str(FIXTURES / "verl-gpg-math-qwen2-7b-fsdp")])
    assert r.exit_code == 0, r.output
    assert "framework: verl (v0.4.1)" in r.output
    assert "rollout_probs_diff" in r.output and "training/rollout_probs_diff_mean" in r.output
    assert "unmapped raw keys (32)" in r.output  # critic/advantages/max and /min are mapped
    j = rlwatch("metrics", str(FIXTURES / "grpo-healthy"), "-f", "json")
    run = json.loads(j.stdout)["runs"][0]
    assert run["framework"] == "trl" and run["metrics"]["kl_ref"] == "train/kl"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["diagnose", "does/not/exist"], "does/not/exist: no such file or directory (accepted: "),
        (["metrics", "{empty}"], "no TensorBoard event files and no readable logs in it or below"),
        (["diagnose", "{text}"], "log.txt: unrecognised log format (tried: verl console log"),
        (
            ["diagnose", "{text}", "--log-format", "xml"],
            "--log-format 'xml' is not a known format (valid: verl-console, ",
        ),
        (["diagnose", "{fake_events}"], "not a TensorBoard event file"),
    ],
)
def test_bad_input_is_one_line_on_stderr_with_exit_2(
    tmp_path: Path, args: list[str], message: str
) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "log.txt").write_text("hello\n")
    (tmp_path / "events.out.tfevents.1.x").write_bytes(b"\x00garbage" * 40)
    paths = {
        "empty": tmp_path / "empty",
        "text": tmp_path / "log.txt",
        "fake_events": tmp_path / "events.out.tfevents.1.x",
    }
    r = rlwatch(*[a.format(**paths) for a in args])
    assert r.returncode == 2
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rlwatch: error: ") and message in lines[0]
    assert "Traceback" not in r.stderr


def test_no_color_and_no_tty_give_plain_text() -> None:
    import os

    env = {**os.environ, "NO_COLOR": "1", "FORCE_COLOR": ""}
    r = rlwatch("diagnose", str(FIXTURES / "truncated"), env=env)
    assert r.returncode == 0 and "\x1b[" not in r.stdout and "\x1b[" not in r.stderr


def test_piped_output_is_not_wrapped_unless_columns_says_so() -> None:
    """Piped (not a TTY) text output keeps each line whole, for grep and CI logs; $COLUMNS wins."""
    import os
    import subprocess
    import sys

    fsdp = Path(__file__).resolve().parents[1] / "fixtures" / "verl-gpg-math-qwen2-7b-fsdp"
    cmd = [sys.executable, "-m", "rlwatch", "diagnose", str(fsdp), "--exit-zero"]
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    piped = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120).stdout
    assert max(map(len, piped.splitlines())) > 100
    assert any(
        "is 3.6% of its early level, and the damage shows" in ln for ln in piped.splitlines()
    )
    narrow = subprocess.run(
        cmd, capture_output=True, text=True, env={**env, "COLUMNS": "80"}, timeout=120
    ).stdout
    assert max(map(len, narrow.splitlines())) <= 80
