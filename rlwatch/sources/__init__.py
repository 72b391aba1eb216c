"""Target resolution and discovery: what the user typed -> the runs under it -> a RunFrame.

A folder target yields every run under it, of every kind, each named by its path relative to
the target: a folder holding TensorBoard event files is one run (as TensorBoard sees it); a
`.wandb` file is one run and claims its folder (the log files beside it are the same run printed
another way); a TRL output folder's `trainer_state.json` and its `checkpoint-*/` copies are one
run (the most complete file is read); every other log file is a run. Symlinked folders are
followed once. A file that looks like a run but cannot be read is `Skipped`, with the reason.
Runs near each other whose values agree are one run written several ways (TensorBoard events,
trainer_state.json, a console capture): `load` reads them all and keeps one (`copies`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import os
import re
import stat
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

from rlwatch.errors import RlwatchError, SourceError, UsageError
from rlwatch.frame import RunFrame

ACCEPTED = (
    "a TensorBoard log directory or event file, a W&B run folder or .wandb file, a "
    "log file (verl console or JSONL, trainer_state.json, TRL console capture, JSONL "
    "with a step field, a notebook's progress table, a metrics CSV), mlflow:<run_id>, "
    "mlflow:<experiment>/<run name>, a bare "
    "MLflow run id with MLFLOW_TRACKING_URI set, wandb:<entity>/<project>/<run_id> or "
    "a W&B run URL, a trackio project (.db file, trackio:<project>[/<run>]), a SwanLab "
    "run folder or run-*.swanlab file"
)
# suffixes that say "this is a run log": unreadable ones are reported, not ignored
STRONG_LOG_SUFFIXES = {".log", ".jsonl", ".ndjson"}
DOCUMENT_SUFFIXES = {".md", ".html"}
CHECKPOINT = re.compile(r"^checkpoint-\d+$")
TRACKER_DIR = re.compile(r"^(?:offline-)?run-\d")
WANDB_EXTRA = "the wandb extra is not installed: pip install 'rlwatch[wandb]'"
MAX_DEPTH = 64  # folders below a target; deeper trees are cut (with a note)


@dataclass
class Skipped:
    """A file that looks like a run but could not be read, and why."""

    path: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "reason": self.reason}

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


@dataclass
class Found:
    """One run found under a target: its name, kind and files; `load()` reads it."""

    name: str
    kind: str  # "tensorboard" | "wandb" | "swanlab" | "trackio" (a project: many runs) | "log"
    # | "mlflow" (a run folder of a file store)
    paths: list[Path]
    address: str
    log_format: str | None = None
    notes: list[str] = field(default_factory=list)
    own_name: bool = False  # keep the name the source gives (a W&B run's display name)
    run: str | None = None  # a trackio project's one run (its key): this run only
    # W&B's exports of a run's charts (a CSV each): read as parts and named by the export's
    # run, from the first chart written on (`tail` then names it as `diagnose` does)
    parts: bool = False

    @property
    def key(self) -> tuple[str, ...]:
        """Identity of the run on disk (the same run given twice is read once)."""
        key = (self.kind, *sorted(os.path.realpath(p) for p in self.paths))
        return key if self.run is None else (*key, self.run)

    def load(self) -> RunFrame:
        try:
            return self._load()
        except OSError as exc:  # mode 000, vanished, I/O error: one line, never a traceback
            raise SourceError(
                f"{self.address}: cannot read ({exc.strerror or type(exc).__name__})"
            ) from None
        except (RecursionError, MemoryError, OverflowError) as exc:
            raise SourceError(
                f"{self.address}: cannot read ({type(exc).__name__}: the file is damaged or "
                "hostile)"
            ) from None

    def _load(self) -> RunFrame:
        if self.kind == "tensorboard":
            from rlwatch.sources import tensorboard

            frame = tensorboard.load_files(self.name, self.paths)
        elif self.kind == "wandb":
            if importlib.util.find_spec("wandb") is None:
                raise SourceError(f"{self.address}: {WANDB_EXTRA}")
            from rlwatch.sources import wandb_local

            frame = wandb_local.load_file(self.paths[0], None if self.own_name else self.name)
        elif self.kind == "swanlab":
            from rlwatch.sources import swanlab

            frame = swanlab.load_file(self.paths[0])
        elif self.kind == "mlflow":  # a file store's run folder: <store>/<experiment>/<run id>
            from rlwatch.sources import mlflow_source

            run = self.paths[0]
            frame = mlflow_source.load(run.name, str(run.parent.parent))
        elif self.kind == "trackio":
            from rlwatch.sources import trackio

            frame = trackio.load(self.paths[0], self.run)
            if self.run is not None:  # one run of the project, named as found
                (old,) = frame.runs
                return self._noted(frame.renamed({old: self.name}))
            if not self.own_name:  # a project of runs: each under the project's path
                frame = frame.renamed({n: f"{self.name}/{n}" for n in frame.runs})
            return self._noted(frame)
        else:
            from rlwatch.sources import logs

            if self.run is not None:  # one run of a W&B export of several
                frame = logs.load_file(self.paths[0], self.log_format, self.run)
                (old,) = frame.runs
                return self._noted(frame.renamed({old: self.name}))
            if len(self.paths) > 1 or self.parts:  # one run's parts (W&B's chart exports)
                frame = logs.load_parts(self.paths, self.log_format)
            else:
                frame = logs.load_file(self.paths[0], self.log_format)
        if self.own_name:  # the run is the target itself: the source's own name stands
            return self._noted(frame)
        if list(frame.runs) != [self.name]:
            (old,) = frame.runs
            frame = frame.renamed({old: self.name})
        return self._noted(frame)

    def _noted(self, frame: RunFrame) -> RunFrame:
        if self.notes:
            for info in frame.runs.values():
                info.warnings.extend(self.notes)
        return frame


def each_run(runs: list[Found]) -> list[Found]:
    """One `Found` per run: a trackio project's runs, and the runs of a W&B chart exported
    with the runs it compares (`<run> - <key>` columns), each on their own -- named under the
    file's name in a folder, by their own names when the file is the target; every other
    `Found` is one run already. A project that cannot be listed yet stays whole (reading it
    says why)."""
    out: list[Found] = []
    for f in runs:
        listed: list[tuple[str, str]] = []
        if f.run is None and f.kind == "trackio":
            from rlwatch.sources import trackio

            with contextlib.suppress(SourceError, OSError):  # not listable yet: whole
                listed = trackio.list_runs(f.paths[0])
            counts = Counter(n for _, n in listed)
            listed = [  # the same name twice: told apart as trackio.load does
                (key, name if counts[name] == 1 else f"{name}-{key[:8]}") for key, name in listed
            ]
        elif f.run is None and f.kind == "log" and len(f.paths) == 1:
            from rlwatch.sources import logs

            if f.log_format in (None, "csv"):
                listed = [(r, r) for r in logs.export_runs(f.paths[0])]
                listed = listed if len(listed) > 1 else []
                listed = listed or [(r, r) for r in logs.stacked_runs(f.paths[0])]
            if f.log_format in (None, "curves"):  # a JSON of a sweep's curves, a run each
                listed = listed or [(r, r) for r in logs.curve_runs(f.paths[0])]
            if not listed and f.log_format in (None, "kv-pairs", "python-dicts"):
                # a notebook of several trainings, a cell each: named under the notebook's
                # name when it is the target
                cells = logs.notebook_runs(f.paths[0], f.log_format)
                base = logs.run_name(f.paths[0]) if f.own_name else f.name
                out += [replace(f, name=f"{base}/{c}", run=c, own_name=False) for c in cells]
                if cells:
                    continue
        if not listed:
            out.append(f)
            continue
        for key, name in listed:
            out.append(replace(f, name=name if f.own_name else f"{f.name}/{name}", run=key))
    return out


@dataclass
class Discovery:
    runs: list[Found] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)


def _kind_of_special(mode: int) -> str | None:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        return "not a regular file"
    return None


def _stat(path: Path, missing: Exception) -> os.stat_result:
    """os.stat, with a dangling symlink, `missing` and other OS errors said in one line."""
    try:
        return os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise SourceError(f"{path}: dangling symlink (it points at nothing)") from None
        raise missing from None
    except OSError as exc:
        raise SourceError(f"{path}: cannot read ({exc.strerror})") from None


def check_readable_file(path: Path) -> None:
    """Refuse, before any read, what is not a regular readable file (FIFO, device, socket,
    dangling symlink, no permission)."""
    st = _stat(path, SourceError(f"{path}: no such file or directory"))
    special = _kind_of_special(st.st_mode)
    if special is not None or stat.S_ISDIR(st.st_mode):
        what = special or "a directory"
        raise SourceError(f"{path}: is {what}, not a regular file; give a run file or folder")
    if not os.access(path, os.R_OK):
        raise SourceError(f"{path}: cannot read (permission denied)")


def _file_kind(path: Path) -> str:
    # tensorboard.is_event_file and swanlab.SUFFIX, said here: a log file imports no reader
    if "tfevents" in path.name:
        return "tensorboard"
    if path.suffix == ".wandb":
        return "wandb"
    if path.name.endswith(".swanlab"):
        return "swanlab"
    if path.suffix == ".db":
        from rlwatch.sources import trackio

        if trackio.is_store(path):
            return "trackio"
    return "log"


def _not_a_store(path: Path) -> str:
    """Why a .db file is no run: a SQLite file that cannot be read, or not trackio's."""
    from rlwatch.sources import trackio

    problem = trackio.sqlite_problem(path)
    if problem is not None:
        return f"a SQLite file that cannot be read ({problem}): a trackio project cut or damaged?"
    return (
        "not a trackio project (no `metrics` table with trackio's columns); read an MLflow "
        "store as mlflow:EXPERIMENT --tracking-uri sqlite:///PATH"
    )


