"""Verdicts as text (pure functions: data in, rich renderable out)."""

from __future__ import annotations

from typing import Any

STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}
ORDER = {"error": 0, "warning": 1, "info": 2}


def verdicts_renderable(verdicts: list[dict[str, Any]], *, verbose: bool = False) -> Any:
    """Per run: fired verdicts ordered by severity, then one line about skipped rules."""
    from rich.console import Group
    from rich.text import Text

    parts: list[Any] = []
    runs = list(dict.fromkeys(v["run"] for v in verdicts))
    for run in runs:
        mine = [v for v in verdicts if v["run"] == run]
        fired = sorted((v for v in mine if v["episodes"]),
                       key=lambda v: (ORDER[v["severity"]], v["episodes"][0]["first_step"]))
        skipped = [v for v in mine if v["state"] == "skipped"]
        ok = len(mine) - len(fired) - len(skipped)
        parts.append(Text(f"\n{run}", style="bold"))
        for v in fired:
            first, last = v["episodes"][0]["first_step"], v["episodes"][-1]["last_step"]
            line = Text("  ")
            line.append(f"{v['severity'].upper():<7}", style=STYLE[v["severity"]])
            span = f"step {first}" if first == last else f"steps {first}-{last}"
            line.append(f" {v['code']} {v['name']}  {span}"
                        + ("" if v["state"] == "firing" else " (resolved)"))
            parts.append(line)
            parts.append(Text(f"          {v['summary']}"))
            for c in v["checks"]:
                if c["tag"] is None:
                    continue
                parts.append(Text(f"          check {c['metric']}: {_fmt(c['before'])} before"
                                  f" -> {_fmt(c['during'])} during; {c['hint']}", style="dim"))
        parts.append(Text(f"  {len(fired)} fired, {ok} ok, {len(skipped)} skipped "
                          "(metric not logged or too few steps; -v lists them)", style="dim"))
        if verbose:
            for v in skipped:
                parts.append(Text(f"    skipped {v['code']} {v['name']}: {v['reason']}",
                                  style="dim"))
    return Group(*parts)


def _fmt(x: Any) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x)
