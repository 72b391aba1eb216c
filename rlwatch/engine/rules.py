"""The rule model and its strict loader: rules are data, condition kinds are code."""

from __future__ import annotations

import difflib
import re
import string
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from rlwatch.engine import registry, yamlpos
from rlwatch.engine.registry import Node
from rlwatch.errors import RuleFileError
from rlwatch.severity import Severity

SEVERITY_NAMES = tuple(str(s) for s in Severity)

CODE = re.compile(r"^[A-Z]{2}\d{2}$")
NAME = re.compile(r"^[a-z][a-z0-9_]*\.[a-z][a-z0-9_]*$")
FIELD = re.compile(r"^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)?$")

RULE_KEYS = {
    "code",
    "name",
    "severity",
    "description",
    "applies_to",
    "when",
    "for",
    "keep_firing_for",
    "gate",
    "summary",
    "checks",
    "runbook",
}
# any: an episode anywhere in the run fails the gate (events: NaN, a blow-up, a crash);
# last: only an episode still firing at the run's last step does (states a healthy run may pass
# through, e.g. a reward model at chance during a slow warm-up)
GATES = ("any", "last")
TEMPLATE_EXTRAS = {"step", "first_step", "last_step", "steps"}
MAX_FORMAT = 100  # the widest field and the most decimals a summary template may ask for
SPEC = re.compile(r"^(?:.?[<>=^])?[-+ ]?z?#?0?(?P<width>\d*)[,_]?(?:\.(?P<prec>\d+))?[a-zA-Z%]?$")
NOT_RULES = {"metrics.yaml", "symptoms.yaml"}  # the other shipped YAML files in rules/


@dataclass(frozen=True)
class Check:
    metric: str
    hint: str


@dataclass(frozen=True)
class Rule:
    code: str
    name: str
    severity: Severity
    when: Node  # the typed condition (registry nodes), parsed at load time
    summary: str
    description: str = ""
    for_: int = 1
    keep_firing_for: int = 0
    gate: str = "any"  # any: an episode anywhere fails the gate | last: only one still firing
    checks: tuple[Check, ...] = ()
    runbook: str = ""
    frameworks: tuple[str, ...] = ()
    group: str = ""
    file: str = ""
    line: int | None = None
    resolution: int = 1  # the run's logging interval it was scaled to (at_resolution)


_AT: dict[tuple[int, int], tuple[Rule, Rule]] = {}


def at_resolution(rule: Rule, r: int) -> Rule:
    """The rule for a run that logs every `r` training steps: its condition's counts of logs
    (windows, early levels, warm-ups) scaled to span the same training steps
    (`registry.at_resolution`). `for` is not: a log that averages r steps is less noisy than
    one step, so a threshold held on 2 averaged logs is weaker evidence than one held on the
    10 single steps the rule asks; the hold keeps its count of logs. Only the short-run minimum
    evidence counts steps (`robust.short_run_for`: at least `for` // 2 steps, and 3 logs), so a
    run of 5 logs every 10 steps can show a hold. The rule itself when r <= 1; cached."""
    if r <= 1:
        return rule
    hit = _AT.get((id(rule), r))
    if hit is not None and hit[0] is rule:
        return hit[1]
    out = replace(rule, when=registry.at_resolution(rule.when, r), resolution=r)
    if len(_AT) > 4096:
        _AT.clear()
    _AT[(id(rule), r)] = (rule, out)
    return out


@dataclass
class RuleSet:
    rules: list[Rule] = field(default_factory=list)

    def get(self, code: str) -> Rule | None:
        return next((r for r in self.rules if r.code == code), None)


def rules_dir() -> Path:
    return Path(str(resources.files("rlwatch.rules")))


def builtin_files() -> list[Path]:
    return sorted(p for p in rules_dir().glob("*.yaml") if p.name not in NOT_RULES)