# a folder with no log but an experiment report: its README's table of steps is the run
README = re.compile(r"^readme[._-]?.*\.md$", re.IGNORECASE)


def _readme_tables(path: Path, root: str, root_name: str, log_format: str | None) -> list[Found]:
    """The README.md files below a folder that holds no run (a project's documents are never
    runs in a walk, see logs.DOC_NAMES) whose tables are a log of steps; each with a note."""
    found = []
    for f in sorted(itertools.islice(path.rglob("[Rr][Ee][Aa][Dd][Mm][Ee]*"), 1000)):
        if not README.match(f.name) or not f.is_file() or _log_candidate(f, log_format)[1]:
            continue
        name = _rel(str(f.with_suffix("")), root, root_name)
        run = Found(name, "log", [f], str(f), log_format)
        run.notes.append(f"read {f.name}'s table: the folder holds no log beside it")
        found.append(run)
    return found


# a folder with no log by name: its other files are sniffed, at most this many, never code or
# configuration (a script's printed example is no run) nor a file with a NUL in its head
UNNAMED_MAX = 200
NOT_LOGS = re.compile(
    r"\.(?:py|pyx|c|cc|cpp|cu|h|hpp|rs|go|js|ts|java|yaml|yml|toml|cfg|"
    r"ini|lock|gitignore|sql|r|jl|lua|pdf|png|jpe?g|gif|svg|zip|gz|tgz|bz2|xz|zst|tar|pt|pth|"
    r"bin|safetensors|pkl|npy|npz|parquet|arrow|h5)$",
    re.IGNORECASE,
)


