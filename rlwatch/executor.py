"""Many runs: targets -> per-run units -> (read -> evaluate -> Report) per run -> one Report.

Per-run work is independent, so it runs through an executor: in this process (`jobs=1`), a
process pool (`--jobs N`, default the number of cores) or Ray tasks (`--executor ray`, on the
cluster in RAY_ADDRESS or a local Ray). Results come back in input order as they finish. The
parent never holds more than one run's frame: it keeps each run's Report, and nothing it does
grows faster than the number of runs (units are listed once, reports concatenated once).
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlwatch.errors import ExitCode, RlwatchError, SourceError, UsageError

# canonical metrics whose last value the many-run table shows (those a run has)
KEY_METRICS = ("reward_mean", "entropy", "kl_ref", "grad_norm", "response_length_mean")
EXECUTORS = ("process", "ray")


# -- units ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Unit:
    """One run to read, as plain picklable data (it travels to pool workers and Ray tasks)."""

    name: str  # the run's name in the sweep (unique)
    kind: str  # target | tensorboard | wandb-file | swanlab | trackio | log | mlflow | wandb
    ref: tuple[Any, ...]
    address: str = ""

    def load(self) -> Any:
        from rlwatch.frame import RunFrame

        k, r = self.kind, self.ref
        if k == "target":
            from rlwatch.sources import load

            frame: RunFrame = load([r[0]], log_format=r[1], tracking_uri=r[2], timeout=r[3])
        elif k == "found":
            if len(r) == 1:
                frame = r[0].load()
            else:  # runs near each other that may be one run written twice: read together
                from rlwatch.sources import copies

                frame = copies.fold(RunFrame.concat([f.load() for f in r]))
        elif k == "tensorboard":
            from rlwatch.sources.tensorboard import _Run

            run = _Run(self.name, str(Path(r[0][0]).parent))
            for f in r[0]:
                run.add(Path(f))
            frame = run.read(final=True)
        elif k == "wandb-file":
            from rlwatch.sources import wandb_local

            frame = wandb_local.load_file(r[0], self.name)
        elif k == "swanlab":
            from rlwatch.sources import swanlab

            frame = swanlab.load_file(Path(r[0]))
        elif k == "trackio":
            from rlwatch.sources import trackio

            frame = trackio.load(r[0], r[1])
        elif k == "log":
            from rlwatch.sources import logs

            frame = logs.load_file(r[0], r[1])
        elif k == "mlflow":
            from rlwatch.sources import mlflow_source

            frame = mlflow_source.load(r[0], r[1], r[2] if len(r) > 2 else None)
        elif k == "wandb":
            from rlwatch.sources import wandb_api

            frame = wandb_api.load(r[0], r[1] if len(r) > 1 else None)
        else:  # pragma: no cover - units are made below
            raise ValueError(k)
        if self.name and len(frame.runs) == 1 and self.name not in frame.runs:
            frame = frame.renamed({next(iter(frame.runs)): self.name})
        return frame


def _folder_units(root: Path, log_format: str | None, skipped: list[dict[str, str]]) -> list[Unit]:
    """Every run below a folder, named by its path relative to the folder.

    Uses the sources' discovery (`rlwatch.sources.discover`) where there is one; trackio
    projects and SwanLab runs are added here."""
    from rlwatch import sources
    from rlwatch.sources import logs, swanlab, tensorboard, trackio

    units: list[Unit] = []
    taken: set[Path] = set()  # folders that are one run already

    def rel(p: Path) -> str:
        r = os.path.relpath(p, root).replace(os.sep, "/")
        return root.resolve().name if r == "." else r

    discover = getattr(sources, "discover", None)
    if discover is not None:
        found = discover(root, log_format)
        skipped.extend(s.to_dict() if hasattr(s, "to_dict") else dict(s) for s in found.skipped)
        from rlwatch.sources import copies

        # one Found per run (a trackio project's runs each on their own); a copy of a run
        # logged beside it (the same trainer's TensorBoard events, console,
        # trainer_state.json) is folded into it as sources.load folds it
        runs = list(found.runs)
        folders = [copies.folder_of(f.kind, f.address) for f in runs]
        for g in copies.groups(folders):
            if len(g) == 1:
                f = runs[g[0]]
                units.append(Unit(f.name, "found", (f,), str(f.address)))
                continue
            # one run written by several loggers is one unit, named by its folder
            top = min((folders[i] for i in g), key=len)  # real paths, as copies gives them
            name = os.path.relpath(top, os.path.realpath(root)).replace(os.sep, "/")
            name = root.resolve().name if name == "." else name
            units.append(Unit(name, "found", tuple(runs[i] for i in g), top))
        return units
    for name, files in tensorboard.find_runs(root).items():
        paths = [str(f) for f in files]
        units.append(Unit(name, "tensorboard", (paths,), str(files[0].parent)))
        taken.add(files[0].parent)
        taken.add(files[0].parent.resolve())
    for f in sorted(root.rglob("*.wandb")):
        units.append(Unit(rel(f.parent), "wandb-file", (str(f),), str(f)))
        taken.update((f.parent, f.parent.resolve()))
    for f in swanlab.find_runs(root):
        if f.parent not in taken:
            units.append(Unit(rel(f.parent), "swanlab", (str(f),), str(f)))
            taken.add(f.parent)
    for f in logs.log_files(root):
        if f.suffix == ".db" or any(p in taken for p in (*f.parents, *f.resolve().parents)):
            continue  # a log beside event files or a .wandb file is part of that run
        if log_format is None:
            try:
                logs.sniff(f)
            except (SourceError, OSError):
                continue  # not a run (the single-target reader names these)
        units.append(Unit(rel(f), "log", (str(f), log_format), str(f)))
    for db in sorted(root.rglob("*.db")):
        if trackio.is_store(db):
            for key, name in trackio.list_runs(db):
                units.append(Unit(f"{rel(db)}/{name}", "trackio", (str(db), key), str(db)))
    names: dict[str, int] = {}
    out = []
    for u in units:  # names must be unique: a second run with a name gets its kind
        if u.name in names:
            u = Unit(f"{u.name} ({u.kind})", u.kind, u.ref, u.address)
        names[u.name] = 1
        out.append(u)
    return out


class Units(list):
    """Units, plus the files discovery skipped (path, reason)."""

    skipped: list[dict[str, str]]


def expand(
    targets: list[str],
    *,
    log_format: str | None = None,
    tracking_uri: str | None = None,
    filters: list[str] | None = None,
    timeout: float | None = None,
) -> Units:
    """Targets -> one unit per run. Many-run targets (a folder, `mlflow:<experiment>`,
    `wandb:<entity>/<project>`, a trackio project) give every run they hold."""
    from rlwatch.sources import listing, resolve

    if not targets:
        raise UsageError("no target given")
    flt = listing.parse_filters(filters or [])
    units: list[Unit] = []
    skipped: list[dict[str, str]] = []
    for t in targets:
        many = listing.many_run(t, tracking_uri, flt, timeout)
        if many is not None:
            units += many
            continue
        if flt:
            raise UsageError(
                "--filter applies to mlflow:<experiment> and wandb:<entity>/<project> targets"
            )
        p = Path(t)
        if p.is_dir():
            found = _folder_units(p, log_format, skipped)
            if len(found) > 1:
                units += found
                continue
            skipped.clear()  # one run: the single-target path names what it skips
        resolve(t, log_format, tracking_uri)  # a bad target fails before any reading
        # named as its reader names it; clashes across targets are settled in merge()
        units.append(Unit("", "target", (t, log_format, tracking_uri, timeout), t))
    names: dict[str, int] = {}
    out = Units()
    out.skipped = skipped
    seen: set[Any] = set()
    for u in units:
        key = _identity(u)
        if key in seen:  # the same run given twice is read once
            continue
        seen.add(key)
        if u.name and u.name in names:  # the same name from two targets: say which target
            names[u.name] += 1
            u = Unit(f"{u.name} #{names[u.name]}", u.kind, u.ref, u.address)
        else:
            names[u.name] = 1
        out.append(u)
    return out


def _identity(u: Unit) -> Any:
    """What makes two units the same run on disk or on a server."""
    if u.kind == "found":
        return tuple(f.key for f in u.ref)
    if u.kind == "target" and Path(u.ref[0]).exists():
        from rlwatch import sources

        discover = getattr(sources, "discover", None)
        if discover is not None:
            try:
                return tuple(f.key for f in discover(u.ref[0], u.ref[1]).runs)
            except RlwatchError:
                pass
        return ("target", os.path.realpath(u.ref[0]))
    if u.kind in ("tensorboard", "swanlab", "wandb-file", "log"):
        first = u.ref[0][0] if isinstance(u.ref[0], list) else u.ref[0]
        return (u.kind, os.path.realpath(first))
    return (u.kind, *map(str, u.ref))


# -- per-run work -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Settings:
    rules: tuple[str, ...] = ()
    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    fail_on: str = "error"
    require: tuple[str, ...] = ()
    # checks, metric context and symptom table per run: off when only the table is shown
    explain: bool = True


@dataclass
class Outcome:
    """One run's result: its Report, or why it could not be read or evaluated."""

    name: str
    address: str
    report: Any = None  # rlwatch.report.Report
    error: str | None = None


