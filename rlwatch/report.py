"""The Report: one object per diagnosis, one `to_dict()`; every output format renders it.

It holds the runs (framework, steps, wall-time span, restarts, reader warnings), every rule's
verdict per run (state, episodes, observed values, checks, the metric around the episode),
skipped rules with reasons, and per run the symptom -> check table of the metrics glossary
filled with the run's own values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from rlwatch import __version__
from rlwatch.engine.evaluate import Verdict, context, evaluate_run, needed_metrics
from rlwatch.engine.rules import RuleSet
from rlwatch.severity import Severity

SCHEMA_VERSION = 1

# The glossary's "Training Problems" table: symptom, the rules that show it, two checks.
SYMPTOMS: list[dict[str, Any]] = [
    {
        "symptom": "Reward crashes",
        "rules": ["RW01", "EX03"],
        "checks": [
            ("entropy", "did entropy drop suddenly?", "ratio_below", 0.1),
            ("clip_frac", "is the clip fraction spiking?", "recent_max_above", 0.2),
        ],
    },
    {
        "symptom": "KL spikes",
        "rules": ["KL01", "KL02", "KL03"],
        "checks": [
            ("kl_ppo", "PPO (old->new) KL trend", "recent_max_above", 0.05),
            ("lr", "is the learning-rate schedule right?", "lr_jumps", 2.0),
        ],
    },
    {
        "symptom": "Eval stalls, reward rises",
        "rules": ["VL01", "LN05", "LN06"],
        "checks": [
            (
                "response_length_mean",
                "is the response length changing?",
                "ratio_outside",
                (0.5, 1.5),
            ),
            ("aborted_ratio", "is the aborted ratio high?", "recent_max_above", 0.1),
        ],
    },
    {
        "symptom": "Training is slow",
        "rules": ["TM01", "TM02", "TM03"],
        "checks": [
            ("step_time", "step time (and the share spent generating)", "stall", 10.0),
            (
                "seqlen_minmax_diff",
                "throughput and minmax_diff (load balance)",
                "imbalance_above",
                0.5,
            ),
        ],
    },
    {
        "symptom": "OOM",
        "rules": [],
        "checks": [
            ("seqlen_max", "is global_seqlen/max too large?", "recent_max", None),
            ("response_length_max", "response_length/max, prompt_length/max", "recent_max", None),
        ],
    },
]


def _fmt(x: float) -> str:
    if x != x:  # NaN
        return "nan"
    return f"{x:.3g}" if abs(x) < 1e5 else f"{x:,.0f}"


def _check(wide: pd.DataFrame, metric: str, kind: str, limit: Any) -> dict[str, Any]:
    """One check's value on this run, and whether it points at a problem."""
    if metric not in wide.columns or wide[metric].dropna().empty:
        return {"value": "not logged", "problem": False, "logged": False}
    s = wide[metric].dropna()
    early, recent = s.iloc[:10], s.iloc[-20:]
    problem = False
    if kind == "ratio_below" or kind == "ratio_outside":
        e, r = float(early.median()), float(recent.median())
        ratio = r / e if e else float("nan")
        text = f"{_fmt(e)} -> {_fmt(r)} ({ratio:.0%})"
        problem = (ratio < limit) if kind == "ratio_below" else not (limit[0] <= ratio <= limit[1])
    elif kind in ("recent_max_above", "recent_max"):
        m = float(recent.max())
        text = f"max {_fmt(m)} over the last {len(recent)} steps"
        problem = kind == "recent_max_above" and m > limit
    elif kind == "lr_jumps":
        ratio = (s / s.shift(1)).dropna()
        jumps = int(((ratio > limit) | (ratio < 1 / limit)).sum())
        text = f"{_fmt(float(s.iloc[0]))} -> {_fmt(float(s.iloc[-1]))}, {jumps} jump(s) >{limit:g}x"
        problem = jumps > 0
    elif kind == "stall":
        med, top = float(s.median()), float(s.max())
        share = ""
        if "gen_time" in wide.columns:
            g = (wide["gen_time"] / wide[metric]).dropna()
            if len(g):
                share = f", {float(g.median()):.0%} generating"
        text = f"median {_fmt(med)} s, max {_fmt(top)} s{share}"
        problem = med > 0 and top >= limit * med
    elif kind == "imbalance_above":
        if "seqlen_mean" in wide.columns:
            ratio = float((wide[metric] / wide["seqlen_mean"]).dropna().iloc[-20:].median())
            text = f"{_fmt(float(recent.median()))} tokens ({ratio:.0%} of the mean)"
            problem = ratio > limit
        else:
            text = f"{_fmt(float(recent.median()))} tokens"
    else:  # pragma: no cover - the table above is closed
        raise ValueError(kind)
    return {"value": text, "problem": bool(problem), "logged": True}


def symptom_table(wide: pd.DataFrame, fired: set[str]) -> list[dict[str, Any]]:
    rows = []
    for sym in SYMPTOMS:
        checks = []
        for metric, question, kind, limit in sym["checks"]:
            checks.append(
                {"metric": metric, "question": question, **_check(wide, metric, kind, limit)}
            )
        rows.append(
            {
                "symptom": sym["symptom"],
                "present": bool(fired & set(sym["rules"])),
                "rules": [c for c in sym["rules"] if c in fired],
                "checks": checks,
            }
        )
    return rows


@dataclass
class Report:
    runs: list[dict[str, Any]]
    verdicts: list[Verdict]
    symptoms: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    fail_on: str = "error"
    rules: int = 0
    series: dict[str, dict[str, Any]] = field(default_factory=dict)  # rlwatch/series.py

    @property
    def failing(self) -> list[Verdict]:
        t = Severity.parse(self.fail_on)
        return [v for v in self.verdicts if v.fired and v.severity >= t]

    @property
    def healthy(self) -> bool:
        return not self.failing

    def to_dict(self) -> dict[str, Any]:
        counts = {s: 0 for s in ("firing", "resolved", "ok", "skipped")}
        for v in self.verdicts:
            counts[v.state] += 1
        return {
            "schema_version": SCHEMA_VERSION,
            "rlwatch_version": __version__,
            "status": "healthy" if self.healthy else "unhealthy",
            "fail_on": self.fail_on,
            "rules": self.rules,
            "counts": counts,
            "runs": [{**r, "symptoms": self.symptoms.get(r["name"], [])} for r in self.runs],
            "verdicts": [v.to_dict() for v in self.verdicts],
            **({"series": self.series} if self.series else {}),
        }


def build(frame: Any, rules: RuleSet, *, fail_on: str = "error", series: bool = False) -> Report:
    """Evaluate `rules` on every run of `frame` and assemble the report (one pivot per run;
    with downsampled curves for the HTML report and `diff` when `series`)."""
    from rlwatch.render.summary import summarise

    needed = sorted(
        set(needed_metrics(rules))
        | {m for sym in SYMPTOMS for m, *_ in sym["checks"]}
        | {"seqlen_mean", "gen_time"}
    )
    verdicts: list[Verdict] = []
    symptoms = {}
    for run, info in frame.runs.items():
        ctx = context(frame, run, needed)
        mine = evaluate_run(ctx, rules, run, info.framework)
        verdicts += mine
        symptoms[run] = symptom_table(ctx.wide, {v.code for v in mine if v.fired})
    report = Report(summarise(frame)["runs"], verdicts, symptoms, fail_on, len(rules.rules))
    if series:
        from rlwatch.series import collect

        report.series = collect(frame, rules, verdicts)
    return report