def _unnamed_logs(path: Path, root: str, root_name: str) -> list[Found]:
    """The files below a folder that holds no run whose names are no log's but whose content
    is one, sniffed (a job's output saved as `job.o4711`, a console kept as `out.sh`); each
    with a note. Asked only when the walk found nothing, so a folder of logs pays nothing."""
    found = []
    seen = 0
    for f in sorted(itertools.islice(path.rglob("*"), 5000)):
        if seen >= UNNAMED_MAX:
            break
        rel = f.relative_to(path).parts
        if any(part.startswith(".") for part in rel) or NOT_LOGS.search(f.name):
            continue
        if not f.is_file() or _looks_like_run(f):
            continue
        seen += 1
        try:
            with open(f, "rb") as fh:
                if b"\0" in fh.read(8192):
                    continue
        except OSError:
            continue
        if _log_candidate(f, None)[1] is not None:
            continue
        run = Found(_rel(str(f.with_suffix("")), root, root_name), "log", [f], str(f))
        run.notes.append(f"read {f.name}: its name is no log's, its content is one")
        found.append(run)
    return found


def _log_candidate(path: Path, log_format: str | None) -> tuple[bool, str | None]:
    """(is a run, the reason it cannot be read) for a log-suffixed file below a folder."""
    from rlwatch.sources import logs

    strong = path.suffix in STRONG_LOG_SUFFIXES or path.name.endswith(".log.txt")
    try:
        check_readable_file(path)
        if log_format is None:
            logs.sniff(path)
    except SourceError as exc:
        reason = str(exc).removeprefix(f"{path}: ")
        if "unrecognised log format" in reason:
            reason = "unrecognised log format (force one with --log-format)"
            return strong, reason
        return True, reason
    except (OSError, ValueError) as exc:
        return True, f"cannot read ({exc})"
    return True, None