_RULES: dict[Settings, Any] = {}


def _ruleset(s: Settings) -> Any:
    rs = _RULES.get(s)
    if rs is None:
        from rlwatch.engine.rules import load_rules
        from rlwatch.engine.select import select as choose

        rs = _RULES[s] = choose(load_rules(list(s.rules) or None), s.select, s.ignore)
    return rs


def last_values(frame: Any, run: str) -> dict[str, float | None]:
    """The last finite value of each key metric the run has."""
    import numpy as np

    d = frame.run_data(run)
    out: dict[str, float | None] = {}
    if not len(d):
        return out
    from rlwatch.engine.evaluate import category_codes

    cats, codes = category_codes(d["metric"])
    index = {str(c): i for i, c in enumerate(cats)}
    steps, values = d["step"].to_numpy(), d["value"].to_numpy()
    for m in KEY_METRICS:
        if m not in index:
            continue
        sel = codes == index[m]
        s, v = steps[sel], values[sel]
        ok = np.isfinite(v)
        if ok.any():
            i = int(np.argmax(np.where(ok, s, np.iinfo(np.int64).min)))
            x = float(v[i]) * frame.runs[run].scales.get(m, 1.0)
            out[m] = x if math.isfinite(x) else None
        else:
            out[m] = None
    return out


