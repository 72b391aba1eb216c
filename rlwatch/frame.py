"""The RunFrame: every scalar of every run in one long pandas frame, plus run-level facts.

Columns (one row per logged scalar): ``run`` (category), ``step`` (int64), ``metric``
(category; the canonical name where one is known, else the raw key), ``tag`` (category; the
key as logged), ``value`` (float64; NaN and +-inf kept), ``wall_time`` (float64 seconds, NaN
when the source has none), ``source`` (category).

Restarts: a resumed job re-logs steps. The frame keeps the last write per (run, tag, step)
and records each restart on the run's `RunInfo`; `segment_starts` exposes the boundaries so a
rule never compares across a seam as if it were one curve.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

COLUMNS = ("run", "step", "metric", "tag", "value", "wall_time", "source")
DTYPES = {
    "run": "category",
    "step": "int64",
    "metric": "category",
    "tag": "category",
    "value": "float64",
    "wall_time": "float64",
    "source": "category",
}


@dataclass
class Restart:
    """The run went back from `previous_step` to `step` (the first step of a new segment)."""

    step: int
    previous_step: int
    where: str = ""

    def to_dict(self) -> dict[str, object]:
        return {"step": self.step, "previous_step": self.previous_step, "where": self.where}


@dataclass
class RunInfo:
    """Run-level facts that ride along with the rows."""

    name: str
    source: str
    address: str  # a path, or a URI with any secret redacted
    framework: str | None = None
    framework_version: str | None = None  # e.g. verl's era, "v0.2"
    metrics: dict[str, str] = field(default_factory=dict)  # canonical -> raw tag
    unmapped: list[str] = field(default_factory=list)  # raw tags with no canonical name
    scales: dict[str, float] = field(default_factory=dict)  # canonical -> unit factor
    decimals: int | None = None  # values were printed rounded (verl <= 0.4 console: 3)
    hparams: dict[str, object] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)
    restarts: list[Restart] = field(default_factory=list)
    duplicates_dropped: int = 0  # rows replaced by a later write of the same (tag, step)
    files: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # the rows are the whole run again, renumbered: a follower's reader drops what it had
    # (a console's log ordinals turned into steps once the run's summary is printed)
    replaces: bool = False

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "source": self.source,
            "address": self.address,
            "framework": self.framework,
            "framework_version": self.framework_version,
            "metrics": dict(self.metrics),
            "unmapped": list(self.unmapped),
            "hparams": {k: _plain(v) for k, v in self.hparams.items()},
            "texts": dict(self.texts),
            "restarts": [r.to_dict() for r in self.restarts],
            "duplicates_dropped": self.duplicates_dropped,
            "warnings": list(self.warnings),
        }


_DTYPES: dict[tuple[object, ...], pd.CategoricalDtype] = {}


def _categorical(codes: np.ndarray, categories: list, *, shared: bool = True) -> pd.Categorical:
    """`pd.Categorical.from_codes(codes, categories=categories)`, the same array, cheaper.

    The dtype (pandas infers the categories' Index and checks it for NaN and duplicates, ~0.1
    ms) is made once per category list and shared: the runs of a sweep log the same keys
    (a dtype is immutable). Lists of plain distinct strings skip pandas' checks (known
    here); anything else, and a list not `shared`, takes pandas' own way."""
    key = tuple(categories)
    dtype = _DTYPES.get(key) if shared else None
    if dtype is None:
        fast = getattr(pd.CategoricalDtype, "_from_fastpath", None)
        plain = all(type(c) is str for c in key) and len(set(key)) == len(key)
        dtype = fast(categories, False) if fast is not None and plain else None
        if dtype is None:
            return pd.Categorical.from_codes(codes, categories=categories)
        if shared:
            if len(_DTYPES) > 1024:
                _DTYPES.clear()
            _DTYPES[key] = dtype
    return pd.Categorical.from_codes(codes, dtype=dtype)


def _plain(v: object) -> object:
    """A JSON-safe fact: strings, numbers, booleans; NaN/inf and anything else as text."""
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v if isinstance(v, str | int | float | bool) or v is None else str(v)