def _rel(path: str, root: str, root_name: str) -> str:
    rel = os.path.relpath(path, root)
    return root_name if rel == "." else rel.replace(os.sep, "/")


def discover(target: str | os.PathLike[str], log_format: str | None = None) -> Discovery:
    """Every run under a file or folder target (see the module doc); never reads run data."""

    path = Path(target)
    out = Discovery()
    st = _stat(path, UsageError(f"{path}: no such file or directory (accepted: {ACCEPTED})"))
    if not stat.S_ISDIR(st.st_mode):
        check_readable_file(path)
        kind = "log" if log_format is not None else _file_kind(path)
        if kind == "log" and log_format is None and path.suffix == ".db":
            raise SourceError(f"{path}: {_not_a_store(path)}")
        if kind == "tensorboard":
            name = path.parent.name or path.name
            out.runs.append(Found(name, kind, [path], str(path)))
        else:  # the source's own name: a W&B display name, a log file's stem, ...
            out.runs.append(Found(path.stem, kind, [path], str(path), log_format, own_name=True))
        out.runs = each_run(out.runs)
        return out
    if not os.access(path, os.R_OK | os.X_OK):
        raise SourceError(f"{path}: cannot list the folder (permission denied)")

    root = str(path)
    root_name = Path(os.path.abspath(root)).name or root
    visited: set[tuple[int, int]] = set()
    claimed: list[str] = []  # folders owned by a .wandb run (its files/ and logs/ too)
    # (folder -> trainer_state.json files) of TRL output folders, folded after the walk
    states: dict[str, list[Path]] = {}

    def walk(d: str, depth: int) -> None:
        try:
            dst = os.stat(d)
        except OSError:
            return
        ident = (dst.st_dev, dst.st_ino)
        if ident in visited:
            return  # a symlink loop or a second way to the same folder: read once
        visited.add(ident)
        if depth > MAX_DEPTH:
            out.skipped.append(Skipped(d, f"more than {MAX_DEPTH} folders deep; not searched"))
            return
        try:
            with os.scandir(d) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            out.skipped.append(Skipped(d, f"cannot list the folder ({exc.strerror})"))
            return
        events, wandbs, log_files, subdirs, stores = [], [], [], [], []
        for e in entries:
            p = Path(e.path)
            try:
                is_dir = e.is_dir()  # follows symlinks
            except OSError:
                is_dir = False
            if is_dir:
                subdirs.append(e.path)
                continue
            if e.is_symlink() and not os.path.exists(e.path):
                if _looks_like_run(p):
                    out.skipped.append(Skipped(e.path, "dangling symlink (it points at nothing)"))
                continue
            if not _looks_like_run(p):
                continue
            try:
                special = _kind_of_special(os.stat(e.path).st_mode)
            except OSError as exc:
                out.skipped.append(Skipped(e.path, f"cannot read ({exc.strerror})"))
                continue
            if special is not None:
                out.skipped.append(Skipped(e.path, f"is {special}, not a regular file"))
                continue
            kind = "log" if log_format is not None else _file_kind(p)
            if kind == "log" and p.suffix == ".db":  # another app's database is no run
                from rlwatch.sources import trackio

                if trackio.sqlite_problem(p) is not None:
                    out.skipped.append(Skipped(e.path, _not_a_store(p)))
                continue
            {"tensorboard": events, "log": log_files, "trackio": stores}.get(kind, wandbs).append(
                (p, kind) if kind in ("wandb", "swanlab") else p
            )
        in_claimed = any(d == c or d.startswith(c + os.sep) for c in claimed)
        if wandbs and not in_claimed:
            usable = importlib.util.find_spec("wandb") is not None
            for w, kind in wandbs:
                name = _rel(d, root, root_name) if len(wandbs) == 1 else _rel(w, root, root_name)
                if kind == "wandb" and not usable:
                    out.skipped.append(Skipped(str(w), WANDB_EXTRA))
                    continue
                # a folder named by the tracker (run-<date>-<id>) says less than the run's name
                own = name == root_name or bool(TRACKER_DIR.match(Path(d).name))
                out.runs.append(Found(name, kind, [w], str(w), own_name=own))
                claimed.append(d)
                in_claimed = True
        if (
            not in_claimed
            and os.path.join(d, "metrics") in subdirs
            and os.path.isfile(os.path.join(d, "meta.yaml"))
        ):  # a run of an MLflow file store (mlruns/<experiment>/<run>/), as a repo commits it
            out.runs.append(Found(_rel(d, root, root_name), "mlflow", [Path(d)], d, own_name=True))
            claimed.append(d)
            in_claimed = True
        if not in_claimed and os.path.join(d, "logs") in subdirs:
            from rlwatch.sources import swanlab

            if swanlab.is_legacy_run(Path(d)):  # SwanLab < 0.7 local: logs/<column>/<n>.log
                name = _rel(d, root, root_name)
                own = name == root_name or bool(TRACKER_DIR.match(Path(d).name))
                out.runs.append(Found(name, "swanlab", [Path(d)], d, own_name=own))
                claimed.append(d)
                in_claimed = True
        for db in stores:
            name = _rel(str(db.with_suffix("")), root, root_name)
            out.runs.append(Found(name, "trackio", [db], str(db)))
        if events:
            from rlwatch.sources import tensorboard

            found = Found(
                _rel(d, root, root_name),
                "tensorboard",
                sorted(events, key=tensorboard._file_order),
                d,
            )
            out.runs.append(found)
        elif not in_claimed:
            singles = []
            for f in log_files:
                if f.name == "trainer_state.json" and log_format in (None, "trainer-state"):
                    owner = str(f.parent.parent) if CHECKPOINT.match(f.parent.name) else d
                    states.setdefault(owner, []).append(f)
                    continue
                is_run, reason = _log_candidate(f, log_format)
                if reason is not None:
                    if is_run:
                        out.skipped.append(Skipped(str(f), reason))
                    continue
                singles.append(f)
            # documents (.md, .html, .txt, ...) beside real logs are notes, not runs
            if any(f.suffix in STRONG_LOG_SUFFIXES for f in singles):
                singles = [f for f in singles if f.suffix not in DOCUMENT_SUFFIXES]
            for run, fs in _parts_of_runs(singles, log_format):
                f = fs[0]
                if len(fs) == len(singles):  # the folder's one run
                    where = d
                elif len(fs) > 1:  # named by the run the parts are of
                    where = os.path.join(d, str(run).replace(os.sep, "_"))
                else:
                    where = str(f.with_suffix(""))
                name = _rel(where, root, root_name)
                own = name == root_name
                parts = run is not None
                out.runs.append(
                    Found(name, "log", list(fs), str(f), log_format, own_name=own, parts=parts)
                )
        for s in subdirs:
            walk(s, depth + 1)

    walk(root, 0)
    for owner, files in states.items():
        readable = []
        for f in files:
            try:
                check_readable_file(f)
                readable.append((f.stat().st_size, f.stat().st_mtime, f))
            except SourceError as exc:
                out.skipped.append(Skipped(str(f), str(exc).removeprefix(f"{f}: ")))
        if not readable:
            continue
        best = max(readable, key=lambda t: (t[0], t[1]))[2]
        found = Found(_rel(owner, root, root_name), "log", [best], str(best), log_format)
        if len(readable) > 1:
            found.notes.append(
                f"{len(readable) - 1} other trainer_state.json copies (checkpoints) of this "
                f"run not read; {best} is the most complete"
            )
        out.runs.append(found)
    if not out.runs:
        out.runs = _readme_tables(path, root, root_name, log_format)
    if not out.runs and not out.skipped and log_format is None:
        out.runs = _unnamed_logs(path, root, root_name)
    out.runs = each_run(out.runs)
    # a run named like another (a folder that is also a log file name) gets its kind added
    names: dict[str, int] = {}
    for r in out.runs:
        names[r.name] = names.get(r.name, 0) + 1
    for r in out.runs:
        if names[r.name] > 1:
            r.name = f"{r.name} ({r.paths[0].name})"
    return out