def diagnose_unit(unit: Unit, settings: Settings) -> Outcome:
    """Read one run, evaluate the rules, and return its Report (never raises for bad data)."""
    from rlwatch.report import build

    try:
        rs = _ruleset(settings)
        frame = unit.load()
        if frame.data.empty:
            raise SourceError("no scalars")
        for metric in settings.require:
            missing = [n for n, i in frame.runs.items() if metric not in i.metrics]
            if missing:
                raise SourceError(f"required metric {metric!r} not found")
        report = build(frame, rs, fail_on=settings.fail_on, explain=settings.explain)
        for r in report.runs:
            r["last_values"] = last_values(frame, r["name"])
        return Outcome(unit.name, unit.address, report)
    except RlwatchError as exc:
        return Outcome(unit.name, unit.address, error=str(exc))
    except Exception as exc:  # a bug or a corrupt file must not sink the other runs
        return Outcome(unit.name, unit.address, error=f"{type(exc).__name__}: {exc}")


def _batch(units: list[Unit], settings: Settings) -> list[Outcome]:
    return [diagnose_unit(u, settings) for u in units]


# -- executors ----------------------------------------------------------------------------------
_SETTINGS: Settings | None = None


def _init(settings: Settings) -> None:
    global _SETTINGS
    _SETTINGS = settings
    _ruleset(settings)  # load the rule pack once per worker
    if gc.isenabled():  # a pool worker lives for this sweep only: see _frozen_heap
        gc.freeze()


