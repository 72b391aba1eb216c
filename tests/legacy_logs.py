"""Text and JSON logs: verl console and FileLogger JSONL, transformers/TRL trainer_state.json and
printed python dicts, Tinker and other JSONL with a step field. Sniffed, parsed, followed.

Every record that can be read is read; what cannot (a truncated line, a value that is not a
number) is counted in a warning that says what was lost.
"""

from __future__ import annotations

import ast
import json
import math
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rlwatch.errors import SourceError, UsageError
from rlwatch.frame import RunFrame, RunInfo
from rlwatch.sources._rows import STEP_KEYS, Rows

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
VERL_STEP = re.compile(r"step:(\d+) - (.*)$")
VERL_VALUE = re.compile(r"^(?:np\.(?:float|int)\d*|tensor)\((.*?)\)$")
THREE_DECIMALS = re.compile(r"^-?\d+\.\d{3}$")
PY_DICT = re.compile(r"\{'[^']+': .*\}")
WRAPPED = re.compile(r"(?:np\.(?:float|int)\d*|tensor)\(([^()]*)\)")
BARE = re.compile(r"(?<![\w'.])(-?)(nan|inf)(?![\w'])")
VALIDATION_DICT = re.compile(r"(Initial|Final) validation metrics: (\{.*\})")

FORMATS = {
    "verl-console": "verl console log (step:N - key:value - ...)",
    "verl-jsonl": 'verl FileLogger JSONL ({"step": N, "data": {...}})',
    "trainer-state": "transformers/TRL trainer_state.json (log_history)",
    "python-dicts": "TRL/transformers console capture ({'loss': ...} lines)",
    "jsonl": "JSONL with a step field (Tinker metrics.jsonl, ...)",
}
LOG_SUFFIXES = {".log", ".txt", ".out", ".err", ".jsonl", ".json", ".ndjson"}


def _number(text: str) -> float | None:
    text = text.strip()
    m = VERL_VALUE.match(text)
    if m:
        text = m.group(1)
    try:
        return float(text)
    except ValueError:
        return None


# -- parsers: feed(line) for line formats ---------------------------------------------------
class _VerlConsole:
    fmt = "verl-console"

    def __init__(self, rows: Rows):
        self.rows = rows
        self.first_step: int | None = None
        self.last_step: int | None = None
        self.validation: dict[str, dict[str, float]] = {}

    def feed(self, line: str, lineno: int) -> None:
        clean = ANSI.sub("", line)
        m = VERL_STEP.search(clean)
        if m:
            step = int(m.group(1))
            for item in m.group(2).split(" - "):
                key, sep, raw = item.partition(":")
                if not sep:
                    self.rows.skip("items without 'key:value'")
                    continue
                value = _number(raw)
                if value is None:
                    self.rows.skip("non-numeric values", key=key.strip())
                    continue
                self.rows.numbers_seen += 1
                if THREE_DECIMALS.match(raw.strip()):
                    self.rows.numbers_3dp += 1
                self.rows.add(step, key.strip(), value)
            self.first_step = step if self.first_step is None else self.first_step
            self.last_step = step
            return
        v = VALIDATION_DICT.search(clean)
        if v:
            metrics = _literal_dict(v.group(2))
            if metrics is None:
                self.rows.skip("unreadable validation dicts")
                return
            self.validation[v.group(1)] = {
                k: float(x)
                for k, x in metrics.items()
                if isinstance(x, int | float) and not isinstance(x, bool)
            }

    def finish(self) -> None:
        """The Initial/Final validation dicts repeat what the step lines logged; they are
        used only when no step line carries their keys (decided for both first)."""
        logged = {w: any(k in self.rows.index for k in m) for w, m in self.validation.items()}
        for which, metrics in self.validation.items():
            if metrics and not logged[which]:
                step = (self.first_step if which == "Initial" else self.last_step) or 0
                for k, x in metrics.items():
                    self.rows.add(step, k, x)


