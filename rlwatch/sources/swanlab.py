"""SwanLab local/offline run folders, read directly (the swanlab package is not needed).

Three layouts, by the client that wrote them:

- swanlab >= 0.7 (read: record format version 2, written by swanlab 0.10.x in `mode="offline"`
  or `"local"`): each run in `<logdir>/run-<time>-<id>/run-<id>.swanlab`: a 7-byte header
  (`:SWL`, magic 0xE1D6, format version) then LevelDB-log framing (32 KiB blocks; records of
  crc32, length, type FULL/FIRST/MIDDLE/LAST) of protobuf `swanlab.record.v1.Record`
  messages. rlwatch decodes the protobuf wire format itself and reads `start` (project, run
  name, id), `scalar` (key, step, timestamp, value) and skips media, console lines and files.
- swanlab 0.6.x (read: record format version 1, written by 0.6.13 in `mode="local"`): the same
  framing in `<run folder>/backup.swanlab`, each record JSON text, `{"model_type": ..., "data":
  ...}`: `Project`, `Experiment` (id, name), `Column` (key), `Scalar` (key, step, `metric`:
  {index, data, create_time}), `Footer`. Beside it the run folder also has the `logs/` layout
  below; the record file is read (it names every column, system ones too).
- swanlab 0.4.x-0.6.x local mode (read: the layout of 0.4.12, 0.5.9 and 0.6.13, with swanboard's
  database): `<logdir>/run-<time>-<id>/logs/<column>/<n>.log`, one JSON line per logged value,
  `{"index": step, "data": value, "create_time": ISO time}` (1,000 values a file: 1000.log,
  2000.log, ...), and `_summary.json`. `<column>` is the column's number; its key is kept in
  swanboard's SQLite database `<logdir>/runs.swanlab` (table `tag`: `folder` -> `name`, per
  `experiment.run_id` = the run folder's name), read when it is there; dashboards older than
  swanboard 0.1.2b8 named the folder by the URL-quoted key itself. Non-finite values are the
  strings "NaN" and "INF" (the client writes -inf as "INF" too: its sign is lost there).

The last record of a live run may be half-written: reading stops at the first record whose
checksum or framing does not hold, and says so when more than a tail was left.
"""

from __future__ import annotations

import json
import math
import os
import struct
import zlib
from pathlib import Path
from urllib.parse import unquote

from rlwatch.errors import SourceError
from rlwatch.frame import RunFrame, RunInfo
from rlwatch.sources._rows import Rows

SOURCE = "swanlab"
SUFFIX = ".swanlab"
HEADER = struct.Struct("<4sHB")
IDENT, MAGIC, VERSIONS = b":SWL", 0xE1D6, (1, 2)  # 1: swanlab 0.6.x (JSON), 2: >= 0.7
LEGACY_NONFINITE = {"NaN": math.nan, "INF": math.inf, "-INF": -math.inf}
BLOCK = 32768
_REC = struct.Struct("<IHB")
_CRC = [zlib.crc32(bytes([t])) & 0xFFFFFFFF for t in range(5)]
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def is_record_file(path: Path) -> bool:
    if not path.name.endswith(SUFFIX):
        return False
    try:
        with open(path, "rb") as f:
            return f.read(4) == IDENT
    except OSError:
        return False


def is_board_db(path: Path) -> bool:
    """swanboard's SQLite database (`<logdir>/runs.swanlab`, swanlab < 0.7): not a run."""
    try:
        with open(path, "rb") as f:
            return f.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False


def is_legacy_run(folder: Path) -> bool:
    """A pre-0.7 local run folder: `logs/<column>/` folders holding `_summary.json` and
    `<n>.log` JSON lines."""
    logs = folder / "logs"
    try:
        columns = [c for c in logs.iterdir() if c.is_dir()] if logs.is_dir() else []
    except OSError:
        return False
    return any((c / "_summary.json").is_file() for c in columns)


