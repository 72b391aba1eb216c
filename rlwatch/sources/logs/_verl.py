"""verl's console log: `step:N - key:value - key:value ...` (Ray prefixes, ANSI colours, tqdm
bars and numpy/torch reprs around it), read a block at a time.

Fast path: a step line is split once (one C-level regex split), its keys are looked up as one
tuple (a verl run prints the same keys in the same order at every step, so each distinct line
shape is resolved to tag codes once), and its values go into a float array with one map(float).
Any line the fast path cannot take (an item without ':', a value that is not a number) is read
item by item exactly as before.
"""

from __future__ import annotations

import ast
import math
import re
from array import array
from typing import Any

import numpy as np

from rlwatch.sources.logs._cols import Cols, _system_pool, lines

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
STEP_LINE = re.compile(r"step:(\d+) - ([^\n]*)")
VERL_STEP = re.compile(r"step:(\d+) - (.*)$")
# numpy 2's scalar reprs (np.float64(0.5)), torch's (tensor(0.5, device='cuda:0',
# grad_fn=<MeanBackward0>)) and 0-d arrays' (array(0.5), JAX's Array(0.5, dtype=float32)): the
# value is the first argument; keyword arguments are dropped
_WRAP = (
    r"(?<![\w.])(?:np\.(?:float|u?int)\d*|tensor|[Aa]rray)"
    r"\((\[[^()\]]*\]|[^(),]*)(?:,\s*\w+=[^()]*)?\)"
)
VERL_VALUE = re.compile("^" + _WRAP + "$")
WRAPPED = re.compile(_WRAP)
THREE_DECIMALS = re.compile(r"^-?\d+\.\d{3}$")
PLAIN_NUMBER = r"^-?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?$|^-?(?:nan|inf)$"
THREE_DP_VALUE = re.compile(r":\s*-?\d+\.\d{3}\s*(?= - |$)")
BARE = re.compile(r"(?<![\w'.])(-?)(nan|inf)(?![\w'])")
MAX_DICT = 256 << 10  # a printed dict that is not flat is read by ast up to this size
FLAT_PAIR = re.compile(r"'([^'\\\n]*)': (?:'([^'\\\n]*)'|([^,{}\[\]()'\s]+))(, |\}$)")
WORDS = {"None": None, "True": True, "False": False}


def number(text: str) -> float | None:
    text = text.strip()
    m = VERL_VALUE.match(text)
    if m:
        text = m.group(1)
    try:
        return float(text)
    except ValueError:
        return None


def plain_scalars(text: str) -> str:
    """`text` with every wrapped scalar (`np.float64(0.5)`, `tensor(0.5, device='cuda:0')`)
    replaced by its value."""
    if "(" in text and ("np." in text or "tensor(" in text or "rray(" in text):
        return WRAPPED.sub(r"\1", text)
    return text


def literal_dict(text: str) -> dict[str, Any] | None:
    """A printed python dict, read without evaluating anything: a flat dict of numbers and
    strings by one linear scan, anything else by ast.literal_eval (up to MAX_DICT)."""
    text = plain_scalars(text)
    flat = _flat_dict(text)
    if flat is not None:
        return flat
    if len(text) > MAX_DICT:
        return None
    text = BARE.sub(lambda m: f"'__{m.group(1)}{m.group(2)}__'", text)
    try:
        d = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return None
    if not isinstance(d, dict):
        return None
    special = {
        "'__nan__'": math.nan,
        "__nan__": math.nan,
        "__-nan__": math.nan,
        "__inf__": math.inf,
        "__-inf__": -math.inf,
    }
    return {str(k): special.get(v, v) if isinstance(v, str) else v for k, v in d.items()}


def _flat_dict(text: str) -> dict[str, Any] | None:
    if not text.startswith("{'") or not text.endswith("}"):
        return None
    out: dict[str, Any] = {}
    pos, end = 1, len(text)
    while pos < end:
        m = FLAT_PAIR.match(text, pos)
        if m is None:
            return None
        key, s, bare, _ = m.groups()
        if s is not None:
            out[key] = s
        elif bare in WORDS:
            out[key] = WORDS[bare]
        else:
            try:
                out[key] = float(bare) if not bare.lstrip("-").isdigit() else int(bare)
            except ValueError:
                return None
        pos = m.end()
    return out