def _parts_of_runs(
    files: list[Path], log_format: str | None
) -> list[tuple[str | None, list[Path]]]:
    """The log files of a folder as runs, (W&B run or None, files): each file one run, but
    W&B's exports of the charts of one run (a CSV per metric, the same "<run> - " prefix) are
    one run of several parts."""
    from rlwatch.sources import logs

    by_run: dict[str, list[Path]] = {}
    out: list[tuple[str | None, list[Path]]] = []
    for f in files:
        runs = logs.export_runs(f) if log_format in (None, "csv") else []
        if len(runs) != 1:
            out.append((None, [f]))
            continue
        if runs[0] not in by_run:
            by_run[runs[0]] = []
            out.append((runs[0], by_run[runs[0]]))
        by_run[runs[0]].append(f)
    return out


def _looks_like_run(p: Path) -> bool:
    from rlwatch.sources import logs, swanlab, tensorboard

    return (
        tensorboard.is_event_file(p)
        or p.suffix in (".wandb", ".db")
        or (p.name.endswith(swanlab.SUFFIX) and not swanlab.is_board_db(p))
        or logs.is_log_name(p)
    )


def resolve(
    target: str, log_format: str | None = None, tracking_uri: str | None = None
) -> Callable[[], RunFrame]:
    """A loader for one target, or a UsageError naming the forms that are accepted."""
    loaders, _ = _resolve_all(target, log_format, tracking_uri)

    def load_all() -> RunFrame:
        return RunFrame.concat([f() for _, _, f in loaders])

    return load_all


