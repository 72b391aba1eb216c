"""The symptom -> check table: data in rules/symptoms.yaml, check kinds here (declared once).

Each check kind reads one metric of a run (finite values, step order) and says what it shows and
whether that points at a problem. `load_symptoms()` validates the table strictly, with
file:line:col errors like the rule files; `symptom_table()` fills it with a run's values.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from rlwatch.engine import yamlpos
from rlwatch.engine.rules import CODE, _Validator, rules_dir

EXTRA_METRICS = ("seqlen_mean", "gen_time")  # read by the stall and imbalance checks


def _fmt(x: float) -> str:
    if x != x:  # NaN
        return "nan"
    return f"{x:.3g}" if abs(x) < 1e5 else f"{x:,.0f}"


def _ratio(s: pd.Series, wide: pd.DataFrame, metric: str, limit: Any, below: bool) -> tuple:
    e, r = float(s.iloc[:10].median()), float(s.iloc[-20:].median())
    ratio = r / e if e else float("nan")
    problem = (ratio < limit) if below else not (limit[0] <= ratio <= limit[1])
    return f"{_fmt(e)} -> {_fmt(r)} ({ratio:.0%})", problem


def _recent_max(s: pd.Series, wide: pd.DataFrame, metric: str, limit: Any) -> tuple:
    recent = s.iloc[-20:]
    m = float(recent.max())
    return f"max {_fmt(m)} over the last {len(recent)} steps", limit is not None and m > limit


def _lr_jumps(s: pd.Series, wide: pd.DataFrame, metric: str, limit: Any) -> tuple:
    ratio = (s / s.shift(1)).dropna()
    jumps = int(((ratio > limit) | (ratio < 1 / limit)).sum())
    text = f"{_fmt(float(s.iloc[0]))} -> {_fmt(float(s.iloc[-1]))}, {jumps} jump(s) >{limit:g}x"
    return text, jumps > 0


def _stall(s: pd.Series, wide: pd.DataFrame, metric: str, limit: Any) -> tuple:
    med, top = float(s.median()), float(s.max())
    share = ""
    if "gen_time" in wide.columns:
        g = (wide["gen_time"] / wide[metric]).dropna()
        if len(g):
            share = f", {float(g.median()):.0%} generating"
    return f"median {_fmt(med)} s, max {_fmt(top)} s{share}", med > 0 and top >= limit * med


def _imbalance(s: pd.Series, wide: pd.DataFrame, metric: str, limit: Any) -> tuple:
    recent = s.iloc[-20:]
    if "seqlen_mean" in wide.columns:
        ratio = float((wide[metric] / wide["seqlen_mean"]).dropna().iloc[-20:].median())
        return f"{_fmt(float(recent.median()))} tokens ({ratio:.0%} of the mean)", ratio > limit
    return f"{_fmt(float(recent.median()))} tokens", False


@dataclass(frozen=True)
class CheckKind:
    limit: str  # "num" | "range" | "none": what `limit` must be
    fn: Callable[[pd.Series, pd.DataFrame, str, Any], tuple[str, bool]]
    doc: str


CHECKS: dict[str, CheckKind] = {
    "ratio_below": CheckKind(
        "num",
        lambda s, w, m, lim: _ratio(s, w, m, lim, True),
        "recent median / early median (first 10 values) is below limit",
    ),
    "ratio_outside": CheckKind(
        "range",
        lambda s, w, m, lim: _ratio(s, w, m, lim, False),
        "recent median / early median is outside [low, high]",
    ),
    "recent_max_above": CheckKind("num", _recent_max, "the max of the last 20 values > limit"),
    "recent_max": CheckKind("none", _recent_max, "the max of the last 20 values (information)"),
    "lr_jumps": CheckKind("num", _lr_jumps, "a step-to-step change by more than limit x"),
    "stall": CheckKind("num", _stall, "the longest step is >= limit x the median step"),
    "imbalance_above": CheckKind("num", _imbalance, "the metric / seqlen_mean > limit"),
}


@dataclass(frozen=True)
class Check:
    metric: str
    question: str
    check: str
    limit: Any = None


@dataclass(frozen=True)
class Symptom:
    symptom: str
    rules: tuple[str, ...]
    checks: tuple[Check, ...]


def symptoms_file() -> Path:
    return rules_dir() / "symptoms.yaml"


_CACHE: dict[str, list[Symptom]] = {}


def load_symptoms(path: str | Path | None = None) -> list[Symptom]:
    """Parse and strictly validate the symptom table (RuleFileError with file:line:col)."""
    p = str(path or symptoms_file())
    if p in _CACHE:
        return _CACHE[p]
    from rlwatch.engine import cache
    from rlwatch.names import metrics_file

    try:
        with open(p, "rb") as f:
            raw = f.read(yamlpos.MAX_BYTES + 1)
        k: str | None = cache.key(
            p,
            raw,
            metrics_file().read_bytes(),
            cache.code_stamp("rlwatch.engine.symptoms", "rlwatch.engine.rules", "rlwatch.names"),
        )
    except OSError:
        k = None  # the loader below says why
    hit = cache.get("symptoms", k) if k else None
    if hit is not None:
        try:
            out = [
                Symptom(s, tuple(r), tuple(Check(*c[:3], _from_json(c[3])) for c in checks))
                for s, r, checks in hit
            ]
            _CACHE[p] = out
            return out
        except (TypeError, ValueError):
            pass  # a damaged entry: validate again
    out = _validate(p)
    if k:
        plain = [
            [s.symptom, list(s.rules), [[c.metric, c.question, c.check, c.limit] for c in s.checks]]
            for s in out
        ]
        cache.put("symptoms", k, plain)
    _CACHE[p] = out
    return out


def _from_json(limit: Any) -> Any:
    return tuple(limit) if isinstance(limit, list) else limit


def _validate(p: str) -> list[Symptom]:
    v = _Validator(yamlpos.load(p))
    d = v.doc.data
    if not isinstance(d, dict):
        raise v.fail((), "expected a mapping with 'version: 1' and 'symptoms'")
    v.keys(d, (), {"version", "symptoms"}, required={"version", "symptoms"})
    if d["version"] != 1:
        raise v.fail(("version",), f"unsupported version {d['version']!r} (valid: 1)")
    out = []
    for i, s in enumerate(v.list(d["symptoms"], ("symptoms",))):
        at = ("symptoms", i)
        if not isinstance(s, dict):
            raise v.fail(at, "a symptom is a mapping with 'symptom', 'rules' and 'checks'")
        v.keys(s, at, {"symptom", "rules", "checks"}, required={"symptom", "rules", "checks"})
        if not isinstance(s["symptom"], str) or not s["symptom"]:
            raise v.fail((*at, "symptom"), "symptom is a non-empty string")
        codes = v.list(s["rules"], (*at, "rules"))
        for j, code in enumerate(codes):
            if not isinstance(code, str) or not CODE.match(code):
                raise v.fail((*at, "rules", j), f"bad rule code {code!r} (e.g. ST01)")
        checks = v.list(s["checks"], (*at, "checks"))
        if len(checks) != 2:
            raise v.fail((*at, "checks"), f"a symptom has exactly 2 checks, got {len(checks)}")
        parsed = []
        for j, c in enumerate(checks):
            cat = (*at, "checks", j)
            if not isinstance(c, dict):
                raise v.fail(cat, "a check is a mapping with 'metric', 'question' and 'check'")
            v.keys(
                c, cat, {"metric", "question", "check", "limit"}, {"metric", "question", "check"}
            )
            v.metric(c["metric"], (*cat, "metric"))
            if not isinstance(c["question"], str):
                raise v.fail((*cat, "question"), "question is a string")
            kind = CHECKS.get(c["check"]) if isinstance(c["check"], str) else None
            if kind is None:
                raise v.fail(
                    (*cat, "check"),
                    f"unknown check {c['check']!r} (valid: {', '.join(CHECKS)})",
                )
            parsed.append(
                Check(c["metric"], c["question"], c["check"], _limit(v, kind, c, (*cat, "limit")))
            )
        out.append(Symptom(s["symptom"], tuple(codes), tuple(parsed)))
    return out


def _limit(v: _Validator, kind: CheckKind, c: dict[str, Any], at: tuple[object, ...]) -> Any:
    have = c.get("limit")
    if kind.limit == "none":
        if have is not None:
            raise v.fail(at, f"check {c['check']!r} takes no limit")
        return None
    if have is None:
        raise v.fail(at[:-1], f"check {c['check']!r} needs a limit")

    def num(x: Any, where: tuple[object, ...]) -> float:
        if isinstance(x, bool) or not isinstance(x, int | float):
            raise v.fail(where, f"expected a number, got {x!r}")
        return float(x)

    if kind.limit == "range":
        if not (isinstance(have, list) and len(have) == 2):
            raise v.fail(at, f"limit is [low, high], got {have!r}")
        return tuple(num(x, (*at, i)) for i, x in enumerate(have))
    return num(have, at)


def needed(symptoms: list[Symptom]) -> list[str]:
    """The metrics the table reads."""
    return [c.metric for s in symptoms for c in s.checks] + list(EXTRA_METRICS)


def symptom_table(
    wide: pd.DataFrame, fired: set[str], symptoms: list[Symptom] | None = None
) -> list[dict[str, Any]]:
    """The table filled with one run's values (`wide`: step x metric, finite values)."""
    rows = []
    for sym in load_symptoms() if symptoms is None else symptoms:
        checks = []
        for c in sym.checks:
            s = wide[c.metric].dropna() if c.metric in wide.columns else None
            if s is None or s.empty:
                row = {"value": "not logged", "problem": False, "logged": False}
            else:
                text, problem = CHECKS[c.check].fn(s, wide, c.metric, c.limit)
                row = {"value": text, "problem": bool(problem), "logged": True}
            checks.append({"metric": c.metric, "question": c.question, **row})
        rows.append(
            {
                "symptom": sym.symptom,
                "present": bool(fired & set(sym.rules)),
                "rules": [c for c in sym.rules if c in fired],
                "checks": checks,
            }
        )
    return rows
