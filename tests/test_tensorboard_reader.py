"""The TensorBoard reader: tbparse parity on every fixture, bad input, incremental following."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import FIXTURES, fixture_event_files, tb_record, write_tbx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlwatch.errors import SourceError
from rlwatch.sources import _tfrecord, tensorboard
from rlwatch.sources._tfrecord import EventFileReader


def _rlwatch_rows(path: Path) -> pd.DataFrame:
    reader = EventFileReader(str(path))
    b = reader.read()
    return pd.DataFrame(
        {
            "tag": np.asarray(reader.tags, dtype=object)[b.tag],
            "step": b.step,
            "value": b.value,
            "wall_time": b.wall_time,
        }
    )


def _tbparse_rows(path: Path) -> pd.DataFrame:
    from tbparse import SummaryReader

    r = SummaryReader(str(path), extra_columns={"wall_time"})
    parts = [r.scalars[["tag", "step", "value", "wall_time"]]] if len(r.scalars) else []
    tensors = r.tensors
    if len(tensors):
        t = tensors[["tag", "step", "value", "wall_time"]].copy()
        t["value"] = t["value"].astype(float)
        parts.append(t)
    return pd.concat(parts, ignore_index=True)


def _canon(df: pd.DataFrame) -> pd.DataFrame:
    df = df.astype({"tag": str, "step": "int64", "value": "float64", "wall_time": "float64"})
    return df.sort_values(["tag", "step", "wall_time"], kind="stable").reset_index(drop=True)


@pytest.mark.parametrize("path", fixture_event_files(), ids=lambda p: str(p.relative_to(FIXTURES)))
def test_rows_equal_tbparse_on_every_fixture(path: Path) -> None:
    ours, theirs = _canon(_rlwatch_rows(path)), _canon(_tbparse_rows(path))
    assert len(ours) > 0
    pd.testing.assert_frame_equal(ours, theirs)


def test_hparams_and_text_become_run_facts_as_tbparse_reads_them() -> None:
    from tbparse import SummaryReader

    run = FIXTURES / "nemo-tensor-scalars"
    info = tensorboard.load(run).runs["nemo-tensor-scalars"]
    r = SummaryReader(str(run))
    assert info.hparams == dict(zip(r.hparams["tag"], r.hparams["value"], strict=False))
    assert info.texts == dict(zip(r.text["tag"], r.text["value"], strict=False))
    assert info.hparams["algorithm"] == "grpo"


def test_file_order_is_kept(tbx_run: Path) -> None:
    (f,) = tbx_run.glob("events.out.tfevents.*")
    rows = _rlwatch_rows(f)
    assert rows["step"].tolist()[:6] == [0, 0, 0, 1, 1, 1]
    assert rows["tag"].tolist()[:3] == ["actor/entropy", "actor/grad_norm", "critic/score/mean"]


def test_odd_events_take_the_exact_path_and_agree(tmp_path: Path) -> None:
    """Long tags (2-byte length), huge and zero steps, several values in one summary, an event
    without wall_time: all leave the vectorised path and must still equal tbparse."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    w = EventFileWriter(str(tmp_path))
    long_tag = "x/" + "y" * 200
    for step in (0, 1, 2**40, 7):
        vals = [
            summary_pb2.Summary.Value(tag=long_tag, simple_value=step * 0.5),
            summary_pb2.Summary.Value(tag="a", simple_value=1.0),
            summary_pb2.Summary.Value(tag="b", simple_value=float("nan")),
        ]
        w.add_event(
            event_pb2.Event(
                wall_time=1e9 + step, step=step, summary=summary_pb2.Summary(value=vals[:1])
            )
        )
        w.add_event(
            event_pb2.Event(wall_time=1e9, step=step, summary=summary_pb2.Summary(value=vals[1:]))
        )
        w.add_event(event_pb2.Event(step=step, summary=summary_pb2.Summary(value=vals[1:2])))
    w.close()
    (f,) = tmp_path.glob("events.out.tfevents.*")
    ours, theirs = _canon(_rlwatch_rows(f)), _canon(_tbparse_rows(f))
    assert len(ours) == 16 and (ours["step"] == 2**40).sum() == 4
    pd.testing.assert_frame_equal(ours, theirs)


def test_crc_resync_constants_hold() -> None:
    """The one-call CRC check relies on two CRC32C facts; re-derive them on random data."""
    rng = np.random.default_rng(0)
    a, b = rng.bytes(37), rng.bytes(64)
    crc = _tfrecord._crc32c
    stream = (
        a
        + crc(a).to_bytes(4, "little")
        + bytes(8)
        + _tfrecord._RESYNC_TAIL.to_bytes(4, "little")
        + b
        + crc(b).to_bytes(4, "little")
    )
    assert crc(stream) == _tfrecord._RESIDUE
    assert crc(b + crc(b).to_bytes(4, "little")) == _tfrecord._RESIDUE


