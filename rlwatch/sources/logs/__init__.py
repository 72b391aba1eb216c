"""Text and JSON logs: verl console and FileLogger JSONL, transformers/TRL trainer_state.json
(and JSON arrays of its rows), printed python dicts, notebook progress tables, LLaMA-Factory's
trainer_log.jsonl, prime-rl's metrics.jsonl, ms-swift's logging.jsonl, other JSONL with a step
field, custom trainers' `Name: number` lines, and a user's regex. Sniffed, streamed a block at a
time, followed.

Every record that can be read is read; what cannot (a value that is not a number, a step out
of range) is counted in a warning that says what was lost. A last line without its newline is
never parsed (it may be a line still being written): a warning says so.
"""

from __future__ import annotations

import os
import re
from array import array
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rlwatch.errors import SourceError, UsageError
from rlwatch.frame import RunFrame, RunInfo
from rlwatch.sources.logs import _json, _text, _verl
from rlwatch.sources.logs._cols import Blocks, Cols

FORMATS = {
    "verl-console": "verl console log (step:N - key:value - ...)",
    "verl-jsonl": 'verl FileLogger JSONL ({"step": N, "data": {...}})',
    "trainer-state": "transformers/TRL trainer_state.json (log_history)",
    "json-array": 'a JSON array of log_history-style rows ([{"step": N, "loss": ...}, ...])',
    "curves": 'a JSON object holding whole curves ({"rewards_curve": [1.3, 0.4, ...], "kl_curve": '
    "[...]}, or [[step, value], ...] pairs); the i-th value is step i, from 1, unless a `steps` "
    "list as long says otherwise; a JSONL of such objects is a sweep, a run each",
    "python-dicts": "TRL/transformers console capture ({'loss': ...} lines, numbers or strings)",
    "notebook-table": "a Jupyter notebook's progress table (NotebookProgressCallback; HTML, "
    "markdown or text)",
    "llamafactory": "LLaMA-Factory trainer_log.jsonl (current_steps, loss, lr, ...)",
    "prime-rl": 'prime-rl metrics.jsonl ({"step": N, "time": T, ...})',
    "ms-swift": 'ms-swift logging.jsonl ({"loss": ..., "global_step/max_steps": "N/M", ...})',
    "jsonl": "JSONL with a step field (Tinker metrics.jsonl, ...)",
    "jsonl-count": "JSONL without a step field, each line one log of namespaced numbers "
    '({"rollout_info/ep_rew": 0.3, ...}: RL4LMs); steps count the lines from 1',
    "kv-pairs": "lines of `Name: number` or `name=number` pairs with a step counter "
    "(Epoch:[1/1](120/9751), Reward: 0.1, ...), or a step header with one pair a line under it "
    "(NeMo RL's console)",
    "csv": "a metrics CSV: a header of names, a row per log (a W&B export, a metrics.csv)",
}
USER_REGEX = "regex:"
# what a folder's walk treats as a log; a notebook or a page (.ipynb, .md, .html) can hold a
# progress table or a pasted log (a README.md or SOURCE.md is not a run: DOC_NAMES below)
LOG_SUFFIXES = {
    ".log",
    ".txt",
    ".out",
    ".err",
    ".jsonl",
    ".json",
    ".ndjson",
    ".ipynb",
    ".csv",
    ".tsv",
    ".md",
    ".html",
}
DOCUMENTS = {"trainer-state", "json-array", "curves", "notebook-table"}
JSON_LINES = {"verl-jsonl", "jsonl", "jsonl-count", "llamafactory", "prime-rl", "ms-swift"}
MAX_DOCUMENT = 1 << 30  # a JSON/HTML document is read whole: refuse anything larger


HEAD = 256 << 10  # bytes sniffed first
DEEP = 16 << 20  # bytes sniffed at most: a run's first metric line after pages of warnings
# the files sniffed past HEAD: captured output, where a job prints pages before its first log
# (CSVs and JSON documents are judged by their head)
CONSOLES = {".log", ".out", ".err", ".txt", ".jsonl", ".ndjson"}
# pages sniffed past HEAD for a progress table only: a notebook's images come before its table
PAGES = {".ipynb", ".html", ".md"}


def _head(path: Path) -> str:
    with open(path, "rb") as f:
        return f.read(HEAD).decode("utf-8", "replace")


