"""The rule engine: every shipped rule test passes, coverage, strict loading, the CLI."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlwatch.cli.app import app
from rlwatch.engine.rules import load_file, load_rules
from rlwatch.engine.testing import builtin_test_files, coverage, load_cases, parse_series
from rlwatch.errors import RuleFileError

CASES = [c for f in builtin_test_files() for c in load_cases(f)]
runner = CliRunner()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_shipped_rule_case(case) -> None:
    problems = case.run()
    assert not problems, "\n".join(problems)


def test_every_shipped_rule_has_a_firing_and_a_quiet_case() -> None:
    cov = coverage(CASES)
    missing = [
        r.code
        for r in load_rules().rules
        if "firing" not in cov.get(r.code, set()) or "ok" not in cov.get(r.code, set())
    ]
    assert not missing, f"rules without a firing and an ok case: {missing}"


def test_every_rule_has_a_summary_checks_and_a_runbook() -> None:
    for r in load_rules().rules:
        assert r.description and r.runbook.strip() and r.checks, r.code


def test_series_notation() -> None:
    assert parse_series("1x2 0.5+0.5x2 _ nan 3-1x1") == [
        1,
        1,
        1,
        0.5,
        1.0,
        1.5,
        None,
        pytest.approx(float("nan"), nan_ok=True),
        3,
        2,
    ]
    with pytest.raises(ValueError, match="bad series token"):
        parse_series("1x")


GOOD = """\
version: 1
groups:
  - name: g
    rules:
      - code: XX01
        name: custom.rule
        severity: warning
        when:
          threshold: {metric: entropy, below: 0.1}
        summary: "entropy {value:.3g}"