def _records(path: Path) -> list[tuple[int, int]]:
    """(start, payload length) of every record, by a plain sequential walk."""
    data, pos, out = path.read_bytes(), 0, []
    while pos + 12 <= len(data):
        (n,) = struct.unpack_from("<Q", data, pos)
        out.append((pos, n))
        pos += 16 + n
    return out


def test_truncated_last_record_yields_every_complete_record_and_a_warning() -> None:
    frame = tensorboard.load(FIXTURES / "truncated")
    info = frame.runs["truncated"]
    assert len(frame.data) == 50 * 3 - 1  # the cut record is the only loss
    (warning,) = info.warnings
    assert "last record truncated" in warning and "31 bytes unread" in warning


def test_bad_payload_crc_skips_that_record_only(tbx_run: Path) -> None:
    (f,) = tbx_run.glob("events.out.tfevents.*")
    start, n = _records(f)[10]
    data = bytearray(f.read_bytes())
    data[start + 12 + n - 1] ^= 0xFF  # flip the last payload byte (the float value)
    f.write_bytes(bytes(data))
    reader = EventFileReader(str(f))
    block = reader.read()
    assert len(block) == 120 - 1
    assert reader.bad_records == 1
    assert "1 record(s) with a bad data CRC skipped" in reader.warnings[0]
    assert f"first at byte {start}" in reader.warnings[0]


def test_corrupt_header_resyncs_at_the_next_valid_record(tbx_run: Path) -> None:
    (f,) = tbx_run.glob("events.out.tfevents.*")
    recs = _records(f)
    start, _ = recs[20]
    data = bytearray(f.read_bytes())
    data[start] ^= 0x55  # the length no longer matches its CRC
    f.write_bytes(bytes(data))
    reader = EventFileReader(str(f))
    block = reader.read()
    assert len(block) == 120 - 1
    assert any("corrupt record header" in w for w in reader.warnings)
    assert reader.offset == f.stat().st_size


def test_a_file_that_is_not_an_event_file_is_a_one_line_error(tmp_path: Path) -> None:
    f = tmp_path / "events.out.tfevents.123.host"
    f.write_text("step:1 - actor/entropy:0.5\n" * 50)
    with pytest.raises(SourceError, match=r"not a TensorBoard event file") as exc:
        tensorboard.load(f)
    assert str(f) in str(exc.value) and "\n" not in str(exc.value)


def test_an_empty_logdir_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("nothing here")
    with pytest.raises(SourceError, match="no TensorBoard event files"):
        tensorboard.load(tmp_path)


def test_runs_are_found_as_tensorboard_finds_them(tmp_path: Path) -> None:
    write_tbx(tmp_path / "a", {"x": [1.0, 2.0]})
    write_tbx(tmp_path / "group" / "b", {"x": [1.0]})
    write_tbx(tmp_path / "group" / "b" / "nested", {"x": [1.0]})
    write_tbx(tmp_path, {"root": [1.0]})
    runs = tensorboard.find_runs(tmp_path)
    assert sorted(runs) == sorted([tmp_path.name, "a", "group/b", "group/b/nested"])
    frame = tensorboard.load(tmp_path)
    assert frame.data.groupby("run", observed=True).size().to_dict() == {
        tmp_path.name: 1,
        "a": 2,
        "group/b": 1,
        "group/b/nested": 1,
    }


def test_several_event_files_of_a_run_are_read_in_write_order(tmp_path: Path) -> None:
    write_tbx(tmp_path, {"x": [1.0, 2.0]}, [0, 1], suffix=".a")
    write_tbx(tmp_path, {"x": [3.0, 4.0]}, [2, 3], suffix=".b")
    files = sorted(tmp_path.glob("events.*"))
    os.rename(files[0], tmp_path / "events.out.tfevents.1700000200.host")  # the later file
    os.rename(files[1], tmp_path / "events.out.tfevents.1700000100.host")
    frame = tensorboard.load(tmp_path)
    assert frame.data["value"].tolist() == [3.0, 4.0, 1.0, 2.0]


