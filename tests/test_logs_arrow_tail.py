"""A large JSONL file's tail read by Arrow in a second thread (_json.ArrowTail) gives the frame
the line by line read gives, bit for bit: the same tags in the same order, each tag's rows in the
same order, the same values (NaN, -0.0, big integers), the same warnings and restarts. (A line
holding its keys in another order is read by Arrow in the first line's order: the rows of one
line interleave differently, each metric's rows are the same.) The tail is taken only when it
is provably plain; every odd line sends it back to the line by line read."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlwatch.sources import logs
from rlwatch.sources.logs import _cols, _json

pytestmark = pytest.mark.skipif(_json._arrow_json() is None, reason="pyarrow not installed")

# keys of equal length that differ only inside (the word check must tell them apart), short
# ones (< 8 bytes), long ones, non-ASCII, a key that is a step key inside verl's data
KEYS = [
    "a",
    "b",
    "loss",
    "lr",
    "actor/entropy",
    "actor/entropx",
    "xctor/entropy",
    "val-core/gsm8k/acc/mean@1",
    "val-core/gsm8k/acc/mean@4",
    "val-core/math0/acc/mean@1",
    "timing_s/get_batch_rollout_with_filtering",
    "timing_s/get_batch_rollout_with_filterinh",
    "énergie/µ",
    "",
]
EDITS = [
    "none",
    "swap",  # two keys of one line in the other order
    "swap-equal-length",
    "missing",  # a key missing in one line
    "extra",  # one more key in one line
    "duplicate",  # a key twice in one line
    "null",
    "nan",
    "infinity",
    "neg-infinity",
    "string",
    "bool",
    "nested",
    "list",
    "escape-key",
    "escaped-quote-key",
    "non-utf8",
    "blank-line",
    "two-objects",
    "bigint",  # beyond int64
    "int64-edge",
    "neg-zero",
    "neg-zero-float",
    "float-step",
    "negative-step",
    "huge-step",
    "step-order",  # {"data": ..., "step": N} in one line
    "not-an-object",
    "garbage",
    "overflow-number",
]

ADD_REGION = _json.JsonLines.add_region
FLOATS = st.floats(allow_nan=False, allow_infinity=False, width=64)
INTS = st.sampled_from([0, 1, -1, 7, 2**53, 2**53 + 1, -(2**53) - 1, 2**63 - 1, -(2**63), 10**17])
VALUES = st.one_of(FLOATS, INTS)


def _num(v: float | int) -> str:
    return repr(v) if isinstance(v, float) else str(v)


@st.composite
def jsonl_files(draw: Any) -> tuple[bytes, str, str]:
    fmt = draw(st.sampled_from(["verl-jsonl", "jsonl"]))
    edit = draw(st.sampled_from(EDITS))
    keys = draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=8, unique=True))
    if fmt == "jsonl":
        keys = [k for k in keys if k != ""] or ["loss"]
    pair = ["actor/entropy", "actor/entropx"]
    if edit == "swap-equal-length":  # every line holds both; one line in the other order
        keys = [k for k in keys if k not in pair] + pair
    nlines = draw(st.integers(2, 40))
    sep, colon = (", ", ": ") if draw(st.booleans()) else (",", ":")
    rows = []
    step = draw(st.integers(0, 5))
    for _ in range(nlines):
        step += draw(st.integers(0, 2))  # repeated steps too
        rows.append((str(step), [f'"{k}"' for k in keys], [_num(draw(VALUES)) for _ in keys]))
    at = draw(st.one_of(st.integers(0, nlines - 1), st.integers(nlines // 2, nlines - 1)))
    step_s, ks, vs = rows[at]
    ks, vs = list(ks), list(vs)
    j = draw(st.integers(0, len(ks) - 1))
    if edit == "swap" and len(ks) > 1:
        ks[0], ks[-1], vs[0], vs[-1] = ks[-1], ks[0], vs[-1], vs[0]
    elif edit == "swap-equal-length":
        ks[-2], ks[-1], vs[-2], vs[-1] = ks[-1], ks[-2], vs[-1], vs[-2]
    elif edit == "missing" and len(ks) > 1:
        del ks[j], vs[j]
    elif edit == "extra":
        ks.append('"zz/extra"')
        vs.append("3.0")
    elif edit == "duplicate":
        ks.append(ks[j])
        vs.append("4.0")
    elif edit in TOKENS:
        vs[j] = TOKENS[edit]
    elif edit == "escape-key":
        ks[j] = '"l\\u006fss"'
    elif edit == "escaped-quote-key":
        ks[j] = '"a\\":1,\\"b"'
    elif edit == "bigint":
        vs[j] = str(draw(st.sampled_from([2**63, 2**64, 10**30, -(2**63) - 1, 10**400])))
    elif edit == "int64-edge":
        vs[j] = str(draw(st.sampled_from([2**63 - 1, -(2**63), 2**53 + 1])))
    elif edit == "float-step":
        step_s = step_s + ".0"
    elif edit == "negative-step":
        step_s = "-1"
    elif edit == "huge-step":
        step_s = str(2**63)
    rows[at] = (step_s, ks, vs)

    def render(r: int) -> bytes:
        s, kk, vv = rows[r]
        items = sep.join(f"{k}{colon}{v}" for k, v in zip(kk, vv, strict=True))
        if fmt == "jsonl":
            return f'{{"step"{colon}{s}{sep}{items}}}'.encode()
        if edit == "step-order" and r == at:
            return f'{{"data"{colon}{{{items}}}{sep}"step"{colon}{s}}}'.encode()
        return f'{{"step"{colon}{s}{sep}"data"{colon}{{{items}}}}}'.encode()

    lines = [render(r) for r in range(nlines)]
    if edit == "non-utf8":
        lines[at] = lines[at].replace(b'"', b'"\xff', 1)
    elif edit == "blank-line":
        lines.insert(at, b"")
    elif edit == "two-objects":
        lines[at] = lines[at] + lines[at]
    elif edit == "not-an-object":
        lines[at] = b"[1, 2]"
    elif edit == "garbage":
        lines[at] = lines[at][: len(lines[at]) // 2]
    text = b"\n".join(lines) + b"\n"
    if draw(st.booleans()):  # a cut last line
        text += lines[-1][: draw(st.integers(1, max(1, len(lines[-1]) - 1)))]
    return text, fmt, edit


TOKENS = {
    "null": "null",
    "nan": "NaN",
    "infinity": "Infinity",
    "neg-infinity": "-Infinity",
    "string": '"x"',
    "bool": "true",
    "nested": '{"q":1}',
    "list": "[1,2]",
    "overflow-number": "1e400",
    "neg-zero": "-0",
    "neg-zero-float": "-0.0",
}


def _read(path: Path, threaded: bool, monkeypatch: pytest.MonkeyPatch, share: float) -> Any:
    with monkeypatch.context() as m:
        m.setattr(_json, "THREADED_MIN", 0)
        m.setattr(_json, "_runnable", lambda: 1)  # as on an idle machine
        m.setattr(_json, "HEAD_SHARE", share)
        if not threaded:
            m.setattr(_json, "tail_start", lambda *a: None)
        try:
            return logs.load_file(path)
        except Exception as exc:  # the same error both ways
            return f"{type(exc).__name__}: {exc}"


def _same(a: Any, b: Any) -> None:
    if isinstance(a, str) or isinstance(b, str):
        assert a == b
        return
    da, db = a.data, b.data
    assert list(da.columns) == list(db.columns)
    for col in ("run", "metric", "tag", "source"):
        assert list(da[col].cat.categories) == list(db[col].cat.categories)
    # each tag's rows in write order (a stable sort by tag keeps it)
    da = da.iloc[np.argsort(da["tag"].array.codes, kind="stable")]
    db = db.iloc[np.argsort(db["tag"].array.codes, kind="stable")]
    for col in ("run", "metric", "tag", "source"):
        assert (da[col].array.codes == db[col].array.codes).all()
    assert (da["step"].to_numpy() == db["step"].to_numpy()).all()
    for col in ("value", "wall_time"):  # bit for bit: NaN payloads, -0.0
        assert (da[col].to_numpy().view(np.int64) == db[col].to_numpy().view(np.int64)).all()
    (ia,), (ib,) = a.runs.values(), b.runs.values()
    assert ia.warnings == ib.warnings
    assert [r.to_dict() for r in ia.restarts] == [r.to_dict() for r in ib.restarts]
    assert ia.duplicates_dropped == ib.duplicates_dropped


@settings(
    max_examples=500,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=jsonl_files(), block=st.integers(60, 1500), share=st.floats(0.05, 0.95))
def test_the_arrow_tail_gives_the_line_by_line_frame(
    case: tuple[bytes, str, str],
    block: int,
    share: float,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    text, _fmt, edit = case
    f = tmp_path / "run.jsonl"
    f.write_bytes(text)
    taken: list[int] = []

    def spy(self: Any, region: Any) -> None:
        taken.append(region.nlines)
        ADD_REGION(self, region)

    with monkeypatch.context() as m:  # undone after each example
        m.setattr(_cols, "BLOCK", block)
        m.setattr(_json.JsonLines, "add_region", spy)
        new = _read(f, True, m, share)
        old = _read(f, False, m, share)
        m.setattr(_json, "THREADED_MIN", 0)
        m.setattr(_json, "HEAD_SHARE", share)
        m.setattr(_json, "_runnable", lambda: 1)
        start = _json.tail_start(f, len(text), block)
    _same(new, old)
    complete = text.rfind(b"\n") + 1
    plain = edit in ("none", "swap", "swap-equal-length", "step-order")
    if plain and b"-0.0" not in text and start is not None and start < complete:
        assert taken  # a plain tail is read by Arrow (the path under test is taken)


def _plain(path: Path, fmt: str, n: int = 200, keys: int = 30) -> None:
    rng = np.random.default_rng(0)
    names = [f"group{i % 3}/metric_{i:02d}" for i in range(keys)]
    with open(path, "w") as fh:
        for step in range(n):
            vals = {k: float(v) for k, v in zip(names, rng.normal(size=keys), strict=True)}
            vals[names[0]] = step * 3  # an int column
            rec = {"step": step, "data": vals} if fmt == "verl-jsonl" else {"step": step, **vals}
            fh.write(json.dumps(rec, separators=(",", ":")) + "\n")


def _regions_taken(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The line counts of the tails Arrow's reading was taken for, as they are added."""
    taken: list[int] = []

    def spy(self: Any, region: Any) -> None:
        taken.append(region.nlines)
        ADD_REGION(self, region)

    monkeypatch.setattr(_json.JsonLines, "add_region", spy)
    return taken


