"""The gate (#11): discovery of every run under a folder, the top-level guard, no value is not
healthy, and the library API taking a str/Path."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import FIXTURES, REALRUNS, write_tbx
from typer.testing import CliRunner

from rlwatch.cli.app import app
from rlwatch.errors import ExitCode
from rlwatch.sources import discover, load

runner = CliRunner()
REAL = REALRUNS if REALRUNS.is_dir() else Path(os.environ.get("RLWATCH_REALRUNS", REALRUNS))


def rlwatch(*args: str, cwd: Path | None = None, **kw) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **kw.pop("env", {})}
    return subprocess.run(
        [sys.executable, "-m", "rlwatch", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env=env,
        **kw,
    )


def _jsonl(path: Path, n: int = 30, **series) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for i in range(n):
            row = {"step": i, "actor/entropy": 0.5 - 0.001 * i, "critic/score/mean": 0.3}
            row.update({k: (v(i) if callable(v) else v) for k, v in series.items()})
            f.write(json.dumps(row) + "\n")
    return path


def _trainer_state(path: Path, steps: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    hist = [{"step": s, "loss": 0.5, "reward": 0.1 * s, "kl": 0.01} for s in range(1, steps + 1)]
    path.write_text(json.dumps({"global_step": steps, "log_history": hist}))
    return path


@pytest.fixture
def zoo(tmp_path: Path) -> Path:
    """A folder of runs of every kind, as a user's experiments folder holds them."""
    root = tmp_path / "zoo"
    write_tbx(root / "tb" / "a", {"actor/entropy": [0.5] * 20, "actor/grad_norm": [0.3] * 20})
    write_tbx(root / "tb" / "b", {"actor/entropy": [0.4] * 20, "actor/grad_norm": [0.2] * 20})
    _jsonl(root / "verl" / "train.jsonl")
    _jsonl(root / "two" / "x.jsonl")
    _jsonl(root / "two" / "y.jsonl", **{"actor/entropy": lambda i: 0.45 - 0.002 * i})
    # a TRL output folder: the final state and two checkpoint copies are ONE run
    _trainer_state(root / "trl" / "checkpoint-10" / "trainer_state.json", 10)
    _trainer_state(root / "trl" / "checkpoint-20" / "trainer_state.json", 20)
    _trainer_state(root / "trl" / "trainer_state.json", 25)
    # a W&B run folder with the same run as JSONL beside it: one run
    shutil.copytree(FIXTURES / "tinker-rlvr-qwen3-4b-rubric", root / "tinker")
    (root / "notes").mkdir()
    (root / "notes" / "README.txt").write_text("not a run\n")
    (root / "broken.log").write_text("nothing to read here\n")
    return root


def test_a_folder_yields_every_run_of_every_kind(zoo: Path) -> None:
    found = discover(zoo)
    kinds = {f.name: f.kind for f in found.runs}
    assert kinds == {
        "tb/a": "tensorboard",
        "tb/b": "tensorboard",
        "verl": "log",
        "two/x": "log",
        "two/y": "log",
        "trl": "log",
        "tinker": "wandb",
    }
    (trl,) = [f for f in found.runs if f.name == "trl"]
    assert trl.paths == [zoo / "trl" / "trainer_state.json"]  # the most complete copy
    assert [(Path(s.path).name, s.reason) for s in found.skipped] == [
        ("broken.log", "unrecognised log format (force one with --log-format)")
    ]
    frame = load(str(zoo))
    assert sorted(frame.runs) == sorted(kinds)
    assert frame.steps("trl")[0] == 25


