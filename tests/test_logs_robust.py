"""Log readers never crash and never read a value that is not there: a cut last line, hostile
steps and numbers, lines of a megabyte (every parser linear), fractional steps."""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from rlwatch.cli.app import app
from rlwatch.errors import SourceError
from rlwatch.sources import logs

runner = CliRunner()


def test_a_cut_last_line_is_never_read_and_the_follower_waits(tmp_path: Path) -> None:
    f = tmp_path / "run.log"
    f.write_text(
        "step:1 - actor/entropy:0.5 - actor/grad_norm:1.0\n"
        "step:2 - actor/grad_norm:1.1 - actor/entropy:0.4"  # cut mid-number: 0.4xxx
    )
    frame = logs.load_file(f)
    (info,) = frame.runs.values()
    assert frame.steps(info.name) == (1, 1, 1)
    assert any("last line incomplete, not read" in w for w in info.warnings)
    r = runner.invoke(app, ["diagnose", str(f)])
    # one log is too few to judge (exit 2); the error line says what the reader warned of
    assert r.exit_code == 2 and "last line incomplete, not read" in r.output
    follower = logs.Follower(f)
    assert len(follower.poll().data) == 2
    with open(f, "a") as fh:
        fh.write("21\n")
    delta = follower.poll().data
    assert dict(zip(delta["tag"].astype(str), delta["value"], strict=True)) == {
        "actor/grad_norm": 1.1,
        "actor/entropy": 0.421,
    }


