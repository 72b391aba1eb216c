"""The Report: one object per diagnosis, one `to_dict()`; every output format renders it.

It holds the runs (framework, steps, wall-time span, restarts, reader warnings), every rule's
verdict per run (state, episodes, observed values, checks, the metric around the episode),
skipped rules with reasons, and per run the symptom -> check table of the metrics glossary
filled with the run's own values. The gate decision ("does this verdict fail the gate?") is made
here, once, when the Report is built; renderers only read `verdict.failing` / `report.status`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlwatch import __version__
from rlwatch.engine.evaluate import Verdict, context, evaluate_run, needed_metrics
from rlwatch.engine.rules import RuleSet
from rlwatch.severity import Severity

SCHEMA_VERSION = 1
STATES = ("firing", "resolved", "ok", "skipped")


def fails(v: Verdict, at: Severity, *, final: bool = True) -> bool:
    """The gate decision for one verdict: it fired at or above `at`, and its rule's gate holds
    (`gate: any`: an episode anywhere; `gate: last`: one still firing at the last step).

    `final=False` is the question a live watcher asks before the run has ended (tail's
    watchdog, the training callback's stop): a `gate: last` rule is judged at the run's end
    (a state a healthy run may pass through, such as a reward model's slow warm-up at chance),
    so it never stops a run early.
    """
    if not v.fired or v.severity < at:
        return False
    if v.gate == "any":
        return True
    return final and v.state == "firing"


def summarise(frame: Any) -> list[dict[str, Any]]:
    """What was loaded, per run, as plain data (the one serialisation of a RunFrame's runs)."""
    import numpy as np

    runs = []
    data = frame.data
    if len(frame.runs) == 1 and len(data):  # one run (a sweep's unit): no groupby
        tag_codes = np.asarray(data["tag"].array.codes)  # not .cat.codes: a Series (~0.1 ms)
        counts: Any = {next(iter(frame.runs)): len(data)}
        tag_counts: Any = {next(iter(frame.runs)): int(np.unique(tag_codes[tag_codes >= 0]).size)}
    else:
        counts = data.groupby("run", observed=True).size() if len(data) else {}
        tag_counts = data.groupby("run", observed=True)["tag"].nunique() if len(data) else {}
    for name, info in frame.runs.items():
        n_steps, first, last = frame.steps(name)
        wall = frame.run_data(name)["wall_time"].to_numpy()
        span = float(np.nanmax(wall) - np.nanmin(wall)) if (wall == wall).any() else None
        runs.append(
            {
                **info.to_dict(),
                "steps": {"count": n_steps, "first": first, "last": last},
                "scalars": int(counts.get(name, 0)) if len(data) else 0,
                "tags": int(tag_counts.get(name, 0)) if len(data) else 0,
                "wall_time_span_s": span,
            }
        )
    return runs


@dataclass
class Report:
    runs: list[dict[str, Any]]
    verdicts: list[Verdict]
    symptoms: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    fail_on: Severity | str = Severity.ERROR
    rules: int = 0
    series: dict[str, dict[str, Any]] = field(default_factory=dict)  # rlwatch/series.py
    html_report: str | None = None  # where `diagnose --html FILE` wrote the page
    diff: dict[str, Any] | None = None  # `diagnose --baseline RUN` (rlwatch/diff.py)
    # files under folder targets that looked like runs but could not be read: {path, reason}
    skipped: list[dict[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.fail_on = Severity.parse(self.fail_on)
        for v in self.verdicts:  # the gate decision, made once
            v.failing = fails(v, self.fail_on)

    @classmethod
    def of_frame(cls, frame: Any) -> Report:
        """A Report of what was loaded, without verdicts (`rlwatch metrics`)."""
        return cls(summarise(frame), [])

    @classmethod
    def merge(cls, reports: list[Report]) -> Report:
        """Per-run Reports (evaluated with the same rules and --fail-on) as one."""
        if not reports:
            return cls([], [])
        merged = cls(
            [r for rep in reports for r in rep.runs],
            [v for rep in reports for v in rep.verdicts],
            {k: v for rep in reports for k, v in rep.symptoms.items()},
            reports[0].fail_on,
            reports[0].rules,
            {k: v for rep in reports for k, v in rep.series.items()},
        )
        merged.skipped = [s for rep in reports for s in rep.skipped]
        return merged

    @property
    def failing(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.failing]

    @property
    def healthy(self) -> bool:
        return not self.failing

    @property
    def status(self) -> str:
        return "healthy" if self.healthy else "unhealthy"

    def run_verdicts(self, run: str) -> list[Verdict]:
        return [v for v in self.verdicts if v.run == run]

    def to_dict(self, *, with_gate: bool = True) -> dict[str, Any]:
        """The plain-data report (the JSON format). Each verdict carries `failing`, the gate
        decision made here (a `gate: last` rule's resolved episode is reported, not failing)."""
        counts = dict.fromkeys(STATES, 0)
        for v in self.verdicts:
            counts[v.state] += 1
        return {
            "schema_version": SCHEMA_VERSION,
            "rlwatch_version": __version__,
            "status": self.status,
            "fail_on": str(self.fail_on),
            "rules": self.rules,
            "counts": counts,
            "runs": [{**r, "symptoms": self.symptoms.get(r["name"], [])} for r in self.runs],
            "run_count": len(self.runs),
            "skipped": [dict(s) for s in self.skipped],
            "skipped_count": len(self.skipped),
            "verdicts": [
                {**v.to_dict(), **({"failing": v.failing} if with_gate else {})}
                for v in self.verdicts
            ],
            **({"series": self.series} if self.series else {}),
            **({"html_report": self.html_report} if self.html_report else {}),
            **({"diff": self.diff} if self.diff else {}),
        }


_METRICS: dict[int, tuple[RuleSet, list[str]]] = {}


def report_metrics(rules: RuleSet) -> list[str]:
    """The metrics a report reads (the rules' and the symptom table's), once per rule set."""
    hit = _METRICS.get(id(rules))
    if hit is not None and hit[0] is rules:
        return hit[1]
    from rlwatch.engine.symptoms import load_symptoms, needed

    metrics = sorted(set(needed_metrics(rules)) | set(needed(load_symptoms())))
    if len(_METRICS) > 16:
        _METRICS.clear()
    _METRICS[id(rules)] = (rules, metrics)
    return metrics


def build(
    frame: Any,
    rules: RuleSet,
    *,
    fail_on: str = "error",
    series: bool = False,
    explain: bool = True,
) -> Report:
    """Evaluate `rules` on every run of `frame` and assemble the report (one pivot per run;
    with downsampled curves for the HTML report and `diff` when `series`).

    `explain=False` (the many-run table, which shows neither): no checks, no metric context
    on the verdicts and no symptom table; the verdicts themselves are the same."""
    from rlwatch.engine.symptoms import load_symptoms, symptom_table

    table = load_symptoms() if explain else []
    metrics = report_metrics(rules)
    verdicts: list[Verdict] = []
    symptoms = {}
    for run, info in frame.runs.items():
        ctx = context(frame, run, metrics)
        mine = evaluate_run(ctx, rules, run, info.framework, explain=explain)
        verdicts += mine
        if explain:
            symptoms[run] = symptom_table(ctx.wide, {v.code for v in mine if v.fired}, table)
    report = Report(summarise(frame), verdicts, symptoms, fail_on, len(rules.rules))
    report.skipped = [s.to_dict() if hasattr(s, "to_dict") else dict(s) for s in frame.skipped]
    if series:
        from rlwatch.series import collect

        report.series = collect(frame, rules, verdicts)
    return report
