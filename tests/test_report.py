"""diagnose's report in every format: snapshots on real fixtures, the gate, -o, config."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import ROOT

from rlwatch import __version__

GOLDENS = Path(__file__).parent / "goldens"
FSDP = "fixtures/verl-gpg-math-qwen2-7b-fsdp"
HEALTHY = "fixtures/verl-gpg-math-qwen2-7b-megatron"


def cli(
    *args: str, cwd: Path = ROOT, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("GITHUB_STEP_SUMMARY", "FORCE_COLOR")}
    base.update({"COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb", **(env or {})})
    return subprocess.run(
        [sys.executable, "-m", "rlwatch", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=base,
        timeout=120,
    )


def snapshot(name: str, r: subprocess.CompletedProcess[str]) -> None:
    text = f"exit code: {r.returncode}\n--- stdout\n{r.stdout}--- stderr\n{r.stderr}".replace(
        __version__, "<version>"
    )
    golden = GOLDENS / f"{name}.txt"
    if os.environ.get("RLWATCH_UPDATE_GOLDENS") == "1":
        golden.write_text(text, encoding="utf-8")
    assert golden.exists(), f"{golden.name} is missing; write it with RLWATCH_UPDATE_GOLDENS=1"
    assert text == golden.read_text(encoding="utf-8"), (
        f"{golden.name} differs; if the change is intended, rerun with RLWATCH_UPDATE_GOLDENS=1"
    )


@pytest.mark.parametrize("fmt", ["text", "json", "junit", "github", "markdown"])
def test_snapshot_of_every_format_on_a_real_run(fmt: str) -> None:
    snapshot(f"diagnose-fsdp-{fmt}", cli("diagnose", FSDP, "--format", fmt))


def test_snapshot_of_a_healthy_real_run() -> None:
    snapshot("diagnose-megatron-text", cli("diagnose", HEALTHY))


def test_json_report_schema() -> None:
    r = cli("diagnose", FSDP, HEALTHY, "--format", "json")
    assert r.returncode == 1 and r.stderr == ""
    doc = json.loads(r.stdout)
    assert doc["schema_version"] == 1 and doc["status"] == "unhealthy"
    assert {"runs", "verdicts", "counts", "fail_on", "rules", "rlwatch_version"} <= set(doc)
    assert len(doc["verdicts"]) == doc["rules"] * 2
    ex03 = next(v for v in doc["verdicts"] if v["code"] == "EX03")
    assert ex03["state"] == "firing" and ex03["episodes"][0]["first_step"] > 150
    assert ex03["context"]["metric"] == "entropy" and len(ex03["context"]["values"]) <= 40
    skipped = [v for v in doc["verdicts"] if v["state"] == "skipped"]
    assert skipped and all(v["reason"] for v in skipped)
    fsdp = next(r for r in doc["runs"] if r["name"] == "verl-gpg-math-qwen2-7b-fsdp")
    slow = next(s for s in fsdp["symptoms"] if s["symptom"] == "Training is slow")
    assert slow["present"] and slow["checks"][0]["problem"]  # the 22,544 s step


def test_junit_has_one_testcase_per_run_and_rule() -> None:
    r = cli("diagnose", FSDP, HEALTHY, "--format", "junit")
    root = ET.fromstring(r.stdout)
    cases = root.findall(".//testcase")
    doc = json.loads(cli("diagnose", FSDP, HEALTHY, "--format", "json").stdout)
    assert len(cases) == len(doc["verdicts"])
    failed = {c.get("name").split()[0] for c in cases if c.find("failure") is not None}
    assert failed == {"EX03", "LN02"}
    assert int(root.get("skipped")) == sum(v["state"] == "skipped" for v in doc["verdicts"])


def test_github_annotations_and_step_summary(tmp_path: Path) -> None:
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    r = cli("diagnose", FSDP, "--format", "github", env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert r.returncode == 1
    lines = r.stdout.splitlines()
    assert any(
        ln.startswith("::error title=EX03 exploration.entropy_collapse_with_damage") for ln in lines
    )
    assert any(ln.startswith("::warning title=TM01") for ln in lines)
    text = summary.read_text()
    assert text.startswith("earlier step\n## rlwatch: unhealthy")
    assert "| 🔴 error | `LN02` length.truncation_saturated |" in text


def test_output_file_gets_the_machine_report_and_the_terminal_the_human_view(
    tmp_path: Path,
) -> None:
    out = tmp_path / "report.json"
    r = cli("diagnose", FSDP, "-o", str(out))
    assert r.returncode == 1 and "EX03 exploration.entropy_collapse_with_damage" in r.stdout
    assert json.loads(out.read_text())["status"] == "unhealthy"
    xml = tmp_path / "report.xml"
    cli("diagnose", FSDP, "-f", "junit", "-o", str(xml))
    assert ET.parse(xml).getroot().tag == "testsuites"


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--require", "entropy"], 1, None),
        (
            ["--require", "kl_ref"],
            2,
            "required metric 'kl_ref' not found in run(s) verl-gpg-math-qwen2-7b-fsdp",
        ),
        (["--require", "entropie"], 2, "--require 'entropie' is not a canonical metric"),
        (["--fail-on", "fatal"], 2, "Invalid value for '--fail-on'"),
        (["-o", "/nonexistent/dir/r.json"], 2, "--output /nonexistent/dir/r.json: cannot write"),
    ],
)
def test_gate_arguments(args: list[str], code: int, message: str | None) -> None:
    r = cli("diagnose", FSDP, *args)
    assert r.returncode == code, r.stderr
    if message:
        assert message in r.stderr


def test_configuration_file_and_flags_override_it(tmp_path: Path) -> None:
    target = str(ROOT / FSDP)
    (tmp_path / "rlwatch.toml").write_text('fail_on = "info"\nselect = ["TM02"]\n')
    assert cli("diagnose", target, cwd=tmp_path).returncode == 1  # TM02 is info
    assert cli("diagnose", target, "--fail-on", "error", cwd=tmp_path).returncode == 0
    (tmp_path / "rlwatch.toml").unlink()
    (tmp_path / "pyproject.toml").write_text('[tool.rlwatch]\nignore = ["EX", "LN"]\n')
    assert cli("diagnose", target, cwd=tmp_path).returncode == 0
    (tmp_path / "pyproject.toml").write_text('[tool.rlwatch]\nfail = "info"\n')
    r = cli("diagnose", target, cwd=tmp_path)
    assert r.returncode == 2 and "[tool.rlwatch]: unknown key 'fail' (valid: rules," in r.stderr


def test_library_api() -> None:
    import rlwatch

    report = rlwatch.diagnose([str(ROOT / FSDP)], select=["EX", "LN"])
    assert not report.healthy
    assert {v.code for v in report.failing} == {"EX03", "LN02"}
    assert isinstance(rlwatch.load_run([str(ROOT / HEALTHY)]), rlwatch.RunFrame)


def test_a_missing_golden_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.modules[__name__], "GOLDENS", tmp_path)
    monkeypatch.delenv("RLWATCH_UPDATE_GOLDENS", raising=False)
    r = subprocess.CompletedProcess([], 0, "out\n", "")
    with pytest.raises(AssertionError, match="is missing"):
        snapshot("nothing-here", r)
    assert not (tmp_path / "nothing-here.txt").exists()
    monkeypatch.setenv("RLWATCH_UPDATE_GOLDENS", "1")
    snapshot("nothing-here", r)  # written on request, then compared
    assert (tmp_path / "nothing-here.txt").read_text().startswith("exit code: 0")


def test_colour_on_a_terminal_and_no_color_removes_every_escape() -> None:
    """rich believes FORCE_COLOR (a terminal); NO_COLOR must then remove every escape, not
    only the colours (bold and dim too)."""
    tty = {"FORCE_COLOR": "1", "TERM": "xterm-256color", "NO_COLOR": ""}
    coloured = cli("diagnose", FSDP, env=tty)
    assert coloured.returncode == 1 and "\x1b[" in coloured.stdout  # the test can fail
    plain = cli("diagnose", FSDP, env={**tty, "NO_COLOR": "1"})
    assert plain.returncode == 1 and "\x1b[" not in plain.stdout + plain.stderr
    assert "EX03" in plain.stdout


def test_the_gate_decision_is_made_once_in_the_report() -> None:
    from rlwatch.api import diagnose

    report = diagnose([str(ROOT / FSDP)], fail_on="warning")
    failing = {v.code for v in report.verdicts if v.failing}
    assert failing == {v.code for v in report.failing} and "TM01" in failing  # a warning
    strict = diagnose([str(ROOT / FSDP)], fail_on="error")
    assert "TM01" not in {v.code for v in strict.failing} and not strict.healthy
    from rlwatch.render.formats import render_junit

    assert render_junit(report).count("<failure") == len(report.failing)
