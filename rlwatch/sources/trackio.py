"""trackio projects: the local SQLite store that `trackio.init(project=...)` writes and its
dashboard reads, read directly with SQL (the trackio package is not needed at run time).

One file per project, `$TRACKIO_DIR/<project>.db` (default `~/.cache/huggingface/trackio`),
in WAL mode, so it is read while training writes. Table `metrics` holds one row per
`trackio.log()` call: `run_name`, `step`, `timestamp` (ISO 8601) and the metrics as JSON text
with non-finite values as the strings "NaN"/"Infinity"/"-Infinity"; files written before
trackio added `run_id` lack that column (runs are then told apart by name). Table `configs`
holds each run's config (its hyper-parameters). transformers' trackio callback logs without a
step (trackio counts calls), so when a row carries `train/global_step` that is the step.

Targets: a project file (`.../<project>.db`: every run in it), `trackio:<project>` (every run of
the project in $TRACKIO_DIR) and `trackio:<project>/<run name>` (one run).
"""

from __future__ import annotations

import json
import math
import os
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import sqlite3  # imported where used: a follower of other sources never loads SQLite

from rlwatch.errors import SourceError, UsageError
from rlwatch.frame import RunFrame, RunInfo
from rlwatch.sources._rows import NONFINITE_STRINGS, Rows

SOURCE = "trackio"
STEP_KEY = "train/global_step"  # the transformers callback's real step
_SQLITE_MAGIC = b"SQLite format 3\x00"
_NONFINITE = NONFINITE_STRINGS


def trackio_dir() -> Path:
    """Where trackio keeps its projects, as trackio itself decides it."""
    if os.environ.get("TRACKIO_DIR"):
        return Path(os.environ["TRACKIO_DIR"])
    hf_home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface"
    )
    return Path(hf_home) / "trackio"


def _connect(path: Path) -> sqlite3.Connection:
    import sqlite3

    # read-only; WAL lets the writer go on while we read a consistent snapshot
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)