def _later_blocks(path: Path) -> Any:
    """The file's text after its first HEAD bytes, about 1 MiB of whole lines at a time, up to
    DEEP bytes in all."""
    with open(path, "rb") as f:
        f.seek(HEAD)
        carry = b""
        while f.tell() < DEEP:
            block = f.read(1 << 20)
            if not block:
                break
            data = carry + block
            cut = data.rfind(b"\n")
            if cut < 0 and len(data) < 4 << 20:
                carry = data  # a long line still going: wait for its end
                continue
            cut = len(data) - 1 if cut < 0 else cut
            carry = data[cut + 1 :]
            yield data[: cut + 1].decode("utf-8", "replace")
        if carry:
            yield carry.decode("utf-8", "replace")


# -- sniffing and loading ------------------------------------------------------------------
def sniff(path: Path, head: str | None = None) -> str:
    """The format of a log file, from its first 256 KiB; a captured output (CONSOLES) whose
    first metric line comes later (after pages of warnings or debug prints) is sniffed on, up
    to 16 MiB."""
    given = head is not None
    if head is None:
        head = _head(path)
    # a notebook saved as one line of JSON: its output lines, a line each; a Kaggle kernel's log
    # (a JSON array of output chunks): the output
    if path.suffix == ".ipynb" or head.startswith(_text.KAGGLE_HEAD):
        head = _text.nb_split(head)
    try:
        fmt = _sniff(path, head)
        if fmt == "kv-pairs" and path.suffix in PAGES and not given and len(head) >= HEAD // 2:
            # a notebook saved on one line: a progress bar's text in an output before its
            # table looks like a counted line; its table, after the head, is the run
            before = head[-4096:]  # a table's header may straddle two blocks
            for block in _later_blocks(path):
                if _text.sniff_notebook(before + block):
                    return "notebook-table"
                before = block[-4096:]
        return fmt
    except SourceError:
        if not given and _large_curves(path, head):
            return "curves"
        if given or len(head) < HEAD // 2 or path.suffix not in CONSOLES | PAGES:
            raise
        st = os.stat(path)
        key = (st.st_dev, st.st_ino)
        if st.st_size < 2 * _MISSED.get(key, 0):  # sniffed deep in vain at half this size
            raise
        before = head[-4096:]  # a table's header may straddle two blocks
        for block in _later_blocks(path):
            if path.suffix in PAGES:  # a notebook's table after its images (base64 outputs)
                if _text.sniff_notebook(before + block):
                    return "notebook-table"
                before = block[-4096:]
                continue
            lines = [ln for ln in block.splitlines() if ln.strip()]
            objects = [ln for ln in lines if ln.lstrip().startswith("{")][:5]
            fmt = _sniff_lines(lines, block, objects)
            if fmt is None and _text.sniff_kv(_steppy_lines(block)):
                fmt = "kv-pairs"  # its first counted line past the 2,000 lines probed above
            if fmt is not None:
                return fmt
        if len(_MISSED) > 4096:
            _MISSED.clear()
        _MISSED[key] = st.st_size
        raise


MAX_CURVES = 64 << 20  # a JSON object cut by the head is read whole for its curves up to this


def _large_curves(path: Path, head: str) -> bool:
    """Whether a JSON object larger than the head is a document of curves (a script's
    `training_history.json` of 30,000 losses: `{"train_losses": [0.80, 1.03, ...], ...}`),
    read whole up to MAX_CURVES; once per version of the file (`tail` sniffs at every poll)."""
    if path.suffix.lower() != ".json" or not _json.CURVES_HEAD.match(head):
        return False
    try:
        st = path.stat()
        if not HEAD < st.st_size <= MAX_CURVES:
            return False
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        if key not in _CURVES:
            text = path.read_bytes().decode("utf-8", "replace")
            if len(_CURVES) > 4096:
                _CURVES.clear()
            _CURVES[key] = _json.curves_in(text) is not None
    except OSError:
        return False
    return _CURVES[key]


_CURVES: dict[tuple[int, int, int, int], bool] = {}