def load_rules(paths: list[str | Path] | None = None, *, with_builtin: bool = True) -> RuleSet:
    """The shipped pack, plus `paths` (which add rules or override shipped ones by code)."""
    files = (builtin_files() if with_builtin else []) + [Path(p) for p in paths or []]
    if not files:
        raise RuleFileError("no rule files", "(none)")
    k = _pack_key(files, with_builtin)
    if k is not None:
        from rlwatch.engine import cache

        hit = cache.get("pack", k)
        if hit is not None:
            try:
                return RuleSet([_rule_from_plain(d) for d in hit])
            except Exception:
                pass
    ruleset = _compile(files, with_builtin)
    if k is not None:
        from rlwatch.engine import cache

        cache.put("pack", k, [_rule_to_plain(r) for r in ruleset.rules])
    return ruleset


def _pack_key(files: list[Path], with_builtin: bool) -> str | None:
    """The compiled pack's cache key: every file's path and bytes, the metrics table and the
    code that compiles them (None when a file cannot be read: the compiler says why)."""
    from rlwatch import __version__
    from rlwatch.engine import cache
    from rlwatch.names import metrics_file

    parts: list[bytes | str] = [__version__, str(with_builtin)]
    try:
        for f in [*files, metrics_file()]:
            with open(f, "rb") as fh:
                raw = fh.read(yamlpos.MAX_BYTES + 1)
            parts += [str(f), raw]
    except OSError:
        return None
    modules = ("rules", "registry", "conditions", "yamlpos")
    parts.append(cache.code_stamp(*(f"rlwatch.engine.{m}" for m in modules), "rlwatch.names"))
    return cache.key(*parts)


def _rule_to_plain(r: Rule) -> dict[str, Any]:
    return {
        "code": r.code,
        "name": r.name,
        "severity": str(r.severity),
        "when": r.when.to_spec(),
        "summary": r.summary,
        "description": r.description,
        "for": r.for_,
        "keep_firing_for": r.keep_firing_for,
        "gate": r.gate,
        "checks": [[c.metric, c.hint] for c in r.checks],
        "runbook": r.runbook,
        "frameworks": list(r.frameworks),
        "group": r.group,
        "file": r.file,
        "line": r.line,
    }


def _rule_from_plain(d: dict[str, Any]) -> Rule:
    return Rule(
        code=d["code"],
        name=d["name"],
        severity=Severity.parse(d["severity"]),
        when=registry.parse(d["when"]),
        summary=d["summary"],
        description=d["description"],
        for_=d["for"],
        keep_firing_for=d["keep_firing_for"],
        gate=d["gate"],
        checks=tuple(Check(m, h) for m, h in d["checks"]),
        runbook=d["runbook"],
        frameworks=tuple(d["frameworks"]),
        group=d["group"],
        file=d["file"],
        line=d["line"],
    )


def _compile(files: list[Path], with_builtin: bool) -> RuleSet:
    out: dict[str, Rule] = {}
    builtin = {str(p) for p in builtin_files()} if with_builtin else set()
    for f in files:
        seen_here: set[str] = set()
        for rule in load_file(f):
            if rule.code in seen_here or (rule.code in out and str(f) in builtin):
                raise RuleFileError(f"duplicate rule code {rule.code}", rule.file, rule.line, 3)
            seen_here.add(rule.code)
            out[rule.code] = rule
    return RuleSet(list(out.values()))


def load_file(path: str | Path) -> list[Rule]:
    """Parse and strictly validate one rule file."""
    doc = yamlpos.load(path)
    v = _Validator(doc)
    return v.file()


