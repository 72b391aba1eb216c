"""JSON logs: line formats (verl FileLogger, flat JSONL with a step, LLaMA-Factory's
trainer_log.jsonl, prime-rl's metrics.jsonl, ms-swift's logging.jsonl) and whole documents
(trainer_state.json, a JSON array of log_history-style rows).

Line formats are read a block at a time with orjson when it is installed (json otherwise, and
for the lines orjson refuses: NaN/Infinity tokens, integers beyond 64 bits). Records of the same
shape (the same keys in the same order) resolve their keys to tag codes once and put their
values straight into a float array. A large verl/flat JSONL file's tail may be read by Arrow's
JSON reader in a second thread meanwhile (ArrowTail: only on an idle core, and used only when
it provably gives the same rows).
"""

from __future__ import annotations

import json
import math
import re
from array import array
from itertools import chain
from operator import itemgetter
from typing import Any

import numpy as np

from rlwatch.errors import SourceError
from rlwatch.sources._rows import STEP_KEYS
from rlwatch.sources.logs import _cols
from rlwatch.sources.logs._cols import (
    SWIFT_STEP,
    SWIFT_TEXT,
    Cols,
    _system_pool,
    sample_text,
    swift_step,
)

try:  # optional: 3-5x faster JSON parsing; json is the fallback
    import orjson

    _fast_loads: Any = orjson.loads
    _FastError: Any = orjson.JSONDecodeError
except ImportError:  # pragma: no cover - orjson is installed in CI
    _fast_loads, _FastError = json.loads, json.JSONDecodeError

NUMERIC = {float, int}
# a hand-written trainer's own step counter (`grpo_step`, `train_step`, `iteration`, a
# REINFORCE loop's `update`, `episode`; ROLL's `system/step`, a float): the step of a flat
# JSONL file whose records hold none of STEP_KEYS (the first such key of the first record
# without one; `total_steps`, `eval_every_step` and `timing_s/step` are no counters)
OWN_STEP = re.compile(
    r"(?!(?:time|timing|perf)[_/])(?:[a-z0-9]+[_/])?(?:step|iteration|iter|update|episode|round)\Z"
    r"|progress/batch\Z"  # the Tinker cookbook's `ml_log`, when it writes no `step`
)
# a record's kind, written as a string field (`{"type": "eval", ...}`); an evaluation's keys
# are named `eval/<key>` so they never overwrite the training's same-named keys of its step
KIND_KEYS = ("type", "split", "phase", "stage", "kind", "mode", "log_type")
# the one object beside a JSONL record's step that holds its values (a logger's own wrapper)
WRAPPERS = ("metrics", "data", "scalars", "logs", "values", "stats")
EVAL_KINDS = ("eval", "val", "test")
NUMERIC_OR_NULL = {float, int, type(None)}
LLAMAFACTORY_TEXT = {"elapsed_time", "remaining_time"}
LLAMAFACTORY_FACTS = {"total_steps"}


def loads(line: str | bytes) -> Any:
    """One JSON value; ValueError when it is not JSON (or nested too deep to read)."""
    try:
        return _fast_loads(line)
    except _FastError:
        pass
    try:
        return json.loads(line)
    except RecursionError:
        raise ValueError("nested too deep") from None
    except UnicodeDecodeError:
        return loads(line.decode("utf-8", "replace"))  # type: ignore[union-attr]


class _Shape:
    __slots__ = ("codes", "np_codes", "pick")

    def __init__(self, codes: array, pick: Any) -> None:
        self.codes, self.pick = codes, pick
        self.np_codes = np.frombuffer(codes, dtype=np.int32).copy()