def _remote(
    target: str, log_format: str | None, tracking_uri: str | None, timeout: float | None = None
) -> Callable[[], RunFrame] | None:
    if target.startswith("mlflow:"):
        from rlwatch.sources import mlflow_source

        ref = target[len("mlflow:") :].strip("/")
        if not ref:
            raise UsageError("mlflow: needs a run: mlflow:<run_id> or mlflow:<experiment>/<run>")
        uri = mlflow_source.tracking_uri(tracking_uri)
        return lambda: mlflow_source.load(ref, uri, timeout=timeout)
    if ":" in target:  # trackio:..., wandb:... and W&B run URLs (a plain path imports neither)
        from rlwatch.sources import trackio, wandb_api

        tr = trackio.parse(target)
        if tr is not None:
            return lambda: trackio.load(*tr)
        wandb_path = wandb_api.parse(target)
        if wandb_path is not None:
            return lambda: wandb_api.load(wandb_path, timeout=timeout)
    if not os.path.lexists(target):
        from rlwatch.sources import mlflow_source

        if mlflow_source.RUN_ID.match(target) and (
            tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
        ):
            uri = mlflow_source.tracking_uri(tracking_uri)
            return lambda: mlflow_source.load(target, uri, timeout=timeout)
    return None


def _resolve_all(
    target: str, log_format: str | None, tracking_uri: str | None, timeout: float | None = None
) -> tuple[list[tuple[tuple[str, ...], str, Callable[[], RunFrame]]], Discovery]:
    """(identity, address, loader) per run of one target, and what discovery found."""
    from rlwatch.sources import logs

    logs.check_format(log_format)
    remote = _remote(str(target), log_format, tracking_uri, timeout)
    if remote is not None:
        return [(("remote", str(target)), str(target), remote)], Discovery()
    found = discover(target, log_format)
    return [(f.key, f.address, f.load) for f in found.runs], found


