"""The live dashboard of `rlwatch tail` (pure: snapshot dict in, rich renderable out)."""

from __future__ import annotations

from typing import Any

from rlwatch.render.text import STYLE, sparkline

SHORT = {
    "reward_mean": "reward",
    "entropy": "entropy",
    "kl_ref": "kl",
    "grad_norm": "grad",
    "response_length_mean": "length",
    "truncation_rate": "trunc",
    "val_score": "val",
}


def ago(seconds: float) -> str:
    """A duration for people: 42s, 7m, 3.5h."""
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 5400:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def dashboard(snap: dict[str, Any], *, interval: float, width: int = 100) -> Any:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    runs = snap["runs"]
    compact = len(runs) > 4 or width < 90
    head = Text(
        f"rlwatch tail: {len(runs)} run(s), polling every {interval:g}s (Ctrl-C to stop)",
        style="bold",
    )
    parts: list[Any] = [head]
    table = Table(box=None, pad_edge=False, header_style="bold", expand=False)
    table.add_column("run", no_wrap=True, overflow="ellipsis", max_width=32)
    table.add_column("step", justify="right")
    table.add_column("steps/min", justify="right")
    table.add_column("updated", justify="right")
    table.add_column("status", no_wrap=True)
    if not compact:
        table.add_column("metrics (last value, recent trend)", overflow="fold")
    for r in runs:
        worst = r["firing"][0]["severity"] if r["firing"] else None
        status = Text(
            "stale" if r["stale"] else (f"{len(r['firing'])} firing" if worst else "ok"),
            style="dim" if r["stale"] else STYLE.get(worst or "", "green"),
        )
        cells = [
            r["name"],
            "-" if r["step"] is None else str(r["step"]),
            "-" if r["rate"] is None else f"{r['rate']:.1f}",
            f"{ago(r['age'])} ago",
            status,
        ]
        if not compact:
            lines = []
            for m, v in r["metrics"].items():
                spark = sparkline(v["values"][-24:])
                lines.append(f"{SHORT.get(m, m):<7}{v['last']:>9.4g} {spark}")
            cells.append(Text("\n".join(lines)))
        table.add_row(*cells)
    parts.append(table)
    firing = [(r["name"], f) for r in runs for f in r["firing"]]
    if firing:
        parts.append(Text("\nfiring", style="bold"))
        for name, f in firing:
            line = Text("  ")
            line.append(f"{f['severity'].upper():<7}", style=STYLE[f["severity"]])
            line.append(f" {f['code']} {name} since step {f['since']}: {f['summary']}")
            parts.append(line)
            for c in f["checks"][:2]:
                if c.get("tag") is not None:
                    parts.append(
                        Text(
                            f"            check {c['metric']}: {c['before']} -> "
                            f"{c['during']}; {c['hint']}",
                            style="dim",
                        )
                    )
    for target, err in snap["errors"].items():
        parts.append(Text(f"source {target}: {err}", style="red"))
    return Group(*parts)