@dataclass
class RunFrame:
    data: pd.DataFrame
    runs: dict[str, RunInfo]
    # files under a folder target that looked like runs but could not be read (sources.Skipped)
    skipped: list = field(default_factory=list)

    # -- construction -------------------------------------------------------------------
    @classmethod
    def empty(cls) -> RunFrame:
        return cls(_empty_data(), {})

    @classmethod
    def from_arrays(
        cls,
        info: RunInfo,
        tags: list[str],
        tag: np.ndarray,
        step: np.ndarray,
        value: np.ndarray,
        wall_time: np.ndarray,
        *,
        where: np.ndarray | None = None,
        places: list[str] | None = None,
        owned: bool = False,
    ) -> RunFrame:
        """Build one run from rows in write order (`tag` holds codes into `tags`).

        `where`/`places` optionally name the file each row came from, for restart reports.
        `owned`: the caller hands the arrays over (nothing else holds or changes them), so
        the frame keeps them instead of copying (pandas copies a dict's arrays by default).
        Detects restarts, keeps the last write per (tag, step), resolves canonical names.
        """
        from rlwatch import names

        tag = np.asarray(tag)
        step = np.asarray(step, dtype=np.int64)
        value = np.asarray(value, dtype=np.float64)
        wall_time = np.asarray(wall_time, dtype=np.float64)
        inf = np.isinf(wall_time)
        if inf.any():  # inf is no time: "unknown" (NaN)
            wall_time = np.where(inf, np.nan, wall_time)
        keep, restarts = _restarts_and_last_writes(tag, step)
        if restarts:
            info.restarts = [
                Restart(
                    int(step[i]),
                    int(prev),
                    places[int(where[i])] if where is not None and places else "",
                )
                for i, prev in restarts
            ]
        if keep is not None:
            info.duplicates_dropped = int(tag.size - keep.size)
            tag, step, value, wall_time = tag[keep], step[keep], value[keep], wall_time[keep]
        present = np.zeros(len(tags), dtype=bool)
        present[tag] = True
        used = [t for t, p in zip(tags, present, strict=False) if p]
        resolution = names.resolve(used)
        info.metrics = resolution.canonical
        info.unmapped = resolution.unmapped
        info.scales = resolution.scales
        info.framework, info.framework_version = resolution.framework, resolution.version
        metric_of = resolution.metric_of
        metric_names = [metric_of.get(t, t) for t in tags]
        metric_cats, metric_codes = np.unique(
            np.asarray(metric_names, dtype=object), return_inverse=True
        )
        n = step.size
        data = pd.DataFrame(
            {
                "run": _categorical(np.zeros(n, np.int8), [info.name], shared=False),
                "step": step,
                "metric": _categorical(metric_codes.astype(np.int32)[tag], list(metric_cats)),
                "tag": _categorical(tag.astype(np.int32), list(tags)),
                "value": value,
                "wall_time": wall_time,
                "source": _categorical(np.zeros(n, np.int8), [info.source]),
            },
            copy=not owned,
        )
        if not present.all():  # tags a reader knows but that have no rows here
            for col in ("metric", "tag"):
                data[col] = data[col].cat.remove_unused_categories()
        return cls(data, {info.name: info})

    @classmethod
    def concat(cls, frames: list[RunFrame]) -> RunFrame:
        frames = [f for f in frames if f.runs]
        if not frames:
            return cls.empty()
        if len(frames) == 1:
            return frames[0]
        runs: dict[str, RunInfo] = {}
        for f in frames:
            for name, info in f.runs.items():
                if name in runs:
                    raise ValueError(f"duplicate run name {name!r}")
                runs[name] = info
        parts = [f.data for f in frames]
        cols = {}
        for col in COLUMNS:
            if DTYPES[col] == "category":
                cols[col] = pd.api.types.union_categoricals([p[col] for p in parts])
            else:
                cols[col] = np.concatenate([p[col].to_numpy() for p in parts])
        return cls(pd.DataFrame(cols), runs)

    def renamed(self, mapping: dict[str, str]) -> RunFrame:
        """The same frame with some runs renamed."""
        import dataclasses

        data = self.data.copy()
        data["run"] = data["run"].cat.rename_categories(lambda c: mapping.get(c, c))
        runs = {
            mapping.get(k, k): dataclasses.replace(v, name=mapping.get(k, k))
            for k, v in self.runs.items()
        }
        return RunFrame(data, runs)

    # -- views --------------------------------------------------------------------------
    def run_data(self, run: str) -> pd.DataFrame:
        if len(self.runs) == 1 and run in self.runs:
            return self.data
        return self.data[self.data["run"] == run]

    def wide(self, run: str, metrics: list[str] | None = None) -> pd.DataFrame:
        """A step x metric table of one run (NaN where a metric was not logged at a step)."""
        d = self.run_data(run)
        if metrics is not None:
            d = d[d["metric"].isin(metrics)]
        if d.empty:
            return pd.DataFrame(index=pd.Index([], dtype="int64", name="step"))
        metric = d["metric"].cat.remove_unused_categories()
        wide = pd.DataFrame(
            {"step": d["step"].to_numpy(), "metric": metric, "value": d["value"].to_numpy()}
        )
        out = wide.pivot(index="step", columns="metric", values="value").sort_index()
        out.columns = pd.Index([str(c) for c in out.columns], name="metric")
        for name, factor in self.runs[run].scales.items():
            if name in out.columns:
                out[name] = out[name] * factor
        return out

    def segment_starts(self, run: str) -> list[int]:
        """Steps at which a new segment begins after a restart (sorted, may be empty)."""
        return sorted({r.step for r in self.runs[run].restarts})

    def segment_of(self, run: str, steps: np.ndarray) -> np.ndarray:
        """Segment number (0 = before any restart) of each step."""
        starts = np.asarray(self.segment_starts(run), dtype=np.int64)
        return np.searchsorted(starts, np.asarray(steps), side="right")

    def steps(self, run: str) -> tuple[int, int, int]:
        """(number of distinct steps, first step, last step) of a run."""
        s = self.run_data(run)["step"].to_numpy()
        if s.size == 0:
            return 0, 0, 0
        return int(np.unique(s).size), int(s.min()), int(s.max())

    def validate(self) -> None:
        """Raise ValueError if the frame breaks its schema."""
        if tuple(self.data.columns) != COLUMNS:
            raise ValueError(f"columns {list(self.data.columns)} != {list(COLUMNS)}")
        for col, dtype in DTYPES.items():
            if str(self.data[col].dtype) != dtype:
                raise ValueError(f"column {col!r} has dtype {self.data[col].dtype}, not {dtype}")
        unknown = set(self.data["run"].cat.categories) - set(self.runs)
        if unknown:
            raise ValueError(f"rows of runs without RunInfo: {sorted(unknown)}")
        if self.data.duplicated(["run", "tag", "step"]).any():
            raise ValueError("more than one row per (run, tag, step)")