def load(
    targets: list[str] | str | os.PathLike[str],
    *,
    log_format: str | None = None,
    tracking_uri: str | None = None,
    workers: int | None = None,
    timeout: float | None = None,
    before_read: Callable[[str, list[str]], None] | None = None,
) -> RunFrame:
    """Read every run of every target (in parallel) into one RunFrame.

    The same run given twice is read once; run names are made unique. A run under a folder
    target that cannot be read is listed in `frame.skipped` with the reason; a target that
    cannot be read at all, or a folder with no readable run, is a SourceError. `before_read`,
    if given, sees each target and the addresses of the runs found in it before any is read
    (it may raise: `diff` refuses a folder of several runs from its walk).
    """
    if isinstance(targets, str | os.PathLike):
        targets = [os.fspath(targets)]
    targets = [os.fspath(t) for t in targets]
    if not targets:
        raise UsageError("no target given (accepted: " + ACCEPTED + ")")
    # every bad target fails before any reading
    plan: list[tuple[str, bool, str, Callable[[], RunFrame]]] = []  # target, in folder, address
    skipped: list[Skipped] = []
    seen: set[tuple[str, ...]] = set()
    for t in targets:
        loaders, found = _resolve_all(t, log_format, tracking_uri, timeout)
        skipped += found.skipped
        folder = os.path.isdir(t) and not _remote_like(t)
        if folder and not loaders:
            why = f"; {len(found.skipped)} skipped: {found.skipped[0]}" if found.skipped else ""
            raise SourceError(
                f"{t}: no TensorBoard event files and no readable logs in it or below{why} — "
                "give a folder or file holding runs (event files, .wandb, logs)"
            )
        if before_read is not None:
            before_read(t, [address for _key, address, _loader in loaders])
        for key, address, loader in loaders:
            if key in seen:
                continue
            seen.add(key)
            plan.append((t, folder, address, loader))

    def run(item: tuple[str, bool, str, Callable[[], RunFrame]]) -> RunFrame | Skipped | None:
        _t, folder, address, loader = item
        try:
            return loader()
        except (RlwatchError, OSError, ValueError, MemoryError, RecursionError) as exc:
            if not folder:
                raise
            reason = str(exc) or type(exc).__name__
            if "holds no metrics" in reason and Path(address).suffix not in STRONG_LOG_SUFFIXES:
                return None  # a document or data file that merely looked like a log
            return Skipped(address, reason.removeprefix(f"{address}: "))

    if len(plan) == 1:
        results = [run(plan[0])]
    else:
        with ThreadPoolExecutor(max_workers=workers or min(4, os.cpu_count() or 1)) as pool:
            results = list(pool.map(run, plan))
    names: set[str] = set()
    # (folder target or None, its runs): a folder's runs are folded together (copies.fold)
    parts: list[tuple[str | None, list[RunFrame]]] = []
    of_target: dict[str, list[RunFrame]] = {}
    for (t, folder, _ident, _loader), res in zip(plan, results, strict=True):
        if res is None:
            continue
        if isinstance(res, Skipped):
            skipped.append(res)
            continue
        clash = {}
        for n in res.runs:
            if n in names:
                new, i = f"{t.rstrip('/')}:{n}", 2
                while new in names:
                    new, i = f"{t.rstrip('/')}:{n} #{i}", i + 1
                clash[n] = new
        if clash:
            res = res.renamed(clash)
        names.update(res.runs)
        if not folder:
            parts.append((None, [res]))
            continue
        if t not in of_target:
            parts.append((t, of_target.setdefault(t, [])))
        of_target[t].append(res)
    frame = RunFrame.concat([_folded(t, frames) for t, frames in parts])
    if not frame.runs and skipped:
        raise SourceError(f"no run could be read ({len(skipped)} skipped; first: {skipped[0]})")
    frame.skipped = skipped
    return frame


def _folded(target: str | None, frames: list[RunFrame]) -> RunFrame:
    """The runs read under a folder target, copies of one run kept once (named by the folder
    they were found in, relative to the target, as discovery names runs)."""
    frame = RunFrame.concat(frames)
    if target is None:
        return frame
    from rlwatch.sources import copies

    root = os.path.realpath(target)
    name = Path(os.path.abspath(target)).name or target
    return copies.fold(frame, lambda d: _rel(d, root, name))


def _remote_like(t: str) -> bool:
    return t.startswith(("mlflow:", "wandb:", "http://", "https://"))