class _Validator:
    def __init__(self, doc: yamlpos.Located):
        from rlwatch.names import catalogue

        self.doc = doc
        self.metrics = set(catalogue().metrics)
        self.frameworks = set(catalogue().frameworks)

    def fail(self, at: tuple[object, ...], message: str) -> RuleFileError:
        line, col = self.doc.where(at)
        return RuleFileError(message, self.doc.path, line, col)

    def file(self) -> list[Rule]:
        d = self.doc.data
        if not isinstance(d, dict):
            raise self.fail((), "expected a mapping with 'version: 1' and 'groups'")
        self.keys(d, (), {"version", "groups"}, required={"version", "groups"})
        if d["version"] != 1:
            raise self.fail(("version",), f"unsupported version {d['version']!r} (valid: 1)")
        rules: list[Rule] = []
        groups = self.list(d["groups"], ("groups",))
        for gi, g in enumerate(groups):
            at = ("groups", gi)
            if not isinstance(g, dict):
                raise self.fail(at, "a group is a mapping with 'name' and 'rules'")
            self.keys(g, at, {"name", "rules"}, required={"name", "rules"})
            for ri, r in enumerate(self.list(g["rules"], (*at, "rules"))):
                rules.append(self.rule(r, (*at, "rules", ri), str(g["name"])))
        codes: dict[str, int] = {}
        for i, r in enumerate(rules):
            if r.code in codes:
                raise RuleFileError(f"duplicate rule code {r.code}", self.doc.path, r.line, 3)
            codes[r.code] = i
        return rules

    def list(self, value: Any, at: tuple[object, ...]) -> list[Any]:
        if not isinstance(value, list):
            raise self.fail(at, f"expected a list, got {type(value).__name__}")
        return value

    def keys(
        self,
        d: dict[str, Any],
        at: tuple[object, ...],
        allowed: set[str],
        required: set[str] = frozenset(),
    ) -> None:  # type: ignore[assignment]
        for k in d:
            if k not in allowed:
                near = difflib.get_close_matches(k, sorted(allowed), n=1)
                hint = f"; did you mean {near[0]!r}?" if near else ""
                raise self.fail(
                    (*at, k), f"unknown key {k!r} (valid: {', '.join(sorted(allowed))}){hint}"
                )
        for k in sorted(required - set(d)):
            raise self.fail(at, f"missing required key {k!r}")

    def rule(self, r: Any, at: tuple[object, ...], group: str) -> Rule:
        if not isinstance(r, dict):
            raise self.fail(at, "a rule is a mapping")
        self.keys(r, at, RULE_KEYS, required={"code", "name", "severity", "when", "summary"})
        code, name, sev = str(r["code"]), str(r["name"]), r["severity"]
        if not CODE.match(code):
            raise self.fail(
                (*at, "code"), f"bad code {code!r} (two capitals and two digits, e.g. ST01)"
            )
        if not NAME.match(name):
            raise self.fail(
                (*at, "name"),
                f"bad name {name!r} (family.snake_case, e.g. stability.grad_norm_spike)",
            )
        if not isinstance(sev, str) or sev not in SEVERITY_NAMES:
            raise self.fail(
                (*at, "severity"), f"bad severity {sev!r} (valid: {', '.join(SEVERITY_NAMES)})"
            )
        when = registry.parse(r["when"], (*at, "when"), self.fail, self.metric)
        observed = when.template_names()
        n_for = self.int(r.get("for", 1), (*at, "for"), minimum=1)
        keep = self.int(r.get("keep_firing_for", 0), (*at, "keep_firing_for"), minimum=0)
        gate = r.get("gate", "any")
        if gate not in GATES:
            raise self.fail((*at, "gate"), f"bad gate {gate!r} (valid: {', '.join(GATES)})")
        for key, value in (("description", ""), ("runbook", "")):
            if not isinstance(r.get(key, value), str):
                raise self.fail((*at, key), f"{key} must be a string")
        summary = r["summary"]
        if not isinstance(summary, str):
            raise self.fail((*at, "summary"), "summary must be a string")
        self.template(summary, (*at, "summary"), observed)
        checks = []
        for ci, c in enumerate(self.list(r.get("checks", []), (*at, "checks"))):
            cat = (*at, "checks", ci)
            if not isinstance(c, dict):
                raise self.fail(cat, "a check is a mapping with 'metric' and 'hint'")
            self.keys(c, cat, {"metric", "hint"}, required={"metric", "hint"})
            self.metric(c["metric"], (*cat, "metric"))
            if not isinstance(c["hint"], str):
                raise self.fail((*cat, "hint"), "hint must be a string")
            checks.append(Check(str(c["metric"]), str(c["hint"])))
        frameworks: tuple[str, ...] = ()
        if "applies_to" in r:
            a = r["applies_to"]
            if not isinstance(a, dict):
                raise self.fail((*at, "applies_to"), "applies_to is a mapping: {frameworks: [...]}")
            self.keys(a, (*at, "applies_to"), {"frameworks"})
            for i, fw in enumerate(
                self.list(a.get("frameworks", []), (*at, "applies_to", "frameworks"))
            ):
                if not isinstance(fw, str) or fw not in self.frameworks:
                    raise self.fail(
                        (*at, "applies_to", "frameworks", i),
                        f"unknown framework {fw!r} (valid: {', '.join(sorted(self.frameworks))})",
                    )
            frameworks = tuple(a.get("frameworks", []))
        line, _ = self.doc.where(at)
        return Rule(
            code=code,
            name=name,
            severity=Severity.parse(sev),
            when=when,
            summary=summary,
            description=str(r.get("description", "")),
            for_=n_for,
            keep_firing_for=keep,
            gate=gate,
            checks=tuple(checks),
            runbook=str(r.get("runbook", "")),
            frameworks=frameworks,
            group=group,
            file=self.doc.path,
            line=line,
        )

    def int(
        self, v: Any, at: tuple[object, ...], minimum: int = 0, maximum: int = registry.MAX_WINDOW
    ) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            raise self.fail(at, f"expected an integer >= {minimum}, got {v!r}")
        if v > maximum:
            raise self.fail(at, f"{at[-1]} must be <= {maximum:,} logged steps, got {v!r}")
        return v

    def metric(self, m: Any, at: tuple[object, ...]) -> None:
        if not isinstance(m, str):
            raise self.fail(at, f"a metric is a name, got {type(m).__name__} {m!r}")
        if m not in self.metrics:
            near = difflib.get_close_matches(str(m), sorted(self.metrics), n=3)
            raise self.fail(
                at,
                f"unknown metric {m!r}"
                + (
                    f" (did you mean {', '.join(near)}?)"
                    if near
                    else " (see the canonical names in rules/metrics.yaml)"
                ),
            )

    def template(self, text: str, at: tuple[object, ...], names: set[str]) -> None:
        allowed = names | TEMPLATE_EXTRAS
        try:
            parsed = [(f, spec or "") for _, f, spec, _ in string.Formatter().parse(text)]
        except ValueError as exc:
            raise self.fail(at, f"bad summary template: {exc}") from None
        fields = [f for f, _ in parsed if f is not None]
        for f, spec in parsed:
            if f is not None and spec:
                self.format_spec(f, spec, at)
        for f in fields:
            root = f.split(".")[0]
            if not FIELD.match(f) or "__" in f or root not in allowed:
                raise self.fail(
                    at, f"summary uses unknown field {{{f}}} (valid: {', '.join(sorted(allowed))})"
                )

    def format_spec(self, name: str, spec: str, at: tuple[object, ...]) -> None:
        """A format spec is plain (no nested fields) and bounded in width and decimals."""
        m = SPEC.match(spec)
        if "{" in spec or m is None:
            raise self.fail(at, f"bad format {{{name}:{spec}}} in the summary (e.g. {{value:.3g}})")
        width, prec = int(m["width"] or 0), int(m["prec"] or 0)
        if width > MAX_FORMAT or prec > MAX_FORMAT:
            raise self.fail(
                at,
                f"format {{{name}:{spec}}} asks for {max(width, prec):,} characters "
                f"(at most {MAX_FORMAT})",
            )
        for sample in (1.5, 1):
            try:
                format(sample, spec)
                return
            except ValueError:
                continue
        raise self.fail(at, f"bad format {{{name}:{spec}}} in the summary (e.g. {{value:.3g}})")
