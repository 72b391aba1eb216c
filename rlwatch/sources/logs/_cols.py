"""Columns: the rows a log parser reads, kept as typed arrays (no per-row objects), plus what
was dropped and why. And the block reader every line format streams through."""

from __future__ import annotations

import contextlib
import math
import re
from array import array
from collections.abc import Iterator
from typing import Any

import numpy as np

from rlwatch.frame import RunFrame, RunInfo
from rlwatch.sources._filetail import complete_last
from rlwatch.sources._rows import STEP_KEYS

MAX_STEP = 2**63 - 1
MAX_SAMPLES = 1 << 16  # a longer list of numbers is no batch's samples (a per-token array)
BLOCK = 4 << 20  # bytes read at a time
MAX_LINE = 64 << 20  # a longer line is skipped (and named in a warning), never held whole
LONG_LINE = 512  # bytes a line on average: a block of such lines is read as views, not split


# ms-swift (`swift sft`/`swift rlhf`) adds its progress to every log it writes to logging.jsonl
# and prints: "global_step/max_steps": "N/M", and the percentage and times as text
SWIFT_STEP = "global_step/max_steps"
SWIFT_TEXT = frozenset({SWIFT_STEP, "percentage", "elapsed_time", "remaining_time"})
_SWIFT = re.compile(r"(\d{1,19})/\d{1,19}")


def swift_step(v: Any) -> str | None:
    """The digits of N in ms-swift's "N/M" progress, or None."""
    m = _SWIFT.fullmatch(v) if isinstance(v, str) else None
    return m.group(1) if m else None


def sample_text(record: dict[str, Any]) -> str | None:
    """The key of a record's free text (a prompt, a completion: 32 characters or more with a
    space or a newline), which makes it a single sample's record; None when it has none."""
    for k, v in record.items():
        if type(v) is str and len(v) >= 32 and (" " in v or "\n" in v):
            return str(k)
    return None


