"""W&B local and offline run folders: the `.wandb` record log read directly.

The file is wandb's datastore: a 7-byte header (`:W&B`, magic 0xBEE1, version) then LevelDB
log framing in 32 KiB blocks — records of `crc32(type + data) | length | type | data` with
type FULL, FIRST, MIDDLE or LAST — holding serialised `wandb.proto.wandb_internal_pb2.Record`
messages. History records become frame rows (the step is `_step`, or the run's declared step
metric such as `train/global_step`); config records become run facts. A truncated or corrupt
file gives every readable record plus a warning.
"""

from __future__ import annotations

import fnmatch
import json
import math
import os
import struct
import zlib
from itertools import pairwise
from pathlib import Path
from typing import Any

from rlwatch.errors import SourceError
from rlwatch.frame import RunFrame, RunInfo
from rlwatch.sources._rows import Rows, nonfinite_string

SOURCE = "wandb-local"
HEADER = struct.Struct("<4sHB")
BLOCK = 32768
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def read_records(path: Path) -> tuple[list[bytes], list[str]]:
    """The payloads of every readable record, and warnings about what could not be read."""
    data = path.read_bytes()
    if len(data) < HEADER.size or HEADER.unpack_from(data)[:2] != (b":W&B", 0xBEE1):
        raise SourceError(f"{path}: not a W&B run file (no ':W&B' header)")
    out: list[bytes] = []
    warnings: list[str] = []
    pos, pending, bad = HEADER.size, bytearray(), 0
    while pos < len(data):
        left = BLOCK - pos % BLOCK
        if left < 7:  # a block trailer of zeros
            pos += left
            continue
        if pos + 7 > len(data):
            warnings.append(
                f"{path}: truncated record header at byte {pos} ({len(data) - pos} bytes unread)"
            )
            break
        crc, length, kind = struct.unpack_from("<IHB", data, pos)
        if crc == 0 and length == 0 and kind == 0:  # zero padding to the end of the block
            pos += left
            continue
        end = pos + 7 + length
        if end > len(data):
            warnings.append(
                f"{path}: last record truncated at byte {pos} "
                f"({len(data) - pos} bytes unread; was the run killed?)"
            )
            break
        payload = data[pos + 7 : end]
        if zlib.crc32(payload, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF != crc or kind > LAST:
            bad += 1
            pending = bytearray()
            pos += left  # resynchronise at the next block, as LevelDB readers do
            continue
        if kind == FULL:
            out.append(payload)
        elif kind == FIRST:
            pending = bytearray(payload)
        elif kind == MIDDLE:
            pending += payload
        else:
            out.append(bytes(pending + payload))
            pending = bytearray()
        pos = end
    if bad:
        warnings.append(
            f"{path}: {bad} corrupt record(s) (bad CRC); skipped to the next block each time"
        )
    return out, warnings


def load_file(path: str | os.PathLike[str], name: str | None = None) -> RunFrame:
    from wandb.proto import wandb_internal_pb2 as pb

    p = Path(path)
    payloads, warnings = read_records(p)
    out = Rows()
    hparams: dict[str, object] = {}
    step_metrics: list[tuple[str, str]] = []  # (glob, step metric)
    undecodable = skipped_values = 0
    run_name = name
    own: list[int | None] = []  # each row's W&B `_step`, beside `out`'s step-metric steps
    mapped: dict[str, tuple[str, list[int]]] = {}  # key -> its step metric, its steps
    for raw in payloads:
        rec = pb.Record()
        try:
            rec.ParseFromString(raw)
        except Exception:
            undecodable += 1
            continue
        kind = rec.WhichOneof("record_type")
        if kind == "history":
            row: dict[str, Any] = {}
            for item in rec.history.item:
                key = item.key or "/".join(item.nested_key)
                try:
                    row[key] = json.loads(item.value_json)
                except json.JSONDecodeError:
                    skipped_values += 1
            step = rec.history.step.num if rec.history.HasField("step") else row.get("_step")
            own_step = int(step) if isinstance(step, int | float) else None
            wall = row.get("_timestamp")
            wall = float(wall) if isinstance(wall, int | float) else math.nan
            media = tuple(k[: -len("_type")] for k in row if k.endswith("/_type"))
            for key, value in row.items():
                if key.startswith("_") or (media and key.startswith(media)):
                    continue
                if isinstance(value, bool) or not isinstance(value, int | float | str | None):
                    skipped_values += 1
                    continue
                if isinstance(value, str):  # W&B writes NaN/Infinity as strings
                    value = nonfinite_string(value)
                    if value is None:
                        skipped_values += 1
                        continue
                s, by = step, None
                for glob, metric in step_metrics:
                    if fnmatch.fnmatchcase(key, glob) and isinstance(row.get(metric), int | float):
                        s, by = row[metric], metric
                        break
                if not isinstance(s, int | float):
                    skipped_values += 1
                    continue
                out.add(int(s), key, math.nan if value is None else float(value), wall)
                own.append(own_step)
                if by is not None and by != key:  # the step metric itself repeats freely
                    mapped.setdefault(key, (by, []))[1].append(int(s))
        elif kind == "metric" and rec.metric.step_metric:
            step_metrics.append((rec.metric.glob_name or rec.metric.name, rec.metric.step_metric))
        elif kind in ("config", "run"):
            updates = rec.config.update if kind == "config" else rec.run.config.update
            if kind == "run" and run_name is None:
                run_name = rec.run.display_name or rec.run.run_id or None
            for item in updates:
                key = item.key or "/".join(item.nested_key)
                if key.startswith("_"):
                    continue
                try:
                    value = json.loads(item.value_json)
                except json.JSONDecodeError:
                    continue
                if isinstance(value, dict) and "value" in value:
                    value = value["value"]
                hparams[key] = (
                    value if isinstance(value, int | float | str | bool) else json.dumps(value)
                )
    crowded = _crowded(mapped)
    if crowded is not None:  # a step metric many logs share: W&B's own row counter instead
        key, metric, n, total = crowded
        if "steps" in hparams:  # the run's own config entry keeps its value, renamed
            hparams["config/steps"] = hparams.pop("steps")
        hparams["steps"] = (
            f"W&B's _step: {n} of {total} logs of {key} share a value of its step metric "
            f"{metric} with the log before"
        )
        _restep(out, own)
    if undecodable:
        warnings.append(f"{p}: {undecodable} record(s) could not be decoded")
    if skipped_values:
        warnings.append(
            f"{p}: {skipped_values} non-numeric history values ignored (media, tables, strings)"
        )
    info = RunInfo(
        run_name or p.stem, SOURCE, str(p), files=[str(p)], hparams=hparams, warnings=warnings
    )
    return out.frame(info)


def _restep(out: Rows, own: list[int | None]) -> None:
    """Put each row at its W&B `_step`, dropping the rows that have none."""
    keep = [i for i, o in enumerate(own) if o is not None]
    if len(keep) < len(own):
        out.codes = [out.codes[i] for i in keep]
        out.values = [out.values[i] for i in keep]
        out.walls = [out.walls[i] for i in keep]
    out.steps = [o for o in own if o is not None]


def _crowded(mapped: dict[str, tuple[str, list[int]]]) -> tuple[str, str, int, int] | None:
    """Whether a step metric holds still over most logs of a training metric it steps
    (`define_metric("train/*", step_metric="grpo_step")` with several optimizer steps logged per
    GRPO step): the last write of each step would keep one log in several. (key, metric, logs
    repeating the step before, logs) of the most crowded such key, or None. Only keys with a
    canonical name count (TRL's profiling timers share each logged global step between the
    logs, several a step), and a step metric that goes back is a run resumed from a checkpoint
    (its later writes replace)."""
    from rlwatch import names

    canonical = names.resolve(list(mapped)).metric_of
    worst = None
    for key, (metric, steps) in mapped.items():
        if key not in canonical or len(steps) < 6:
            continue
        ties = sum(b == a for a, b in pairwise(steps))
        rising = all(b >= a for a, b in pairwise(steps))
        if ties * 2 > len(steps) and rising and (worst is None or ties > worst[2]):
            worst = (key, metric, ties, len(steps))
    return worst


def run_files(target: Path) -> list[Path]:
    """The .wandb files of a run folder, a wandb/ folder, or the file itself."""
    if target.is_file():
        return [target]
    return sorted(target.rglob("*.wandb"))


def load(target: str | os.PathLike[str]) -> RunFrame:
    files = run_files(Path(target))
    if not files:
        raise SourceError(f"{target}: no .wandb run files in it or below")
    frames = []
    seen: set[str] = set()
    for f in files:
        frame = load_file(f)
        (name,) = frame.runs
        if name in seen:
            frame = frame.renamed({name: f"{name} ({f.parent.name})"})
        seen.update(frame.runs)
        frames.append(frame)
    return RunFrame.concat(frames)