def _steppy_lines(block: str, limit: int = 2000) -> list[str]:
    """The first `limit` lines of a block with a step counter (the kv-pairs reader's own: `step
    12`, `Step: 12`, `iter 12`), in order with the lines of one `Name: number` pair among them
    (a block's, as NeMo RL prints a step's results under its header): probed for pairs deep in
    a console (DeepSpeed-Chat's step lines after ten thousand lines of launcher output, NeMo
    RL's first step after a large cluster's start-up), past the 2,000 lines `_sniff_lines`
    probes."""
    found: list[tuple[int, int]] = []  # (start, end) of each line taken
    pos = 0
    while len(found) < limit:
        m = _text.STEP_COUNTER.search(block, pos)
        if m is None:
            break
        start = block.rfind("\n", 0, m.start()) + 1
        end = block.find("\n", m.end())
        end = len(block) if end < 0 else end
        found.append((start, end))
        pos = end + 1  # the next line
    if found:  # the pair lines up to the last counter line taken (and a block after it)
        stop = block.find("\n", found[-1][1] + 1, found[-1][1] + (64 << 10))
        stop = len(block) if stop < 0 else stop
        pairs = _text.BLOCK_LINES.finditer(block, 0, stop)
        found += [(m.start(), m.end()) for _, m in zip(range(4 * limit), pairs, strict=False)]
    return [block[a:b] for a, b in sorted(set(found))]


# files sniffed deep in vain, by (device, inode) -> their size then: a growing file that is no
# log (a W&B debug.log) is read deep again only once it has doubled (tail looks often)
_MISSED: dict[tuple[int, int], int] = {}


def _sniff_lines(lines: list[str], head: str, objects: list[str] | None = None) -> str | None:
    """A line-based format seen in these lines (JSON lines: `objects`, else the first 5), or
    None."""
    if any(_verl.sniff_line(ln) for ln in lines):
        return "verl-console"
    counted = 0  # records of namespaced numbers without a step (_json.counted_record)
    for ln in lines[:5] if objects is None else objects:
        try:
            obj = _json.loads(ln)
        except ValueError:
            continue
        fmt = _json.sniff_line(obj)
        if fmt:
            return fmt
        counted = counted + 1 if counted >= 0 and _json.counted_record(obj) else -1
    if counted >= 2:
        return "jsonl-count"
    if any(_text.metrics_dict(_verl.ANSI.sub("", ln)) for ln in lines if "{'" in ln):
        return "python-dicts"
    if any("{" in ln for ln in lines) and _text.sniff_wrapped_dicts(head.splitlines()[:4000]):
        return "python-dicts"
    if _text.sniff_kv(lines):
        return "kv-pairs"
    return None


def _sniff(path: Path, head: str) -> str:
    doc = _json.sniff_document(head)
    if doc:
        return doc
    lines = [ln for ln in head.splitlines()[:2000] if ln.strip()]
    if (
        lines
        and (path.suffix in (".html", ".md", ".ipynb") or "<th" in head or "Training Loss" in head)
        and _text.sniff_notebook(head, own=path.suffix in (".md", ".html"))
    ):
        if _text.loss_only_table(head):
            # a table of the loss alone beside the run's printed logs (a callback printing
            # every metric): the logs are the run
            other = _sniff_lines(lines, head)
            if other is None and _text.sniff_kv(_steppy_lines(head)):
                other = "kv-pairs"
            if other is not None:
                return other
        return "notebook-table"
    if path.suffix in (".csv", ".tsv", ".txt") and _text.sniff_csv(lines[:6]):
        return "csv"
    fmt = _sniff_lines(lines, head)
    if fmt is not None:
        return fmt
    if path.suffix in PAGES and len(lines) >= 2000 and _text.sniff_kv(_steppy_lines(head)):
        return "kv-pairs"  # a notebook's printed results after 2,000 lines of its cells' JSON
    first, *rest = FORMATS
    raise SourceError(
        f"{path}: unrecognised log format (tried: {FORMATS[first]}, {', '.join(rest)}); "
        "force one with --log-format NAME, or --log-format 'regex:...' with a (?P<step>...) group"
    )


def check_format(fmt: str | None) -> None:
    if fmt is None:
        return
    if fmt.startswith(USER_REGEX):
        _text.user_regex(fmt[len(USER_REGEX) :])
        return
    if fmt not in FORMATS:
        raise UsageError(
            f"--log-format {fmt!r} is not a known format (valid: {', '.join(FORMATS)}, "
            "or regex:<pattern with (?P<step>...) and named metric groups>)"
        )