"""


@pytest.mark.parametrize(
    ("change", "where", "message"),
    [
        (
            ("severity: warning", "severity: fatal"),
            ":7:",
            "bad severity 'fatal' (valid: info, warning, error)",
        ),
        (("threshold:", "treshold:"), ":9:", "unknown condition kind 'treshold'"),
        (
            ("metric: entropy", "metric: entropie"),
            ":9:",
            "unknown metric 'entropie' (did you mean entropy",
        ),
        (("summary:", "sumary:"), ":10:", "unknown key 'sumary'"),
        (("{value:.3g}", "{baseline}"), ":10:", "summary uses unknown field {baseline}"),
        (("below: 0.1", "below: lots"), ":9:", "expected a number, got 'lots'"),
        (("code: XX01", "code: x1"), ":5:", "bad code 'x1'"),
        (("version: 1", "version: 2"), ":1:", "unsupported version 2"),
        (
            ("name: custom.rule", "name: custom.rule\n        name: again"),
            ":7:",
            "duplicate key 'name'",
        ),
        (("below: 0.1}", "below: 0.1"), ":10:", "invalid YAML"),
    ],
)
def test_rule_file_errors_point_at_file_line_col(
    tmp_path: Path, change: tuple[str, str], where: str, message: str
) -> None:
    f = tmp_path / "r.yaml"
    f.write_text(GOOD.replace(*change))
    with pytest.raises(RuleFileError) as exc:
        load_file(f)
    text = str(exc.value)
    assert text.startswith(f"{f}{where}") and message in text, text


def test_duplicate_codes_are_an_error(tmp_path: Path) -> None:
    f = tmp_path / "r.yaml"
    rule = textwrap.indent(GOOD.split("rules:\n")[1], "")
    f.write_text(GOOD + rule)
    with pytest.raises(RuleFileError, match="duplicate rule code XX01"):
        load_file(f)


def test_nothing_in_a_rule_file_is_executed(tmp_path: Path) -> None:
    f = tmp_path / "r.yaml"
    f.write_text(
        GOOD.replace(
            'summary: "entropy {value:.3g}"',
            "summary: !!python/object/apply:os.system ['echo pwned']",
        )
    )
    with pytest.raises(RuleFileError, match="is not allowed \\(rule files are plain data\\)"):
        load_file(f)


def test_a_user_file_overrides_a_shipped_rule_by_code(tmp_path: Path) -> None:
    f = tmp_path / "r.yaml"
    f.write_text(GOOD.replace("XX01", "EX01").replace("severity: warning", "severity: info"))
    rules = load_rules([f])
    assert rules.get("EX01").severity == "info"
    assert len(rules.rules) == len(load_rules().rules)


def test_rules_cli(tmp_path: Path) -> None:
    r = runner.invoke(app, ["rules", "list"])
    assert r.exit_code == 0 and "EX01" in r.output and "exploration.entropy_collapse" in r.output
    r = runner.invoke(app, ["rules", "explain", "st02"])
    assert r.exit_code == 0 and "runbook:" in r.output and "count:" in r.output
    assert "gate: any" in r.output
    assert "gate: last" in runner.invoke(app, ["rules", "explain", "RM01"]).output
    assert runner.invoke(app, ["rules", "explain", "ZZ99"]).exit_code == 2
    assert runner.invoke(app, ["rules", "test"]).exit_code == 0
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(GOOD)
    bad.write_text(GOOD.replace("severity: warning", "severity: fatal"))
    r = runner.invoke(app, ["rules", "check", str(good)])
    assert r.exit_code == 0 and "1 rule(s): OK" in r.output
    r = runner.invoke(app, ["rules", "check", str(bad)])
    assert r.exit_code == 2 and f"{bad}:7:" in r.output
    failing = tmp_path / "x.test.yaml"
    failing.write_text(
        textwrap.dedent(f"""\
        version: 1
        rule_files: [{good.name}]
        tests:
          - name: wrong expectation
            series: {{entropy: "0.5x5"}}
            expect: [{{code: XX01, step: 3, state: firing}}]
        """)
    )
    r = runner.invoke(app, ["rules", "test", str(failing)])
    assert r.exit_code == 1 and "XX01 at step 3: expected firing, got ok" in r.output
    failing.write_text(
        "version: 1\ntests: [{name: x, series: {}, expect: [{code: X, state: on}]}]\n"
    )
    assert runner.invoke(app, ["rules", "test", str(failing)]).exit_code == 2


def test_rules_test_run_pattern_and_junit_like_promtool(tmp_path: Path) -> None:
    import xml.etree.ElementTree as ET

    good = tmp_path / "good.yaml"
    good.write_text(GOOD)
    tests = tmp_path / "x.test.yaml"
    tests.write_text(
        textwrap.dedent(f"""\
        version: 1
        rule_files: [{good.name}]
        tests:
          - name: low entropy fires
            series: {{entropy: "0.5 0.05"}}
            expect: [{{code: XX01, step: 1, state: firing}}]
          - name: wrong expectation
            series: {{entropy: "0.5x5"}}
            expect: [{{code: XX01, step: 3, state: firing}}]
        """)
    )
    xml = tmp_path / "out.xml"
    r = runner.invoke(app, ["rules", "test", str(tests), "--run", "fires$", "--junit", str(xml)])
    assert r.exit_code == 0 and "1 passed, 0 failed" in r.output, r.output
    root = ET.parse(xml).getroot()
    assert root.get("tests") == "1" and root.get("failures") == "0"
    r = runner.invoke(app, ["rules", "test", str(tests), "--junit", str(xml)])
    assert r.exit_code == 1 and "1 passed, 1 failed" in r.output
    root = ET.parse(xml).getroot()
    failed = [c.get("name") for c in root.iter("testcase") if c.find("failure") is not None]
    assert failed == ["wrong expectation"] and root.get("failures") == "1"
    r = runner.invoke(app, ["rules", "test", str(tests), "--run", "no such test"])
    assert r.exit_code == 2 and "matches no test" in r.output
    assert runner.invoke(app, ["rules", "test", str(tests), "--run", "("]).exit_code == 2


SYMPTOMS_GOOD = """\
version: 1
symptoms:
  - symptom: Reward crashes
    rules: [RW01]
    checks:
      - {metric: entropy, question: "did entropy drop?", check: ratio_below, limit: 0.1}
      - {metric: seqlen_max, question: "too long?", check: recent_max}