class _JsonLines:
    """verl FileLogger JSONL ({"step", "data"}) and flat JSONL with a step field."""

    def __init__(self, rows: Rows, fmt: str):
        self.rows, self.fmt = rows, fmt
        self.bad_lines: list[int] = []

    def feed(self, line: str, lineno: int) -> None:
        if not line.strip():
            return
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            self.bad_lines.append(lineno)
            return
        if not isinstance(obj, dict):
            self.bad_lines.append(lineno)
            return
        if self.fmt == "verl-jsonl":
            step, data = obj.get("step"), obj.get("data")
            if not isinstance(step, int) or not isinstance(data, dict):
                self.bad_lines.append(lineno)
                return
            self.rows.add_mapping(step, data)
            return
        step = next((obj[k] for k in STEP_KEYS if isinstance(obj.get(k), int | float)), None)
        if step is None:
            self.bad_lines.append(lineno)
            return
        self.rows.add_mapping(int(step), obj)

    def finish(self) -> None:
        if self.bad_lines:
            self.rows.skip(
                f"lines that are not a JSON record with a step (line "
                f"{', '.join(map(str, self.bad_lines[:5]))}"
                f"{', ...' if len(self.bad_lines) > 5 else ''})",
                len(self.bad_lines),
            )


class _PythonDicts:
    """Dicts printed by transformers' ProgressCallback; tqdm bars and other text in between."""

    fmt = "python-dicts"

    def __init__(self, rows: Rows):
        self.rows = rows
        self.ordinal = 0
        self.ordinal_steps = False

    def feed(self, line: str, lineno: int) -> None:
        m = PY_DICT.search(ANSI.sub("", line))
        if not m:
            return
        d = _literal_dict(m.group(0))
        if d is None:
            self.rows.skip("printed dicts that could not be read")
            return
        if "train_runtime" in d or "train_loss" in d:
            self.rows.facts.update({f"summary/{k}": v for k, v in d.items()})
            return
        if isinstance(d.get("step"), int):
            step = d["step"]
        else:
            self.ordinal += 1
            step, self.ordinal_steps = self.ordinal, True
        self.rows.add_mapping(step, d)

    def finish(self) -> None:
        if self.ordinal_steps:
            self.rows.facts["steps"] = "log ordinals (the printed dicts carry no step)"


def _literal_dict(text: str) -> dict[str, Any] | None:
    """A printed python dict, read without evaluating anything (ast.literal_eval)."""
    text = WRAPPED.sub(r"\1", text)
    text = BARE.sub(lambda m: f"'__{m.group(1)}{m.group(2)}__'", text)
    try:
        d = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
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


def _trainer_state(text: str, rows: Rows, warnings: list[str], path: str) -> None:
    try:
        doc = json.loads(text)
        entries = doc.get("log_history") if isinstance(doc, dict) else None
        if not isinstance(entries, list):
            raise SourceError(f"{path}: a JSON file without a 'log_history' list")
        for k, v in doc.items():
            if k != "log_history" and isinstance(v, int | float | str) and v is not None:
                rows.facts[k] = v
    except json.JSONDecodeError as exc:  # truncated: read the complete entries
        start = text.find("[", text.find('"log_history"'))
        entries, pos, dec = [], start + 1, json.JSONDecoder()
        while start >= 0:
            while pos < len(text) and text[pos] in " \t\r\n,":
                pos += 1
            try:
                obj, pos = dec.raw_decode(text, pos)
            except json.JSONDecodeError:
                break
            entries.append(obj)
        warnings.append(
            f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}); read the "
            f"{len(entries)} complete log_history entries before byte {pos}, the "
            f"rest ({len(text) - pos} bytes) is lost"
        )
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("step"), int):
            rows.skip("log_history entries without a step")
            continue
        if "train_runtime" in entry:
            rows.facts.update({f"summary/{k}": v for k, v in entry.items()})
            continue
        rows.add_mapping(entry["step"], entry)