class JsonLines:
    """One JSON record per line. `fmt` decides where the step and the metrics are:
    verl-jsonl {"step", "data": {...}}; jsonl (flat, a step key); llamafactory (current_steps);
    prime-rl ({"step", "time", **metrics}: non-finite values were dropped by the writer);
    ms-swift ("global_step/max_steps": "N/M"; the trainer state it appends at the end is no log)."""

    def __init__(self, cols: Cols, fmt: str):
        self.cols, self.fmt = cols, fmt
        self.bad_lines: list[int] = []
        self.n_bad = 0
        self.shapes: dict[tuple[str, ...], _Shape | None] = {}
        # a JSON null: NaN where the writer writes NaN so (verl's FileLogger); elsewhere "not
        # logged in this record" (a hand-written trainer's None for a feature turned off,
        # pandas' missing cells), NaN tokens being NaN
        self.none = "skip" if fmt in ("llamafactory", "jsonl", "jsonl-count") else "nan"
        self.drop: set[str] = set()
        if fmt == "llamafactory":
            self.drop = {"current_steps"} | LLAMAFACTORY_TEXT | LLAMAFACTORY_FACTS
        elif fmt == "prime-rl":
            self.drop = {"time"}
        elif fmt == "ms-swift":
            self.drop = set(SWIFT_TEXT)
        self.track = fmt == "prime-rl"
        self.present: list[tuple[int, frozenset[int]]] = []  # step, codes
        # records of one shape in a row, converted to floats by numpy in one go
        self.batch: _Shape | None = None
        self.rows: list[Any] = []
        self.steps: list[int] = []
        self.datas: list[dict[str, Any]] = []
        self.fast_types = NUMERIC | ({type(None)} if self.none == "nan" else set())
        self.threaded = False  # a second thread reads the file's tail meanwhile
        self.own_step: str | None = None  # OWN_STEP: decided by the first record without a step
        self.counted = 0  # jsonl-count: the records read so far (a record's step is its count)

    def feed_lines(self, lines: list[bytes], lineno: int = 1) -> None:
        """A block's complete lines (without their newlines). Plain blocks -- every line a
        record of the format, every value a number -- are parsed by orjson and converted to
        columns a run of same-shape records at a time; anything else goes through `feed`."""
        if self.fmt in ("verl-jsonl", "jsonl") and _fast_loads is not json.loads:
            try:
                if self._plain_lines(lines):
                    return
            except (ValueError, TypeError, KeyError, OverflowError):  # unusual: read as below
                pass
        self.feed(b"\n".join(lines) + b"\n" if lines else b"", lineno)

    def _plain_lines(self, lines: list[bytes]) -> bool:
        """Every line one JSON object with an integer step >= 0 (verl: and a `data` object) and
        plain numbers for values. Nothing is added unless the whole block qualifies."""
        if not lines:
            return True
        if self.threaded:  # short C calls: a second thread waiting for the GIL gets it soon
            objs = []
            for i in range(0, len(lines), 16):
                objs += map(_fast_loads, lines[i : i + 16])
        else:
            objs = list(map(_fast_loads, lines))  # orjson.JSONDecodeError is a ValueError
        if set(map(type, objs)) != {dict}:
            return False
        if self.fmt == "verl-jsonl":
            steps = [o["step"] for o in objs]
            datas = [o["data"] for o in objs]
            if set(map(type, datas)) != {dict}:
                return False
        else:
            datas = objs
            steps = []
        # runs of consecutive records with the same keys in the same order
        keys = list(map(tuple, datas))
        runs: list[tuple[int, int, tuple[str, ...]]] = []
        start = 0
        for i in range(1, len(keys) + 1):
            if i == len(keys) or keys[i] != keys[start]:
                runs.append((start, i, keys[start]))
                start = i
        plan = []
        for a, b, ks in runs:
            if self.fmt == "jsonl":
                key = next((k for k in STEP_KEYS if k in ks), None)
                if key is None:
                    return False
                run_steps = [d[key] for d in datas[a:b]]
            else:
                run_steps = steps[a:b]
            if set(map(type, run_steps)) != {int}:
                return False
            st = np.array(run_steps, np.int64)  # OverflowError beyond int64
            if st.min() < 0:
                return False
            keep = [i for i, k in enumerate(ks) if not (k in STEP_KEYS or k in self.drop)]
            if not keep:
                return False
            if len(keep) == len(ks):  # the values straight from the dicts, no row tuples
                part = datas[a:b]
                types = set(map(type, chain.from_iterable(map(dict.values, part))))
                if not types <= self.fast_types:
                    return False
                # null -> NaN where it is NaN (verl); ints correctly rounded (as np.array);
                # OverflowError beyond float
                flat = chain.from_iterable(map(dict.values, part))
                vals = np.fromiter(flat, np.float64, count=(b - a) * len(ks))
                plan.append((st, list(ks), vals.reshape(b - a, len(ks))))
                continue
            pick = itemgetter(*keep) if len(keep) > 1 else lambda t, i=keep[0]: (t[i],)
            rows = [pick(tuple(d.values())) for d in datas[a:b]]
            types = set(map(type, chain.from_iterable(rows)))
            if not types <= self.fast_types:  # a string, boolean, list or object
                return False
            # null -> NaN where it is NaN, as the record path reads it; an int beyond float:
            # OverflowError
            vals = np.array(rows, np.float64)
            if vals.ndim != 2:
                return False
            plan.append((st, [ks[i] for i in keep], vals))
        cols = self.cols
        for st, names, vals in plan:
            codes = np.array([cols.code(str(k)) for k in names], np.int32)
            n, k = vals.shape
            cols.add_arrays(np.tile(codes, n), np.repeat(st, k), vals.reshape(-1))
        return True

    def add_region(self, region: Region) -> None:
        """A region's rows (_json.plain_region), after the rows read so far."""
        self.flush()
        cols = self.cols
        codes = np.array([cols.code(k) for k in region.names], np.int32)
        n, k = region.values.shape
        cols.add_arrays(np.tile(codes, n), np.repeat(region.steps, k), region.values.reshape(-1))

    def feed(self, text: str | bytes, lineno: int = 1) -> None:
        if isinstance(text, bytes):
            if self.fmt == "verl-jsonl" and self._verl_text(text):
                return
            if self.fmt in ("verl-jsonl", "jsonl") and self._arrow(text):
                return
        nl = b"\n" if isinstance(text, bytes) else "\n"
        for i, line in enumerate(text.split(nl)[:-1], lineno):  # type: ignore[arg-type]
            if not line or line.isspace():
                continue
            try:
                obj = loads(line)
            except ValueError:
                self._bad(i)
                continue
            if not isinstance(obj, dict):
                self._bad(i)
                continue
            self.record(obj, i)
        self.flush()

    def _verl_text(self, block: bytes) -> bool:
        """verl FileLogger lines of plain numbers ({"step":N,"data":{"k":1.5,...}}, compact or
        with spaces) read as text by Arrow string kernels, like the console log: split into
        items, items into key and value, values cast by Arrow's exact float parser. Taken only
        when nothing can be misread: no escape, list or nested object (checked here), and every
        value a plain number (a string, true/false or null leaves a value Arrow refuses to cast,
        and the block is read otherwise)."""
        if b"\\" in block or b"[" in block:
            return False
        arrow = _verl_arrow()
        if arrow is None:
            return False
        pa, pc = arrow
        found = VERL_LINE.findall(block)
        nlines = block.count(b"\n")
        if not found or len(found) != nlines or block.count(b"{") != 2 * nlines:
            return False
        spaced = found[0][1][:80].find(b'": ') >= 0  # json.dumps' default separators
        item_sep, kv_sep = (', "', '": ') if spaced else (',"', '":')
        prefix = item_sep[:-1].encode()
        steps, texts = [], []
        for digits, inner in found:
            if len(digits) > 18:
                return False
            steps.append(int(digits))
            texts.append(prefix + inner.strip())
        try:
            lines = pa.array(texts, pa.binary()).cast(pa.string())
        except pa.ArrowInvalid:  # not UTF-8
            return False
        lists = pc.list_slice(pc.split_pattern(lines, item_sep), 1)
        per_line = pc.list_value_length(lists).to_numpy(zero_copy_only=False)
        kv = pc.split_pattern(lists.flatten(), kv_sep, max_splits=1)
        if not len(kv) or pc.min(pc.list_value_length(kv)).as_py() != 2:
            return False
        flat = kv.flatten()
        keys = flat.take(pa.array(np.arange(0, len(flat), 2)))
        raw = flat.take(pa.array(np.arange(1, len(flat), 2)))
        raw = pc.utf8_trim_whitespace(raw)
        try:
            values = pc.cast(raw, pa.float64()).to_numpy(zero_copy_only=False)
        except pa.ArrowInvalid:
            return False
        cols = self.cols
        enc = pc.dictionary_encode(keys)
        table = np.array(
            [-1 if k in STEP_KEYS else cols.code(k) for k in enc.dictionary.to_pylist()], np.int32
        )
        codes = table[enc.indices.to_numpy(zero_copy_only=False)]
        step_of = np.repeat(np.asarray(steps, np.int64), per_line)
        if (codes < 0).any():
            keep = codes >= 0
            codes, step_of, values = codes[keep], step_of[keep], values[keep]
        cols.add_arrays(codes, step_of, values)
        return True

    def _arrow(self, block: bytes) -> bool:
        """A block read by Arrow's JSON reader straight into columns (no Python object per
        value), when it is plain: every record a JSON object with an integer step >= 0 and no
        `null`/NaN (Arrow cannot tell null from a missing key; NaN is not JSON). Anything else
        -- or any doubt -- returns False and the block is read record by record."""
        if b"null" in block or b"NaN" in block or b"Infinity" in block:
            return False
        if _deeply_nested(block):  # Arrow's reader is quadratic in the depth (gate, #11)
            return False
        try:
            return self._arrow_plain(block)
        except (UnicodeDecodeError, RecursionError):  # non-UTF-8 keys: record by record
            return False

    def _arrow_plain(self, block: bytes) -> bool:
        arrow = _arrow_json()
        if arrow is None:
            return False
        pa, pj = arrow
        try:
            table = pj.read_json(
                pa.py_buffer(block),
                read_options=pj.ReadOptions(use_threads=True, block_size=len(block) + 1),
            )
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OverflowError, ValueError):
            return False
        names = table.column_names
        if self.fmt == "verl-jsonl":
            if "step" not in names or "data" not in names:
                return False
            step_col, data = table.column("step"), table.column("data")
            if not pa.types.is_struct(data.type) or data.null_count:
                return False
            data = data.combine_chunks()
            fields = [(f.name, data.field(i)) for i, f in enumerate(data.type)]
        else:
            key = next((k for k in STEP_KEYS if k in names), None)
            if key is None:
                return False
            if any(pa.types.is_string(table[k].type) for k in KIND_KEYS if k in names):
                return False  # records that say their kind (`"split": "eval"`): one by one
            step_col = table.column(key)
            rest = [n for n in names if n not in STEP_KEYS and n not in self.drop]
            wrapped = [n for n in rest if n in WRAPPERS and pa.types.is_struct(table[n].type)]
            if wrapped:  # `{"metrics": {...}, "step": N}` on every line, or record by record
                inner = table.column(wrapped[0])
                if len(names) != 2 or rest != wrapped or inner.null_count:
                    return False
                inner = inner.combine_chunks()
                fields = [(f.name, inner.field(i)) for i, f in enumerate(inner.type)]
            else:
                fields = [(n, table.column(n).combine_chunks()) for n in rest]
        if not pa.types.is_integer(step_col.type) or step_col.null_count or not len(step_col):
            return False
        steps = step_col.to_numpy().astype(np.int64, copy=False)
        if steps.min() < 0:
            return False
        cols, n = self.cols, len(steps)
        try:
            leaves = list(_leaves(fields, ""))
        except _NotPlain:
            return False
        if any(_number_list(arr.type) for _, arr in leaves):  # samples: record by record
            return False
        names_, values, valid = [], [], []
        for name, arr in leaves:
            if name in STEP_KEYS and "/" not in name and self.fmt == "verl-jsonl":
                continue
            t = arr.type
            if pa.types.is_integer(t) or pa.types.is_floating(t):
                names_.append(name)
                values.append(arr.to_numpy(zero_copy_only=False).astype(np.float64, copy=False))
                valid.append(arr.is_valid().to_numpy(zero_copy_only=False))
            elif pa.types.is_null(t):
                continue
            else:
                reason = "boolean values" if pa.types.is_boolean(t) else "non-numeric values"
                cols.skip(reason, len(arr) - arr.null_count, key=name)
                if cols.samples is None and self.fmt == "jsonl" and pa.types.is_string(t):
                    text = arr.drop_null()
                    cols.samples = sample_text({name: text[0].as_py()}) if len(text) else None
        if names_:
            codes = np.array([cols.code(k) for k in names_], np.int32)
            vals = np.column_stack(values)  # rows x keys: row-major = the order written
            mask = np.column_stack(valid)
            cols.add_arrays(
                np.broadcast_to(codes, (n, len(codes)))[mask],
                np.broadcast_to(steps[:, None], (n, len(codes)))[mask],
                vals[mask],
            )
        return True

    def flush(self) -> None:
        """The batched records of one shape: one numpy conversion, then columns."""
        shape, rows = self.batch, self.rows
        if shape is None or not rows:
            return
        steps, datas = self.steps, self.datas
        self.batch, self.rows, self.steps, self.datas = None, [], [], []
        try:
            values = np.array(rows, dtype=np.float64)
        except (TypeError, ValueError, OverflowError):  # e.g. an integer beyond float range
            for step, data in zip(steps, datas, strict=True):
                self.cols.add_mapping(step, data, none=self.none, drop=self.drop)
            return
        k = len(shape.codes)
        self.cols.add_arrays(
            np.tile(shape.np_codes, len(rows)),
            np.repeat(np.asarray(steps, np.int64), k),
            values.reshape(-1),
        )

    def _bad(self, lineno: int) -> None:
        self.n_bad += 1
        if len(self.bad_lines) < 5:
            self.bad_lines.append(lineno)

    def record(self, obj: dict[str, Any], lineno: int = 0) -> None:
        cols, fmt = self.cols, self.fmt
        wall = math.nan
        if fmt == "verl-jsonl":
            step, data = cols.step(obj.get("step")), obj.get("data")
            if step is None or not isinstance(data, dict):
                self._bad(lineno)
                return
        else:
            if fmt == "llamafactory":
                raw = obj.get("current_steps")
                for k in LLAMAFACTORY_FACTS:
                    if k in obj:
                        cols.facts[k] = obj[k]
            elif fmt == "ms-swift":
                digits = swift_step(obj.get(SWIFT_STEP))
                if digits is None and ("log_history" in obj or "last_model_checkpoint" in obj):
                    return  # the trainer state written when the run ends: its logs are above
                if "train_runtime" in obj:  # the training's summary (as in trainer_state.json)
                    cols.facts.update(
                        {f"summary/{k}": v for k, v in obj.items() if k not in SWIFT_TEXT}
                    )
                    return
                step = None if digits is None else cols.step_text(digits)
                if step is None:
                    if digits is None:
                        self._bad(lineno)
                    return
                raw = step
            elif fmt == "jsonl-count":
                if not counted_record(obj):
                    self._bad(lineno)
                    return
                self.counted += 1
                if self.counted == 1:
                    cols.notes.append(
                        "no step field: each line is one log, its step the line's count from 1"
                    )
                raw = self.counted
            else:
                raw = next((obj[k] for k in STEP_KEYS if _is_num(obj.get(k))), None)
                if fmt == "prime-rl" and _is_num(obj.get("time")):
                    wall = float(obj["time"])
                elif raw is None and fmt == "jsonl":
                    if self.own_step is None:
                        self.own_step = own_step_key(obj)
                        if self.own_step is not None:
                            self.drop.add(self.own_step)
                    raw = obj.get(self.own_step) if self.own_step is not None else None
            if raw is None or not _is_num(raw):
                self._bad(lineno)
                return
            step = cols.step(raw)
            if step is None:
                return
            data = obj
            if fmt == "jsonl" and len(obj) == 2:
                # `{"metrics": {...}, "step": N}`: the object beside the step is the record
                inner = next((obj[k] for k in WRAPPERS if type(obj.get(k)) is dict), None)
                data = obj if inner is None else inner
            if fmt == "jsonl":
                kind = next((k for k in KIND_KEYS if isinstance(obj.get(k), str)), None)
                if kind is not None:
                    self._kind(step, obj, kind)
                    return
        keys = tuple(data)
        shape = self.shapes.get(keys, False)
        if shape is False:
            shape = self.shapes[keys] = self._shape(keys, nested=fmt == "verl-jsonl")
        if shape is not None and not self.track and math.isnan(wall):
            vals = data.values()
            picked = tuple(vals) if shape.pick is None else shape.pick(tuple(vals))
            if set(map(type, picked)) <= self.fast_types:
                if shape is not self.batch:
                    self.flush()
                    self.batch = shape
                self.rows.append(picked)
                self.steps.append(step)
                self.datas.append(data)
                return
        self.flush()
        n0 = len(cols.codes)
        done = False
        if shape is not None:
            vals = data.values()
            picked = vals if shape.pick is None else shape.pick(tuple(vals))
            if set(map(type, picked)) <= NUMERIC:
                try:
                    cols.add_row(step, shape.codes, picked, wall)
                    done = True
                except (TypeError, OverflowError, ValueError):
                    pass
        if not done:
            if fmt == "jsonl" and cols.samples is None:
                cols.samples = sample_text(data)
            cols.add_mapping(step, data, none=self.none, wall=wall, drop=self.drop)
        if self.track:
            self.present.append((step, frozenset(cols.codes[n0:])))  # rows, not chunks

    def _kind(self, step: int, obj: dict[str, Any], kind: str) -> None:
        """A record that says its kind: its keys under `eval/` for an evaluation's, else as
        written; the kind itself is a label, no value."""
        self.flush()
        evaluation = obj[kind].strip().lower().startswith(EVAL_KINDS)
        skip = self.drop
        rest = {k: v for k, v in obj.items() if k != kind and k not in STEP_KEYS and k not in skip}
        self.cols.add_mapping(step, rest, "eval/" if evaluation else "", none=self.none)

    def _shape(self, keys: tuple[str, ...], nested: bool) -> _Shape | None:
        """Codes and positions of a record shape's metric keys (None: read key by key)."""
        keep = [i for i, k in enumerate(keys) if not (k in STEP_KEYS or k in self.drop)]
        if not keep:
            return None
        codes = array("i", [self.cols.code(str(keys[i])) for i in keep])
        if len(keep) == len(keys):
            return _Shape(codes, None)
        if len(keep) == 1:
            (i,) = keep
            return _Shape(codes, lambda t: (t[i],))
        return _Shape(codes, itemgetter(*keep))

    def finish(self) -> None:
        self.flush()
        if self.n_bad:
            self.cols.skip(
                f"lines that are not a JSON record with a step (line "
                f"{', '.join(map(str, self.bad_lines))}"
                f"{', ...' if self.n_bad > len(self.bad_lines) else ''})",
                self.n_bad,
            )
            self.n_bad, self.bad_lines = 0, []
        if self.track:
            self._vanished()

    def _vanished(self) -> None:
        """prime-rl's FileMonitor drops NaN/inf values before writing: a metric logged at every
        record that then goes missing is evidence (likely non-finite), not silence."""
        rows = self.present
        if len(rows) < 4:
            return
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        count: dict[int, int] = {}
        for r, (_, codes) in enumerate(rows):
            for c in codes:
                first.setdefault(c, r)
                last[c] = r
                count[c] = count.get(c, 0) + 1
        gone = []
        for c, f in sorted(first.items(), key=lambda x: x[1]):
            run = f
            while run < len(rows) and c in rows[run][1]:
                run += 1
            if run - f >= 3 and run < len(rows):  # logged at every record, then a hole
                missing = len(rows) - f - count[c]
                gone.append((self.cols.tags[c], rows[run][0], missing, last[c] < run))
        for tag, at, missing, ended in gone[:20]:
            what = "vanished" if ended else f"missing from {missing} record(s)"
            self.cols.notes.append(
                f"metric {tag!r} was logged at every record, then {what} from step {at} on "
                "(prime-rl's metrics.jsonl drops NaN/inf values: likely non-finite)"
            )
        if gone:
            self.cols.facts["vanished_metrics"] = ", ".join(f"{t}@{a}" for t, a, _, _ in gone)
        self.present = []