"""


@pytest.mark.parametrize(
    ("change", "where", "message"),
    [
        (("check: ratio_below", "check: ratio_beloww"), ":6:", "unknown check 'ratio_beloww'"),
        (("metric: entropy", "metric: entropie"), ":6:", "unknown metric 'entropie'"),
        (("limit: 0.1", "limit: [1, 2]"), ":6:", "expected a number"),
        (("check: recent_max}", "check: recent_max, limit: 3}"), ":7:", "takes no limit"),
        (("[RW01]", "[rw1]"), ":4:", "bad rule code 'rw1'"),
        (("question:", "questoin:"), ":6:", "unknown key 'questoin'"),
    ],
)
def test_the_symptom_table_is_validated_with_file_line_col(
    tmp_path: Path, change: tuple[str, str], where: str, message: str
) -> None:
    from rlwatch.engine.symptoms import load_symptoms

    f = tmp_path / "symptoms.yaml"
    f.write_text(SYMPTOMS_GOOD)
    assert len(load_symptoms(f)) == 1
    g = tmp_path / "bad.yaml"
    g.write_text(SYMPTOMS_GOOD.replace(*change))
    with pytest.raises(RuleFileError) as exc:
        load_symptoms(g)
    assert str(exc.value).startswith(f"{g}{where}") and message in str(exc.value), str(exc.value)


def test_the_shipped_symptom_table_names_shipped_rules_only() -> None:
    from rlwatch.engine.symptoms import load_symptoms

    codes = {r.code for r in load_rules().rules}
    table = load_symptoms()
    assert table and all(set(s.rules) <= codes for s in table)


# -- rule files that are hostile or wrong: one line file:line:col, exit 2, never a traceback ----
def _check_cli(path: Path) -> tuple[int, str]:
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-m", "rlwatch", "rules", "check", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "Traceback" not in r.stderr and r.stdout == "", r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"rlwatch: error: {path}"), r.stderr
    return r.returncode, lines[0]


HOSTILE = {
    "billion laughs": (
        "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
        + "".join(
            f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n"
            for p, c in zip("abcdefgh", "bcdefghi", strict=True)
        )
        + GOOD,
        ":",
        "too many values",
    ),
    "recursive alias": ("x: &a [1, *a]\n" + GOOD, ":1:", "recursive alias"),
    "deep nesting": ("x: " + "[" * 2000 + "]" * 2000 + "\n" + GOOD, "", "nested too deeply"),
    "key that is a mapping": (GOOD.replace("code: XX01", "? {a: 1}\n        : XX01"), ":5:", "key"),
    "metric as a list": (GOOD.replace("metric: entropy", "metric: [entropy]"), ":9:", "list"),
    "check as a mapping": (
        GOOD + "        checks: {metric: entropy, hint: x}\n",
        ":11:",
        "expected a list",
    ),
    "check hint as a mapping": (
        GOOD + "        checks: [{metric: entropy, hint: {a: 1}}]\n",
        ":11:",
        "hint must be a string",
    ),
    "check metric as a list": (
        GOOD + "        checks: [{metric: [entropy], hint: x}]\n",
        ":11:",
        "a metric is a name, got list",
    ),
    "window of 10**12": (
        GOOD.replace(
            "threshold: {metric: entropy, below: 0.1}",
            "spike: {metric: entropy, factor: 2, window: 1000000000000}",
        ),
        ":9:",
        "window must be",
    ),
    "for of 10**12": (GOOD + "        for: 1000000000000\n", ":11:", "for must be <= 100,000"),
    "keep_firing_for of 10**12": (
        GOOD + "        keep_firing_for: 1000000000000\n",
        ":11:",
        "keep_firing_for must be <= 100,000",
    ),
    "huge format width": (
        GOOD.replace("{value:.3g}", "{value:>1000000000}"),
        ":10:",
        "asks for 1,000,000,000 characters",
    ),
    "nested format spec": (GOOD.replace("{value:.3g}", "{value:{value}}"), ":10:", "bad format"),
    "severity as a list": (GOOD.replace("severity: warning", "severity: [error]"), ":7:", "bad"),
    "frameworks item as a list": (
        GOOD + "        applies_to: {frameworks: [[verl]]}\n",
        ":11:",
        "unknown framework",
    ),
}


@pytest.mark.parametrize("case", sorted(HOSTILE), ids=sorted(HOSTILE))
def test_hostile_rule_files_are_one_line_errors_with_exit_2(tmp_path: Path, case: str) -> None:
    text, where, message = HOSTILE[case]
    f = tmp_path / "r.yaml"
    f.write_text(text)
    with pytest.raises(RuleFileError) as exc:
        load_file(f)
    assert str(exc.value).startswith(f"{f}{where}") and message in str(exc.value), str(exc.value)


def test_hostile_rule_files_through_the_cli(tmp_path: Path) -> None:
    for case in ("billion laughs", "recursive alias", "deep nesting", "key that is a mapping"):
        f = tmp_path / f"{case.replace(' ', '_')}.yaml"
        f.write_text(HOSTILE[case][0])
        code, line = _check_cli(f)
        assert code == 2 and HOSTILE[case][2] in line, line


def test_a_non_utf8_rule_file_names_the_byte(tmp_path: Path) -> None:
    f = tmp_path / "r.yaml"
    f.write_bytes(GOOD.replace("entropy {value", "entropy \xe9 {value").encode("latin-1"))
    with pytest.raises(RuleFileError, match=r"r\.yaml:10:27: not UTF-8 text \(byte 0xe9\)"):
        load_file(f)
    code, _ = _check_cli(f)
    assert code == 2


def test_a_huge_rule_file_is_refused_before_parsing(tmp_path: Path) -> None:
    f = tmp_path / "r.yaml"
    f.write_text(GOOD + "#" * (5 * 1024 * 1024) + "\n")
    with pytest.raises(RuleFileError, match="file too large"):
        load_file(f)


def test_a_huge_for_or_keep_firing_for_never_fires_on_healthy_data(tmp_path: Path) -> None:
    """The evaluator had a sentinel (-10**9) that a keep_firing_for beyond it turned into
    "firing everywhere"; and the loader now bounds both."""
    from rlwatch.engine.evaluate import evaluate_rule
    from rlwatch.engine.testing import series_context

    f = tmp_path / "r.yaml"
    f.write_text(GOOD + "        for: 100000\n        keep_firing_for: 100000\n")
    rule = load_file(f)[0]
    healthy = series_context({"entropy": "0.5x50"})
    verdict, firing, _ = evaluate_rule(healthy, rule)
    assert verdict.state == "ok" and not firing[1].any()
    import dataclasses

    wide = dataclasses.replace(rule, for_=10**12, keep_firing_for=10**12)
    verdict, firing, _ = evaluate_rule(healthy, wide)
    assert verdict.state == "ok" and not firing[1].any()
    sick = series_context({"entropy": "0.5 0.05 0.5x5"})
    verdict, firing, _ = evaluate_rule(sick, dataclasses.replace(rule, for_=1))
    assert verdict.state == "firing" and firing[1].tolist() == [False] + [True] * 7


@pytest.mark.parametrize(
    ("test", "message"),
    [
        ("{name: x, series: [1, 2], expect: []}", "series is a mapping"),
        ('{name: x, series: {entropy: "1x99999999999"}, expect: []}', "more than 1,000,000"),
        ('{name: x, series: {entropy: "1"}, start: lots, expect: []}', "start is a whole"),
        ('{name: x, series: {entropy: "1"}, expect: {code: XX01}}', "expect is a list"),
        ('{name: x, series: {entropy: "1"}, expect: [{code: XX01, state: ok, step: a}]}', "step"),
    ],
)
def test_hostile_rule_test_files_are_one_line_errors(
    tmp_path: Path, test: str, message: str
) -> None:
    f = tmp_path / "x.test.yaml"
    f.write_text(f"version: 1\ntests:\n  - {test}\n")
    with pytest.raises(RuleFileError) as exc:
        load_cases(f)
    assert str(exc.value).startswith(f"{f}:3:") and message in str(exc.value), str(exc.value)


# -- the compiled rule pack is cached as plain data (JSON) keyed by content -------------------
def _rules_plain(rules) -> list[tuple]:
    return [(r.code, r.severity, r.when, r.for_, r.checks, r.file, r.line) for r in rules.rules]


def test_the_compiled_pack_cache_gives_the_same_rules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    from rlwatch.engine import rules as R

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("RLWATCH_NO_CACHE", raising=False)
    compiled = R._compile(R.builtin_files(), True)
    first = load_rules()  # compiles and writes the cache
    entries = list((tmp_path / "cache" / "rlwatch").glob("pack-*.json"))
    assert len(entries) == 1 and json.loads(entries[0].read_text())["data"]  # JSON, not pickle
    second = load_rules()  # from the cache
    assert _rules_plain(first) == _rules_plain(second) == _rules_plain(compiled)

    entries[0].write_text('{"format": 1, "key": "x", "data": [{"code": 1}]}')  # corrupt
    assert _rules_plain(load_rules()) == _rules_plain(compiled)
    entries[0].write_text("not json at all {")
    assert _rules_plain(load_rules()) == _rules_plain(compiled)


def test_a_changed_rule_file_is_compiled_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("RLWATCH_NO_CACHE", raising=False)
    f = tmp_path / "r.yaml"
    f.write_text(GOOD)
    assert load_rules([f], with_builtin=False).get("XX01").severity == "warning"
    f.write_text(GOOD.replace("severity: warning", "severity: error"))
    assert load_rules([f], with_builtin=False).get("XX01").severity == "error"
    f.write_text(GOOD.replace("severity: warning", "severity: fatal"))
    with pytest.raises(RuleFileError, match="bad severity"):  # errors are never cached
        load_rules([f], with_builtin=False)


def test_an_unwritable_or_disabled_cache_is_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "file-not-dir"
    blocker.write_text("x")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # mkdir under a file fails
    assert load_rules().rules
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "c2"))
    monkeypatch.setenv("RLWATCH_NO_CACHE", "1")
    assert load_rules().rules and not (tmp_path / "c2").exists()


@pytest.mark.parametrize(("collapse_at", "fires"), [(40, True), (300, False)])
def test_within_counts_steps_from_the_runs_first_log_in_the_live_evaluator(collapse_at, fires):
    """EX05 (entropy collapsed within the run's first 100 steps) fed log by log, as tail and the
    training callback do: the evaluator keeps only a recent window of a long run, so a collapse
    at step 300 must be measured from the run's first step (kept with its early level), not
    from the window's."""
    from rlwatch.engine.incremental import Evaluator
    from rlwatch.engine.rules import load_rules
    from rlwatch.engine.select import select

    ev = Evaluator(select(load_rules(), ["EX05"], None), run="live")
    fired = []
    for step in range(1, collapse_at + 30):
        entropy = 1.2 if step < collapse_at else 0.03
        logs = {"entropy": entropy, "completions/mean_length": 12.0, "reward": 0.5}
        fired += [c.verdict.code for c in ev.log(step, logs) if c.kind == "fired"]
    assert fired == (["EX05"] if fires else [])