# -- sniffing and loading ------------------------------------------------------------------
def sniff(path: Path, head: str | None = None) -> str:
    """The format of a log file, from its first 256 KiB."""
    if head is None:
        with open(path, "rb") as f:
            head = f.read(256 << 10).decode("utf-8", "replace")
    stripped = head.lstrip()
    if stripped.startswith("{") and '"log_history"' in head:
        return "trainer-state"
    lines = [ln for ln in head.splitlines()[:2000] if ln.strip()]
    if any(
        VERL_STEP.search(ANSI.sub("", ln)) and ":" in ln.split("step:", 1)[1][:200] for ln in lines
    ):
        return "verl-console"
    for ln in lines[:5]:
        try:
            obj = json.loads(ln)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            if isinstance(obj.get("step"), int) and isinstance(obj.get("data"), dict):
                return "verl-jsonl"
            if any(isinstance(obj.get(k), int | float) for k in STEP_KEYS):
                return "jsonl"
    if any(PY_DICT.search(ANSI.sub("", ln)) for ln in lines):
        return "python-dicts"
    raise SourceError(
        f"{path}: unrecognised log format (tried: "
        f"{'; '.join(FORMATS.values())}); force one with --log-format"
    )


def check_format(fmt: str | None) -> None:
    if fmt is not None and fmt not in FORMATS:
        raise UsageError(
            f"--log-format {fmt!r} is not a known format (valid: {', '.join(FORMATS)})"
        )


def _line_parser(fmt: str, rows: Rows) -> Any:
    if fmt == "verl-console":
        return _VerlConsole(rows)
    if fmt in ("verl-jsonl", "jsonl"):
        return _JsonLines(rows, fmt)
    return _PythonDicts(rows)


GENERIC_STEMS = {
    "metrics",
    "trainer_state",
    "training_logs",
    "log",
    "logs",
    "train",
    "output",
    "stdout",
    "verl_demo",
    "grpo",
    "ppo",
    "run",
}


def run_name(path: Path) -> str:
    """The file's stem, with its folder when the stem says nothing (metrics, trainer_state)."""
    stem = path.stem
    if stem.lower() in GENERIC_STEMS and path.parent.name:
        return f"{path.parent.name}/{stem}"
    return stem


def _frame(path: Path, fmt: str, rows: Rows, warnings: list[str]) -> RunFrame:
    info = RunInfo(run_name(path), fmt, str(path), files=[str(path)])
    info.warnings = warnings + rows.warnings(path)
    info.hparams = dict(rows.facts)
    if fmt == "verl-console" and rows.numbers_seen and rows.numbers_3dp >= 0.99 * rows.numbers_seen:
        info.decimals = 3  # verl <= 0.4 printed f"{v:.3f}": 0.000 means below resolution
    return rows.frame(info)


def load_file(path: str | os.PathLike[str], fmt: str | None = None) -> RunFrame:
    """Read one log file (format sniffed unless given)."""
    p = Path(path)
    check_format(fmt)
    try:
        text = p.read_bytes().decode("utf-8", "replace")
    except OSError as exc:
        raise SourceError(f"{p}: cannot read ({exc.strerror})") from None
    fmt = fmt or sniff(p, text[: 256 << 10])
    rows, warnings = Rows(), []
    if fmt == "trainer-state":
        _trainer_state(text, rows, warnings, str(p))
    else:
        parser = _line_parser(fmt, rows)
        lines = text.split("\n")
        if lines and lines[-1] and fmt in ("verl-jsonl", "jsonl"):
            try:
                json.loads(lines[-1])
            except json.JSONDecodeError:
                warnings.append(
                    f"{p}: the last line is cut off ({len(lines[-1])} bytes "
                    "without a newline, not valid JSON); it was not read"
                )
                lines = lines[:-1]
        for i, line in enumerate(lines, 1):
            parser.feed(line, i)
        parser.finish()
    if not rows.steps:
        raise SourceError(f"{p}: read as {FORMATS[fmt]}, but it holds no metrics")
    return _frame(p, fmt, rows, warnings)