def _leaves(fields: list[tuple[str, Any]], prefix: str) -> Any:
    """(a/b name, array) of every non-struct leaf of struct fields, in field order."""
    import pyarrow as pa

    for name, arr in fields:
        if pa.types.is_struct(arr.type):
            sub = [(f.name, arr.field(i)) for i, f in enumerate(arr.type)]
            if arr.null_count:  # a record whose value here is not an object: read it as before
                raise _NotPlain
            yield from _leaves(sub, f"{prefix}{name}/")
        else:
            yield f"{prefix}{name}", arr


def _number_list(t: Any) -> bool:
    """Whether an Arrow type is a list of numbers (a batch's samples, `Cols._samples`)."""
    import pyarrow as pa

    return (pa.types.is_list(t) or pa.types.is_large_list(t)) and (
        pa.types.is_integer(t.value_type) or pa.types.is_floating(t.value_type)
    )


class _NotPlain(Exception):
    pass


_ARROW_JSON: Any = None
_VERL_ARROW: Any = None
VERL_LINE = re.compile(rb'^\{"step": ?(\d+), ?"data": ?\{(.*)\}\}[ \t\r]*$', re.M)


def _deeply_nested(block: bytes, limit: int = 64) -> bool:
    """Whether brackets in `block` nest deeper than `limit` (strings not excluded: a false
    alarm only costs the fast path). Linear, in numpy."""
    b = np.frombuffer(block, np.uint8)
    step = ((b == 91) | (b == 123)).astype(np.int32) - ((b == 93) | (b == 125))
    return bool(step.size) and int(np.cumsum(step).max()) > limit