def _work(unit: Unit) -> Outcome:
    assert _SETTINGS is not None
    return diagnose_unit(unit, _SETTINGS)


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - macOS/Windows
        return os.cpu_count() or 1


@contextlib.contextmanager
def _frozen_heap() -> Iterator[None]:
    """The objects alive now (modules, the rule pack, the name catalogue, ...) are left out
    of the cyclic collector's passes while many runs are diagnosed, then handed back.

    Each run allocates thousands of objects, so the collector runs often; its full passes
    walked the whole heap of pandas, numpy and the rules each time (~1 ms a run over a
    sweep). Forked workers inherit the frozen heap (and do not copy its pages by touching
    them). Nothing is collected less: garbage made during the sweep is still found."""
    if not gc.isenabled():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def run_pool(units: list[Unit], settings: Settings, jobs: int) -> Iterator[Outcome]:
    """Per-run work in a process pool; outcomes in input order, as they complete."""
    if jobs <= 1 or len(units) <= 1:
        _ruleset(settings)
        if units:
            yield diagnose_unit(units[0], settings)
        with _frozen_heap():
            for u in units[1:]:
                yield diagnose_unit(u, settings)
        return
    import multiprocessing as mp

    _ruleset(settings)  # forked workers inherit the loaded pack
    method = "fork" if sys.platform.startswith("linux") else "spawn"
    if method == "fork":
        # the first run here: what the per-run path imports and caches lazily (the reader,
        # the metric-name catalogue, ...) is then inherited by every worker, not paid by each
        yield diagnose_unit(units[0], settings)
        units = units[1:]
    ctx = mp.get_context(method)
    jobs = min(jobs, len(units))
    chunk = max(1, min(16, len(units) // (jobs * 8)))
    with _frozen_heap(), ctx.Pool(jobs, initializer=_init, initargs=(settings,)) as pool:
        yield from pool.imap(_work, units, chunksize=chunk)


def run_ray(
    units: list[Unit], settings: Settings, jobs: int | None = None, batch: int | None = None
) -> Iterator[Outcome]:
    """Per-run work as Ray tasks on RAY_ADDRESS's cluster (or a local Ray); input order."""
    try:
        import ray
    except ImportError:
        raise UsageError(
            "--executor ray needs Ray: pip install 'rlwatch[ray]' (or use --executor process)"
        ) from None
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"ignore_reinit_error": True, "log_to_driver": False}
        if not os.environ.get("RAY_ADDRESS"):  # a local Ray for this command only
            kwargs["include_dashboard"] = False
            if jobs:
                kwargs["num_cpus"] = jobs
        try:
            ray.init(**kwargs)
        except Exception as exc:
            raise SourceError(f"Ray: cannot start or reach a cluster ({exc})") from None
    remote = ray.remote(num_cpus=1, max_retries=1)(_batch)
    # several runs per task: a task costs milliseconds of scheduling, a small run less
    size = batch or max(1, min(32, len(units) // (int(ray.cluster_resources().get("CPU", 1)) * 4)))
    ref_settings = ray.put(settings)
    pending = [remote.remote(units[i : i + size], ref_settings) for i in range(0, len(units), size)]
    for ref in pending:
        yield from ray.get(ref)


def run(
    units: list[Unit],
    settings: Settings,
    *,
    executor: str = "process",
    jobs: int | None = None,
    progress: bool = False,
) -> list[Outcome]:
    """Every unit's Outcome, in the order of `units`."""
    jobs = jobs or default_jobs()
    if executor == "ray":
        it: Iterable[Outcome] = run_ray(units, settings, jobs if jobs else None)
    elif executor == "process":
        it = run_pool(units, settings, jobs)
    else:
        raise UsageError(f"--executor {executor!r}: valid are {', '.join(EXECUTORS)}")
    return list(_with_progress(it, len(units), progress))


def _with_progress(it: Iterable[Outcome], total: int, enabled: bool) -> Iterator[Outcome]:
    if not enabled or not sys.stderr.isatty() or total < 2:
        yield from it
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    with Progress(
        "diagnosing",
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task("runs", total=total)
        for o in it:
            bar.advance(task)
            yield o


# -- one report ---------------------------------------------------------------------------------
@dataclass
class Sweep:
    """The per-run Reports merged into one (runs that could not be read are in its `skipped`,
    and in `unread`)."""

    report: Any  # rlwatch.report.Report
    unread: list[dict[str, str]] = field(default_factory=list)  # path, reason

    @property
    def exit_code(self) -> int:
        if not self.report.healthy:
            return ExitCode.UNHEALTHY
        return ExitCode.FAILED if self.unread else ExitCode.HEALTHY


def _renamed(report: Any, mapping: dict[str, str]) -> Any:
    import dataclasses

    runs = [{**r, "name": mapping.get(r["name"], r["name"])} for r in report.runs]
    verdicts = [
        dataclasses.replace(v, run=mapping[v.run]) if v.run in mapping else v
        for v in report.verdicts
    ]
    symptoms = {mapping.get(k, k): v for k, v in report.symptoms.items()}
    return dataclasses.replace(report, runs=runs, verdicts=verdicts, symptoms=symptoms)


def merge(
    outcomes: list[Outcome], settings: Settings, rules: int, skipped: list[dict[str, str]] = ()
) -> Sweep:
    import dataclasses

    from rlwatch.report import Report

    reports = []
    names: set[str] = set()
    unread = []
    for o in outcomes:
        if o.report is None:
            unread.append({"path": o.name or o.address, "reason": f"could not read: {o.error}"})
            continue
        rep = o.report
        clash = {r["name"] for r in rep.runs if r["name"] in names}
        if clash:  # two targets gave runs of one name: the later one gets its target
            rep = _renamed(rep, {n: f"{o.address.rstrip('/')}:{n}" for n in clash})
        names.update(r["name"] for r in rep.runs)
        reports.append(rep)
    if not reports:
        first = unread[0] if unread else {"path": "?", "reason": "nothing to read"}
        raise SourceError(
            f"none of the {len(outcomes)} run(s) could be read "
            f"(first: {first['path']}: {first['reason']})"
        )
    if not any(v.state != "skipped" for rep in reports for v in rep.verdicts):
        from rlwatch.api import unevaluated

        every = [v for rep in reports for v in rep.verdicts]
        raise SourceError(unevaluated(every, [run for rep in reports for run in rep.runs]))
    merged = Report.merge(reports)
    merged = dataclasses.replace(merged, fail_on=settings.fail_on, rules=rules)
    merged.skipped = [*skipped, *merged.skipped, *unread]
    return Sweep(merged, unread)


def diagnose_many(
    units: list[Unit],
    settings: Settings,
    *,
    executor: str = "process",
    jobs: int | None = None,
    progress: bool = False,
    on_outcome: Callable[[Outcome], None] | None = None,
) -> Sweep:
    """Diagnose every unit and merge the Reports (the library entry point of a sweep)."""
    rules = len(_ruleset(settings).rules)
    outcomes = run(units, settings, executor=executor, jobs=jobs, progress=progress)
    if on_outcome is not None:
        for o in outcomes:
            on_outcome(o)
    return merge(outcomes, settings, rules, getattr(units, "skipped", []))