def log_files(directory: Path) -> list[Path]:
    """Candidate log files below a directory (by suffix), in name order."""
    return sorted(
        p
        for p in directory.rglob("*")
        if p.is_file() and (p.suffix in LOG_SUFFIXES or p.name.endswith(".log.txt"))
    )


def load_dir(directory: Path, fmt: str | None = None) -> RunFrame:
    """Every readable log file below a directory is a run; the others are named in a warning."""
    frames, unread = [], []
    for f in log_files(directory):
        try:
            frames.append(load_file(f, fmt))
        except SourceError as exc:
            unread.append(str(exc))
    if not frames:
        raise SourceError(
            f"{directory}: no TensorBoard event files and no readable logs in it "
            f"or below ({len(unread)} candidate file(s) unrecognised)"
        )
    names: dict[str, int] = {}
    out = []
    for frame in frames:
        (name,) = frame.runs
        if name in names:
            info = frame.runs[name]
            frame = frame.renamed({name: str(Path(info.address).relative_to(directory))})
        names[name] = 1
        out.append(frame)
    merged = RunFrame.concat(out)
    if unread:
        first = next(iter(merged.runs.values()))
        first.warnings.extend(f"not a run: {u}" for u in unread)
    return merged


class Follower:
    """Follows a growing log file: each poll reads new complete lines only (trainer_state.json,
    rewritten at each checkpoint, is re-read when it changes and only new steps returned)."""

    def __init__(self, path: str | os.PathLike[str], fmt: str | None = None):
        self.path = Path(path)
        check_format(fmt)
        self.fmt = fmt
        self.offset = 0
        self.parser: Any = None
        self.rows = Rows()
        self.sent = 0
        self.last_step: int | None = None
        self._stamp: tuple[float, int] | None = None
        self.tail: Any = None

    def notices(self) -> list[str]:
        return self.tail.notices() if self.tail is not None else []

    def poll(self) -> RunFrame:
        if not self.path.exists() and self.tail is None:
            raise SourceError(f"{self.path}: no such file")
        if self.fmt is None:
            self.fmt = sniff(self.path) if self.path.stat().st_size else None
            if self.fmt is None:
                return RunFrame.empty()
        if self.fmt == "trainer-state":
            return self._poll_json()
        if self.parser is None:
            self.parser = _line_parser(self.fmt, self.rows)
        if self.tail is None:
            from rlwatch.sources._filetail import FileTail

            self.tail = FileTail(self.path)  # by inode and name: rotation, copytruncate, ...
        chunk = self.tail.read().decode("utf-8", "replace")
        if not chunk:
            return RunFrame.empty()
        for line in chunk.split("\n")[:-1]:
            self.parser.feed(line, 0)
        return self._delta()

    def _poll_json(self) -> RunFrame:
        st = self.path.stat()
        stamp = (st.st_mtime, st.st_size)
        if stamp == self._stamp:
            return RunFrame.empty()
        self._stamp = stamp
        rows, warnings = Rows(), []
        _trainer_state(
            self.path.read_text(encoding="utf-8", errors="replace"), rows, warnings, str(self.path)
        )
        keep = [i for i, s in enumerate(rows.steps) if self.last_step is None or s > self.last_step]
        for i in keep:
            self.rows.add(rows.steps[i], rows.tags[rows.codes[i]], rows.values[i])
        return self._delta()

    def _delta(self) -> RunFrame:
        new = range(self.sent, len(self.rows.steps))
        if not new:
            return RunFrame.empty()
        self.sent = len(self.rows.steps)
        self.last_step = max(self.rows.steps[i] for i in new)
        delta = Rows()
        for i in new:
            delta.add(self.rows.steps[i], self.rows.tags[self.rows.codes[i]], self.rows.values[i])
        return _frame(self.path, self.fmt or "", delta, [])


def iter_formats() -> Iterable[str]:
    return FORMATS.keys()