def _verl_arrow() -> Any:
    global _VERL_ARROW
    if _VERL_ARROW is None:
        try:
            import pyarrow as pa
            import pyarrow.compute as pc

            _system_pool(pa)
            _VERL_ARROW = (pa, pc)
        except ImportError:  # pragma: no cover
            _VERL_ARROW = False
    return _VERL_ARROW or None


def _arrow_json() -> Any:
    global _ARROW_JSON
    if _ARROW_JSON is None:
        try:
            import pyarrow as pa
            import pyarrow.json as pj

            _system_pool(pa)
            _ARROW_JSON = (pa, pj)
        except ImportError:  # pragma: no cover - pyarrow ships with pandas' extras
            _ARROW_JSON = False
    return _ARROW_JSON or None


def _is_num(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


# -- whole documents ----------------------------------------------------------------------
def _entries(text: str, path: str, warnings: list[str]) -> tuple[list[Any], dict[str, Any]]:
    """The rows of a trainer_state.json (its log_history) or of a JSON array; a cut file gives
    the complete rows before the cut."""
    try:
        doc = loads(text)
    except ValueError as exc:
        m = HISTORY_KEY.search(text)
        start = m.end() - 1 if m else text.find("[")
        entries, pos = _complete_rows(text, start)
        msg = getattr(exc, "msg", str(exc))
        warnings.append(
            f"{path}: not valid JSON ({msg}); read the {len(entries)} complete "
            f"{'log_history entries' if m else 'rows'} before byte {pos}, the rest "
            f"({len(text) - pos} bytes) is lost"
        )
        return entries, {}
    if isinstance(doc, list):
        return doc, {}
    key = _history_key(doc)
    if key is None:
        raise SourceError(f"{path}: a JSON file without a 'log_history' list")
    facts = {
        k: v
        for k, v in doc.items()
        if k != key and isinstance(v, int | float | str) and not _huge(v)
    }
    return doc[key], facts


# a trainer state's `log_history`, or a dump of one under a key of its own (`raw_log_history`)
HISTORY_KEY = re.compile(r'"(\w{0,64}log_history)"\s{0,64}:\s{0,64}\[')
# a key whose list holds rows (`{"metrics": [{"step": 0, "reward/all/mean": ...`: Prime
# Intellect's hosted-RL export of a prime-rl run's history; `"points": [{"step": 0, ...`)
ROWS_KEY = re.compile(r'"([\w./-]{1,64})"\s{0,64}:\s{0,64}\[\s{0,64}\{')


def _history_key(doc: Any) -> str | None:
    """The key of a document's log_history list: `log_history`, else the first key that ends
    with it (a script's own dump of `trainer.state.log_history`), else the first key holding a
    list of rows whose first has a step (`_step_rows`: an export's `metrics`, a dump's
    `points`)."""
    if not isinstance(doc, dict):
        return None
    keys = ["log_history"] + [k for k in doc if isinstance(k, str) and k.endswith("log_history")]
    found = next((k for k in keys if isinstance(doc.get(k), list)), None)
    if found is None:
        found = next((k for k, v in doc.items() if isinstance(k, str) and _step_rows(v)), None)
    return found


def _step_rows(rows: Any) -> bool:
    """A list of rows, the first an object with a numeric step (STEP_KEYS) and a number more."""
    if not isinstance(rows, list) or not rows or not isinstance(rows[0], dict):
        return False
    row = rows[0]
    step = next((k for k in STEP_KEYS if _is_num(row.get(k))), None)
    return step is not None and any(_is_num(v) for k, v in row.items() if k != step)


def _rows_head(head: str) -> bool:
    """A document's head holding a key whose list holds rows with a step (ROWS_KEY; the first
    eight such lists looked at, their first row parsed)."""
    for n, m in enumerate(ROWS_KEY.finditer(head)):
        if n >= 8:
            return False
        try:  # the list's first row, from its `{`
            row, _ = json.JSONDecoder().raw_decode(head, m.end() - 1)
        except (json.JSONDecodeError, RecursionError):
            continue
        if _step_rows([row]):
            return True
    return False


def _huge(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and abs(v) > 2**63


def _complete_rows(text: str, start: int) -> tuple[list[Any], int]:
    entries: list[Any] = []
    pos, dec = start + 1, json.JSONDecoder()
    if start < 0:
        return entries, 0
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        try:
            obj, pos = dec.raw_decode(text, pos)
        except (json.JSONDecodeError, RecursionError):
            break
        entries.append(obj)
    return entries, pos


def read_document(text: str, cols: Cols, warnings: list[str], path: str) -> None:
    """trainer_state.json or a JSON array of log_history-style rows."""
    entries, facts = _entries(text, path, warnings)
    cols.facts.update(facts)
    for entry in entries:
        raw = (
            next((entry[k] for k in STEP_KEYS if _is_num(entry.get(k))), None)
            if isinstance(entry, dict)
            else None
        )
        if raw is None:
            cols.skip("log_history entries without a step")
            continue
        step = cols.step(raw)
        if step is None:
            continue
        if "train_runtime" in entry:
            cols.facts.update(
                {f"summary/{k}": v for k, v in entry.items() if isinstance(v, int | float | str)}
            )
            continue
        cols.add_mapping(step, entry)


def sniff_document(head: str) -> str | None:
    stripped = head.lstrip()
    if stripped.startswith("{") and HISTORY_KEY.search(head) and not _a_record(stripped):
        return "trainer-state"
    if stripped.startswith("{") and _rows_head(head) and not _a_record(stripped):
        return "trainer-state"  # its rows read as a log_history's
    if curves_in(head) is not None:
        return "curves"
    if stripped.startswith("["):
        rest = stripped[1:].lstrip()
        if rest.startswith("{"):
            entries, _ = _complete_rows(stripped, 0)
            if (
                entries
                and isinstance(entries[0], dict)
                and any(_is_num(entries[0].get(k)) for k in STEP_KEYS)
            ):
                return "json-array"
    return None


MIN_CURVE = 6  # values in a list that makes a JSON object a document of curves
CURVE_SUFFIX = re.compile(
    r"[_/.-]?(?:curves?|history|hist|values|per_step|series|avg)$", re.IGNORECASE
)
CURVE_STEPS = ("steps", "step", "iterations", "iteration", "global_steps", "x")


def _curves(doc: dict[str, Any], prefix: str = "", depth: int = 0) -> list[tuple[str, Any]]:
    """(name, list) for each list of at least 2 numbers or [step, value] pairs in an object,
    nested objects' keys joined with `/` (4 deep at most)."""
    out: list[tuple[str, Any]] = []
    for k, v in doc.items():
        if not isinstance(k, str):
            continue
        if isinstance(v, dict) and depth < 4:
            out += _curves(v, f"{prefix}{k}/", depth + 1)
        elif isinstance(v, list) and len(v) >= 2:
            if all(map(_is_num, v)) or all(
                isinstance(p, list) and len(p) == 2 and _is_num(p[0]) and _is_num(p[1]) for p in v
            ):
                out.append((prefix + k, v))
            elif all(isinstance(r, dict) and _is_num(r.get("value")) for r in v):
                # [{"step": 1, "value": 0.69, "epoch": 0.01}, ...]: a callback's records
                key = next((s for s in STEP_KEYS if all(_is_num(r.get(s)) for r in v)), None)
                if key is not None:
                    out.append((prefix + k, [[r[key], r["value"]] for r in v]))
    return out


MAX_CURVE_RUNS = 64  # records of a JSONL file of curves, a run each
RUN_FIELDS = ("run_name", "run", "name", "experiment", "variant", "seed")
SPLITS = {"train", "training", "eval", "evaluation", "val", "valid", "validation", "test", "dev"}


# a JSON object whose first value is a list of numbers (or of [step, value] pairs)
CURVES_HEAD = re.compile(r'\s{0,64}\{\s{0,64}"[^"\\]{1,200}"\s{0,16}:\s{0,16}\[\s{0,64}[-\d\[]')


def curves_in(head: str) -> dict[str, Any] | None:
    """The document of curves a file's head is whole (curve_doc) when it holds a curve of
    MIN_CURVE values or more, else None (a cut or larger one is not judged by its head)."""
    stripped = head.lstrip()
    if not stripped.startswith("{") or ('": [' not in head and '":[' not in head):
        return None
    doc = curve_doc(stripped)
    if doc is None or not any(len(c) >= MIN_CURVE for _, c in _curves(doc)):
        return None
    return doc


def curve_doc(text: str) -> dict[str, Any] | None:
    """A document of curves as one object: the JSON object, or the records of a JSONL file
    whose every line is an object of curves without a step (a run each: a sweep's seeds),
    under the name of each run's `run_name`/`run`/`name`/`experiment`/`variant`/`seed` field
    (`seed=0`), else `line N`. None for anything else (a record with a step is a log's)."""
    try:
        doc = loads(text)
    except (ValueError, RecursionError):
        doc = None
    if isinstance(doc, dict):
        return doc if sniff_line(doc) is None else None
    if doc is not None:
        return None
    out: dict[str, Any] = {}
    lines = [(i, ln) for i, ln in enumerate(text.splitlines(), 1) if ln.strip()]
    if len(lines) > MAX_CURVE_RUNS:  # many records: a per-sample file, not a sweep's runs
        return None
    for i, line in lines:
        try:
            obj = loads(line)
        except (ValueError, RecursionError):
            return None
        if not isinstance(obj, dict) or sniff_line(obj) is not None:
            return None
        if not any(len(c) >= MIN_CURVE for _, c in _curves(obj)) or any(
            isinstance(v, str) and len(v) > 64 for v in obj.values()
        ):
            return None  # no curve, or a sample's text (a prompt, a completion)
        field = next((k for k in RUN_FIELDS if isinstance(obj.get(k), int | str)), None)
        name = f"{field}={obj[field]}" if field is not None else f"line {i}"
        out[name if name not in out else f"{name} (line {i})"] = obj
    return out if len(out) >= 2 else None


def curve_runs(doc: dict[str, Any]) -> tuple[int, list[str]]:
    """The runs a document of curves holds (`<run>/<metric>` below any container key the
    curves share: a sweep's seeds, `{"ALIGNED": {"loss": [...]}, "SYCOPHANT": {...}}`) and
    how many leading components name no run; no runs when it is one run. Splits (`train/`,
    `eval/`) are one run's parts, never runs."""
    parts = [name.split("/") for name, _ in _curves(doc)]
    k = 0
    while parts and all(len(p) > k + 1 for p in parts) and len({p[k] for p in parts}) == 1:
        k += 1
    if not parts or any(len(p) < k + 2 for p in parts):
        return k, []
    metrics: dict[str, set[str]] = {}
    for p in parts:
        metrics.setdefault(p[k], set()).add("/".join(p[k + 1 :]))
    runs = list(metrics)
    if len(runs) < 2 or {r.lower() for r in runs} & SPLITS:
        return k, []
    shared = set.intersection(*metrics.values())
    return (k, runs) if shared else (k, [])


def _singular(key: str) -> str:
    """A curve's name in the singular, as the metric its values are a log each of
    (`train_losses` -> `train_loss`, `val_accuracies` -> `val_accuracy`, `gradient_norms` ->
    `gradient_norm`); any other name as it is."""
    cut = max(key.rfind("_"), key.rfind("/")) + 1
    head, word = key[:cut], key[cut:]
    low = word.lower()
    if len(low) < 4 or not low.isalpha():
        return key
    if low.endswith("ies"):
        word = word[:-3] + "y"
    elif low.endswith("sses"):
        word = word[:-2]
    elif low.endswith("s") and not low.endswith(("ss", "us", "is", "as")):
        word = word[:-1]
    return head + word


def read_curves(text: str, cols: Cols, path: str, run: str | None = None) -> None:
    """A JSON object of whole curves (sniff_document): each list of numbers is a metric whose
    i-th value is step i (from 1), or the step a `steps` list as long gives it; a list of
    [step, value] pairs carries its own steps. Named by its key without a `_curve` suffix;
    the object's plain numbers and strings are the run's facts. With `run`, one of the runs
    the document holds (curve_runs): its curves, named below it."""
    doc = curve_doc(text)
    if doc is None:
        raise SourceError(f"{path}: not a JSON object of curves (or cut)")
    curves = _curves(doc)
    if run is not None:
        k, runs = curve_runs(doc)
        if run not in runs:
            raise SourceError(f"{path}: no run {run!r} in it")
        picked = []
        for name, values in curves:
            p = name.split("/")
            if p[k] == run:
                picked.append(("/".join(p[k + 1 :]), values))
        curves = picked
        if k == 0 and isinstance(doc.get(run), dict):  # a run's own facts (its seed, ...)
            doc = doc[run]
    axes = {len(v): v for k, v in curves if k.split("/")[-1].lower() in CURVE_STEPS}
    axes = {
        n: v for n, v in axes.items() if all(type(x) is int and 0 <= x <= _cols.MAX_STEP for x in v)
    }
    cols.facts.update(
        {k: v for k, v in doc.items() if isinstance(v, int | float | str) and not _huge(v)}
    )
    # the longest plain curve without an axis of its own: one half as long or shorter beside it
    # is a value every so many of its steps (an evaluation every 500 steps in a list of its own)
    plain = [
        len(v)
        for k, v in curves
        if not isinstance(v[0], list)
        and k.split("/")[-1].lower() not in CURVE_STEPS
        and len(v) not in axes
    ]
    longest = max(plain, default=0)
    for name, values in curves:
        if name.split("/")[-1].lower() in CURVE_STEPS:  # an axis, never a metric
            continue
        key = _singular(CURVE_SUFFIX.sub("", name) or name)
        if isinstance(values[0], list):  # [step, value] pairs
            for raw, v in values:
                step = cols.step(raw)
                x = None if step is None else cols.value(key, v)
                if x is not None:
                    cols.add(step, key, x)
            continue
        try:
            vals = np.array(values, np.float64)
        except OverflowError:  # an integer beyond float: one value at a time
            vals = np.array([cols.value(key, v) for v in values], np.float64)
        steps = axes.get(len(values))
        n = len(vals)
        if steps is not None:
            st = np.array(steps, np.int64)
        elif 2 * n <= longest:  # (a list a value or two short of the longest is one a step)
            st = np.rint(np.arange(1, n + 1) * (longest / n)).astype(np.int64)
            cols.notes.append(
                f"{name}: {n} values beside curves of {longest} and no steps of its own: "
                f"placed every {longest / n:.3g} steps, the last at step {int(st[-1])}"
            )
        else:
            st = np.arange(1, n + 1)
        cols.add_arrays(np.full(n, cols.code(key)), st, vals)
    if not len(cols):
        raise SourceError(f"{path}: a JSON document of curves without a number")


def _a_record(text: str) -> bool:
    """The first line is a whole JSON object without a log_history: a line of JSONL (ms-swift
    appends its trainer state, log_history and all, as the last line of logging.jsonl)."""
    try:
        obj = loads(text.split("\n", 1)[0])
    except ValueError:
        return False
    return isinstance(obj, dict) and _history_key(obj) is None


def sniff_line(obj: Any) -> str | None:
    if not isinstance(obj, dict):
        return None
    if _is_num(obj.get("step")) and isinstance(obj.get("data"), dict):
        return "verl-jsonl"
    if _is_num(obj.get("current_steps")) and "total_steps" in obj:
        return "llamafactory"
    if swift_step(obj.get(SWIFT_STEP)) is not None:
        return "ms-swift"
    keys = list(obj)[:2]
    if keys == ["step", "time"] and _is_num(obj["time"]) and obj["time"] > 1e9:
        return "prime-rl"
    if any(_is_num(obj.get(k)) for k in STEP_KEYS):
        return "jsonl"
    key = own_step_key(obj)
    if key is not None and any(_is_num(v) for k, v in obj.items() if k != key):
        return "jsonl"
    return None


def counted_record(obj: Any) -> bool:
    """A JSON line without a step that is still one log: two or more keys, each namespaced
    (`rollout_info/ep_rew`, `ppo/approx_kl`), each value a number. RL4LMs writes its rollout
    and training metrics so, a line per iteration. A per-sample file (`{"idx": 3, "score":
    0.5, "response": ...}`) is none: its keys are bare or its values text."""
    if type(obj) is not dict or len(obj) < 2:
        return False
    return all(type(k) is str and "/" in k.strip("/") for k in obj) and all(
        _is_num(v) for v in obj.values()
    )


def own_step_key(obj: dict[str, Any]) -> str | None:
    """The record's own step counter (OWN_STEP), a whole number >= 0, or None: the first
    integer one, else the first written as a float (`3.0`)."""
    floats = None
    for k, v in obj.items():
        if type(v) not in (int, float) or not v >= 0 or not isinstance(k, str):
            continue
        if type(v) is int and OWN_STEP.match(k):
            return k
        if floats is None and type(v) is float and v.is_integer() and OWN_STEP.match(k):
            floats = k
    return floats


# -- a file's plain tail read by Arrow in a second thread ---------------------------------
THREADED_MIN = 16 << 20  # smaller files are read by one thread: the second one pays no more
HEAD_SHARE = 0.6  # of the file read by orjson here (measured: the two threads end together)


class Region:
    """The rows of complete lines [start, end) of a file, as the line by line read gives them:
    `names` in each record's key order, `values` one row per record (float64)."""

    __slots__ = ("end", "names", "nlines", "start", "steps", "values")

    def __init__(
        self, start: int, end: int, nlines: int, names: list[str], steps: Any, values: Any
    ):
        self.start, self.end, self.nlines = start, end, nlines
        self.names, self.steps, self.values = names, steps, values


class ArrowTail:
    """Reads a JSONL file from `start` (a line's start) to its last newline with Arrow's JSON
    reader in a worker thread while this thread reads the head; `result()` is the Region, or
    None when the tail is not provably plain (then it is read line by line as before)."""

    def __init__(self, path: Any, fmt: str, start: int) -> None:
        import threading

        self.path, self.fmt, self.start = path, fmt, start
        self.found: Any = None
        self.end = 0
        self.thread = threading.Thread(target=self._run, name="rlwatch-arrow-tail", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.start)
                data = f.read()
            end = data.rfind(b"\n") + 1
            if end <= 0:
                return
            self.end = end
            found = plain_region(data, end, self.fmt)
            del data
            if found is None:
                return
            # the rows built here too, while the head is still being read
            nlines, names, steps, arrays = found
            values = np.empty((nlines, len(names)), np.float64)
            for j, arr in enumerate(arrays):
                values[:, j] = arr.to_numpy()  # int64 -> float64: correctly rounded
            del arrays, found
            # no NaN/inf (Arrow reads NaN/Infinity tokens) and no -0.0 (`-0`: orjson int 0)
            if not np.isfinite(values).all() or np.signbit(values[values == 0]).any():
                return
            self.found = Region(self.start, self.start + end, nlines, names, steps, values)
        except Exception:  # any doubt: the tail is read line by line
            self.found = None

    def result(self) -> Region | None:
        self.thread.join()
        found, self.found = self.found, None
        return found


def tail_start(path: Any, size: int, block: int) -> int | None:
    """Where a second thread's tail starts: a line start the line by line reader reaches after
    a whole number of blocks (about HEAD_SHARE of the file), or None when one thread reads all:
    a small file, one core, no idle core now (on a busy machine a second thread costs ~30%
    more wall time: it takes a core's share from this one), no orjson/pyarrow."""
    import os

    if size < THREADED_MIN or _fast_loads is json.loads:
        return None
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    if cores < 2 or _runnable() >= cores:  # no idle core now: a second thread only costs
        return None
    if _arrow_json() is None:
        return None
    nblocks = max(1, round(size * HEAD_SHARE / block))
    at = nblocks * block
    if at >= size:
        return None
    with open(path, "rb") as f:  # the head's last block ends at the last newline before `at`
        f.seek(at - block)
        window = f.read(block)
    nl = window.rfind(b"\n")
    return None if nl < 0 else at - block + nl + 1


def _runnable() -> int:
    """Threads runnable on the machine now, this one included (/proc/loadavg; elsewhere the
    one-minute load average)."""
    import os

    try:
        with open("/proc/loadavg", "rb") as f:
            return int(f.read().split()[3].split(b"/")[0])
    except (OSError, ValueError, IndexError):
        try:
            return round(os.getloadavg()[0]) + 1
        except OSError:  # pragma: no cover
            return 1


def plain_region(buf: bytes, n: int, fmt: str) -> tuple[int, list[str], Any, list[Any]] | None:
    """Lines buf[:n] (complete, each a record) read by Arrow's JSON reader, when that provably
    gives what the line by line read gives: every line a record with the first line's keys
    (each once: Arrow refuses a key written twice; no other: a new key is a new column; none
    missing: a null), every value a number (no null, no escape), an integer step >= 0. A line
    may hold its keys in another order: its rows then come in the first line's order, each
    metric's rows the same as the line by line read's. Returns (lines, metric names, steps,
    Arrow arrays of the metrics) or None. The caller still checks the values (no NaN/inf, no
    -0.0)."""
    if buf.find(b"\\", 0, n) >= 0:
        return None
    text = memoryview(buf)[:n]
    first = _fast_loads(bytes(text[: buf.find(b"\n", 0, n)]))
    shape = _first_shape(first, fmt)
    if shape is None:
        return None
    _, columns, step_key, (names, keys) = shape
    pa, pj = _arrow_json()
    try:
        table = pj.read_json(
            pa.py_buffer(text),
            read_options=pj.ReadOptions(use_threads=False, block_size=1 << 25),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, UnicodeDecodeError, OverflowError):
        return None
    nlines = buf.count(b"\n", 0, n)
    if table.num_rows != nlines or table.column_names != columns:
        return None
    if fmt == "verl-jsonl":
        data = table.column("data")
        if not pa.types.is_struct(data.type) or data.null_count:
            return None
        if [f.name for f in data.type] != keys:
            return None
        fields = dict(zip(keys, data.combine_chunks().flatten(), strict=True))
    else:
        fields = {c: table.column(c).combine_chunks() for c in columns}
    step_col = table.column(step_key)
    if not pa.types.is_int64(step_col.type) or step_col.null_count:
        return None
    for a in fields.values():  # null: a JSON null or a key missing in a line
        if not (pa.types.is_int64(a.type) or pa.types.is_float64(a.type)) or a.null_count:
            return None
    steps = step_col.to_numpy()
    if not len(steps) or steps.min() < 0:
        return None
    if not _short_lines(buf, n):
        return None
    return nlines, names, steps.astype(np.int64, copy=False), [fields[k] for k in names]


def _first_shape(first: Any, fmt: str) -> Any:
    """From the first record: every quoted string of a line in order, Arrow's columns, the
    step column, and (metric names kept, the record's data keys)."""
    if type(first) is not dict:
        return None
    if fmt == "verl-jsonl":
        data = first.get("data")
        if set(first) != {"step", "data"} or type(data) is not dict:
            return None
        if type(first["step"]) is not int:
            return None
        keys = list(data)
        values = data.values()
        seq = []
        for k in first:
            seq.append(k)
            if k == "data":
                seq += keys
        step_key = "step"
    else:
        keys = list(first)
        values = first.values()
        seq = keys
        step_key = next((k for k in STEP_KEYS if k in first), None)
        if step_key is None or type(first[step_key]) is not int:
            return None
    if not set(map(type, values)) <= NUMERIC or len(set(seq)) != len(seq):
        return None
    names = [k for k in keys if k not in STEP_KEYS]
    if not names:
        return None
    return seq, list(first), step_key, (names, keys)


def _short_lines(buf: bytes, n: int) -> bool:
    """Whether no line of buf[:n] is longer than the line reader holds (Blocks._hold skips
    such a line); a region shorter than that needs no look."""
    if n <= _cols.MAX_LINE:
        return True
    newlines = np.flatnonzero(np.frombuffer(buf, np.uint8, count=n) == 10)
    return bool(np.diff(newlines, prepend=-1).max() - 1 <= _cols.MAX_LINE)