def _line_parser(fmt: str, cols: Cols, run: str | None = None, name: str = "") -> Any:
    if fmt.startswith(USER_REGEX):
        return _text.UserRegex(cols, _text.user_regex(fmt[len(USER_REGEX) :]))
    if fmt == "verl-console":
        return _verl.VerlConsole(cols)
    if fmt in JSON_LINES:
        return _json.JsonLines(cols, fmt)
    if fmt == "kv-pairs":
        return _text.KeyValues(cols)
    if fmt == "csv":
        return _text.Csv(cols, run, name)
    return _text.PythonDicts(cols)


def _describe(fmt: str) -> str:
    return FORMATS.get(fmt, f"your regex {fmt[len(USER_REGEX) :]!r}")


GENERIC_STEMS = {
    "metrics",
    "logging",
    "trainer_state",
    "trainer_log",
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


def _frame(path: Path, fmt: str, cols: Cols, warnings: list[str] | None) -> RunFrame:
    info = RunInfo(run_name(path), fmt, str(path), files=[str(path)])
    info.hparams = dict(cols.facts)
    if fmt == "verl-console" and cols.numbers_seen and cols.numbers_3dp >= 0.99 * cols.numbers_seen:
        info.decimals = 3  # verl <= 0.4 printed f"{v:.3f}": 0.000 means below resolution
    frame = cols.frame(info)
    # after the frame: building it can add a note (a file of single samples, averaged)
    info.warnings = [] if warnings is None else warnings + cols.warnings(path)
    return frame


def _read_document(
    p: Path, fmt: str, cols: Cols, warnings: list[str], run: str | None = None
) -> None:
    if p.stat().st_size > MAX_DOCUMENT:
        raise SourceError(f"{p}: a {fmt} document larger than 1 GiB is not read whole")
    text = p.read_bytes().decode("utf-8", "replace")
    if fmt == "notebook-table":
        _text.read_notebook(text, cols, str(p))
        if p.suffix == ".ipynb" and not text.rstrip().endswith("}"):  # a notebook is one object
            warnings.append(
                f"{p}: the notebook ends before its JSON does (cut, or still being saved): "
                "only the table rows before the cut are read"
            )
    elif fmt == "curves":
        _json.read_curves(text, cols, str(p), run)
    else:
        _json.read_document(text, cols, warnings, str(p))


def _partial_warning(p: Path, blocks: Blocks) -> list[str]:
    out = []
    if blocks.partial:
        out.append(
            f"{p}: last line incomplete, not read ({blocks.partial} bytes without a newline: "
            "a line still being written, or a cut file)"
        )
    if blocks.long_lines:
        out.append(f"{p}: {blocks.long_lines} line(s) longer than 64 MiB skipped")
    return out


def _read_json_lines(p: Path, parser: _json.JsonLines, blocks: Blocks) -> Blocks:
    """JSON lines a block at a time; a large verl/flat JSONL file's tail is read by Arrow in a
    second thread meanwhile, and taken when this read reaches it and it is provably what this
    read gives (_json.plain_region); otherwise this read goes on as if there were no tail."""
    import sys

    start = None
    if parser.fmt in ("verl-jsonl", "jsonl"):
        start = _json.tail_start(p, p.stat().st_size, blocks.block)
    if start is None:
        for lines in blocks.line_lists():
            parser.feed_lines(lines, blocks.lineno)
        return blocks
    # the worker needs the GIL back after each of its numpy/Arrow calls: hand it over sooner
    interval = sys.getswitchinterval()
    sys.setswitchinterval(min(interval, 0.0005))
    parser.threaded = True
    try:
        tail = _json.ArrowTail(p, parser.fmt, start)
        reads = blocks.line_lists()
        for lines in reads:
            parser.feed_lines(lines, blocks.lineno)
            if blocks.offset >= start:
                break
        region = tail.result()  # the thread ends here, whatever becomes of its tail
        if blocks.offset != start:  # the file changed under this read: no tail
            region = None
    finally:
        sys.setswitchinterval(interval)
        parser.threaded = False
    if region is None:  # as if there were no tail: the same reader goes on
        for lines in reads:
            parser.feed_lines(lines, blocks.lineno)
        return blocks
    reads.close()
    parser.add_region(region)
    rest = Blocks(p, offset=region.end, binary=True)
    rest.lineno = blocks.lineno + len(lines) + region.nlines
    rest.long_lines = blocks.long_lines
    for more in rest.line_lists():
        parser.feed_lines(more, rest.lineno)
    return rest


def load_file(
    path: str | os.PathLike[str], fmt: str | None = None, run: str | None = None
) -> RunFrame:
    """Read one log file (format sniffed unless given), streaming it a block at a time;
    `run`: of a W&B export of several runs' charts, that run (named so)."""
    p = Path(path)
    check_format(fmt)
    cols, warnings = Cols(), []
    fmt = _read_into(p, fmt, cols, warnings, run)
    if not len(cols):
        more = f" ({warnings[0]})" if warnings else ""
        what = f" for run {run!r}" if run is not None else ""
        raise SourceError(f"{p}: read as {_describe(fmt)}, but it holds no metrics{what}{more}")
    frame = _frame(p, fmt, cols, warnings)
    if run is not None and fmt in ("csv", "curves"):
        frame = frame.renamed({next(iter(frame.runs)): run})
    return frame


def load_parts(paths: list[Path], fmt: str | None = None) -> RunFrame:
    """One run written as several files (W&B's export of each chart of a run: a CSV per
    metric), each read by its own reader into one set of columns, so the names resolve over
    them all as over one file's. A part that holds nothing is said in a warning."""
    check_format(fmt)
    cols, warnings = Cols(), []
    first = None
    unread: list[str] = []
    for p in paths:
        before = len(cols)
        try:
            got = _read_into(p, fmt, cols, warnings)
        except SourceError as exc:  # one damaged part: the others are still the run
            unread.append(str(exc))
            continue
        first = first or got
        if len(cols) == before:
            unread.append(f"{p}: read as {_describe(got)}, but it holds no metrics")
    if not len(cols) or first is None:
        raise SourceError(
            f"{paths[0]}: read as the {len(paths)} parts of one run, none holds metrics"
            + (f" ({unread[0]})" if unread else "")
        )
    warnings += [f"{u} (a part of this run; the other parts are read)" for u in unread]
    frame = _frame(paths[0], first, cols, warnings)
    (info,) = frame.runs.values()
    info.files = [str(p) for p in paths]
    runs = export_runs(paths[0])  # the run's own name, not its first chart's
    return frame.renamed({info.name: runs[0]}) if len(runs) == 1 else frame


def _read_into(
    p: Path, fmt: str | None, cols: Cols, warnings: list[str], run: str | None = None
) -> str:
    """Read `p` into `cols` (its format sniffed unless given); the format read."""
    try:
        fmt = fmt or sniff(p)
        if fmt in DOCUMENTS:
            _read_document(p, fmt, cols, warnings, run)
        else:
            parser = _line_parser(fmt, cols, run, p.name)
            # a bar's redraw is a record
            bars = isinstance(parser, (_text.KeyValues, _text.PythonDicts))
            if bars and run is not None:  # one of a notebook's trainings (notebook_runs)
                cells = _notebook_cells(p, fmt).get(run)
                if cells is None:
                    raise SourceError(f"{p}: no training {run!r} in this notebook (any more)")
                parser.nb = _text.Output(cells)
            blocks = Blocks(p, binary=isinstance(parser, _json.JsonLines), cr=bars)
            if isinstance(parser, _json.JsonLines):
                blocks = _read_json_lines(p, parser, blocks)
            else:
                for text in blocks:
                    parser.feed(text, blocks.lineno)
            parser.finish()
            warnings += _partial_warning(p, blocks)
    except OSError as exc:
        raise SourceError(f"{p}: cannot read ({exc.strerror or exc})") from None
    except MemoryError:
        raise SourceError(f"{p}: too large to read in memory") from None
    return fmt


MAX_NOTEBOOK = 64 << 20  # a notebook is parted into its cells' trainings up to this size


def notebook_runs(path: Path, fmt: str | None = None) -> list[str]:
    """The trainings a notebook's cells printed, when it holds two or more (an algorithm a
    cell, a sweep a cell): each a run, named by its first cell (`cell-9`, counted from 1 as
    Jupyter shows them); none otherwise (the notebook is one run)."""
    return list(_notebook_cells(path, fmt))


def _notebook_cells(path: Path, fmt: str | None) -> dict[str, frozenset[int]]:
    """`notebook_runs`, each with the cells (from 0) whose output it is."""
    if path.suffix.lower() != ".ipynb":
        return {}
    try:
        st = os.stat(path)
        if st.st_size > MAX_NOTEBOOK:
            return {}
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, fmt)  # `tail` asks each poll
        if key in _NOTEBOOKS:
            return _NOTEBOOKS[key]
        fmt = fmt or sniff(path)
        text = path.read_bytes().decode("utf-8", "replace")
    except (OSError, SourceError):
        return {}
    runs: dict[str, frozenset[int]] = {}
    if fmt in ("kv-pairs", "python-dicts") and _text.NB_HEAD.match(text):
        runs = _text.notebook_trainings(text, lambda cols: _line_parser(fmt, cols))
    if len(_NOTEBOOKS) > 4096:
        _NOTEBOOKS.clear()
    _NOTEBOOKS[key] = runs
    return runs


