"""JSON logs: line formats (verl FileLogger, flat JSONL with a step, LLaMA-Factory's
trainer_log.jsonl, prime-rl's metrics.jsonl) and whole documents (trainer_state.json, a JSON
array of log_history-style rows).

Line formats are read a block at a time with orjson when it is installed (json otherwise, and
for the lines orjson refuses: NaN/Infinity tokens, integers beyond 64 bits). Records of the same
shape (the same keys in the same order) resolve their keys to tag codes once and put their
values straight into a float array.
"""

from __future__ import annotations

import json
import math
from array import array
from operator import itemgetter
from typing import Any

from rlwatch.errors import SourceError
from rlwatch.sources._rows import STEP_KEYS
from rlwatch.sources.logs._cols import Cols

try:  # optional: 3-5x faster JSON parsing; json is the fallback
    import orjson

    _fast_loads: Any = orjson.loads
    _FastError: Any = orjson.JSONDecodeError
except ImportError:  # pragma: no cover - orjson is installed in CI
    _fast_loads, _FastError = json.loads, json.JSONDecodeError

NUMERIC = {float, int}
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


class _Shape:
    __slots__ = ("codes", "pick")

    def __init__(self, codes: array, pick: Any) -> None:
        self.codes, self.pick = codes, pick


class JsonLines:
    """One JSON record per line. `fmt` decides where the step and the metrics are:
    verl-jsonl {"step", "data": {...}}; jsonl (flat, a step key); llamafactory (current_steps);
    prime-rl ({"step", "time", **metrics}: non-finite values were dropped by the writer)."""

    def __init__(self, cols: Cols, fmt: str):
        self.cols, self.fmt = cols, fmt
        self.bad_lines: list[int] = []
        self.n_bad = 0
        self.shapes: dict[tuple[str, ...], _Shape | None] = {}
        self.none = "skip" if fmt == "llamafactory" else "nan"
        self.drop: set[str] = set()
        if fmt == "llamafactory":
            self.drop = {"current_steps"} | LLAMAFACTORY_TEXT | LLAMAFACTORY_FACTS
        elif fmt == "prime-rl":
            self.drop = {"time"}
        self.track = fmt == "prime-rl"
        self.present: list[tuple[int, frozenset[int]]] = []  # step, codes

    def feed(self, text: str, lineno: int = 1) -> None:
        for i, line in enumerate(text.split("\n")[:-1], lineno):
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
            else:
                raw = next((obj[k] for k in STEP_KEYS if _is_num(obj.get(k))), None)
                if fmt == "prime-rl" and _is_num(obj.get("time")):
                    wall = float(obj["time"])
            if raw is None or not _is_num(raw):
                self._bad(lineno)
                return
            step = cols.step(raw)
            if step is None:
                return
            data = obj
        keys = tuple(data)
        shape = self.shapes.get(keys, False)
        if shape is False:
            shape = self.shapes[keys] = self._shape(keys, nested=fmt == "verl-jsonl")
        n0 = len(cols)
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
            cols.add_mapping(step, data, none=self.none, wall=wall, drop=self.drop)
        if self.track:
            self.present.append((step, frozenset(cols.codes[n0:])))

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


def _is_num(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


# -- whole documents ----------------------------------------------------------------------
def _entries(text: str, path: str, warnings: list[str]) -> tuple[list[Any], dict[str, Any]]:
    """The rows of a trainer_state.json (its log_history) or of a JSON array; a cut file gives
    the complete rows before the cut."""
    try:
        doc = loads(text)
    except ValueError as exc:
        key = text.find('"log_history"')
        start = text.find("[", key) if key >= 0 else text.find("[")
        entries, pos = _complete_rows(text, start)
        msg = getattr(exc, "msg", str(exc))
        warnings.append(
            f"{path}: not valid JSON ({msg}); read the {len(entries)} complete "
            f"{'log_history entries' if key >= 0 else 'rows'} before byte {pos}, the rest "
            f"({len(text) - pos} bytes) is lost"
        )
        return entries, {}
    if isinstance(doc, list):
        return doc, {}
    entries = doc.get("log_history") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise SourceError(f"{path}: a JSON file without a 'log_history' list")
    facts = {
        k: v
        for k, v in doc.items()
        if k != "log_history" and isinstance(v, int | float | str) and not _huge(v)
    }
    return entries, facts


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
    if stripped.startswith("{") and '"log_history"' in head:
        return "trainer-state"
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


def sniff_line(obj: Any) -> str | None:
    if not isinstance(obj, dict):
        return None
    if _is_num(obj.get("step")) and isinstance(obj.get("data"), dict):
        return "verl-jsonl"
    if _is_num(obj.get("current_steps")) and "total_steps" in obj:
        return "llamafactory"
    keys = list(obj)[:2]
    if keys == ["step", "time"] and _is_num(obj["time"]) and obj["time"] > 1e9:
        return "prime-rl"
    if any(_is_num(obj.get(k)) for k in STEP_KEYS):
        return "jsonl"
    return None