# Each hostile line is built at a size `m` (one megabyte at m=1_000_000). A parser is linear
# when ten times the input costs about ten times the CPU: the bound compares the full line with
# the same line at a tenth of its size, measured in the same test, so a loaded machine slows
# both alike (a quadratic parser costs ~100x; the one this guards against took 27 s).
LINES = [
    ("verl-console", lambda m: "step:1 - " + "a:1.0 - " * (m // 8) + "b:2"),
    ("verl-console", lambda m: "step:" * (m // 5)),
    ("verl-console", lambda m: "step:1 - " + "x" * m),
    ("verl-console", lambda m: "Final validation metrics: {" * (m // 25)),
    ("python-dicts", lambda m: "{'a': " * (m // 6)),
    ("python-dicts", lambda m: "{'loss': 0.1, " + "'k': 1, " * (m // 8) + "'x': 2}"),
    ("python-dicts", lambda m: " " * m + ": {'a': 1}"),
    ("kv-pairs", lambda m: "step 1 " + "a" * m + ": 1"),
    ("kv-pairs", lambda m: "(1/2) " + "a: 1, " * (m // 6)),
    ("kv-pairs", lambda m: "step" + " " * m + "x"),
    ("kv-pairs", lambda m: "epoch" + " " * m + "(1/2) a: 1, b: 2"),
    ("kv-pairs", lambda m: "step 1 " + "a 1 / 2 " * (m // 8)),
    ("kv-pairs", lambda m: "step 1 " + "a" * m + " 1"),
    (
        "jsonl",
        lambda m: json.dumps({"step": 1, "r": 0.5, "v": list(range(m // 7)), "s": "x" * 99}),
    ),
    ("jsonl", lambda m: json.dumps({"step": 1, "r": 0.5, "s": "\\" * (m // 2)})),
    ("jsonl", lambda m: "[" * m),
    ("notebook-table", lambda m: "Step\tTraining Loss\n" + " " * m),
]
MEGABYTE = 1_000_000


def _cpu(f: Path, line: str, fmt: str | None) -> float:
    f.write_text(line + "\n")
    t0 = time.process_time()
    with contextlib.suppress(SourceError):
        logs.load_file(f, fmt)
    return time.process_time() - t0


def _assert_linear(f: Path, make: Callable[[int], str], fmt: str | None) -> None:
    _cpu(f, make(MEGABYTE // 10), fmt)  # warm: first-call costs (imports, regex compiles)
    tenth = _cpu(f, make(MEGABYTE // 10), fmt)
    full = _cpu(f, make(MEGABYTE), fmt)
    # linear: ~10x; the floor keeps timer noise on a fast tenth from failing a fast parser
    assert full < 30 * max(tenth, 0.02), f"{full:.2f} s for 1 MB vs {tenth:.3f} s for 100 kB"


@pytest.mark.parametrize(("fmt", "make"), LINES)
def test_every_parser_is_linear_on_a_one_megabyte_line(
    tmp_path: Path, fmt: str, make: Callable[[int], str]
) -> None:
    _assert_linear(tmp_path / "big.log", make, fmt)


@pytest.mark.parametrize(
    "make",
    [
        lambda m: "{'a': " * (m // 6),
        lambda m: "step " + " " * m,
        lambda m: "<th>Step</th>" * (m // 14),
    ],
)
def test_sniffing_a_one_megabyte_line_is_linear(tmp_path: Path, make: Callable[[int], str]) -> None:
    _assert_linear(tmp_path / "big.txt", make, None)


def test_fractional_jsonl_steps_warn(tmp_path: Path) -> None:
    f = tmp_path / "m.jsonl"
    f.write_text("".join(json.dumps({"step": s / 2, "reward": s}) + "\n" for s in range(6)))
    frame = logs.load_file(f)
    (info,) = frame.runs.values()
    assert any("6 records" not in w and "fractional step (e.g. 0.5" in w for w in info.warnings)


@pytest.mark.parametrize(
    "bad",
    [
        '{"step": NaN, "reward": 1}',
        '{"step": Infinity, "reward": 1}',
        '{"step": -5, "reward": 1}',
        '{"step": 1e400, "reward": 1}',
        '{"step": ' + "9" * 400 + ', "reward": 1}',
        '{"step": 9223372036854775808, "reward": 1}',
        '{"step": 3, "reward": ' + "9" * 400 + "}",
        '{"step": 3, "reward": {"a": ' * 50_000 + "1" + "}" * 100_000,
        '{"step": 3, "data": "x"}',
        '{"step": true, "reward": 1}',
    ],
)
def test_hostile_jsonl_steps_and_numbers_never_crash(tmp_path: Path, bad: str) -> None:
    f = tmp_path / "m.jsonl"
    f.write_text('{"step": 1, "reward": 0.5}\n' + bad + "\n" + '{"step": 2, "reward": 0.6}\n')
    frame = logs.load_file(f, "jsonl")
    rows = {(r.tag, r.step): r.value for r in frame.data.itertuples()}
    assert rows[("reward", 1)] == 0.5 and rows[("reward", 2)] == 0.6
    assert frame.data["step"].between(0, 2**63 - 1).all()
    r = runner.invoke(app, ["diagnose", str(f)])
    assert r.exit_code in (0, 1, 2) and "Traceback" not in r.output


@pytest.mark.parametrize(
    "bad",
    [
        "step:" + "9" * 400 + " - actor/entropy:0.5",
        "step:9223372036854775808 - actor/entropy:0.5",
        "step:3 - actor/entropy:" + "9" * 400,
        "step:3 - actor/entropy:1e999 - actor/kl:-inf",
    ],
)
def test_hostile_console_steps_and_numbers_never_crash(tmp_path: Path, bad: str) -> None:
    f = tmp_path / "run.log"
    f.write_text("step:1 - actor/entropy:0.5\n" + bad + "\nstep:2 - actor/entropy:0.4\n")
    frame = logs.load_file(f)
    assert frame.data["step"].between(0, 2**63 - 1).all()
    assert len(frame.data[frame.data["step"] <= 2]) >= 2


def test_trainer_state_with_hostile_steps(tmp_path: Path) -> None:
    f = tmp_path / "trainer_state.json"
    hist = [{"step": 1, "loss": 0.1}, {"step": -1, "loss": 0.2}, {"step": 2.5, "loss": 0.3}]
    f.write_text(json.dumps({"log_history": hist}).replace("-1", "1e999"))
    frame = logs.load_file(f)
    assert frame.data["step"].between(0, 2**63 - 1).all()
    vals = frame.data["value"].tolist()
    assert 0.1 in vals and not any(math.isnan(v) for v in vals)


def test_jsonl_follower_waits_for_a_cut_record(tmp_path: Path) -> None:
    f = tmp_path / "metrics.jsonl"
    f.write_text('{"step": 1, "reward": 0.5}\n{"step": 2, "rew')
    follower = logs.Follower(f)
    assert follower.poll().data["step"].tolist() == [1]
    with open(f, "a") as fh:
        fh.write('ard": 0.25}\n')
    delta = follower.poll().data
    assert delta["step"].tolist() == [2] and delta["value"].tolist() == [0.25]


def test_a_folder_readme_is_not_a_run(tmp_path: Path) -> None:
    (tmp_path / "run.log").write_text("step:1 - actor/entropy:0.5\n")
    (tmp_path / "SOURCE.md").write_text("Lines look like `step:1 - actor/entropy:0.5`\n")
    assert logs.log_files(tmp_path) == [tmp_path / "run.log"]


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    lines=st.lists(st.binary(max_size=1500).map(lambda b: b.replace(b"\n", b"")), max_size=40),
    tail=st.binary(max_size=700).map(lambda b: b.replace(b"\n", b"")),
    block=st.integers(1, 4000),
)
def test_line_lists_yields_every_complete_line_once_in_order(
    lines: list[bytes], tail: bytes, block: int
) -> None:
    """The JSONL block reader (reused buffer: memoryviews of long lines, bytes of short ones)
    gives back exactly the file's complete lines, whatever the block size; the unfinished
    last line is counted in `partial`, never read."""
    import tempfile

    from rlwatch.sources.logs import _cols

    long_line_default = _cols.LONG_LINE

    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "run.jsonl"
        f.write_bytes(b"".join(line + b"\n" for line in lines) + tail)
        try:
            for long_line in (0, 10**9):  # every line viewed, every line split
                _cols.LONG_LINE = long_line
                blocks = _cols.Blocks(f, block=block, binary=True)
                got: list[bytes] = []
                for part in blocks.line_lists():
                    got += [bytes(x) for x in part]  # views are valid only until the next block
                assert got == lines
                assert blocks.partial == len(tail)
                assert blocks.lineno == len(lines) + 1
                assert blocks.offset == f.stat().st_size - len(tail)
        finally:
            _cols.LONG_LINE = long_line_default


@pytest.mark.parametrize("long_line", [10**9, 0], ids=["split", "views"])
@pytest.mark.parametrize("width", [40, 2000])
def test_a_line_too_long_to_hold_is_skipped_and_named(
    tmp_path: Path, width: int, long_line: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A JSONL line longer than MAX_LINE is dropped (counted in a warning), the lines around
    it are read, on both of the block reader's paths (short lines split, long ones viewed)."""
    from rlwatch.sources.logs import _cols

    monkeypatch.setattr(_cols, "MAX_LINE", 10_000)
    monkeypatch.setattr(_cols, "BLOCK", 1024)
    monkeypatch.setattr(_cols, "LONG_LINE", long_line)  # force one path or the other
    pad = "p" * width

    def rec(step: int) -> str:
        return json.dumps({"step": step, "loss": step / 10, "note_" + pad: 1.0}) + "\n"

    huge = json.dumps({"step": 99, "loss": 5.0, "x": "y" * 50_000}) + "\n"
    f = tmp_path / "run.jsonl"
    f.write_text(rec(1) + rec(2) + huge + rec(3) + rec(4))
    frame = logs.load_file(f)
    (info,) = frame.runs.values()
    d = frame.data[frame.data["tag"] == "loss"]
    assert d["step"].tolist() == [1, 2, 3, 4]
    assert d["value"].tolist() == [0.1, 0.2, 0.3, 0.4]
    assert any("1 line(s) longer than 64 MiB skipped" in w for w in info.warnings)


@pytest.mark.parametrize("fmt", ["text", "json", "markdown", "github", "junit"])
def test_reader_warnings_go_to_stderr_in_every_format(tmp_path: Path, fmt: str) -> None:
    """What a reader skipped is named on stderr, one `rlwatch: warning:` line, whatever the
    format; stdout stays the report alone (JSON still carries the warning as data)."""
    import os
    import subprocess
    import sys

    f = tmp_path / "run.log"
    f.write_text(
        "".join(f"step:{s} - actor/entropy:0.5 - actor/grad_norm:1.0\n" for s in range(1, 6))
        + "step:6 - actor/grad_norm:1.1 - actor/entropy:0.4"
    )
    r = subprocess.run(
        [sys.executable, "-m", "rlwatch", "diagnose", str(f), "--format", fmt],
        capture_output=True,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert r.returncode == 0, r.stderr
    warned = [x for x in r.stderr.splitlines() if x.startswith("rlwatch: warning: ")]
    assert len(warned) == 1 and "last line incomplete, not read" in warned[0]
    if fmt == "json":
        (run,) = json.loads(r.stdout)["runs"]
        assert any("last line incomplete" in w for w in run["warnings"])
    elif fmt == "text":
        assert "last line incomplete" not in r.stdout


_KEY = st.from_regex(r"[a-z][a-z_/]{0,24}", fullmatch=True)
_VALUE = st.one_of(
    st.floats(),
    st.integers(-(10**9), 10**9),
    st.floats(-1e6, 1e6).map(lambda v: f"{v:.4g}"),  # newer transformers print strings
)


def _read(text: str) -> object:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "train.log"
        f.write_text(text)
        try:
            frame = logs.load_file(f)
        except SourceError as exc:
            return ("error", str(exc).split(": ", 1)[1])
    (info,) = frame.runs.values()
    rows = sorted((r.tag, r.step, repr(r.value)) for r in frame.data.itertuples())
    return info.source, rows, sorted(info.warnings)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    dicts=st.lists(st.dictionaries(_KEY, _VALUE, min_size=1, max_size=10), min_size=1, max_size=6),
    noise=st.lists(st.sampled_from(["", "Map: 100%|####| 7473/7473", "INFO: saving ckpt"])),
    width=st.integers(1, 300),
    trim=st.booleans(),
)
def test_printed_dicts_cut_at_any_width_read_as_the_uncut_log(
    dicts: list[dict[str, object]], noise: list[str], width: int, trim: bool
) -> None:
    """A console of printed dicts, with other lines between them, cut into rows of any pane
    width (a terminal capture; `trim`: each row's trailing spaces dropped, as `tmux
    capture-pane` does without -N): the same rows, source and warnings as the uncut log."""
    lines = []
    for i, d in enumerate(dicts):
        lines += noise[i : i + 1]
        lines.append(str(d))
    cut = [line[i : i + width] for line in lines for i in range(0, max(len(line), 1), width)]
    if trim:
        cut = [row.rstrip(" ") for row in cut]
    whole, rows = _read("\n".join(lines) + "\n"), _read("\n".join(cut) + "\n")
    assert rows == whole