_NOTEBOOKS: dict[tuple[int, int, int, int, str | None], dict[str, frozenset[int]]] = {}


def curve_runs(path: Path) -> list[str]:
    """The runs a small JSON document of curves holds (a sweep's seeds, one record each, or
    `{"<run>": {"loss": [...]}, ...}`), or none; read only when the file is a head's size."""
    if path.suffix.lower() not in (".json", ".jsonl", ".ndjson"):
        return []
    try:
        st = os.stat(path)
        if st.st_size > HEAD:
            return []
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)  # `tail` asks at every poll
        if key in _SWEEPS:
            return _SWEEPS[key]
        head = _head(path)
    except OSError:
        return []
    doc = _json.curves_in(head) if _json.sniff_document(head) == "curves" else None
    runs = [] if doc is None else _json.curve_runs(doc)[1]
    if len(_SWEEPS) > 4096:
        _SWEEPS.clear()
    _SWEEPS[key] = runs
    return runs


_SWEEPS: dict[tuple[int, int, int, int], list[str]] = {}


def export_runs(path: Path) -> list[str]:
    """The W&B runs whose charts `path` is a CSV export of (its header's "<run> - "
    prefixes, in order), or none; the header alone is read."""
    if path.suffix.lower() != ".csv":
        return []
    try:
        with open(path, "rb") as f:
            head = f.read(HEAD)
    except OSError:
        return []
    line = head.split(b"\n", 1)[0].decode("utf-8", "replace").rstrip("\r")
    header = _text._csv_header(line)
    if header is None:
        return []
    # TensorBoard's export of one of a run's tags; renamed (no run in its name), of the run
    # its folder's exports are
    tb = _text.tb_export(path.name, header, path.absolute().parent.name or "run")
    return [tb[0]] if tb is not None else _text.export_runs(header)