@pytest.mark.parametrize("fmt", ["verl-jsonl", "jsonl"])
def test_a_plain_tail_is_taken_and_equals_the_line_by_line_read(
    fmt: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = tmp_path / "run.jsonl"
    _plain(f, fmt)
    monkeypatch.setattr(_cols, "BLOCK", 4096)
    taken = _regions_taken(monkeypatch)
    new = _read(f, True, monkeypatch, 0.5)
    assert taken and 50 < taken[0] < 150  # the tail was read by Arrow
    old = _read(f, False, monkeypatch, 0.5)
    _same(new, old)
    assert len(new.data) == 200 * 30 and not math.isnan(new.data["value"].iloc[-1])


def test_one_core_a_busy_machine_or_a_small_file_reads_in_one_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    f = tmp_path / "run.jsonl"
    _plain(f, "verl-jsonl")
    size = f.stat().st_size
    assert _json.tail_start(f, size, 4096) is None  # below THREADED_MIN
    monkeypatch.setattr(_json, "THREADED_MIN", 0)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(_json, "_runnable", lambda: 1)
    assert _json.tail_start(f, size, 4096) is not None
    monkeypatch.setattr(_json, "_runnable", lambda: 2)  # no idle core
    assert _json.tail_start(f, size, 4096) is None
    monkeypatch.setattr(_json, "_runnable", lambda: 1)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert _json.tail_start(f, size, 4096) is None
    assert _json._runnable() >= 1


def test_a_line_the_line_reader_skips_sends_the_tail_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A line longer than MAX_LINE in the tail: the line reader skips it (and says so), so
    Arrow's reading of it is not taken."""
    f = tmp_path / "run.jsonl"
    _plain(f, "jsonl")
    lines = f.read_bytes().splitlines()
    lines[180] = lines[180].replace(b"{", b"{" + b" " * 8000, 1)  # the same record, spaced out
    f.write_bytes(b"\n".join(lines) + b"\n")
    monkeypatch.setattr(_cols, "BLOCK", 4096)
    monkeypatch.setattr(_cols, "MAX_LINE", 3000)
    taken = _regions_taken(monkeypatch)
    new = _read(f, True, monkeypatch, 0.5)
    old = _read(f, False, monkeypatch, 0.5)
    assert not taken
    _same(new, old)
    (info,) = new.runs.values()
    assert any("1 line(s) longer than 64 MiB skipped" in w for w in info.warnings)