def find_runs(target: Path) -> list[Path]:
    """Every run below `target` (or `target` itself), in name order: record files, and the
    folders of pre-0.7 runs that have none."""
    if target.is_file():
        return [target] if is_record_file(target) else []
    files = sorted(p for p in target.rglob(f"*{SUFFIX}") if is_record_file(p))
    have = {f.parent for f in files}
    legacy = [target] if is_legacy_run(target) else []
    legacy += [d.parent for d in target.rglob("logs") if is_legacy_run(d.parent)]
    return sorted({*files, *(d for d in legacy if d not in have)})


# -- the framing ------------------------------------------------------------------------------
def version(data: bytes) -> int:
    """The record format version of a record file (after checking its header)."""
    if len(data) < HEADER.size:
        raise SourceError("too short for a SwanLab record file")
    ident, magic, v = HEADER.unpack_from(data)
    if ident != IDENT or magic != MAGIC:
        raise SourceError("not a SwanLab record file (bad header)")
    return int(v)


def records(data: bytes) -> tuple[list[bytes], int]:
    """The complete records of a record file and the number of bytes left unread."""
    if len(data) < HEADER.size:
        raise SourceError("too short for a SwanLab record file")
    ident, magic, version = HEADER.unpack_from(data)
    if ident != IDENT or magic != MAGIC:
        raise SourceError("not a SwanLab record file (bad header)")
    if version not in VERSIONS:
        raise SourceError(
            f"SwanLab record format version {version} (rlwatch reads {VERSIONS}: swanlab "
            "0.6.x and >= 0.7); "
            "a newer or older swanlab wrote it"
        )
    out: list[bytes] = []
    pos, n = HEADER.size, len(data)
    pending: list[bytes] = []
    good = pos
    while pos < n:
        left = BLOCK - pos % BLOCK
        if left < _REC.size:  # block trailer padding
            pos += left
            continue
        if pos + _REC.size > n:
            break
        crc, length, kind = _REC.unpack_from(data, pos)
        start = pos + _REC.size
        end = start + length
        if end > n or kind not in (FULL, FIRST, MIDDLE, LAST):
            break
        chunk = data[start:end]
        if zlib.crc32(chunk, _CRC[kind]) & 0xFFFFFFFF != crc:
            break
        pos = end
        if kind == FULL:
            out.append(chunk)
            pending = []
            good = pos
        elif kind == FIRST:
            pending = [chunk]
        elif pending:
            pending.append(chunk)
            if kind == LAST:
                out.append(b"".join(pending))
                pending = []
                good = pos
    return out, n - good