class Cols:
    """Rows in write order, column by column: tag codes, steps, values, wall times."""

    def __init__(self) -> None:
        self.tags: list[str] = []
        self.index: dict[str, int] = {}
        self.codes = array("i")
        self.steps = array("q")
        self.values = array("d")
        self.walls: array | None = None  # created when a source has a wall time
        # blocks added as numpy columns, kept as they are (no copy) in write order with the
        # arrays' rows: (codes, steps, values, walls or None)
        self.chunks: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]] = []
        self.in_chunks = 0
        self.skipped: dict[str, int] = {}  # reason -> count
        self.examples: dict[str, list[str]] = {}  # reason -> a few keys it hit
        self.notes: list[str] = []  # warnings said as they are
        self.facts: dict[str, object] = {}
        self.numbers_seen = 0
        self.numbers_3dp = 0
        self.fractional: list[float] = []  # a few fractional steps seen
        self.n_fractional = 0
        # records of single samples (a completion's text beside its reward): the records that
        # share a step are one batch, its value their mean (`sample_means`)
        self.samples: str | None = None  # the text key that said so

    def __len__(self) -> int:
        return self.in_chunks + len(self.values)

    def _seal(self) -> None:
        """Move the rows added one by one into a chunk (so chunks and rows keep their order)."""
        n = len(self.values)
        if not n:
            return
        walls = np.frombuffer(self.walls, np.float64) if self.walls is not None else None
        self.chunks.append(
            (
                np.frombuffer(self.codes, np.int32),
                np.frombuffer(self.steps, np.int64),
                np.frombuffer(self.values, np.float64),
                walls,
            )
        )
        self.in_chunks += n
        self.codes, self.steps, self.values = array("i"), array("q"), array("d")
        if self.walls is not None:
            self.walls = array("d")

    def max_step(self) -> int:
        self._seal()
        return max(int(c[1].max()) for c in self.chunks)

    def code(self, key: str) -> int:
        c = self.index.get(key)
        if c is None:
            c = self.index[key] = len(self.tags)
            self.tags.append(key)
        return c

    def add(self, step: int, key: str, value: float, wall: float = math.nan) -> None:
        self.codes.append(self.code(key))
        self.steps.append(step)
        self.values.append(value)
        if self.walls is not None:
            self.walls.append(wall)
        elif wall == wall:  # the first wall time: earlier rows had none
            self.walls = array("d", [math.nan]) * (len(self.values) - 1)
            self.walls.append(wall)

    def add_row(self, step: int, codes: array, values: Any, wall: float = math.nan) -> None:
        """One record of several values whose codes are known (`values` iterable of floats)."""
        n0 = len(self.values)
        try:
            self.values.extend(values)
        except (TypeError, OverflowError, ValueError):
            del self.values[n0:]
            raise
        self.codes.extend(codes)
        n = len(self.values) - n0
        self.steps.extend(array("q", [step]) * n)
        if self.walls is not None or wall == wall:
            if self.walls is None:
                self.walls = array("d", [math.nan]) * n0
            self.walls.extend(array("d", [wall]) * n)

    def add_arrays(self, codes: np.ndarray, steps: np.ndarray, values: np.ndarray) -> None:
        """Rows given as numpy columns (no wall time), kept without copying."""
        if not len(values):
            return
        self._seal()
        self.chunks.append(
            (
                np.asarray(codes, np.int32),
                np.asarray(steps, np.int64),
                np.asarray(values, np.float64),
                None,
            )
        )
        self.in_chunks += len(values)

    def skip(self, reason: str, n: int = 1, key: str | None = None) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + n
        if key is not None:
            seen = self.examples.setdefault(reason, [])
            if key not in seen and len(seen) < 3:
                seen.append(key[:80])

    def value(self, key: str, v: object) -> float | None:
        """A logged value as a float, or None (counted) when it is not a number."""
        if isinstance(v, bool):
            self.skip("boolean values", key=key)
            return None
        if isinstance(v, float):
            return v
        if isinstance(v, int):
            try:
                return float(v)
            except OverflowError:
                self.skip("integers beyond float range (read as +-inf)", key=key)
                return math.inf if v > 0 else -math.inf
        if isinstance(v, str):
            try:
                return float(v)
            except ValueError:
                pass
        self.skip("non-numeric values", key=key)
        return None

    def add_mapping(
        self,
        step: int,
        data: dict[str, Any],
        prefix: str = "",
        *,
        none: str = "nan",
        wall: float = math.nan,
        drop: frozenset[str] | set[str] = frozenset(),
        depth: int = 0,
        strings: bool = False,
    ) -> None:
        """A record's numbers; nested dicts flatten to `a/b`. `none`: "nan" (verl's FileLogger
        writes NaN as null) or "skip" (null means "not logged in this record"). `strings`: read
        numbers printed as strings (transformers' console dicts)."""
        for key, v in data.items():
            key = str(key)
            if not prefix and (key in STEP_KEYS or key in drop):
                continue
            name = f"{prefix}{key}"
            if v is None:
                if none == "nan":
                    self.add(step, name, math.nan, wall)
            elif isinstance(v, dict):
                if depth < 8:
                    self.add_mapping(
                        step, v, f"{name}/", none=none, wall=wall, depth=depth + 1, strings=strings
                    )
                else:
                    self.skip("values nested too deep", key=name)
            elif isinstance(v, str) and not (strings and _numeric_text(v)):
                self.skip("non-numeric values", key=name)
            elif isinstance(v, list):
                self._samples(step, name, v, wall)
            else:
                x = self.value(name, v)
                if x is not None:
                    self.add(step, name, x, wall)

    def _samples(self, step: int, name: str, v: list[Any], wall: float) -> None:
        """A list of numbers logged at a step (a hand-written loop's `"rewards": [0.0, 1.0]`):
        a batch's samples, read as their mean and spread, `<key>/mean` and `<key>/std`
        (population, as TRL's reward_std over a group). Any other list is no metric."""
        if 2 <= len(v) <= MAX_SAMPLES and all(type(x) in (int, float) for x in v):
            # an int beyond float (OverflowError) or a mean that overflows near float's limit
            # (inf, no numpy warning) is no number
            with np.errstate(all="ignore"), contextlib.suppress(OverflowError):
                a = np.asarray(v, np.float64)
                mean, std = float(a.mean()), float(a.std())
                if math.isfinite(mean) and math.isfinite(std):
                    self.add(step, f"{name}/mean", mean, wall)
                    self.add(step, f"{name}/std", std, wall)
                    return
        self.skip("non-numeric values", key=name)

    def step(self, x: object) -> int | None:
        """A step as logged -> an int64 step, or None (counted) when it cannot be one."""
        if isinstance(x, bool) or not isinstance(x, int | float):
            return None
        if isinstance(x, float):
            if not math.isfinite(x):
                self.skip("records with a NaN/inf step")
                return None
            if x != math.floor(x):
                self.n_fractional += 1
                if len(self.fractional) < 3:
                    self.fractional.append(x)
            try:
                x = int(x)
            except (OverflowError, ValueError):
                self.skip("records with a step out of range (0 <= step < 2**63)")
                return None
        if not 0 <= x <= MAX_STEP:
            self.skip("records with a step out of range (0 <= step < 2**63)")
            return None
        return x

    def step_text(self, digits: str) -> int | None:
        """A step printed as decimal digits (a regex group of \\d+)."""
        if len(digits) > 19 or int(digits) > MAX_STEP:
            self.skip("records with a step out of range (0 <= step < 2**63)")
            return None
        return int(digits)

    def warnings(self, where: object) -> list[str]:
        """One line per kind of value that was not read, with a few of the keys it hit."""
        out = [f"{where}: {n}" for n in self.notes]
        if self.n_fractional:
            ex = ", ".join(f"{x:g}" for x in self.fractional)
            out.append(
                f"{where}: {self.n_fractional} records have a fractional step (e.g. {ex}); "
                "read at the step's integer part, so records that share it replace each other"
            )
        for reason, n in self.skipped.items():
            keys = self.examples.get(reason)
            out.append(
                f"{where}: {n} {reason} ignored"
                + (f" (keys: {', '.join(keys)}{', ...' if n > len(keys) else ''})" if keys else "")
            )
        return out

    def clear_rows(self) -> None:
        """Forget the rows (kept: the tag table, so codes stay valid; used by followers)."""
        self.codes, self.steps, self.values = array("i"), array("q"), array("d")
        if self.walls is not None:
            self.walls = array("d")
        self.chunks, self.in_chunks = [], 0

    def frame(self, info: RunInfo) -> RunFrame:
        """The run's frame; the rows move into it (the Cols is left empty, its tags kept)."""
        self._seal()
        chunks = self.chunks
        if not chunks:
            empty = np.zeros(0)
            return RunFrame.from_arrays(
                info, self.tags, np.zeros(0, np.int32), np.zeros(0, np.int64), empty, empty
            )

        # one column at a time, each block's part dropped once copied: the peak is the rows
        # once plus one column, not the rows twice
        parts = [list(p) for p in zip(*chunks, strict=True)]
        self.chunks, self.in_chunks = [], 0
        del chunks
        lens = [len(v) for v in parts[2]]
        n = sum(lens)
        walls = parts.pop(3)
        out = []
        for pieces in parts:
            col = pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
            pieces.clear()
            out.append(col)
        if all(w is None for w in walls):
            wall = np.full(n, np.nan)
        else:
            wall = np.concatenate(
                [
                    w if w is not None else np.full(k, np.nan)
                    for w, k in zip(walls, lens, strict=True)
                ]
            )
        if self.samples is not None:
            out[0], out[1], out[2], wall = self.sample_means(out[0], out[1], out[2], wall)
        return RunFrame.from_arrays(info, self.tags, out[0], out[1], out[2], wall, owned=True)

    def sample_means(self, codes: Any, steps: Any, values: Any, wall: Any) -> tuple:
        """Rows of a file of single samples, one row per (tag, step): the mean of the records
        that share the step (a batch of samples; NaN when one is), in write order. A step
        that goes back (a restart) keeps the last writes, as any other log."""
        order = np.argsort(codes, kind="stable")
        c, s = codes[order], steps[order]
        same = c[1:] == c[:-1]
        if (same & (s[1:] < s[:-1])).any():
            return codes, steps, values, wall
        starts = np.flatnonzero(np.concatenate([[True], ~same | (s[1:] != s[:-1])]))
        if len(starts) == len(codes):  # no step has two records
            return codes, steps, values, wall
        counts = np.diff(np.append(starts, len(codes)))
        means = np.add.reduceat(values[order], starts) / counts
        walls = np.fmax.reduceat(wall[order], starts)
        back = np.argsort(order[starts])  # each group at its first record's place
        note = (
            f"records of single samples (their {self.samples!r} is a text): the records "
            "that share a step are one batch, each step's value their mean"
        )
        if note not in self.notes:
            self.notes.append(note)
        return c[starts][back], s[starts][back], means[back], walls[back]