MAX_STACKED = 64 << 20  # a CSV of several runs' rows is scanned for its runs up to this size


def stacked_runs(path: Path) -> list[str]:
    """The runs a CSV holds one after another, told apart by a column naming each row's run
    (`experiment,step,reward` with `baseline` rows, then `softmax` rows: _text.RUN_COLUMNS),
    in order; none when it names fewer than two (or the file is no such CSV)."""
    import csv

    if path.suffix.lower() not in (".csv", ".tsv"):
        return []
    try:
        if path.stat().st_size > MAX_STACKED:
            return []
        with open(path, encoding="utf-8", errors="replace", newline="") as f:
            first = f.readline()  # the header, split as the CSV reader splits it
            reader = csv.reader(f, delimiter=_text.delimiter(first))
            header = _text._csv_header(first.rstrip("\r\n"))
            at = _text.run_column(header) if header is not None else None
            if at is None or header is None:
                return []
            seen: dict[str, None] = {}
            for row in reader:
                if len(row) == len(header) and row[at].strip() and not _text._number(row[at]):
                    seen.setdefault(row[at].strip(), None)
    except (OSError, csv.Error, ValueError):
        return []
    return list(seen) if len(seen) > 1 else []


# a project's own documents are never runs in a folder walk (a README may quote a log line);
# a page of pasted logs (`part-of-logs.md`) or a notebook with a training table is
DOC_NAMES = re.compile(
    r"^(?:readme|source|changelog|changes|history|licen[cs]e|copying|notice|contributing|"
    r"authors|security|code_of_conduct|design|todo)(?:[._-]|$)",
    re.IGNORECASE,
)


# a file without a suffix that names a log (`rl_loop_logs`, `train_log`, `stdout`, `nohup`):
# a job's captured output saved as it came
LOG_STEM = re.compile(r"log|stdout|stderr|output|console|nohup", re.IGNORECASE)


