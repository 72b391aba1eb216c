"""promtool-style rule tests: input series in a compact notation, expected state at steps.

A test file (YAML, `version: 1`)::

    rule_files: [stability.yaml]        # optional, relative to the test file; default: all shipped
    tests:
      - name: one 25x spike after warm-up fires, then resolves
        series:
          grad_norm: "1x29 25 1x10"      # steps 0..40
        expect:
          - {code: ST01, step: 30, state: firing, observed: {value: 25, ratio: 25}}
          - {code: ST01, step: 31, state: ok}

Series notation (as promtool's): `a` one value; `axn` n+1 copies of a; `a+bxn` / `a-bxn` a then
n more values stepping by b; `_` (or `_xn`) steps with no value; `nan`, `inf`, `-inf`.
Optional per test: `start` (first step, default 0), `stride` (default 1), `restarts` (steps
where a new segment begins), `decimals` (values printed rounded, as in verl <= 0.4 logs),
`now` (the time the run is judged at, for `stalled`). A series named `wall_time` gives each
step's wall time (seconds) instead of a metric.
States: `firing` (the rule fires at that step), `ok` (evaluated, not firing), `skipped`.
Observed values compare with a relative tolerance of 1e-6 (absolute 1e-9).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rlwatch.engine import registry, yamlpos
from rlwatch.engine.conditions import Context, Skip, build_context, evaluate
from rlwatch.engine.evaluate import evaluate_rule
from rlwatch.engine.rules import RuleSet, builtin_files, load_rules, rules_dir
from rlwatch.errors import RuleFileError

_TOKEN = re.compile(
    r"^(?P<a>[-+]?(?:\d+\.?\d*(?:e[-+]?\d+)?|\.\d+|nan|inf)|_)"
    r"(?:(?P<op>[-+])(?P<b>\d+\.?\d*(?:e[-+]?\d+)?))?(?:x(?P<n>\d+))?$"
)
STATES = ("firing", "ok", "skipped")
MAX_STEPS = 1_000_000  # the longest series a test may expand to


def parse_series(text: str) -> list[float | None]:
    """Expand the compact notation; None marks a step with no value."""
    out: list[float | None] = []
    for tok in str(text).split():
        m = _TOKEN.match(tok)
        if not m:
            raise ValueError(f"bad series token {tok!r} (e.g. 1, 1x9, 0.5+0.1x10, _, nan)")
        n = int(m["n"]) if m["n"] is not None else 0
        if len(out) + n + 1 > MAX_STEPS:
            raise ValueError(f"a series of more than {MAX_STEPS:,} steps")
        if m["a"] == "_":
            out += [None] * (n + 1)
            continue
        a = float(m["a"])
        b = float(m["b"] or 0) * (-1 if m["op"] == "-" else 1)
        if m["op"] is None and m["n"] is None:
            out.append(a)
        elif m["op"] is None:
            out += [a] * (n + 1)
        else:
            out += [a + b * i for i in range(n + 1)]
    return out


def series_context(
    series: dict[str, str],
    *,
    start: int = 0,
    stride: int = 1,
    restarts: list[int] | None = None,
    decimals: int | None = None,
    now: float | None = None,
) -> Context:
    """The evaluation context of series in the compact notation (step = start + stride * i)."""
    columns: dict[str, pd.Series] = {}
    nonfinite: dict[str, np.ndarray] = {}
    series = dict(series)
    wall = None
    if "wall_time" in series:  # each step's wall time, not a metric
        values = parse_series(series.pop("wall_time"))
        steps = start + stride * np.arange(len(values))
        wall = pd.Series([np.nan if v is None else v for v in values], index=steps, dtype=float)
        wall = wall.dropna()
    for metric, text in series.items():
        values = parse_series(text)
        steps = start + stride * np.arange(len(values))
        s = pd.Series([np.nan if v is None else v for v in values], index=steps, dtype=float)
        logged = np.array([v is not None for v in values])
        nonfinite[metric] = steps[logged & ~np.isfinite(s.to_numpy())]
        columns[metric] = s
    wide = pd.DataFrame(columns)
    if wall is not None and not columns:
        wide = pd.DataFrame(index=wall.index)
    wide.index.name = "step"
    return build_context(
        wide,
        nonfinite,
        restarts=restarts or (),
        decimals=decimals,
        wall=None if wall is None else (lambda: wall),
        now=now,
    )


def state(when: str | dict[str, Any], **series: str) -> str:
    """A condition's state at the last step of `series` (compact notation): firing, ok or
    skipped. `when` is a condition as written in a rule file (YAML text or a mapping); the
    docstring examples of every condition kind use this.
    """
    import yaml

    spec = yaml.safe_load(when) if isinstance(when, str) else when
    node = registry.parse(spec)
    now = series.pop("now", None)
    try:
        sig = evaluate(series_context(series, now=None if now is None else float(now)), node)
    except Skip:
        return "skipped"
    return "firing" if sig.mask.size and bool(sig.mask[-1]) else "ok"


@dataclass
class Case:
    file: str
    name: str
    spec: dict[str, Any]
    rules: RuleSet
    line: int | None = None

    @property
    def id(self) -> str:
        return f"{Path(self.file).name}::{self.name}"

    def context(self) -> Context:
        return series_context(
            self.spec["series"],
            start=int(self.spec.get("start", 0)),
            stride=int(self.spec.get("stride", 1)),
            restarts=[int(x) for x in self.spec.get("restarts", [])],
            decimals=self.spec.get("decimals"),
            now=self.spec.get("now"),
        )

    def run(self) -> list[str]:
        """Failures as readable lines (empty when the case passes)."""
        ctx = self.context()
        failures = []
        cache: dict[str, Any] = {}
        for exp in self.spec["expect"]:
            code = exp["code"]
            rule = self.rules.get(code)
            if rule is None:
                failures.append(f"{code}: no such rule in the rule files")
                continue
            if code not in cache:
                cache[code] = evaluate_rule(ctx, rule)
            verdict, firing, sig = cache[code]
            step = exp.get("step")
            if verdict.state == "skipped":
                got = "skipped"
            elif step is None:
                got = "firing" if verdict.fired else "ok"
            else:
                hit = np.flatnonzero(firing[0] == step) if firing is not None else []
                got = "firing" if len(hit) and bool(firing[1][hit[0]]) else "ok"
            where = f"step {step}" if step is not None else "the run"
            if got != exp["state"]:
                detail = f" ({verdict.reason})" if verdict.reason else ""
                failures.append(f"{code} at {where}: expected {exp['state']}, got {got}{detail}")
                continue
            for key, want in (exp.get("observed") or {}).items():
                at = np.flatnonzero(sig.steps == step) if sig is not None else []
                if sig is None or key not in sig.observed or len(at) == 0:
                    failures.append(f"{code} at {where}: no observed value {key!r}")
                    continue
                have = float(sig.observed[key][at[0]])
                if not _close(have, float(want)):
                    failures.append(
                        f"{code} at {where}: observed {key} expected {want}, got {have:.6g}"
                    )
        return failures


def _close(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)


def load_cases(path: str | Path) -> list[Case]:
    """The cases of one test file, validated (RuleFileError with file:line:col)."""
    doc = yamlpos.load(path)
    d = doc.data

    def fail(at: tuple[object, ...], msg: str) -> RuleFileError:
        line, col = doc.where(at)
        return RuleFileError(msg, doc.path, line, col)

    if not isinstance(d, dict) or d.get("version") != 1 or not isinstance(d.get("tests"), list):
        raise fail((), "a rule test file is a mapping with 'version: 1' and a list 'tests'")
    unknown = set(d) - {"version", "rule_files", "tests"}
    if unknown:
        raise fail(
            (sorted(unknown)[0],),
            f"unknown key {sorted(unknown)[0]!r} (valid: version, rule_files, tests)",
        )
    base = Path(doc.path).parent
    if "rule_files" in d:
        names = d["rule_files"]
        if not isinstance(names, list) or not all(isinstance(f, str) for f in names):
            raise fail(("rule_files",), "rule_files is a list of file names")
        files = [base / f for f in names]
        for i, f in enumerate(files):
            if not f.exists():
                raise fail(("rule_files", i), f"rule file {f} not found")
        rules = load_rules(files, with_builtin=False)
    else:
        rules = load_rules()
    cases = []
    for i, t in enumerate(d["tests"]):
        at = ("tests", i)
        if not isinstance(t, dict):
            raise fail(at, "a test is a mapping with 'name', 'series' and 'expect'")
        bad = set(t) - {
            "name",
            "series",
            "expect",
            "start",
            "stride",
            "restarts",
            "decimals",
            "now",
        }
        if bad:
            k = sorted(bad)[0]
            raise fail(
                (*at, k),
                f"unknown key {k!r} (valid: name, series, expect, start, "
                "stride, restarts, decimals, now)",
            )
        now = t.get("now", 0)
        if isinstance(now, bool) or not isinstance(now, int | float) or not math.isfinite(now):
            raise fail((*at, "now"), f"now is a time in seconds, got {now!r}")
        for k in ("name", "series", "expect"):
            if k not in t:
                raise fail(at, f"missing required key {k!r}")
        if not isinstance(t["series"], dict):
            raise fail((*at, "series"), 'series is a mapping: {metric: "1x10 5"}')
        for metric, text in t["series"].items():
            if not isinstance(text, str | int | float) or isinstance(text, bool):
                raise fail((*at, "series", metric), 'a series is text like "1x10 5"')
            try:
                parse_series(text)
            except ValueError as exc:
                raise fail((*at, "series", metric), str(exc)) from None
        for key in ("start", "stride", "decimals"):
            v = t.get(key, 1)
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 10**9:
                raise fail((*at, key), f"{key} is a whole number >= 0, got {v!r}")
        restarts = t.get("restarts", [])
        if not isinstance(restarts, list) or not all(
            isinstance(x, int) and not isinstance(x, bool) for x in restarts
        ):
            raise fail((*at, "restarts"), "restarts is a list of steps")
        if not isinstance(t["expect"], list):
            raise fail((*at, "expect"), "expect is a list of {code, state, step, observed}")
        for j, e in enumerate(t["expect"]):
            eat = (*at, "expect", j)
            if not isinstance(e, dict) or "code" not in e or "state" not in e:
                raise fail(
                    eat, "an expectation has 'code' and 'state' (and optional 'step', 'observed')"
                )
            if e["state"] not in STATES:
                raise fail(
                    (*eat, "state"), f"bad state {e['state']!r} (valid: {', '.join(STATES)})"
                )
            bad = set(e) - {"code", "state", "step", "observed"}
            if bad:
                raise fail((*eat, sorted(bad)[0]), f"unknown key {sorted(bad)[0]!r}")
            step = e.get("step")
            if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
                raise fail((*eat, "step"), f"step is a whole number, got {step!r}")
            obs = e.get("observed") or {}
            if not isinstance(obs, dict) or not all(
                isinstance(x, int | float) and not isinstance(x, bool) for x in obs.values()
            ):
                raise fail((*eat, "observed"), "observed is a mapping {name: number}")
        cases.append(Case(doc.path, str(t["name"]), t, rules, doc.where(at)[0]))
    return cases


def junit_xml(results: list[tuple[Case, list[str]]]) -> str:
    """JUnit XML of rule-test results: one testsuite per test file, one testcase per test."""
    from xml.sax.saxutils import escape, quoteattr

    files: dict[str, list[tuple[Case, list[str]]]] = {}
    for case, problems in results:
        files.setdefault(case.file, []).append((case, problems))
    failures = sum(bool(p) for _, p in results)
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<testsuites name="rlwatch rules test" tests="{len(results)}" failures="{failures}">',
    ]
    for file, mine in files.items():
        out.append(
            f'  <testsuite name={quoteattr(file)} tests="{len(mine)}" '
            f'failures="{sum(bool(p) for _, p in mine)}">'
        )
        for case, problems in mine:
            head = (
                f"    <testcase classname={quoteattr(Path(file).name)} name={quoteattr(case.name)}"
            )
            if problems:
                out += [
                    head + ">",
                    f"      <failure message={quoteattr(problems[0])}>"
                    f"{escape(chr(10).join(problems))}</failure>",
                    "    </testcase>",
                ]
            else:
                out.append(head + "/>")
        out.append("  </testsuite>")
    out.append("</testsuites>")
    return "\n".join(out) + "\n"


def builtin_test_files() -> list[Path]:
    return sorted((rules_dir() / "tests").glob("*.test.yaml"))


def coverage(cases: list[Case]) -> dict[str, set[str]]:
    """Rule code -> the states its expectations cover."""
    out: dict[str, set[str]] = {}
    for c in cases:
        for e in c.spec["expect"]:
            out.setdefault(e["code"], set()).add(e["state"])
    return out


__all__ = [
    "Case",
    "builtin_files",
    "builtin_test_files",
    "coverage",
    "load_cases",
    "parse_series",
    "series_context",
    "state",
]