_EMPTY: pd.DataFrame | None = None


def _empty_data() -> pd.DataFrame:
    """The empty frame, built once (polls that find nothing new return it often)."""
    global _EMPTY
    if _EMPTY is None:
        _EMPTY = pd.DataFrame({c: pd.Series(dtype=t) for c, t in DTYPES.items()})
    return _EMPTY


def _restarts_and_last_writes(
    tag: np.ndarray, step: np.ndarray
) -> tuple[np.ndarray | None, list[tuple[int, int]]]:
    """Rows to keep (None = all) and restarts as (row of the first re-logged step, previous step).

    A restart is a write whose step is lower than the previous write of the same tag. One
    restart re-logs many tags; a tag seen twice starts the next restart.
    """
    if tag.size < 2:
        return None, []
    # the common case, without a sort: steps never go down, and rows of one step have
    # increasing tag codes (so no tag is written twice at a step, nor at a lower step)
    up = step[1:] > step[:-1]
    if (up | (step[1:] == step[:-1]) & (tag[1:] > tag[:-1])).all():
        return None, []
    codes = tag.astype(np.int16) if tag.size and tag.max() < 32767 else tag
    order = np.argsort(codes, kind="stable")
    t, s = tag[order], step[order]
    same = t[1:] == t[:-1]
    back = same & (s[1:] <= s[:-1])
    if not back.any():
        return None, []
    # last write per (tag, step): a row is superseded by a later row of the same tag and step
    rows = order  # rows in (tag, write order)
    frame = pd.DataFrame({"t": t, "s": s})
    dup = frame.duplicated(["t", "s"], keep="last").to_numpy()
    keep = np.sort(rows[~dup])
    restarts: list[tuple[int, int]] = []
    down = np.flatnonzero(same & (s[1:] < s[:-1])) + 1  # positions in (tag, write) order
    if down.size:
        events = sorted((int(order[i]), int(t[i]), int(s[i - 1])) for i in down)
        seen: set[int] = set()
        for row, tg, prev in events:
            if not restarts or tg in seen:
                restarts.append((row, prev))
                seen = set()
            else:  # same restart: it began at the lowest step re-logged
                first_row, first_prev = restarts[-1]
                if step[row] < step[first_row]:
                    restarts[-1] = (row, max(prev, first_prev))
                else:
                    restarts[-1] = (first_row, max(prev, first_prev))
            seen.add(tg)
    return keep, restarts
