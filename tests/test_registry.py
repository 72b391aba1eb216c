"""The condition-kind registry: one declaration per kind, read by the validator, the evaluator,
`rules explain` and this docstring test (every kind's examples run, and must fire / stay quiet)."""

from __future__ import annotations

import doctest
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlwatch.cli.app import app
from rlwatch.engine import registry
from rlwatch.engine.rules import load_file, load_rules
from rlwatch.engine.testing import state
from rlwatch.errors import RuleFileError

KINDS = registry.kinds()


def test_the_shipped_kinds_are_registered() -> None:
    assert set(KINDS) >= {
        "threshold",
        "spike",
        "relative",
        "trend",
        "nonfinite",
        "stuck",
        "stall",
        "count",
        "all",
        "any",
    }


@pytest.mark.parametrize("name", KINDS)
def test_docstring_examples_of_every_kind_run_and_show_a_firing_and_a_quiet_case(
    name: str,
) -> None:
    cls = registry.REGISTRY[name]
    tests = doctest.DocTestFinder().find(cls, name, globs={"state": state})
    examples = [e for t in tests for e in t.examples]
    wants = {e.want.strip() for e in examples}
    assert {"'firing'", "'ok'"} <= wants, f"{name}: needs a firing and an ok example"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for t in tests:
        runner.run(t)
    assert runner.failures == 0 and runner.tries == len(examples)


@pytest.mark.parametrize("name", KINDS)
def test_every_parameter_is_declared_with_a_type_and_a_meaning(name: str) -> None:
    kind = registry.describe(name)
    assert kind["doc"], name
    for p in kind["params"]:
        assert p["type"] in registry.TYPES and p["doc"], (name, p["name"])
    assert registry.REGISTRY[name].signal is not registry.Node.signal


def test_the_evaluator_memoises_identical_leaf_nodes() -> None:
    spec = {"spike": {"metric": "grad_norm", "factor": 10, "window": 20}}
    a, b = registry.parse(spec), registry.parse({"spike": {"metric": "grad_norm", "factor": 10.0}})
    assert a == b and hash(a) == hash(b)  # the default window is the declared one
    assert a.window == 20 and a.min_periods == 5


def test_a_node_round_trips_through_plain_data() -> None:
    for rule in load_rules().rules:
        assert registry.parse(rule.when.to_spec()) == rule.when
        assert registry.parse(rule.when.to_spec(defaults=True)) == rule.when


def test_lookback_and_head_are_declared_per_kind() -> None:
    p = registry.parse
    assert p({"threshold": {"metric": "kl_ref", "above": 1}}).lookback() == 0
    assert p({"spike": {"metric": "grad_norm", "factor": 3, "window": 7}}).lookback() == 7
    assert p({"stall": {"factor": 3}}).lookback() is None
    c = p({"count": {"of": {"stuck": {"metric": "lr", "steps": 4}}, "at_least": 2, "within": 9}})
    assert c.lookback() == 13
    r = p({"relative": {"metric": "entropy", "below_factor": 0.1, "first_steps": 12}})
    assert r.lookback() == 0 and r.head() == 12
    assert p({"any": [r.to_spec(), c.to_spec()]}).head() == 12


RULE = """\
version: 1
groups:
  - name: g
    rules:
      - code: XX01
        name: custom.rule
        severity: warning
        when:
          {when}
        summary: "seen {{value}}"
"""


@pytest.mark.parametrize(
    ("when", "message"),
    [
        ("spike: {metric: grad_norm, factor: 10, window: 1000000000000}", "window must be"),
        ("spike: {metric: grad_norm, factor: 10, window: 4, min_periods: 5}", "min_periods"),
        ("spike: {metric: grad_norm, factor: -1}", "factor must be > 0"),
        ("spike: {metric: [grad_norm], factor: 2}", "metric is a metric name, got list"),
        ("stuck: {metric: lr, steps: 0}", "expected an integer >= 1"),
        ("trend: {metric: lr, below: -0.1}", "missing required key 'window'"),
        ("threshold: {metric: lr}", "'threshold' needs one of: above, below, outside, inside"),
        ("threshold: {metric: lr, outside: [2, 1]}", "outside: low 2.0 > high 1.0"),
        ("all: []", "'all' needs at least one condition"),
        ("count: {of: {spik: {metric: lr}}, at_least: 1, within: 2}", "did you mean 'spike'"),
    ],
)
def test_the_validator_reads_the_declaration(tmp_path: Path, when: str, message: str) -> None:
    f = tmp_path / "r.yaml"
    f.write_text(RULE.format(when=when))
    with pytest.raises(RuleFileError) as exc:
        load_file(f)
    assert str(exc.value).startswith(f"{f}:9:") and message in str(exc.value), str(exc.value)