def is_log_name(p: Path) -> bool:
    """A file a folder's walk takes for a log, by its name (its content is sniffed later); a
    model card (`README.md` of a trained model) by the training results table in its head."""
    if p.suffix in (".md", ".html", ".txt", ".ipynb", "") and DOC_NAMES.match(p.name):
        return p.suffix == ".md" and _model_card(p)
    if not p.suffix:
        return bool(LOG_STEM.search(p.name)) and not p.name.startswith(".")
    return p.suffix in LOG_SUFFIXES or p.name.endswith(".log.txt")


def _model_card(p: Path) -> bool:
    """Whether a Markdown document holds transformers' model-card table of training results
    (`| Training Loss | Epoch | Step | Validation Loss | ...`) in its first 256 KiB; asked once
    per version of the file (`tail` walks its folders at every poll)."""
    try:
        st = os.stat(p)
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        if key in _CARDS:
            return _CARDS[key]
        with open(p, "rb") as f:
            head = f.read(HEAD).decode("utf-8", "replace")
    except OSError:
        return False
    card = "| Training Loss" in head and any(
        _text._cells(ln)[:3] == _text.MODEL_CARD
        for ln in head.splitlines()
        if "Training Loss" in ln
    )
    if len(_CARDS) > 4096:
        _CARDS.clear()
    _CARDS[key] = card
    return card


_CARDS: dict[tuple[int, int, int, int], bool] = {}


