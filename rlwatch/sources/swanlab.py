"""SwanLab local/offline run folders, read directly (the swanlab package is not needed).

SwanLab >= 0.7 (read: the record file format version 2, written by swanlab 0.10.x in
`mode="offline"` or `"local"`) keeps each run in `<logdir>/run-<time>-<id>/run-<id>.swanlab`:
a 7-byte header (`:SWL`, magic 0xE1D6, format version) then LevelDB-log framing (32 KiB blocks;
records of crc32, length, type FULL/FIRST/MIDDLE/LAST) of protobuf `swanlab.record.v1.Record`
messages. rlwatch decodes the protobuf wire format itself and reads `start` (project, run name,
id), `scalar` (key, step, timestamp, value) and skips media, console lines and files.
Older clients (< 0.7) wrote `logs/<column>/*.log` JSON lines instead; that layout is not read.

The last record of a live run may be half-written: reading stops at the first record whose
checksum or framing does not hold, and says so when more than a tail was left.
"""

from __future__ import annotations

import math
import os
import struct
import zlib
from pathlib import Path

from rlwatch.errors import SourceError
from rlwatch.frame import RunFrame, RunInfo
from rlwatch.sources._rows import Rows

SOURCE = "swanlab"
SUFFIX = ".swanlab"
HEADER = struct.Struct("<4sHB")
IDENT, MAGIC, VERSIONS = b":SWL", 0xE1D6, (2,)
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


def find_runs(target: Path) -> list[Path]:
    """Every `run-*.swanlab` record file below `target` (or `target` itself), in name order."""
    if target.is_file():
        return [target] if is_record_file(target) else []
    return sorted(p for p in target.rglob(f"*{SUFFIX}") if is_record_file(p))


# -- the framing ------------------------------------------------------------------------------
def records(data: bytes) -> tuple[list[bytes], int]:
    """The complete records of a record file and the number of bytes left unread."""
    if len(data) < HEADER.size:
        raise SourceError("too short for a SwanLab record file")
    ident, magic, version = HEADER.unpack_from(data)
    if ident != IDENT or magic != MAGIC:
        raise SourceError("not a SwanLab record file (bad header)")
    if version not in VERSIONS:
        raise SourceError(
            f"SwanLab record format version {version} (rlwatch reads {VERSIONS}); "
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
    """One SwanLab run from its record file."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SourceError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        recs, left = records(data)
    except SourceError as exc:
        raise SourceError(f"{path}: {exc}") from None
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
    name = _text(start.get(4)) or path.parent.name
    project = _text(start.get(1))
    info = RunInfo(name, SOURCE, str(path), files=[str(path)])
    info.hparams = {"swanlab/project": project, "swanlab/run_id": run_id, **_config(path)}
    group = _text(start.get(7))
    if group:
        info.hparams["swanlab/group"] = group
    info.warnings = rows.warnings(path)
    if left > BLOCK and state is not None:
        info.warnings.append(f"{path}: {left} bytes after the last readable record were not read")
    if not rows.steps:
        raise SourceError(f"{path}: a SwanLab run with no scalar metrics")
    return rows.frame(info)


def _config(path: Path) -> dict[str, object]:
    """`files/config.yaml` beside the record file: {key: {value: ...}} as SwanLab writes it."""
    cfg = path.parent / "files" / "config.yaml"
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
        raise SourceError(f"{target}: no SwanLab run (run-*.swanlab) found")
    frames = [load_file(f) for f in files]
    seen: dict[str, int] = {}
    out = []
    for f, frame in zip(files, frames, strict=True):
        (name,) = frame.runs
        if name in seen:
            rel = os.path.relpath(f.parent, target) if target.is_dir() else f.parent.name
            frame = frame.renamed({name: f"{name} ({rel})"})
        seen[name] = 1
        out.append(frame)
    return RunFrame.concat(out)