# -- the protobuf wire format (only what the records use) --------------------------------------
def _varint(b: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        c = b[i]
        i += 1
        result |= (c & 0x7F) << shift
        if c < 0x80:
            return result, i
        shift += 7


def fields(b: bytes) -> dict[int, object]:
    """Field number -> last value (int for varints/fixed, bytes for length-delimited)."""
    out: dict[int, object] = {}
    i, n = 0, len(b)
    while i < n:
        key, i = _varint(b, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            v, i = _varint(b, i)
            out[num] = v
        elif wire == 1:
            out[num] = b[i : i + 8]
            i += 8
        elif wire == 2:
            length, i = _varint(b, i)
            out[num] = b[i : i + length]
            i += length
        elif wire == 5:
            out[num] = b[i : i + 4]
            i += 4
        else:
            raise ValueError(f"protobuf wire type {wire}")
    return out


def _text(v: object) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else ""


def _seconds(v: object) -> float:
    if not isinstance(v, bytes):
        return math.nan
    t = fields(v)
    return float(t.get(1, 0)) + float(t.get(2, 0)) / 1e9  # type: ignore[arg-type]


# Record fields: 1 num, 2 timestamp, 10 start, 11 finish, 12 column, 13 scalar, 14 media, ...
# StartRecord: 1 project, 4 name, 7 group, 10 id. ScalarRecord: 1 key, 2 step, 4 timestamp,
# 5 value (ScalarValue: 1 number, a double).
def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def load_file(path: Path) -> RunFrame:
    """One SwanLab run from its record file, or from a pre-0.7 run folder."""
    if path.is_dir():
        return _load_legacy(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SourceError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        recs, left = records(data)
    except SourceError as exc:
        raise SourceError(f"{path}: {exc}") from None
    if version(data) == 1:
        return _load_json_records(path, recs, left)
    rows = Rows()
    start: dict[int, object] = {}
    state = None
    for rec in recs:
        try:
            r = fields(rec)
            if 13 in r:
                s = fields(r[13])  # type: ignore[arg-type]
                value = fields(s[5]).get(1) if isinstance(s.get(5), bytes) else None  # type: ignore[arg-type]
                number = struct.unpack("<d", value)[0] if isinstance(value, bytes) else 0.0
                rows.add(
                    _signed(int(s.get(2, 0))),  # type: ignore[call-overload]
                    _text(s.get(1)),
                    number,
                    _seconds(s.get(4)),
                )
            elif 10 in r:
                start = fields(r[10])  # type: ignore[arg-type]
            elif 11 in r:
                state = fields(r[11]).get(1)  # type: ignore[arg-type]
        except (ValueError, IndexError, struct.error):
            rows.skip("undecodable records")
    run_id = _text(start.get(10)) or path.stem.removeprefix("run-")
    return _frame(
        path,
        rows,
        name=_text(start.get(4)) or path.parent.name,
        project=_text(start.get(1)),
        run_id=run_id,
        group=_text(start.get(7)),
        finished=state is not None,
        left=left,
    )


def _frame(
    path: Path,
    rows: Rows,
    *,
    name: str,
    project: str,
    run_id: str,
    group: str = "",
    finished: bool = False,
    left: int = 0,
    files: list[str] | None = None,
) -> RunFrame:
    folder = path if path.is_dir() else path.parent
    info = RunInfo(name, SOURCE, str(path), files=files or [str(path)])
    info.hparams = {"swanlab/project": project, "swanlab/run_id": run_id, **_config(folder)}
    if group:
        info.hparams["swanlab/group"] = group
    info.warnings = rows.warnings(path)
    if left > BLOCK and finished:
        info.warnings.append(f"{path}: {left} bytes after the last readable record were not read")
    if not rows.steps:
        raise SourceError(f"{path}: a SwanLab run with no scalar metrics")
    return rows.frame(info)


def _legacy_value(v: object) -> float | None:
    """A logged value of the pre-0.7 clients: a number, or "NaN"/"INF"."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int | float):
        return float(v)
    return LEGACY_NONFINITE.get(v) if isinstance(v, str) else None


def _iso_seconds(v: object) -> float:
    from datetime import datetime

    try:
        return datetime.fromisoformat(str(v)).timestamp()
    except ValueError:
        return math.nan


def _add_legacy(rows: Rows, key: str, line: dict[str, object], step: object = None) -> None:
    value = _legacy_value(line.get("data"))
    at = line.get("index") if step is None else step
    if value is None or isinstance(at, bool) or not isinstance(at, int):
        rows.skip("values that are not numbers (media, text)", key=key)
        return
    rows.add(at, key, value, _iso_seconds(line.get("create_time")))


def _load_json_records(path: Path, recs: list[bytes], left: int) -> RunFrame:
    """swanlab 0.6.x: `backup.swanlab`, each record a JSON object (format version 1)."""
    rows = Rows()
    meta: dict[str, str] = {}
    finished = False
    for rec in recs:
        try:
            doc = json.loads(rec)
            kind, data = doc.get("model_type"), doc.get("data") or {}
        except (ValueError, AttributeError):
            rows.skip("undecodable records")
            continue
        if kind == "Scalar" and isinstance(data.get("metric"), dict):
            _add_legacy(rows, str(data.get("key")), data["metric"], data.get("step"))
        elif kind == "Experiment":
            meta["name"], meta["id"] = str(data.get("name") or ""), str(data.get("id") or "")
        elif kind == "Project":
            meta["project"] = str(data.get("name") or "")
        elif kind == "Footer":
            finished = True
    return _frame(
        path,
        rows,
        name=meta.get("name") or path.parent.name,
        project=meta.get("project", ""),
        run_id=meta.get("id") or path.parent.name.rsplit("-", 1)[-1],
        finished=finished,
        left=left,
    )


def _board(folder: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(column folder -> key, run facts) from swanboard's database beside the run folder."""
    db = folder.parent / "runs.swanlab"
    if not db.is_file():
        return {}, {}
    import sqlite3

    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)
        try:
            exp = con.execute(
                "SELECT e.id, e.name, p.name FROM experiment e LEFT JOIN project p "
                "ON e.project_id = p.id WHERE e.run_id = ?",
                (folder.name,),
            ).fetchone()
            if exp is None:
                return {}, {}
            tags = con.execute(
                "SELECT folder, name FROM tag WHERE experiment_id = ?", (exp[0],)
            ).fetchall()
        finally:
            con.close()
    except sqlite3.Error:
        return {}, {}
    return {str(f): str(n) for f, n in tags if f is not None}, {
        "name": str(exp[1] or ""),
        "project": str(exp[2] or ""),
    }


def _load_legacy(folder: Path) -> RunFrame:
    """swanlab 0.4.x-0.6.x local mode: `logs/<column>/<n>.log` JSON lines."""
    names, meta = _board(folder)
    rows = Rows()
    unnamed, written = [], []
    columns = sorted(
        (c for c in (folder / "logs").iterdir() if c.is_dir()),
        key=lambda c: (not c.name.isdigit(), int(c.name) if c.name.isdigit() else 0, c.name),
    )
    for col in columns:
        key = names.get(col.name)
        if key is None:
            if col.name.isdigit():
                unnamed.append(col.name)
                key = f"column {col.name}"
            else:  # swanboard < 0.1.2b8: the folder is the URL-quoted key
                key = unquote(col.name)
        parts = sorted(
            (f for f in col.glob("*.log") if f.stem.isdigit()), key=lambda f: int(f.stem)
        )
        written += [str(f) for f in parts]
        for part in parts:
            try:
                text = part.read_text(encoding="utf-8", errors="replace")
            except OSError as exc:
                rows.skip(f"unreadable files ({exc.strerror})")
                continue
            for line in text.splitlines():
                if not line.strip():
                    continue
                try:
                    doc = json.loads(line)
                except ValueError:
                    rows.skip("undecodable lines", key=key)
                    continue
                if isinstance(doc, dict):
                    _add_legacy(rows, key, doc)
    frame = _frame(
        folder,
        rows,
        name=meta.get("name") or folder.name,
        project=meta.get("project", ""),
        run_id=folder.name.rsplit("-", 1)[-1],
        files=written,
    )
    if unnamed:
        (info,) = frame.runs.values()
        info.warnings.append(
            f"{folder}: {len(unnamed)} column(s) named by number (column {unnamed[0]}, ...): "
            f"their keys are kept in swanboard's database {folder.parent / 'runs.swanlab'}, "
            "which is not there or does not know this run"
        )
    return frame


def _config(folder: Path) -> dict[str, object]:
    """The run folder's `files/config.yaml`: {key: {value: ...}} as SwanLab writes it."""
    cfg = folder / "files" / "config.yaml"
    if not cfg.is_file():
        return {}
    import yaml

    try:
        doc = yaml.safe_load(cfg.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return {}
    out: dict[str, object] = {}
    if isinstance(doc, dict):
        for k, v in doc.items():
            v = v.get("value") if isinstance(v, dict) and "value" in v else v
            out[str(k)] = v if isinstance(v, int | float | str | bool) else str(v)
    return out


def load(target: str | os.PathLike[str]) -> RunFrame:
    """A record file or a folder of SwanLab runs (each run named by its experiment name)."""
    target = Path(target)
    files = find_runs(target)
    if not files:
        raise SourceError(
            f"{target}: no SwanLab run (run-*.swanlab, backup.swanlab, logs/<column>/) found"
        )
    frames = [load_file(f) for f in files]
    seen: dict[str, int] = {}
    out = []
    for f, frame in zip(files, frames, strict=True):
        (name,) = frame.runs
        if name in seen:
            where = f if f.is_dir() else f.parent
            rel = os.path.relpath(where, target) if target.is_dir() else where.name
            frame = frame.renamed({name: f"{name} ({rel})"})
        seen[name] = 1
        out.append(frame)
    return RunFrame.concat(out)