def log_files(directory: Path) -> list[Path]:
    """Candidate log files below a directory (by name), in name order."""
    return sorted(p for p in directory.rglob("*") if p.is_file() and is_log_name(p))


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
    """Follows a growing log file: each poll reads new complete lines only, and leaves a line
    still being written for the next poll (whole documents -- trainer_state.json, rewritten at
    each checkpoint, a JSON array, a notebook table -- are re-read when they change and only
    new steps returned)."""

    def __init__(self, path: str | os.PathLike[str], fmt: str | None = None):
        self.path = Path(path)
        check_format(fmt)
        self.fmt = fmt
        self.given = fmt is not None
        self.sniffed = 0  # the file's size when its format was decided
        self.replaces = False  # read again from the first line in another format
        self._start()

    def _start(self) -> None:
        """Nothing read yet."""
        self.parser: Any = None
        self.cols = Cols()
        self.last_step: int | None = None
        self._stamp: tuple[float, int] | None = None
        self.lineno = 1
        self.tail: Any = None
        self.kept: list[dict[str, array]] = []  # rows handed out with log ordinals
        self.kept_rows = 0
        self.carried = 0  # a file of single samples: its last step's rows, read again

    def poll(self) -> RunFrame:
        if not self.path.exists() and self.tail is None:
            raise SourceError(f"{self.path}: no such file")
        if not self._format():
            return RunFrame.empty()
        if self.fmt in DOCUMENTS:
            return self._poll_document()
        if self.parser is None:
            self.parser = _line_parser(self.fmt, self.cols, name=self.path.name)
        if self.tail is None:
            from rlwatch.sources._filetail import FileTail

            # by inode and name: rotation, copytruncate, ...; a bar's redraw is a record
            self.tail = FileTail(self.path, cr=self.fmt in ("kv-pairs", "python-dicts"))
        for text in self.tail.blocks():
            self.parser.feed(text, self.lineno)
            self.lineno += text.count("\n")
        parser = self.parser
        if getattr(parser, "restarted", False):  # a new training: it replaces the rows so far
            parser.restarted, self.replaces = False, True
            self.kept, self.kept_rows = [], 0
            parser.settle_steps()
        if (
            getattr(parser, "summary", None) is not None
            and parser.ordinal_steps
            and not parser.keep_ordinals
        ):
            return self._renumbered()
        if "Final" in getattr(self.parser, "validation", {}):
            # verl's Initial/Final validation dicts are decided once the Final one is printed
            # (the end of training: every step line is in), as the batch reader decides them
            self.parser.finish()
        return self._delta()

    def _format(self) -> bool:
        """Decide the file's format, as diagnose does from the file's first HEAD bytes; False
        while it is empty. Decided again while those bytes are still being written: a verl
        console prints its config as a Python dict before its first step line, so a head cut
        there reads as `python-dicts`. When the whole head says otherwise, the file is read
        again from its first line (`replaces`: tail evaluates the run afresh)."""
        try:
            size = self.path.stat().st_size
        except OSError:
            return self.fmt is not None  # gone: the tail says what became of it
        if self.fmt is None:
            if not size:
                return False
            self.fmt, self.sniffed = sniff(self.path), size
            return True
        if self.given or self.sniffed >= HEAD or size == self.sniffed:
            return True
        self.sniffed = size
        try:
            fmt = sniff(self.path)
        except SourceError:
            return True
        if fmt != self.fmt:
            if self.tail is not None:
                self.tail.close()
            self._start()
            self.fmt, self.replaces = fmt, True
        return True

    def notices(self) -> list[str]:
        """Files that moved since the last call (rotated, truncated, recreated, deleted)."""
        return self.tail.notices() if self.tail is not None else []

    def _poll_document(self) -> RunFrame:
        st = self.path.stat()
        stamp = (st.st_mtime, st.st_size)
        if stamp == self._stamp:
            return RunFrame.empty()
        self._stamp = stamp
        cols, warnings = Cols(), []
        _read_document(self.path, self.fmt or "", cols, warnings)
        cols._seal()
        rows = [zip(*c[:3], strict=True) for c in cols.chunks]
        for code, step, value in (r for part in rows for r in part):
            if self.last_step is None or step > self.last_step:
                self.cols.add(int(step), cols.tags[code], float(value))
        return self._delta()

    def _renumbered(self) -> RunFrame:
        """A console without steps whose summary is now printed: its steps from the epochs,
        as diagnose reads it. The whole run again, renumbered, if rows were handed out with
        ordinals (`RunInfo.replaces`: `tail` evaluates it afresh); else as it was."""
        parser, cols = self.parser, self.cols
        now = cols.codes, cols.steps, cols.values
        if self.kept:
            for name, kind in (("codes", "i"), ("steps", "q"), ("values", "d")):
                whole = array(kind)
                for part in self.kept:
                    whole.extend(part[name])
                whole.extend(getattr(cols, name))
                setattr(cols, name, whole)
            parser.offset = 0
        parser.settle_steps()
        if parser.step_of is None:  # not renumbered: the ordinals stand, for good
            cols.codes, cols.steps, cols.values = now
            parser.keep_ordinals = True
            self.kept = []
            return self._delta()
        replaces = bool(self.kept)
        self.kept = []
        frame = self._delta()
        if replaces:
            for info in frame.runs.values():
                info.replaces = True
        return frame

    def _delta(self) -> RunFrame:
        if len(self.cols) == self.carried:  # nothing new
            return RunFrame.empty()
        parser, cols = self.parser, self.cols
        carry = _last_step_rows(cols) if cols.samples is not None else None
        if getattr(parser, "ordinal_steps", False) and not parser.keep_ordinals:
            # rows with log ordinals: kept, to be renumbered once the summary is printed
            n = len(cols.steps)
            if self.kept_rows + n <= MAX_KEPT_ROWS:
                self.kept.append({k: getattr(cols, k)[:] for k in ("codes", "steps", "values")})
                self.kept_rows += n
                parser.offset += n
            else:
                parser.keep_ordinals = True  # too long to keep
                self.kept = []
        self.last_step = cols.max_step()
        frame = _frame(self.path, self.fmt or "", cols, None)
        cols.clear_rows()
        self.carried = 0
        if carry is not None:  # more samples of the last step may come: its mean again then
            cols.add_arrays(*carry)
            self.carried = len(carry[2])
        if self.replaces:
            self.replaces = False
            for info in frame.runs.values():
                info.replaces = True
        return frame


MAX_KEPT_ROWS = 5_000_000  # a step-less console's rows kept by `tail` for its renumbering


def _last_step_rows(cols: Cols) -> tuple[Any, Any, Any]:
    """The rows of a Cols' highest step (codes, steps, values), copied."""
    import numpy as np

    cols._seal()
    c, s, v = (np.concatenate([ch[i] for ch in cols.chunks]) for i in range(3))
    at = s == s.max()
    return c[at].copy(), s[at].copy(), v[at].copy()


def iter_formats() -> Iterable[str]:
    return FORMATS.keys()


__all__ = [
    "FORMATS",
    "Follower",
    "check_format",
    "iter_formats",
    "load_dir",
    "load_file",
    "log_files",
    "run_name",
    "sniff",
]