def _is_sqlite(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(16) == _SQLITE_MAGIC


def is_store(path: Path) -> bool:
    """A SQLite file whose `metrics` table has trackio's columns."""
    import sqlite3

    try:
        if not _is_sqlite(path):
            return False
        db = _connect(path)
        try:
            cols = {r[1] for r in db.execute("PRAGMA table_info(metrics)")}
        finally:
            db.close()
    except (OSError, sqlite3.Error):
        return False
    return {"run_name", "step", "metrics", "timestamp"} <= cols


def sqlite_problem(path: Path) -> str | None:
    """Why a file that begins as SQLite cannot be read as a database (a store cut short or
    damaged: "database disk image is malformed", ...); None when it reads or is no SQLite."""
    import sqlite3

    try:
        if not _is_sqlite(path):
            return None
        db = _connect(path)
        try:
            db.execute("SELECT name FROM sqlite_master").fetchall()  # not a scan of the file
        finally:
            db.close()
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    except sqlite3.Error as exc:
        return str(exc) or type(exc).__name__
    return None


def parse(target: str) -> tuple[Path, str | None] | None:
    """(project file, run name or None) of a trackio: target; None for other targets."""
    if not target.startswith("trackio:"):
        return None
    ref = target[len("trackio:") :].strip("/")
    if not ref:
        raise UsageError("trackio: needs a project: trackio:<project> or trackio:<project>/<run>")
    project, _, run = ref.partition("/")
    path = Path(project)
    if not (path.suffix == ".db" and path.is_file()):
        path = trackio_dir() / f"{project}.db"
    if not path.is_file():
        raise SourceError(f"{target}: no trackio project {project!r} in {trackio_dir()}")
    return path, run or None


def _wall(stamp: Any) -> float:
    try:
        return datetime.fromisoformat(str(stamp)).timestamp()
    except ValueError:
        return math.nan


class _RunRows:
    def __init__(self, name: str) -> None:
        self.name = name
        self.rows = Rows()
        self.global_step: int | None = None


def list_runs(path: Path) -> list[tuple[str, str]]:
    """(run key, run name) of every run in a project file, in first-write order."""
    import sqlite3

    db = _connect(path)
    try:
        cols = {r[1] for r in db.execute("PRAGMA table_info(metrics)")}
        key = "run_id" if "run_id" in cols else "run_name"
        return [
            (str(k), str(n))
            for k, n in db.execute(
                f"SELECT {key}, run_name FROM metrics GROUP BY {key} ORDER BY MIN(id)"
            )
        ]
    except sqlite3.Error as exc:
        raise SourceError(f"{path}: cannot read the trackio store ({exc})") from None
    finally:
        db.close()


def load(path: str | os.PathLike[str], run: str | None = None) -> RunFrame:
    """Every run of a trackio project file (or the one run named / keyed `run`)."""
    import sqlite3

    path = Path(path)
    try:
        db = _connect(path)
        try:
            cols = {r[1] for r in db.execute("PRAGMA table_info(metrics)")}
            if not {"run_name", "step", "metrics"} <= cols:
                raise SourceError(f"{path}: not a trackio project (no metrics table)")
            key = "run_id" if "run_id" in cols else "run_name"
            q = f"SELECT {key}, run_name, step, timestamp, metrics FROM metrics"
            args: tuple[str, ...] = ()
            if run is not None:
                q += f" WHERE run_name = ? OR {key} = ?"
                args = (run, run)
            rows = db.execute(q + " ORDER BY id", args).fetchall()
            configs = _configs(db, key)
        finally:
            db.close()
    except sqlite3.Error as exc:
        raise SourceError(f"{path}: cannot read the trackio store ({exc})") from None
    if not rows:
        what = f"no run {run!r} in" if run else "no metrics in"
        raise SourceError(f"{path}: {what} the trackio project")
    runs: dict[str, _RunRows] = {}
    for rkey, name, step, stamp, text in rows:
        r = runs.get(rkey)
        if r is None:
            r = runs[rkey] = _RunRows(str(name))
        try:
            data = json.loads(text)
        except (TypeError, json.JSONDecodeError):
            r.rows.skip("rows whose metrics are not JSON")
            continue
        if not isinstance(data, dict):
            r.rows.skip("rows whose metrics are not a JSON object")
            continue
        gs = data.get(STEP_KEY)
        if isinstance(gs, int | float) and not isinstance(gs, bool) and math.isfinite(gs):
            r.global_step = int(gs)
        s = r.global_step if r.global_step is not None else int(step)
        wall = _wall(stamp)
        for k, v in data.items():
            if k == STEP_KEY or k.startswith("_"):
                continue
            if isinstance(v, str):
                v = _NONFINITE.get(v, v)
            if isinstance(v, bool) or not isinstance(v, int | float):
                r.rows.skip("non-numeric values (media, tables, text)", key=k)
                continue
            r.rows.add(s, k, float(v), wall)
    # the same name used by two runs (run_id differs): keep both, tell them apart
    counts: dict[str, int] = {}
    for r in runs.values():
        counts[r.name] = counts.get(r.name, 0) + 1
    frames = []
    project = path.stem
    for rkey, r in runs.items():
        if not r.rows.steps:
            continue
        name = r.name if counts[r.name] == 1 else f"{r.name}-{str(rkey)[:8]}"
        info = RunInfo(
            name,
            SOURCE,
            f"{path} run {r.name}",
            hparams={**configs.get(rkey, {}), "trackio/project": project},
            files=[str(path)],
        )
        info.warnings = r.rows.warnings(f"{path} run {r.name}")
        frames.append(r.rows.frame(info))
    if not frames:
        raise SourceError(f"{path}: the trackio project holds no numeric metrics")
    return RunFrame.concat(frames)


def _configs(db: sqlite3.Connection, key: str) -> dict[str, dict[str, object]]:
    import sqlite3

    try:
        cols = {r[1] for r in db.execute("PRAGMA table_info(configs)")}
        if not {"config", "run_name"} <= cols:
            return {}
        ck = key if key in cols else "run_name"
        out: dict[str, dict[str, object]] = {}
        for k, text in db.execute(f"SELECT {ck}, config FROM configs"):
            try:
                cfg = json.loads(text)
            except (TypeError, json.JSONDecodeError):
                continue
            if isinstance(cfg, dict):
                out[str(k)] = {
                    str(a): b if isinstance(b, int | float | str | bool) else json.dumps(b)
                    for a, b in cfg.items()
                    if not str(a).startswith("_") and b is not None
                }
        return out
    except sqlite3.Error:
        return {}
