"""Licensed public RL logs (fixtures/public): rlwatch's verdict equals the label in SOURCE.md.

Each run was labelled from its own numbers before any rule was run on it (see its SOURCE.md).
healthy -> exit 0; broken -> exit 1 with an error verdict of the labelled family. Runs the rules
get wrong are listed in fixtures/public/known_wrong.txt and marked xfail(strict=True).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlwatch.cli.app import app

PUBLIC = Path(__file__).resolve().parents[1] / "fixtures" / "public"
PERMISSIVE = ("MIT", "Apache-2.0", "BSD", "CC-BY")


def _source(run: Path) -> dict[str, str]:
    text = (run / "SOURCE.md").read_text(encoding="utf-8")
    fields = dict(re.findall(r"^(label|family): *(\S+) *$", text, re.M))
    fields["licence"] = next((lic for lic in PERMISSIVE if lic in text), "")
    fields["sha256"] = " ".join(re.findall(r"sha256:? `([0-9a-f]{64})`", text))
    fields["evidence"] = text.split("evidence:", 1)[-1].strip()
    return fields


def _known_wrong() -> dict[str, str]:
    path = PUBLIC / "known_wrong.txt"
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines() if path.exists() else []:
        if line.strip() and not line.startswith("#"):
            name, _, why = line.partition(" ")
            out[name] = why.strip()
    return out


RUNS = sorted(p.parent for p in PUBLIC.glob("*/SOURCE.md"))
KNOWN_WRONG = _known_wrong()


def test_every_public_run_has_a_source_a_licence_and_a_label() -> None:
    assert RUNS, "no public runs"
    assert set(KNOWN_WRONG) <= {r.name for r in RUNS}, "known_wrong.txt names an unknown run"
    for run in RUNS:
        src = _source(run)
        assert src.get("label") in ("healthy", "broken"), run.name
        assert (src.get("family") == "-") == (src["label"] == "healthy"), run.name
        assert src["licence"], f"{run.name}: no permissive licence named in SOURCE.md"
        assert src["evidence"], run.name
        # one data file, or the few files of one run (a W&B export: a CSV per chart)
        data = [p for p in run.iterdir() if p.name != "SOURCE.md"]
        named = src["sha256"].split()
        assert data and len(data) == len(named), f"{run.name}: {data} against {named}"
        for f in data:
            digest = hashlib.sha256(f.read_bytes()).hexdigest()
            assert digest in named, f"{run.name}: {f.name} is not a file SOURCE.md names"


def _case(run: Path):
    marks = []
    if run.name in KNOWN_WRONG:
        marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_WRONG[run.name]))
    return pytest.param(run, marks=marks, id=run.name)


@pytest.mark.parametrize("run", [_case(r) for r in RUNS])
def test_verdict_matches_label(run: Path) -> None:
    src = _source(run)
    r = CliRunner().invoke(app, ["diagnose", str(run), "--format", "json"])
    assert r.exit_code in (0, 1), r.output[-2000:]
    report = json.loads(r.stdout)
    errors = [
        v
        for v in report["verdicts"]
        if v["severity"] == "error" and v["state"] in ("firing", "resolved")
    ]
    fired = sorted(f"{v['code']} {v['name']}" for v in errors)
    if src["label"] == "healthy":
        assert r.exit_code == 0, f"false alarm on a healthy run: {fired}"
    else:
        assert r.exit_code == 1, f"missed: {src['family']} ({src['evidence'][:200]})"
        families = {str(v["name"]).split(".", 1)[0] for v in errors}
        assert src["family"] in families, f"wrong family: wanted {src['family']}, fired {fired}"