def _numeric_text(s: str) -> bool:
    """A string that is a number as printed (transformers prints floats as '0.03797')."""
    if len(s) > 64:
        return False
    try:
        float(s)
    except ValueError:
        return False
    return True


class Blocks:
    """Complete lines of a file, a block at a time, from a byte offset. What follows the last
    newline (a line still being written, or a cut file) is never parsed: `partial` says how
    many bytes it holds once the file is read to its end."""

    def __init__(
        self, path: Any, offset: int = 0, block: int = 0, binary: bool = False, cr: bool = False
    ):
        self.path, self.offset, self.block, self.binary = path, offset, block or BLOCK, binary
        self.cr = cr  # a carriage return ends a record too (tqdm's redraws of one bar)
        self.partial = 0
        self.long_lines = 0
        self._dropping = False  # inside a line too long to hold
        self.lineno = 1  # the line number the next block starts at

    def _reads(self) -> Iterator[bytes]:
        """The file's blocks from `offset`, with the rest of a line too long to hold (and
        being dropped) cut off the front."""
        self._dropping = False
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            while data := f.read(self.block):
                if self._dropping:  # inside a line too long to hold: skip to its end
                    nl = data.find(b"\n")
                    if nl < 0:
                        self.offset += len(data)
                        continue
                    self.offset += nl + 1
                    self.lineno += 1
                    data, self._dropping = data[nl + 1 :], False
                yield data

    def _hold(self, carry: bytes) -> bytes:
        """The start of an unfinished line, or nothing once it is too long to hold (it is
        counted, and dropped up to its end)."""
        if len(carry) <= MAX_LINE:
            return carry
        self.long_lines += 1
        self.offset += len(carry)
        self._dropping = True
        return b""

    def _finish(self, carry: bytes) -> None:
        self.partial = 0 if self._dropping else len(carry)

    def _last_line(self, carry: bytes) -> bytes:
        """A notebook's JSON ends on its closing `}` without a newline, a Kaggle kernel's log on
        its `]`: that last line is complete, and read; else nothing."""
        if carry and not self._dropping and complete_last(self.path, carry):
            self.offset += len(carry)
            return carry + b"\n"
        return b""

    def __iter__(self) -> Iterator[Any]:
        carry = b""
        for data in self._reads():
            buf = carry + data if carry else data
            cut = buf.rfind(b"\n")
            if self.cr:
                cut = max(cut, buf.rfind(b"\r"))
            if cut < 0:
                carry = self._hold(buf)
                continue
            carry = buf[cut + 1 :]
            chunk = buf[: cut + 1]
            self.offset += cut + 1
            yield chunk if self.binary else chunk.decode("utf-8", "replace")
            self.lineno += chunk.count(b"\n")
        last = self._last_line(carry)
        if last:
            carry = b""
            yield last if self.binary else last.decode("utf-8", "replace")
            self.lineno += 1
        self._finish(carry)

    def line_lists(self) -> Iterator[list[Any]]:
        """The same complete lines, a block's worth at a time and without their newlines,
        never copied into a joined block (a line is assembled from two reads only when it
        straddles them). A block of long lines (verl's records are kilobytes) is read into one
        reused buffer and its lines are memoryviews of it, valid until the next list is asked
        for: no fresh pages to fault in and no copy. Short lines are split into bytes."""
        carry = b""
        buf = bytearray(self.block)
        view = memoryview(buf)
        find = buf.find
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            while n := f.readinto(buf):
                start = 0
                if self._dropping:  # inside a line too long to hold: skip to its end
                    nl = find(b"\n", 0, n)
                    if nl < 0:
                        self.offset += n
                        continue
                    self.offset += nl + 1
                    self.lineno += 1
                    start, self._dropping = nl + 1, False
                last = buf.rfind(b"\n", start, n)
                if last < 0:
                    carry = self._hold(carry + view[start:n])
                    continue
                # the block's last complete line stands for its lines' length
                if last - max(buf.rfind(b"\n", start, last), start - 1) > LONG_LINE:
                    parts: list[Any] = []
                    pos = start
                    while pos <= last:
                        j = find(b"\n", pos, last + 1)
                        parts.append(view[pos:j])
                        pos = j + 1
                else:
                    parts = bytes(view[start:last]).split(b"\n")
                tail = bytes(view[last + 1 : n])
                if carry:
                    parts[0] = carry + parts[0]
                carry = tail
                self.offset += sum(map(len, parts)) + len(parts)
                yield parts
                self.lineno += len(parts)
                del parts
        last = self._last_line(carry)
        if last:
            carry = b""
            yield [last[:-1]]
            self.lineno += 1
        self._finish(carry)


def _system_pool(pa: object) -> None:
    """Arrow's kernels allocate from the C allocator, which gives a block's temporaries back
    when they are freed (mimalloc/jemalloc pools keep them: the peak resident grows)."""
    with contextlib.suppress(Exception):  # an Arrow build without it: keep its pool
        pa.set_memory_pool(pa.system_memory_pool())  # type: ignore[attr-defined]


def lines(text: str) -> list[str]:
    """The lines of a block of complete lines (each ended by a newline)."""
    return text.split("\n")[:-1]
