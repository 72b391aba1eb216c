"""The live dashboard of `rlwatch tail` (pure: snapshot dict in, rich renderable out).

Per run: step, steps/min, last update, status, and the key metrics (entropy, KL, grad norm,
reward, truncation, length) as `name value sparkline`. Sparklines are scaled to the run's own
range over its whole history (not to the last few points), so a collapsed metric's noise stays
a flat line at the bottom. At 80 columns the metrics move to a line of their own under the run.
"""

from __future__ import annotations

import math
from typing import Any

from rlwatch.render.text import BARS, STYLE

SHORT = {
    "reward_mean": "reward",
    "entropy": "entropy",
    "kl_ref": "kl",
    "grad_norm": "grad",
    "response_length_mean": "len",
    "truncation_rate": "trunc",
    "val_score": "val",
}
SHOWN = 6  # key metrics shown per run


def ago(seconds: float) -> str:
    """A duration for people: 42s, 7m, 3.5h."""
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 5400:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def num(x: Any) -> str:
    """A number for people: 3 significant digits, no float noise (0.0363, 1.2e-05, 412, 3.1k)."""
    if x is None:
        return "n/a"
    if isinstance(x, str):
        return x
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    a = abs(x)
    if a == 0:
        return "0"
    if a >= 1e5:
        return f"{x:.2e}".replace("e+0", "e").replace("e+", "e")
    if a >= 1e3:
        return f"{x / 1e3:.1f}k"
    if a >= 1e-3:
        return f"{x:.3g}"
    return f"{x:.1e}".replace("e-0", "e-")


def spark(values: list[float], lo: float | None, hi: float | None, n: int) -> str:
    """Bars on the scale [lo, hi] (the run's whole range), the last `n` points."""
    vals = [v for v in values[-n:] if isinstance(v, int | float) and math.isfinite(v)]
    if not vals:
        return ""
    lo = min(vals) if lo is None else lo
    hi = max(vals) if hi is None else hi
    span = hi - lo
    return "".join(
        BARS[0 if span <= 0 else min(7, max(0, int((v - lo) / span * 7.999)))] for v in vals
    )


def dashboard(snap: dict[str, Any], *, interval: float | None, width: int = 100) -> Any:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    runs = snap["runs"]
    narrow = width < 110
    title = f"rlwatch tail: {len(runs)} run(s)"
    if interval is not None:
        title += f", polling every {interval:g}s (Ctrl-C to stop)"
    parts: list[Any] = [Text(title, style="bold")]
    for target in snap.get("waiting", []):
        if not runs:
            parts.append(Text(f"waiting for the first record in {target}", style="dim"))
    spark_n = 10 if narrow else 16
    if narrow:  # one line per run, its key metrics on the lines below it
        for r in runs:
            line = Text()
            line.append(_clip(r["name"], max(12, width - 44)), style="bold")
            line.append(f"  step {'-' if r['step'] is None else r['step']}")
            line.append(f"  {'-' if r['rate'] is None else format(r['rate'], '.3g')}/min")
            line.append(f"  {ago(r['age'])} ago  ")
            line.append_text(_status(r))
            parts.append(line)
            parts.append(_metrics(r, spark_n, width=width, indent="  "))
    else:
        table = Table(box=None, pad_edge=False, header_style="bold", expand=False)
        table.add_column("run", no_wrap=True, overflow="ellipsis", max_width=40)
        table.add_column("step", justify="right", no_wrap=True)
        table.add_column("steps/min", justify="right", no_wrap=True)
        table.add_column("updated", justify="right", no_wrap=True)
        table.add_column("status", no_wrap=True)
        table.add_column("key metrics (last value, recent trend on the run's scale)", no_wrap=True)
        for r in runs:
            table.add_row(
                r["name"],
                "-" if r["step"] is None else str(r["step"]),
                "-" if r["rate"] is None else f"{r['rate']:.3g}",
                f"{ago(r['age'])} ago",
                _status(r),
                _metrics(r, spark_n, width=0),
            )
        parts.append(table)
    firing = [(r["name"], f) for r in runs for f in r["firing"]]
    if firing:
        parts.append(Text("firing", style="bold"))
        for name, f in firing:
            line = Text("  ")
            line.append(f"{f['severity'].upper():<7}", style=STYLE[f["severity"]])
            line.append(f" {f['code']} {name} since step {f['since']}: {f['summary']}")
            parts.append(line)
            for c in f["checks"][:2]:
                if c.get("tag") is not None:
                    parts.append(
                        Text(
                            f"          check {c['metric']}: {num(c['before'])} -> "
                            f"{num(c['during'])}; {c['hint']}",
                            style="dim",
                        )
                    )
    for target, err in snap["errors"].items():
        parts.append(Text(f"source {target}: {err}", style="red"))
    return Group(*parts)


def _status(r: dict[str, Any]) -> Any:
    from rich.text import Text

    worst = r["firing"][0]["severity"] if r["firing"] else None
    return Text(
        "stale" if r["stale"] else (f"{len(r['firing'])} firing" if worst else "ok"),
        style="dim" if r["stale"] else STYLE.get(worst or "", "green"),
    )


def _clip(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


def _metrics(r: dict[str, Any], n: int, *, width: int, indent: str = "") -> Any:
    """`name value sparkline` per key metric: one per line (width 0), else as many per line
    as fit in `width`."""
    from rich.text import Text

    items = list(r["metrics"].items())[:SHOWN]
    item = 7 + 7 + 1 + n + 2
    cols = 1 if width == 0 else max(1, (width - len(indent)) // item)
    out = Text(indent)
    for i, (m, v) in enumerate(items):
        if i:
            out.append("\n" + indent if i % cols == 0 else "  ")
        out.append(f"{SHORT.get(m, m):<7}{num(v['last']):>7} ")
        out.append(spark(v["values"], v.get("lo"), v.get("hi"), n).ljust(n), style="cyan")
    return out
