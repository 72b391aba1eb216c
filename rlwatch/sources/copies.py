"""One run written by several loggers is one run.

A TRL/transformers output folder often holds the same run three times: TensorBoard events
(`runs/<date>/` or the `logging_dir`), `trainer_state.json` (and its checkpoint copies) and a
console capture. A folder target would list it once per file. Two runs found under one target are
the same run when one's folder is the other's or below it and their values agree wherever both
logged a metric at a step: a seed or a learning rate changes the loss and the reward from the
first log, so two different runs never agree on several noisy values. Metrics that the config
alone decides (the learning rate, the epoch) and constant ones are no evidence and are left out
of the comparison.

`diagnose` (through `load` and the many-run executor) and `tail` (through its `Follower`) fold
with the same test and keep the same copy (`copies_of`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

import numpy as np
import pandas as pd

from rlwatch.frame import RunFrame, RunInfo

NO_EVIDENCE = frozenset({"lr", "epoch"})
MIN_AGREEING = 3  # values both copies logged that must agree (and no value may disagree)
REL_TOL = 2e-3  # a console prints 4 significant digits; float32 keeps 7
ABS_TOL = 1e-6
# the copy to keep: the richer record first, a live log ("": any other log) before the
# trainer_state.json that checkpoints rewrite now and then; then the one that got furthest
KIND_ORDER = (
    "tensorboard",
    "mlflow",
    "wandb",
    "wandb-local",
    "swanlab",
    "trackio",
    "",
    "trainer-state",
)
CHECKPOINT = re.compile(r"^checkpoint-\d+$")
MAX_BELOW = 2  # an output folder's runs/<date>/ events are two levels below its other logs
MAX_GROUP = 6  # more runs than that near one folder is a sweep, not one run's copies


def folder_of(kind: str, address: str) -> str:
    """The folder a run was written into: a TensorBoard run's own folder, a log file's folder
    (a checkpoint's `trainer_state.json` belongs to the output folder above it)."""
    path = os.path.realpath(address)
    if kind == "tensorboard" and os.path.isdir(path):
        return path
    parent = os.path.dirname(path)
    if CHECKPOINT.match(os.path.basename(parent)):
        parent = os.path.dirname(parent)
    return parent


def groups(folders: list[str]) -> list[list[int]]:
    """Indices of runs that may be copies of each other (their folders near), in groups of at
    most MAX_GROUP; every other run alone. Sorted, so the order of the input is kept."""
    parent = list(range(len(folders)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    where: dict[str, list[int]] = {}
    for i, f in enumerate(folders):
        where.setdefault(f, []).append(i)
    for i, f in enumerate(folders):
        up = f
        for _ in range(MAX_BELOW + 1):  # this folder and the few above it
            for j in where.get(up, ()):
                if j != i:
                    parent[root(i)] = root(j)
            nxt = os.path.dirname(up)
            if nxt == up:
                break
            up = nxt
    out: dict[int, list[int]] = {}
    for i in range(len(folders)):
        out.setdefault(root(i), []).append(i)
    result: list[list[int]] = []
    for members in out.values():  # a log at a sweep's root is no copy of every run below it
        result += [members] if len(members) <= MAX_GROUP else [[i] for i in members]
    return sorted(result)


def _evidence(rows: pd.DataFrame) -> pd.Series:
    """The run's values indexed by (metric, step), without the no-evidence metrics."""
    metric = rows["metric"].astype(str)
    keep = ~metric.isin(NO_EVIDENCE).to_numpy()
    series = pd.Series(
        rows["value"].to_numpy()[keep],
        index=pd.MultiIndex.from_arrays([metric.to_numpy()[keep], rows["step"].to_numpy()[keep]]),
    )
    return series[~series.index.duplicated(keep="last")]


def compare(a: pd.DataFrame, b: pd.DataFrame) -> bool | None:
    """Do two runs' rows record one run? True when >= MIN_AGREEING shared values of metrics
    that vary agree (to a console's rounding; NaN agrees with NaN) and none disagrees; False
    when a shared value disagrees; None while they share too few values to tell."""
    if a.empty or b.empty:
        return None
    ea, eb = _evidence(a), _evidence(b)
    shared = ea.index.intersection(eb.index)
    if not len(shared):
        return None
    va, vb = ea.loc[shared].to_numpy(), eb.loc[shared].to_numpy()
    metric = shared.get_level_values(0)
    # constant metrics (a fixed max length, a zero clip count) are no evidence either
    varies = pd.Series(va).groupby(np.asarray(metric)).transform("nunique").to_numpy() > 1
    both_nan = np.isnan(va) & np.isnan(vb)
    with np.errstate(invalid="ignore"):
        close = np.abs(va - vb) <= ABS_TOL + REL_TOL * np.maximum(np.abs(va), np.abs(vb))
    agree = close | both_nan | (va == vb)  # +-inf equals itself
    if not agree.all():
        return False
    return True if int(varies.sum()) >= MIN_AGREEING else None


def same_run(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    return compare(a, b) is True


def _rank(info: RunInfo, last: int) -> tuple[int, int]:
    order = KIND_ORDER.index(info.source) if info.source in KIND_ORDER else KIND_ORDER.index("")
    return (-order, last)


def copies_of(
    runs: list[tuple[RunInfo, pd.DataFrame]], last: list[int] | None = None
) -> dict[int, int]:
    """Which of a group's runs are copies, and of which run kept: {copy index: kept index}.
    Runs that are the same run (directly or through another) are one; the one kept is of the
    richer kind (KIND_ORDER), then reached the furthest step (`last`, else the rows' last
    step), then came first."""
    if last is None:
        last = [int(r["step"].max()) if not r.empty else -1 for _, r in runs]
    n = len(runs)
    parent = list(range(n))
    for i in range(n):
        for j in range(i + 1, n):
            if same_run(runs[i][1], runs[j][1]):
                a, b = parent[i], parent[j]
                parent = [a if p == b else p for p in parent]
    out: dict[int, int] = {}
    for p in set(parent):
        members = [i for i in range(n) if parent[i] == p]
        best = max(members, key=lambda i: (_rank(runs[i][0], last[i]), -i))
        out.update({i: best for i in members if i != best})
    return out


def note(copy: RunInfo) -> str:
    return f"the same run is also in {copy.address} (its values agree); read once, from here"


def fold(frame: RunFrame, name_of: Callable[[str], str] | None = None) -> RunFrame:
    """The frame with every run that is a copy of another near it left out (a note on the run
    kept names the copy). `name_of(folder)` names a run kept for its copies after the
    shallowest folder they were found in (not after `tb/` below it)."""
    if len(frame.runs) < 2:
        return frame
    names = list(frame.runs)
    infos = [frame.runs[n] for n in names]
    found = groups([folder_of(i.source, i.address) for i in infos])
    at = frame.data.groupby("run", observed=True).indices  # one pass, not a mask per run
    empty = frame.data.iloc[:0]
    dropped: list[str] = []
    renames: dict[str, str] = {}
    for g in found:
        if len(g) < 2:
            continue
        runs = [(infos[i], frame.data.iloc[at[names[i]]] if names[i] in at else empty) for i in g]
        found_copies = copies_of(runs)
        for copy, kept in found_copies.items():
            dropped.append(names[g[copy]])
            infos[g[kept]].warnings.append(note(infos[g[copy]]))
        if name_of is not None:
            for kept in set(found_copies.values()):
                same = [g[kept], *(g[c] for c, k in found_copies.items() if k == kept)]
                top = min((folder_of(infos[i].source, infos[i].address) for i in same), key=len)
                renames[names[g[kept]]] = name_of(top)
    if not dropped:
        return frame
    data = frame.data[~frame.data["run"].isin(dropped)]
    data = data.assign(run=data["run"].cat.remove_unused_categories())
    runs = {n: i for n, i in frame.runs.items() if n not in dropped}
    out = RunFrame(data.reset_index(drop=True), runs)
    taken = set(runs)
    renames = {a: b for a, b in renames.items() if a != b and b not in taken}
    if len(set(renames.values())) == len(renames) and renames:
        out = out.renamed(renames)
    out.skipped = frame.skipped
    return out