def test_json_lists_runs_and_skipped_with_counts(zoo: Path) -> None:
    r = runner.invoke(app, ["diagnose", str(zoo), "--format", "json", "--exit-zero"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["run_count"] == len(doc["runs"]) == 7
    assert doc["skipped_count"] == 1
    assert doc["skipped"][0]["path"].endswith("broken.log")
    assert "unrecognised log format" in doc["skipped"][0]["reason"]
    assert "rlwatch: skipped " in r.stderr and "broken.log" in r.stderr


@pytest.mark.parametrize("fmt", ["text", "junit", "github", "markdown"])
def test_run_and_skipped_counts_in_every_format(zoo: Path, fmt: str) -> None:
    r = runner.invoke(app, ["diagnose", str(zoo), "--format", fmt, "--exit-zero"])
    assert r.exit_code == 0, r.output
    out = " ".join(r.stdout.split())
    assert ("7 run(s)" in out or "7 run(s) read" in out) and "1 skipped" in out
    assert "broken.log" in out


def test_symlinked_folders_are_followed_once(tmp_path: Path) -> None:
    real = tmp_path / "real"
    _jsonl(real / "r1" / "metrics.jsonl")
    top = tmp_path / "top"
    top.mkdir()
    (top / "link").symlink_to(real, target_is_directory=True)
    (real / "loop").symlink_to(real, target_is_directory=True)  # a loop
    (top / "again").symlink_to(real, target_is_directory=True)  # a second way in
    found = discover(top)
    assert len(found.runs) == 1 and found.runs[0].name in ("link/r1", "again/r1")
    assert len(load(str(top)).runs) == 1


def test_the_same_run_given_twice_is_read_once(tmp_path: Path) -> None:
    f = _jsonl(tmp_path / "run" / "metrics.jsonl")
    frame = load([str(f), str(f), str(tmp_path / "run"), str(tmp_path)])
    assert len(frame.runs) == 1
    r = rlwatch("diagnose", str(f), str(f), "--format", "json", "--exit-zero")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["run_count"] == 1


def test_two_different_runs_with_one_name_are_both_kept(tmp_path: Path) -> None:
    a = _jsonl(tmp_path / "a" / "run.jsonl")
    b = _jsonl(tmp_path / "b" / "run.jsonl", n=12)
    frame = load([str(a), str(b)])
    assert len(frame.runs) == 2


def test_load_run_takes_a_str_or_a_path(tmp_path: Path) -> None:
    import rlwatch

    f = _jsonl(tmp_path / "run.jsonl")
    for target in (str(f), f, [str(f)], [f]):
        frame = rlwatch.load_run(target)
        assert len(frame.runs) == 1 and len(frame.data) == 60
    report = rlwatch.diagnose(f)
    assert report.to_dict()["run_count"] == 1


@pytest.mark.skipif(not REAL.is_dir(), reason="shared/realruns is not here (CI has it)")
def test_realruns_folder_lists_all_14_runs_and_exits_1() -> None:
    r = rlwatch("diagnose", str(REAL), "--format", "json")
    assert r.returncode == ExitCode.UNHEALTHY, r.stderr
    doc = json.loads(r.stdout)
    assert doc["run_count"] == 14 and doc["skipped"] == []


# -- no value is not healthy ----------------------------------------------------------------
def test_a_metric_that_is_nan_everywhere_fires(tmp_path: Path) -> None:
    f = _jsonl(tmp_path / "nan.jsonl", n=50, **{"actor/grad_norm": math.nan})
    r = runner.invoke(app, ["diagnose", str(f), "--format", "json"])
    assert r.exit_code == ExitCode.UNHEALTHY, r.output
    doc = json.loads(r.stdout)
    fired = {v["code"]: v for v in doc["verdicts"] if v["episodes"]}
    assert "ST03" in fired and fired["ST03"]["severity"] == "error"
    assert "no finite value at all" in fired["ST03"]["summary"]
    # the same run with finite grad_norm is healthy: the firing is about the NaNs
    ok = _jsonl(tmp_path / "ok.jsonl", n=50, **{"actor/grad_norm": 0.3})
    assert runner.invoke(app, ["diagnose", str(ok)]).exit_code == ExitCode.HEALTHY


def test_a_kl_that_is_nan_everywhere_is_a_kl_not_computed(tmp_path: Path) -> None:
    """Unsloth's GRPO table shows `kl` as nan on every row when the KL is not computed (beta
    0): the KL rules are skipped (`nan_when_off` in metrics.yaml), not fired; a KL that is a
    number first and NaN later is still evidence (KL01/KL02 read it, ST rules its loss)."""
    f = _jsonl(tmp_path / "off.jsonl", n=40, **{"actor/kl_loss": math.nan, "actor/pg_loss": 0.1})
    r = runner.invoke(app, ["diagnose", str(f), "--format", "json"])
    assert r.exit_code == ExitCode.HEALTHY, r.output
    verdicts = {v["code"]: v for v in json.loads(r.stdout)["verdicts"]}
    assert verdicts["KL02"]["state"] == "skipped" and not verdicts["KL02"]["episodes"]
    # a loss that is NaN everywhere still fires: the run diverged from its first log
    bad = _jsonl(
        tmp_path / "bad.jsonl", n=40, **{"actor/kl_loss": math.nan, "actor/pg_loss": math.nan}
    )
    assert runner.invoke(app, ["diagnose", str(bad)]).exit_code == ExitCode.UNHEALTHY


def test_a_nan_fires_only_the_rules_the_run_could_be_judged_by(tmp_path: Path) -> None:
    """A PPO console whose actor loss is NaN at every step (DeepSpeed-Chat, a smoke test at a
    broken setting): the loss rules fire; a reward-model or DPO rule that also reads the loss
    does not -- the run logs no accuracy or preference metric, so no value of its loss could
    make those rules judge it."""
    f = tmp_path / "step3.log"
    f.write_text(
        "".join(
            f"Epoch: 0 | Step: {s} | PPO Epoch: 1 | Actor Loss: nan | Critic Loss: {1 + s / 10} "
            "| Unsupervised Loss: 0.0\nEnd-to-End => Latency: 2.36s, TFLOPs: 0.17\n"
            "Generation => Latency: 0.28s, TFLOPs: 0.08\nTraining   => Latency: 1.80s\n"
            f"Average reward score: {s / 100} | EMA reward score: {s / 200}\n"
            for s in range(1, 21)
        )
    )
    r = runner.invoke(app, ["diagnose", str(f), "--format", "json"])
    assert r.exit_code == ExitCode.UNHEALTHY, r.output
    doc = json.loads(r.stdout)
    fired = {v["code"] for v in doc["verdicts"] if v["episodes"] and v["severity"] == "error"}
    assert "ST05" in fired and not fired & {"RM01", "RM03", "DP04"}, fired
    # the reward line three lines below each step line is that step's
    (run,) = doc["runs"]
    assert run["metrics"]["reward_mean"] == "average_reward_score"


def test_inf_everywhere_fires_too(tmp_path: Path) -> None:
    f = _jsonl(tmp_path / "inf.jsonl", n=20, **{"actor/pg_loss": math.inf})
    r = runner.invoke(app, ["diagnose", str(f), "--select", "ST05"])
    assert r.exit_code == ExitCode.UNHEALTHY, r.output


def test_require_exits_2_when_the_metric_has_no_finite_value(tmp_path: Path) -> None:
    f = _jsonl(tmp_path / "nan.jsonl", n=20, **{"actor/grad_norm": math.nan})
    r = rlwatch("diagnose", str(f), "--require", "grad_norm")
    assert r.returncode == ExitCode.FAILED
    assert r.stderr.count("\n") == 1 and "no finite value" in r.stderr
    r = rlwatch("diagnose", str(f), "--require", "kl_ref")
    assert r.returncode == ExitCode.FAILED and "not found" in r.stderr


def test_one_or_two_logs_are_no_evidence_of_health(tmp_path: Path) -> None:
    """A run of fewer than three logs (a run just started, a stray log line read out of a
    document) is never called healthy: exit 2 saying why; what fires in them still fails
    the gate; a folder of such runs is exit 2 too; three logs are judged."""
    for n in (1, 2):
        f = _jsonl(tmp_path / "short" / f"s{n}.jsonl", n=n, **{"actor/grad_norm": 0.3})
        r = rlwatch("diagnose", str(f))
        assert r.returncode == ExitCode.FAILED, r.stdout + r.stderr
        assert r.stderr.count("\n") == 1, r.stderr
        assert f"too few logs to call the run healthy ({n} logged" in r.stderr
        nan = _jsonl(tmp_path / "nan" / f"n{n}.jsonl", n=n, **{"actor/grad_norm": math.nan})
        assert runner.invoke(app, ["diagnose", str(nan)]).exit_code == ExitCode.UNHEALTHY
    r = rlwatch("diagnose", str(tmp_path / "short"))
    assert r.returncode == ExitCode.FAILED and "too few logs" in r.stderr, r.stderr
    three = _jsonl(tmp_path / "three.jsonl", n=3, **{"actor/grad_norm": 0.3})
    assert runner.invoke(app, ["diagnose", str(three)]).exit_code == ExitCode.HEALTHY
    # `tail --once --exit-on` judges the run as it stands, as diagnose does
    gate = ["--once", "--plain", "--exit-on", "error"]
    r = rlwatch("tail", str(tmp_path / "short" / "s2.jsonl"), *gate)
    assert r.returncode == ExitCode.FAILED and "too few logs" in r.stderr, r.stdout + r.stderr
    assert r.stderr.count("\n") == 1, r.stderr
    r = rlwatch("tail", str(tmp_path / "nan" / "n2.jsonl"), *gate)
    assert r.returncode == ExitCode.UNHEALTHY, r.stdout + r.stderr
    assert rlwatch("tail", str(three), *gate).returncode == ExitCode.HEALTHY


# -- the guard ------------------------------------------------------------------------------
def test_an_unexpected_exception_is_exit_2_one_line_and_debug_shows_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rlwatch.sources import logs

    def boom(*a, **k):
        raise KeyError("surprise")

    monkeypatch.setattr(logs, "load_file", boom)
    f = _jsonl(tmp_path / "run.jsonl")
    r = runner.invoke(app, ["diagnose", str(f)])
    assert r.exit_code == ExitCode.FAILED
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rlwatch: error: ")
    assert "KeyError" in lines[0] and "--debug" in lines[0] and "Traceback" not in r.output
    monkeypatch.delenv("RLWATCH_DEBUG", raising=False)
    r = runner.invoke(app, ["diagnose", str(f), "--debug"])
    assert r.exit_code == ExitCode.FAILED and "Traceback" in r.stderr
    os.environ.pop("RLWATCH_DEBUG", None)


@pytest.mark.parametrize("exc", [MemoryError, RecursionError, ZeroDivisionError])
def test_no_crash_is_ever_exit_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exc: type[BaseException]
) -> None:
    from rlwatch import api, report

    def boom(*a, **k):
        raise exc()

    # rlwatch.api imported before report.build is patched: a first import under the patch
    # would bind boom as api.build for good (monkeypatch would "restore" boom)
    monkeypatch.setattr(report, "build", boom)
    monkeypatch.setattr(api, "build", boom)
    f = _jsonl(tmp_path / "run.jsonl")
    r = runner.invoke(app, ["diagnose", str(f)])
    assert r.exit_code == ExitCode.FAILED
    assert len(r.stderr.strip().splitlines()) == 1


def test_ascii_only_stdout_does_not_crash() -> None:
    env = {"PYTHONIOENCODING": "ascii", "LC_ALL": "C", "LANG": "C"}
    r = rlwatch("diagnose", str(FIXTURES / "grpo-broken"), "--format", "markdown", env=env)
    assert r.returncode == ExitCode.UNHEALTHY, r.stderr
    assert "Traceback" not in r.stderr
    r = rlwatch("diagnose", str(FIXTURES / "grpo-broken"), env=env)
    assert r.returncode == ExitCode.UNHEALTHY, r.stderr


GATE_LAST_RULE = """\
version: 1
groups:
  - name: custom
    rules:
      - code: XX01
        name: custom.low_reward
        severity: error
        gate: {gate}
        when:
          threshold: {{metric: reward_mean, below: 0.2}}
        summary: "reward {{value:.2f}} at step {{step}}"
"""


@pytest.mark.parametrize(
    ("gate", "late", "code", "state"),
    [
        ("last", 0.5, 0, "resolved"),  # a state the run passed through: reported, not failing
        ("last", 0.1, 1, "firing"),  # still in it at the last step: failing
        ("any", 0.5, 1, "resolved"),  # an event anywhere in the run fails the gate
    ],
)
def test_gate_last_fails_only_while_still_firing_at_the_last_step(
    tmp_path: Path, gate: str, late: float, code: int, state: str
) -> None:
    rules = tmp_path / "r.yaml"
    rules.write_text(GATE_LAST_RULE.format(gate=gate))
    log = _jsonl(
        tmp_path / "run.jsonl", 30, **{"critic/score/mean": lambda i: 0.1 if i < 20 else late}
    )
    r = rlwatch("diagnose", str(log), "--rules", str(rules), "--select", "XX01", "--format", "json")
    assert r.returncode == code, r.stdout + r.stderr
    v = next(v for v in json.loads(r.stdout)["verdicts"] if v["code"] == "XX01")
    assert v["state"] == state and v["episodes"][0]["first_step"] == 0
    assert v["failing"] is bool(code)
    text = rlwatch("diagnose", str(log), "--rules", str(rules), "--select", "XX01").stdout
    assert ("not failing" in text) is (code == 0)


@pytest.mark.parametrize(("back", "code", "state"), [(True, 0, "resolved"), (False, 1, "firing")])
def test_a_reward_collapse_with_symptoms_the_run_climbed_back_from_does_not_fail(
    tmp_path: Path, back: bool, code: int, state: str
) -> None:
    """RW05 (the reward falls while the groups lose their reward variance) is judged at the end:
    a one-group-a-step run's dip of 8 logs that it climbs back from for 15 is reported, not
    failing (a healthy TRL GRPO run of a 7B model failed on such a dip); one still down fails."""

    def reward(i: int) -> float:
        return 0.6 + 0.01 * (i % 3) if i < 20 or (back and i >= 28) else 0.3

    def zero_std(i: int) -> float:
        return 0.1 if i < 20 or (back and i >= 28) else 0.8

    series = {"critic/score/mean": reward, "frac_reward_zero_std": zero_std}
    log = _jsonl(tmp_path / "run.jsonl", 43, **series)
    r = rlwatch("diagnose", str(log), "--select", "RW05", "--format", "json")
    assert r.returncode == code, r.stdout + r.stderr
    v = next(v for v in json.loads(r.stdout)["verdicts"] if v["code"] == "RW05")
    assert v["state"] == state and v["failing"] is bool(code) and v["gate"] == "last"


def test_a_bad_gate_value_is_refused_with_its_position(tmp_path: Path) -> None:
    rules = tmp_path / "r.yaml"
    rules.write_text(GATE_LAST_RULE.format(gate="sometimes"))
    r = rlwatch("rules", "check", str(rules))
    assert r.returncode == 2
    assert "r.yaml:8:" in r.stderr and "bad gate 'sometimes'" in r.stderr


def _noisy(i: int) -> float:
    """A reward near zero that moves by ~0.2 from log to log (a chain reward in [-1, 1])."""
    return 0.15 + 0.12 * math.sin(2.3 * i) * math.cos(0.7 * i)


@pytest.mark.parametrize(
    ("after", "code", "state"),
    [
        (_noisy, 0, "ok"),  # a dip of a few logs the reward came back from: no crash
        (lambda i: -0.3 + 0.02 * math.sin(i), 1, "firing"),  # still down at the end: a crash
    ],
)
def test_a_short_reward_dip_is_no_crash(
    tmp_path: Path, after: Callable[[int], float], code: int, state: str
) -> None:
    """RW01 holds for 5 logs: a noisy reward near zero (a chain reward in [-1, 1] moves by ~0.2
    a log) that falls for 4 logs and comes back is not a crash; one that stays down is."""
    dip = {26: -0.2, 27: -0.3, 28: -0.25, 29: -0.3}
    log = _jsonl(
        tmp_path / "run.jsonl",
        50,
        **{"critic/score/mean": lambda i: _noisy(i) if i < 26 else dip.get(i, after(i))},
    )
    r = rlwatch("diagnose", str(log), "--select", "RW01", "--format", "json")
    v = next(v for v in json.loads(r.stdout)["verdicts"] if v["code"] == "RW01")
    assert (r.returncode, v["state"]) == (code, state), r.stdout + r.stderr