class VerlConsole:
    fmt = "verl-console"
    SAMPLE_ALL = 200  # the precision check looks at every one of the first step lines ...
    SAMPLE_EVERY = 100  # ... then at one in this many

    def __init__(self, cols: Cols):
        self.cols = cols
        self.first_step: int | None = None
        self.last_step: int | None = None
        self.validation: dict[str, dict[str, float]] = {}
        self.shapes: dict[tuple[str, ...], array] = {}
        self.nlines = 0
        self.blocks = 0
        self.last_keys: list[str] | None = None
        self.last_codes = array("i")

    def feed(self, text: str, lineno: int = 0) -> None:
        if "\x1b" in text:
            text = ANSI.sub("", text)
        if "validation metrics: {" in text:
            self._validation(text)
        found = STEP_LINE.findall(text)
        if not found:
            return
        arrow = _arrow()
        if arrow is not None and len(found) > 1:
            self._columnar(arrow, found)
            return
        for digits, items in found:
            self._line(digits, items)

    def _columnar(self, arrow: Any, found: list[tuple[str, str]]) -> None:
        """A block of step lines in a handful of Arrow kernels (no Python object per value):
        split into items, items into key and value, values cast to float64 by Arrow's exact
        parser; keys dictionary-encoded and mapped to tag codes once per distinct key. Items
        Arrow cannot take (no ':', a value that is not a plain number) are read by Python, in
        place, so the rows keep their order."""
        pa, pc = arrow
        cols = self.cols
        steps, texts = [], []
        for digits, items in found:
            step = cols.step_text(digits)
            if step is None:
                continue
            items = plain_scalars(items)
            steps.append(step)
            texts.append(items)
        if not steps:
            return
        self.nlines += len(steps)
        lists = pc.split_pattern(pa.array(texts, pa.large_string()), " - ")
        per_line = pc.list_value_length(lists).to_numpy(zero_copy_only=False)
        items = lists.flatten()
        kv = pc.split_pattern(items, ":", max_splits=1)
        if pc.min(pc.list_value_length(kv)).as_py() != 2:  # an item without ':': rare
            self.nlines -= len(steps)
            for digits, text in zip(steps, texts, strict=True):
                self._line(str(digits), text)
            return
        flat = kv.flatten()
        keys = flat.take(pa.array(np.arange(0, len(flat), 2)))
        raw = pc.utf8_trim_whitespace(flat.take(pa.array(np.arange(1, len(flat), 2))))
        try:
            if pc.any(pc.match_substring(raw, "(")).as_py():  # Arrow reads nan(123)
                raise pa.ArrowInvalid("not a plain number")
            values = pc.cast(raw, pa.float64()).to_numpy(zero_copy_only=False)
            keep = None
        except pa.ArrowInvalid:  # some value Arrow will not parse: check each
            plain = pc.match_substring_regex(raw, PLAIN_NUMBER)
            values = pc.cast(pc.if_else(plain, raw, "0"), pa.float64()).to_numpy().copy()
            keep = plain.to_numpy(zero_copy_only=False)
            for i in np.flatnonzero(~keep):
                key = str(keys[i].as_py()).strip()
                x = number(raw[i].as_py())
                if x is None:
                    cols.skip("non-numeric values", key=key)
                else:
                    values[i], keep[i] = x, True
        enc = pc.dictionary_encode(keys)
        table = np.array([cols.code(str(k).strip()) for k in enc.dictionary.to_pylist()], np.int32)
        codes = table[enc.indices.to_numpy(zero_copy_only=False)] if len(table) else table
        step_of = np.repeat(np.asarray(steps, np.int64), per_line)
        numeric = raw if keep is None else pc.filter(raw, pa.array(keep))
        self.blocks += 1
        if self.blocks <= 2 or self.blocks % 8 == 0:  # the precision check samples blocks
            cols.numbers_seen += len(numeric)
            dp = pc.sum(pc.match_substring_regex(numeric, r"^-?\d+\.\d{3}$")).as_py()
            cols.numbers_3dp += int(dp or 0)
        if keep is not None:
            codes, step_of, values = codes[keep], step_of[keep], values[keep]
        cols.add_arrays(codes, step_of, values)
        self.first_step = steps[0] if self.first_step is None else self.first_step
        self.last_step = steps[-1]

    def _line(self, digits: str, items: str) -> None:
        cols = self.cols
        step = cols.step_text(digits)
        if step is None:
            return
        self.nlines += 1
        items = plain_scalars(items)
        # "k:v - k:v" -> [k, v, k, v]: two C-level string passes; exactly one ':' per item
        # (checked by the count) keeps keys and values aligned
        flat = items.replace(" - ", ":").split(":")
        n = len(flat) >> 1
        ok = not len(flat) & 1 and items.count(" - ") == n - 1
        if ok:
            keys = flat[0::2]
            raw = flat[1::2]
            try:
                vals = list(map(float, raw))
            except ValueError:
                ok = False
        if not ok:
            self._slow(step, items)
        else:
            if keys == self.last_keys:  # the usual case: the same keys as the line before
                codes = self.last_codes
            else:
                shape = tuple(keys)
                codes = self.shapes.get(shape)
                if codes is None:
                    codes = self.shapes[shape] = array("i", [cols.code(k.strip()) for k in keys])
                self.last_keys, self.last_codes = keys, codes
            cols.add_row(step, codes, vals)
            if self.nlines <= self.SAMPLE_ALL or self.nlines % self.SAMPLE_EVERY == 0:
                cols.numbers_seen += n
                cols.numbers_3dp += len(THREE_DP_VALUE.findall(items))
        self.first_step = step if self.first_step is None else self.first_step
        self.last_step = step

    def _slow(self, step: int, items: str) -> None:
        cols = self.cols
        sample = self.nlines <= self.SAMPLE_ALL or self.nlines % self.SAMPLE_EVERY == 0
        for item in items.split(" - "):
            key, sep, raw = item.partition(":")
            if not sep:
                cols.skip("items without 'key:value'")
                continue
            value = number(raw)
            if value is None:
                cols.skip("non-numeric values", key=key.strip())
                continue
            if sample:
                cols.numbers_seen += 1
                if THREE_DECIMALS.match(raw.strip()):
                    cols.numbers_3dp += 1
            cols.add(step, key.strip(), value)

    def _validation(self, text: str) -> None:
        for line in lines(text):
            at = line.find("validation metrics: {")
            if at < 0 or STEP_LINE.search(line):
                continue
            head = line[:at]
            which = "Initial" if head.endswith("Initial ") else "Final"
            if not head.endswith(f"{which} "):
                continue
            start = at + len("validation metrics: ")
            end = line.rfind("}")
            if end < start:
                continue
            body = line[start : end + 1]
            metrics = literal_dict(body)
            if metrics is None:
                self.cols.skip("unreadable validation dicts")
                continue
            self.validation[which] = {
                k: float(x)
                for k, x in metrics.items()
                if isinstance(x, int | float) and not isinstance(x, bool) and _finite_int(x)
            }

    def finish(self) -> None:
        """The Initial/Final validation dicts repeat what the step lines logged; they are
        used only when no step line carries their keys (decided for both before either is
        added: the Initial dict's rows must not hide the Final one)."""
        logged = {w: any(k in self.cols.index for k in m) for w, m in self.validation.items()}
        for which, metrics in self.validation.items():
            if metrics and not logged[which]:
                step = (self.first_step if which == "Initial" else self.last_step) or 0
                for k, x in metrics.items():
                    self.cols.add(step, k, x)
        self.validation = {}


_ARROW: Any = None


def _arrow() -> Any:
    """(pyarrow, pyarrow.compute) when installed (pandas brings it), else None."""
    global _ARROW
    if _ARROW is None:
        try:
            import pyarrow as pa
            import pyarrow.compute as pc

            _system_pool(pa)
            _ARROW = (pa, pc)
        except ImportError:  # pragma: no cover - pyarrow ships with the test extras
            _ARROW = False
    return _ARROW or None


def _finite_int(x: float) -> bool:
    try:
        float(x)
    except OverflowError:
        return False
    return True


def sniff_line(line: str) -> bool:
    m = VERL_STEP.search(ANSI.sub("", line))
    return bool(m) and ":" in line.split("step:", 1)[1][:200]