class TestFollower:
    def test_polls_return_only_new_rows_and_add_up_to_a_batch_read(self, tmp_path: Path) -> None:
        run = tmp_path / "run"
        f = write_tbx(run, {"actor/entropy": [0.5, 0.4], "actor/grad_norm": [1.0, 1.1]})
        follower = tensorboard.Follower(tmp_path)
        seen = [follower.poll().data]
        assert len(seen[0]) == 4
        assert len(follower.poll().data) == 0  # nothing new, nothing returned

        r1, r2 = tb_record(2, "actor/entropy", 0.3), tb_record(2, "actor/grad_norm", 1.2)
        with open(f, "ab") as fh:  # one whole record and the first half of the next
            fh.write(r1 + r2[:9])
        seen.append(follower.poll().data)
        assert seen[-1]["value"].tolist() == [pytest.approx(0.3)]
        with open(f, "ab") as fh:
            fh.write(r2[9:])
        seen.append(follower.poll().data)
        assert seen[-1]["value"].tolist() == [pytest.approx(1.2)]
        # a new event file in the run, and a new run
        write_tbx(run, {"actor/entropy": [0.2]}, [3], suffix=".z")
        write_tbx(tmp_path / "run2", {"x": [7.0]})
        delta = follower.poll().data
        assert sorted(delta["run"].astype(str)) == ["run", "run2"]
        seen.append(delta)
        polled = pd.concat([d.astype({"run": str, "tag": str}) for d in seen])
        batch = tensorboard.load(tmp_path).data.astype({"run": str, "tag": str})
        key = ["run", "tag", "step"]
        pd.testing.assert_frame_equal(
            polled[[*key, "value"]].sort_values(key).reset_index(drop=True),
            batch[[*key, "value"]].sort_values(key).reset_index(drop=True),
        )


def _event_record(kind: int, step: int, tag: str, value: float) -> bytes:
    """One framed record of several shapes: a simple scalar, a 0-d float tensor of the scalars
    plugin, a summary of two values, a text summary, or a file_version event."""
    import io

    from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2
    from tensorboard.summary.writer.record_writer import RecordWriter

    Value = summary_pb2.Summary.Value
    if kind == 0:
        values = [Value(tag=tag, simple_value=value)]
    elif kind == 1:
        t = tensor_pb2.TensorProto(dtype=1, float_val=[value])
        meta = summary_pb2.SummaryMetadata(
            plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars")
        )
        values = [Value(tag=tag, tensor=t, metadata=meta)]
    elif kind == 2:
        values = [Value(tag=tag, simple_value=value), Value(tag=tag + "/b", simple_value=-value)]
    elif kind == 3:
        t = tensor_pb2.TensorProto(dtype=7, string_val=[tag.encode() * 40])
        meta = summary_pb2.SummaryMetadata(
            plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="text")
        )
        values = [Value(tag=tag + "/text", tensor=t, metadata=meta)]
    else:
        ev = event_pb2.Event(wall_time=1.7e9, file_version="brain.Event:2")
        values = []
    if values:
        summary = summary_pb2.Summary(value=values)
        ev = event_pb2.Event(wall_time=1.7e9 + step / 8, step=step, summary=summary)
    buf = io.BytesIO()
    RecordWriter(buf).write(ev.SerializeToString())
    return buf.getvalue()


def _read_all(path: Path, max_bytes: int | None) -> tuple[EventFileReader, list[np.ndarray]]:
    reader, blocks = EventFileReader(str(path)), []
    while True:
        blocks.append(reader.read(max_bytes))
        if not reader.more:
            break
    reader.finish()
    cols = [np.concatenate([getattr(b, f) for b in blocks]) for f in ("step", "value")]
    cols.append(np.asarray(reader.tags, dtype=object)[np.concatenate([b.tag for b in blocks])])
    return reader, cols


_RECORDS = st.lists(
    st.tuples(
        st.integers(0, 4),
        st.integers(0, 2**40),
        st.sampled_from(["a", "actor/entropy", "critic/score/mean", "x/" + "y" * 150]),
        st.floats(width=32, allow_nan=False),
    ),
    min_size=1,
    max_size=40,
)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    records=_RECORDS,
    block=st.integers(16, 700),
    max_bytes=st.none() | st.integers(1, 2000),
    damage=st.sampled_from(["none", "header", "payload", "cut"]),
    where=st.integers(0, 39),
)
def test_any_block_size_reads_the_same_rows(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    records: list[tuple[int, int, str, float]],
    block: int,
    max_bytes: int | None,
    damage: str,
    where: int,
) -> None:
    """Blocks of a few bytes (records straddle them, records longer than a block grow it) and
    reads bounded by `max_bytes` give the rows one whole-file read gives, corrupt or cut files
    included: the reused block buffer carries what is left of a block into the next one."""
    f = tmp_path / f"events.out.tfevents.{block}.{damage}.host"
    raws = [_event_record(*r) for r in records]
    data = bytearray(b"".join(raws))
    at = sum(map(len, raws[: where % len(raws)]))
    if damage == "header":
        data[at] ^= 0x55
    elif damage == "payload":
        data[at + 14] ^= 0x01
    elif damage == "cut":
        del data[len(data) - 3 :]
    f.write_bytes(bytes(data))
    try:
        whole, expected = _read_all(f, None)
    except SourceError:
        monkeypatch.setattr(_tfrecord, "BLOCK", block)
        with pytest.raises(SourceError):
            _read_all(f, max_bytes)
        return
    monkeypatch.setattr(_tfrecord, "BLOCK", block)
    small, got = _read_all(f, max_bytes)
    for a, b in zip(expected, got, strict=True):
        assert np.array_equal(a, b)
    assert (small.offset, small.records, small.texts) == (whole.offset, whole.records, whole.texts)
    assert small.bad_records == whole.bad_records
    assert bool(small.warnings) == bool(whole.warnings) == (damage != "none")