def test_rules_explain_shows_each_kind_with_its_declared_defaults() -> None:
    r = CliRunner().invoke(app, ["rules", "explain", "ST01"])
    assert r.exit_code == 0, r.output
    assert "spike: The value jumps against a robust rolling baseline" in r.output
    assert (
        "window (int, default 20, 1..100000, logs: r x fewer every r steps, at least 3): "
        "logged steps in the rolling baseline"
    ) in r.output


def test_counts_of_logs_scale_with_the_runs_logging_interval() -> None:
    """A rule's counts of logs are written for a run that logs every step: for one that logs
    every r steps they count r x fewer (never below their floor); thresholds, `within`'s
    training steps and `for` do not change, and r = 1 returns the very same rule."""
    from rlwatch.engine.registry import at_resolution as scale_node
    from rlwatch.engine.rules import at_resolution, load_rules

    rules = load_rules([], with_builtin=True)
    ex05 = rules.get("EX05")
    assert ex05 is not None and at_resolution(ex05, 1) is ex05
    scaled = at_resolution(ex05, 10)
    assert scaled is at_resolution(ex05, 10)  # cached
    spec = scaled.when.to_spec(defaults=True)["all"][0]["within"]
    assert spec["steps"] == 100  # training steps: unchanged
    inner = spec["of"]["sustained"]
    assert inner["window"] == 3 and inner["of"]["relative"]["first_steps"] == 1
    assert inner["fraction"] == 0.7 and scaled.for_ == ex05.for_
    st01 = rules.get("ST01")
    assert st01 is not None
    s4 = scale_node(st01.when, 4).to_spec(defaults=True)["spike"]
    assert (s4["window"], s4["min_periods"], s4["factor"]) == (5, 3, 10)


def test_short_run_minimum_evidence_counts_steps_on_a_coarse_run() -> None:
    """Early in a run (its first 2 x `for` logs) a hold needs half the logs so far, at least
    `for` // 2 training steps and 3 logs: on a run that logs every step that is 5 logs of a
    `for: 10`; on one that logs every 10 steps (TRL's default), 3 logs (30 steps). From log
    2 x `for` on, `for` applies whatever the cadence; the scaled rule carries its cadence."""
    from rlwatch.engine.robust import short_run_for
    from rlwatch.engine.rules import at_resolution, load_rules

    assert [short_run_for(10, p) for p in (0, 4, 9, 13, 19, 30)] == [5, 5, 5, 7, 10, 10]
    assert [short_run_for(10, p, resolution=10) for p in (0, 4, 9, 13, 19)] == [3, 3, 5, 7, 10]
    assert short_run_for(10, 4, resolution=2) == 3 and short_run_for(20, 4, resolution=2) == 5
    assert short_run_for(2, 0, resolution=10) == 2  # never more than `for`
    ln02 = load_rules([], with_builtin=True).get("LN02")
    assert ln02 is not None and ln02.resolution == 1
    assert at_resolution(ln02, 10).resolution == 10 and at_resolution(ln02, 10).for_ == 10


def test_the_metrics_a_condition_can_be_judged_by() -> None:
    """`needs`: an `any` is judged on one branch, an `all` on one of each of its conditions',
    `unless_logged`'s metric is optional; a condition of too many alternatives to work out
    lets each metric alone judge it (a NaN-only metric then fires it, as before)."""
    from rlwatch.engine.conditions import MAX_NEEDS, needs

    def th(m: str) -> dict:
        return {"threshold": {"metric": m, "above": 0}}

    when = registry.parse({"all": [th("loss"), {"any": [th("rm_accuracy"), th("dpo_margin")]}]})
    assert sorted(map(sorted, needs(when))) == [["dpo_margin", "loss"], ["loss", "rm_accuracy"]]
    when = registry.parse({"unless_logged": {"metric": "val_score", "of": th("loss")}})
    assert needs(when) == [frozenset({"loss"})]
    pairs = [{"any": [th(f"m{i}a"), th(f"m{i}b")]} for i in range(7)]  # 2**7 > MAX_NEEDS
    assert MAX_NEEDS < 2**7
    when = registry.parse({"all": pairs}, metric=lambda v, at: None)
    alts = needs(when)
    assert len(alts) == 14 and all(len(a) == 1 for a in alts)