def _traced_read(reader: EventFileReader) -> tuple[_tfrecord.Block, int]:
    """One read, and the peak of memory traced while it ran (numpy's buffers included)."""
    import tracemalloc

    _tfrecord._crc_words()  # its tables (1 MiB) are built once, on first use
    tracemalloc.start()
    try:
        block = reader.read()
        return block, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_record_longer_than_any_scalar_is_stepped_over_in_bounded_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record longer than MAX_RECORD (a huge image or graph; or a header that lies, with a
    valid CRC) is not read into memory: a complete one is stepped over and counted, one that
    runs past the end of the file stops the read with the bytes left unread reported."""
    monkeypatch.setattr(_tfrecord, "BLOCK", 4096)
    monkeypatch.setattr(_tfrecord, "MAX_RECORD", 8192)
    head = b"".join(_event_record(0, s, "actor/entropy", 0.5 + s) for s in range(40))
    big = _event_record(3, 41, "x" * 2000, 0.0)  # a text summary of ~80 KB
    assert len(big) > 8192
    tail = b"".join(_event_record(0, s, "actor/entropy", 0.5 + s) for s in range(42, 80))
    f = tmp_path / "events.out.tfevents.1.long"
    f.write_bytes(head + big + tail)
    reader = EventFileReader(str(f))
    block = reader.read()
    reader.finish()
    assert block.step.tolist() == list(range(40)) + list(range(42, 80))
    assert reader.other_events == 1 and not reader.warnings and not reader.texts
    assert reader.offset == f.stat().st_size

    length = 1 << 39  # 512 GiB declared, with a valid header CRC
    header = struct.pack("<Q", length) + struct.pack(
        "<I", _tfrecord.masked_crc(struct.pack("<Q", length))
    )
    f.write_bytes(head + header + os.urandom(2 << 20))
    reader = EventFileReader(str(f))
    block, peak = _traced_read(reader)
    reader.finish()
    assert block.step.tolist() == list(range(40))
    assert peak < 200_000, f"{peak} bytes traced for a read of 4 KiB blocks"
    (warning,) = reader.warnings
    assert "last record truncated" in warning and f"at byte {len(head)}" in warning


@pytest.mark.parametrize("after", ["records", "nothing"])
def test_unreadable_bytes_across_many_reads_cost_one_warning_and_bounded_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, after: str
) -> None:
    """Random bytes (or zeros) longer than many reads, after good records: the reader drops
    what it has scanned instead of holding it, and says once where the unreadable run began
    and how long it was (up to the next valid record, or to the end)."""
    monkeypatch.setattr(_tfrecord, "BLOCK", 4096)
    head = b"".join(_event_record(0, s, "actor/entropy", 0.5 + s) for s in range(40))
    junk = os.urandom(150_000) + bytes(100_000)
    tail = b"".join(_event_record(0, s, "actor/entropy", 0.5 + s) for s in range(40, 60))
    f = tmp_path / "events.out.tfevents.1.junk"
    f.write_bytes(head + junk + (tail if after == "records" else b""))
    reader = EventFileReader(str(f))
    block, peak = _traced_read(reader)
    reader.finish()
    (warning,) = reader.warnings
    if after == "records":
        assert block.step.tolist() == list(range(60))
        assert f"corrupt record header at byte {len(head)}; skipped {len(junk)} bytes" in warning
        assert reader.bad_records == 1
    else:
        assert block.step.tolist() == list(range(40))
        assert f"{len(junk)} unreadable bytes from byte {len(head)} to the end" in warning
    assert reader.offset == f.stat().st_size
    assert peak < 400_000, f"{peak} bytes traced for a read of 4 KiB blocks"
