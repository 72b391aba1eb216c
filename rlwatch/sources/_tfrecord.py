"""Fast, incremental reader of TensorBoard event files.

An event file is a TFRecord stream: ``uint64 length | uint32 masked_crc32c(length) | data |
uint32 masked_crc32c(data)``, where ``data`` is a serialised ``tensorboard.Event``.

The common case -- one scalar per event, written as ``simple_value`` (tensorboardX, torch) or
as a 0-d float tensor with the ``scalars`` plugin (tensorboard's own summary ops, TF2) -- is
decoded vectorised with numpy over 16 MiB blocks: record starts are found from the header
CRCs and confirmed by the chain of lengths, and the fields are gathered through unaligned
strided views. Every other record (file_version, hparams, text, histograms, several values
in one summary, ...) takes an exact protobuf slow path. Payload CRCs are checked with a C
CRC32C. Nothing is sampled: every readable scalar comes back, in file order.
"""

from __future__ import annotations

import functools
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NoReturn

import numpy as np

try:  # the C implementation; google-crc32c falls back to pure Python on exotic platforms
    from google_crc32c import value as _crc32c
except ImportError:  # pragma: no cover - google-crc32c is a hard dependency
    from google_crc32c.python import value as _crc32c  # type: ignore[no-redef]

BLOCK = 16 << 20  # bytes read per block
# a record longer than this is stepped over unread (no scalar event comes near it): reading
# stays bounded however long a record a header declares
MAX_RECORD = 64 << 20
_PAD = 512  # zero bytes after each block: fixed-offset reads past a record stay inside
_MASK_DELTA = 0xA282EAD8
_U64 = np.uint64
_FULL = _U64(0xFFFFFFFFFFFFFFFF)
_HIGH_BITS = _U64(0x8080808080808080)
_LOW7 = _U64(0x7F7F7F7F7F7F7F7F)
# masks keeping the first k bytes of a little-endian word, k = 0..8
_BYTE_MASKS = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [(1 << 64) - 1], dtype=np.uint64)
# _TAG_MASKS[k][n]: the bytes of a tag of length n (< 128) inside its k-th 8-byte word
_TAG_MASKS = _BYTE_MASKS[np.clip(np.arange(128) - 8 * np.arange(16)[:, None], 0, 8)]
# bytes after the tag of a 0-d DT_FLOAT tensor value: field 8 (tensor), len 10, dtype=1,
# empty shape, then float_val (packed, field 5) or tensor_content (field 4) of 4 bytes
_TENSOR_FLOAT_VAL = int.from_bytes(bytes.fromhex("420a080112002a04"), "little")
_TENSOR_CONTENT = int.from_bytes(bytes.fromhex("420a080112002204"), "little")
# SummaryMetadata{plugin_data{plugin_name: "scalars"}} as written by tensorboard/TF2
_SCALARS_META = bytes([0x4A, 0x0B, 0x0A, 0x09, 0x0A, 0x07]) + b"scalars"


def _crc_table() -> np.ndarray:
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(0x82F63B78), table >> 1)
    return table.astype(np.uint32)


_TABLE = _crc_table()


def _mask(crc: np.ndarray) -> np.ndarray:
    crc = crc.astype(np.uint32)
    return ((crc >> np.uint32(15)) | (crc << np.uint32(17))) + np.uint32(_MASK_DELTA)


def masked_crc(data: bytes) -> int:
    crc = _crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


@functools.cache
def _crc_words() -> np.ndarray:
    """Tables for the CRC32C of 8 bytes a 16-bit word at a time (slicing by 4 words): row j
    maps the j-th little-endian word to its share of the CRC, the initial 0xFFFFFFFF folded
    into rows 0 and 1. 1 MiB, built once."""
    t = np.empty((8, 256), dtype=np.uint32)  # t[k][b]: byte b followed by k zero bytes
    t[0] = _TABLE
    for k in range(1, 8):
        t[k] = (t[k - 1] >> np.uint32(8)) ^ _TABLE[t[k - 1] & np.uint32(0xFF)]
    w = np.arange(1 << 16, dtype=np.uint32)
    rows = np.stack([t[7 - 2 * j][w & 0xFF] ^ t[6 - 2 * j][w >> 8] for j in range(4)])
    rows[:2] = rows[:2][:, w ^ 0xFFFF]
    return rows


def _masked_crc_of_lengths(lengths: np.ndarray) -> np.ndarray:
    """Masked CRC32C of each uint64 taken as its 8 little-endian bytes (the record header)."""
    rows = _crc_words()
    words = np.ascontiguousarray(lengths, dtype="<u8").view("<u2").reshape(-1, 4)
    crc = rows[0][words[:, 0]] ^ rows[1][words[:, 1]]
    crc ^= rows[2][words[:, 2]]
    crc ^= rows[3][words[:, 3]]
    return _mask(crc ^ np.uint32(0xFFFFFFFF))


# CRC32C(D || le32(CRC32C(D))) is this constant for every D; and from that state, these 12
# bytes bring the CRC register back to its initial value (found once by GF(2) algebra; a test
# re-derives the property)
_RESIDUE = 0x48674BC7
_RESYNC_TAIL = int.from_bytes(bytes.fromhex("f62e80b0"), "little")


def _payloads_ok(
    raw: memoryview, buf: np.ndarray, starts: np.ndarray, data: np.ndarray, ends: np.ndarray
) -> np.ndarray:
    """Which records' payloads match their CRC. Overwrites headers and footers in `buf`.

    Fast path: with every header replaced by the 12 resync bytes and every footer by its
    unmasked CRC, the contiguous records form one stream whose CRC32C is `_RESIDUE` exactly
    when every record is intact -- one C call over the block instead of one per record.
    A block that fails is checked record by record to name the bad ones.
    """
    u32 = _view(buf, "<u4")
    u64 = _view(buf, "<u8")
    stored = u32[ends].copy()
    if np.array_equal(starts[1:], ends[:-1] + 4):
        u64[starts] = 0
        u32[starts + 8] = _RESYNC_TAIL
        rot = stored - np.uint32(_MASK_DELTA)
        u32[ends] = (rot >> np.uint32(17)) | (rot << np.uint32(15))
        if _crc32c(buf[int(data[0]) : int(ends[-1]) + 4].tobytes()) == _RESIDUE:
            return np.ones(starts.size, dtype=bool)
    pairs = zip(data.tolist(), ends.tolist(), strict=True)
    crc = np.fromiter(
        (_crc32c(bytes(raw[d:e])) for d, e in pairs), dtype=np.uint32, count=starts.size
    )
    return _mask(crc) == stored


def _view(buf: np.ndarray, dtype: str) -> np.ndarray:
    """An unaligned view giving the little-endian `dtype` value starting at every byte."""
    size = np.dtype(dtype).itemsize
    return np.ndarray(shape=(buf.size - size + 1,), dtype=dtype, buffer=buf, strides=(1,))


def _varint(words: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Decode a varint from each little-endian word: (value, number of bytes; 0 if > 8)."""
    stop = ~words & _HIGH_BITS
    low = stop & (~stop + _U64(1))  # lowest terminating high bit: 2**(8k+7)
    ok = low != 0
    bit = np.log2(np.where(ok, low, 1).astype(np.float64)).astype(np.int64)
    nbytes = np.where(ok, (bit - 7) // 8 + 1, 0)
    x = words & (low - _U64(1)) & _LOW7
    x = (x & _U64(0x007F007F007F007F)) | ((x & _U64(0x7F007F007F007F00)) >> _U64(1))
    x = (x & _U64(0x00003FFF00003FFF)) | ((x & _U64(0x3FFF00003FFF0000)) >> _U64(2))
    x = (x & _U64(0x000000000FFFFFFF)) | ((x & _U64(0x0FFFFFFF00000000)) >> _U64(4))
    return x, nbytes


@dataclass
class Block:
    """The scalars decoded from one read of a file (codes index the reader's tag table)."""

    tag: np.ndarray  # int32 codes into EventFileReader.tags
    step: np.ndarray  # int64
    value: np.ndarray  # float64 (float32 values widened exactly, as TensorBoard does)
    wall_time: np.ndarray  # float64 seconds

    @staticmethod
    def empty() -> Block:
        return Block(np.empty(0, np.int32), np.empty(0, np.int64), np.empty(0), np.empty(0))

    def __len__(self) -> int:
        return int(self.step.size)


@dataclass
class EventFileReader:
    """Reads one event file from where the last call stopped.

    `offset` is the byte after the last complete record. A partial trailing record (a writer
    still writing, or killed mid-write) is left for the next call; `finish()` reports it.
    """

    path: str
    offset: int = 0
    tags: list[str] = field(default_factory=list)
    hparams: dict[str, object] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)
    other_events: int = 0  # summaries that are not scalars (images, histograms, ...)
    huge_tensors: int = 0  # scalar-plugin tensors whose shape is not one element (skipped)
    records: int = 0
    bad_records: int = 0
    warnings: list[str] = field(default_factory=list)
    more: bool = False  # the last read stopped at max_bytes with records left
    _tag_index: dict[str, int] = field(default_factory=dict, repr=False)
    # where unreadable bytes began that no valid header has ended yet (they span reads)
    _garbage_from: int | None = field(default=None, repr=False)
    _plugins: dict[str, str] = field(default_factory=dict, repr=False)

    # -- public -------------------------------------------------------------------------
    def read(self, max_bytes: int | None = None) -> Block:
        """Every complete record appended since the last call (about `max_bytes` of the file
        at most when given; `more` then says whether records are left for the next call)."""
        blocks = list(self._read_blocks(max_bytes))
        if not blocks:
            return Block.empty()
        if len(blocks) == 1:
            return blocks[0]
        return Block(
            *(
                np.concatenate([getattr(b, f) for b in blocks])
                for f in ("tag", "step", "value", "wall_time")
            )
        )

    def finish(self) -> None:
        """Call at the end of a batch read: a partial last record becomes a warning."""
        if self.huge_tensors:
            self.warnings.append(
                f"{self.path}: {self.huge_tensors} scalar record(s) declaring a tensor of more "
                "than one element skipped (not materialised)"
            )
        size = os.path.getsize(self.path)
        if self.offset < size:
            self.warnings.append(
                f"{self.path}: last record truncated at byte {self.offset} of {size} "
                f"({size - self.offset} bytes unread; was the writer killed mid-write?)"
            )

    # -- blocks -------------------------------------------------------------------------
    def _read_blocks(self, max_bytes: int | None = None) -> Iterator[Block]:
        """Blocks read into one reused buffer (no fresh pages per block, no copy): the bytes
        left after a block's last complete record open the next one."""
        self.more = False
        start = self.offset
        buf = np.empty(0, dtype=np.uint8)
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            pending = b""
            want = BLOCK
            while True:
                k = len(pending)
                if buf.size < k + want + _PAD:
                    buf = np.empty(k + want + _PAD, dtype=np.uint8)
                buf[:k] = np.frombuffer(pending, dtype=np.uint8)
                got = f.readinto(memoryview(buf)[k : k + want])
                n = k + got
                if not n:
                    return
                buf[n : n + _PAD] = 0
                at_eof = got < want
                raw = memoryview(buf)[:n]
                used, block = self._decode(raw, buf, n, at_eof)
                if at_eof and self._garbage_from is not None:  # it ends inside unreadable bytes
                    self._unreadable_to_end(self._garbage_from, self.offset + n)
                    used = n
                self.offset += used
                if block is not None and len(block):
                    yield block
                pending = bytes(raw[used:])  # its header bytes are as read: records < used
                del raw
                if at_eof:
                    return
                if max_bytes is not None and self.offset - start >= max_bytes:
                    self.more = True  # a live follower catching up reads the rest next call
                    return
                if len(pending) >= 12:
                    length, hcrc = struct.unpack_from("<QI", pending)
                    if length > MAX_RECORD and masked_crc(pending[:8]) == hcrc:
                        end = self.offset + 16 + length
                        if end > os.fstat(f.fileno()).st_size:
                            return  # not all there: the next read, or finish(), says so
                        f.seek(end)  # a huge image, graph or blob: not a scalar
                        self.offset, pending, want = end, b"", BLOCK
                        self.records += 1
                        self.other_events += 1
                        continue
                # a record longer than the block: read more before trying again
                want = BLOCK if used else max(BLOCK, 2 * n)

    def _decode(
        self, raw: memoryview, buf: np.ndarray, n: int, at_eof: bool
    ) -> tuple[int, Block | None]:
        """The records of buf[:n] (`raw` views it; n + _PAD bytes of buf hold zeros after)."""
        starts, lengths, used = self._frame(raw, buf, n, at_eof)
        if starts.size == 0:
            return used, None
        self.records += int(starts.size)
        data = starts + 12
        ends = data + lengths.astype(np.int64)
        good = _payloads_ok(raw, buf, starts, data, ends)
        if not good.all():
            bad = np.flatnonzero(~good)
            self.bad_records += int(bad.size)
            self.warnings.append(
                f"{self.path}: {bad.size} record(s) with a bad data CRC skipped "
                f"(first at byte {self.offset + int(starts[bad[0]])})"
            )
            data, ends = data[good], ends[good]
        return used, self._decode_events(raw, buf, data, ends)

    # -- framing ------------------------------------------------------------------------
    def _frame(
        self, raw: memoryview, buf: np.ndarray, n: int, at_eof: bool
    ) -> tuple[np.ndarray, np.ndarray, int]:
        """Record starts and payload lengths of the complete records in raw, and bytes used."""
        if n < 12:
            return np.empty(0, np.int64), np.empty(0, np.uint64), 0
        u64 = _view(buf, "<u8")
        u32 = _view(buf, "<u4")
        # Vectorised: candidate starts are positions whose payload opens with field 1
        # (wall_time, tag byte 0x09), confirmed by the header CRC and the chain of lengths.
        cand = np.flatnonzero(buf[12:n] == 0x09)
        if cand.size == 0 or cand[0] != 0:
            cand = np.concatenate([[0], cand])
        lens = u64[cand]
        keep = lens < _U64(1 << 40)
        cand, lens = cand[keep], lens[keep]
        keep = _masked_crc_of_lengths(lens) == u32[cand + 8]
        starts, lens = cand[keep].astype(np.int64), lens[keep]
        if starts.size and starts[0] == 0 and self._garbage_from is None:
            nxt = starts + 16 + lens.astype(np.int64)
            if np.array_equal(nxt[:-1], starts[1:]):
                complete = nxt <= n
                starts, lens = starts[complete], lens[complete]
                pos = int(nxt[complete][-1]) if complete.any() else 0
                if pos < n:  # a record of another shape, or a partial one: walk the rest
                    s2, l2, pos = self._walk(raw, buf, n, pos, at_eof)
                    starts, lens = np.concatenate([starts, s2]), np.concatenate([lens, l2])
                return starts, lens, pos
        s, ln, pos = self._walk(raw, buf, n, 0, at_eof)
        return s, ln, pos

    def _walk(
        self, raw: memoryview, buf: np.ndarray, n: int, pos: int, at_eof: bool
    ) -> tuple[np.ndarray, np.ndarray, int]:
        """Exact sequential framing from pos, resynchronising after a corrupt header."""
        starts: list[int] = []
        lens: list[int] = []
        unpack = struct.unpack_from
        while pos + 12 <= n:
            length, hcrc = unpack("<QI", raw, pos)
            if masked_crc(bytes(raw[pos : pos + 8])) != hcrc:
                here = self.offset + pos
                first = here if self._garbage_from is None else self._garbage_from
                nxt = self._resync(buf, n, pos + 1)
                if first == 0 and (  # unreadable from byte 0 on: is it an event file?
                    (nxt is None and (at_eof or self.offset + n > 64 << 10))
                    or (nxt is not None and self.offset + nxt > 64 << 10)
                ):
                    self._not_event_file()
                if nxt is None:
                    if not at_eof:
                        # no valid header starts before n - 11: those bytes are lost, and
                        # only the last 11 are kept (a header may straddle into the next read)
                        self._garbage_from = first
                        pos = n - 11
                        break
                    self._unreadable_to_end(first, self.offset + n)
                    pos = n
                    break
                self._garbage_from = first
                pos = nxt
                continue
            if self._garbage_from is not None:  # a valid header again
                first, self._garbage_from = self._garbage_from, None
                if first == 0 and self.offset + pos > 64 << 10:
                    self._not_event_file()
                self.bad_records += 1
                self.warnings.append(
                    f"{self.path}: corrupt record header at byte {first}; "
                    f"skipped {self.offset + pos - first} bytes to the next valid record"
                )
            end = pos + 16 + length
            if end > n:
                break
            starts.append(pos)
            lens.append(length)
            pos = end
        return np.asarray(starts, np.int64), np.asarray(lens, np.uint64), pos

    def _unreadable_to_end(self, first: int, end: int) -> None:
        """The file ends inside unreadable bytes that began at byte `first`: one warning (or,
        unreadable from byte 0 on, not an event file at all)."""
        self._garbage_from = None
        if first == 0:
            self._not_event_file()
        self.warnings.append(
            f"{self.path}: {end - first} unreadable bytes from byte {first} to the end "
            "(corrupt record header)"
        )

    def _not_event_file(self) -> NoReturn:
        """No valid record header in the first 64 KiB: not an event file at all."""
        from rlwatch.errors import SourceError

        raise SourceError(
            f"{self.path}: not a TensorBoard event file (no valid TFRecord header at byte 0)"
        )

    @staticmethod
    def _resync(buf: np.ndarray, n: int, start: int) -> int | None:
        """First position >= start holding a valid header followed by a valid header (or EOF)."""
        u64 = _view(buf, "<u8")
        u32 = _view(buf, "<u4")
        zero_crc = _masked_crc_of_lengths(np.zeros(1, np.uint64))[0]
        window = 1 << 16
        while start + 12 <= n:
            stop = min(n - 11, start + window)
            # a length < 2**40 has its top 3 bytes zero: few positions of random or text bytes
            # do, so the CRCs are computed for those only (a run of zeros: length 0, one CRC)
            lens = u64[start:stop]
            pos = np.flatnonzero(lens < _U64(1 << 40))
            lens = lens[pos]
            pos += start
            ok = np.where(lens == 0, u32[pos + 8] == zero_crc, False)
            some = np.flatnonzero(lens != 0)
            if some.size:
                ok[some] = _masked_crc_of_lengths(lens[some]) == u32[pos[some] + 8]
            for p in pos[ok].tolist():
                nxt = p + 16 + int(u64[p])
                if nxt >= n - 11:
                    return p
                if masked_crc(bytes(buf[nxt : nxt + 8])) == int(u32[nxt + 8]):
                    return p
            start = stop
            window = min(window * 4, 1 << 22)  # bounded temporaries on a long unreadable run
        return None

    # -- decoding -----------------------------------------------------------------------
    def _decode_events(
        self, raw: memoryview, buf: np.ndarray, d: np.ndarray, e: np.ndarray
    ) -> Block:
        """Decode Event payloads [d, e): vectorised for one-scalar events, protobuf otherwise."""
        u64 = _view(buf, "<u8")
        f64 = _view(buf, "<f8")
        f32 = _view(buf, "<f4")
        # every offset read below is < d + 300 <= n + _PAD - 8: no clipping needed
        ok = buf[d] == 0x09
        wall = f64[d + 1]
        p = d + 9
        has_step = buf[p] == 0x10
        step, nb = _varint(u64[p + 1])
        ok &= ~has_step | (nb > 0)
        step = np.where(has_step, step, _U64(0))
        p = np.where(has_step, p + 1 + nb, p)
        # summary (0x2A, len sl), its value (0x0A, len vl), the tag (0x0A, len tl): one word
        # read; sl, vl and tl are one-byte varints (< 128)
        word = u64[p]
        ok &= (word & _U64(0x000080FF80FF80FF)) == _U64(0x0000000A000A002A)
        sl = ((word >> _U64(8)) & _U64(0xFF)).astype(np.int64)
        vl = ((word >> _U64(24)) & _U64(0xFF)).astype(np.int64)
        tl = ((word >> _U64(40)) & _U64(0xFF)).astype(np.int64)
        ok &= (p + 2 + sl == e) & (p + 4 + vl == e)
        q = p + 6 + tl  # first byte after the tag
        # simple_value (0x15) and its 4 bytes: one word read
        word = u64[q]
        simple = ok & ((word & _U64(0xFF)) == _U64(0x15)) & (q + 5 == e)
        fast = simple.copy()
        bits = ((word >> _U64(8)) & _U64(0xFFFFFFFF)).astype(np.uint32)
        value = bits.view(np.float32).astype(np.float64)
        del word, bits
        maybe = np.flatnonzero(ok & ~simple)
        if maybe.size:  # 0-d float tensors (tensorboard / TF2 scalar summaries)
            qm, em = q[maybe], e[maybe]
            word = u64[qm]
            tensor = (word == _U64(_TENSOR_FLOAT_VAL)) | (word == _U64(_TENSOR_CONTENT))
            tensor &= (qm + 12 == em) | (
                (qm + 12 + len(_SCALARS_META) == em) & self._is_scalars_meta(buf, qm + 12)
            )
            fast[maybe] = tensor
            value[maybe] = f32[qm + 8]

        rows: list[tuple[np.ndarray, ...]] = []
        idx = np.flatnonzero(fast)
        if idx.size:
            codes = self._tag_codes(raw, buf, (p + 6)[idx], tl[idx])
            rows.append((idx, codes, step[idx].astype(np.int64), value[idx], wall[idx]))
        # file_version events (b"brain.Event:2", once per file) carry nothing to decode
        slow = np.flatnonzero(~fast)
        if slow.size:
            ds = d[slow]
            slow = slow[~((buf[ds + 9] == 0x1A) & (ds + 11 + buf[ds + 10] == e[slow]))]
        if slow.size:
            rows.append(self._decode_slow(raw, slow, d[slow], e[slow]))
        if not rows:
            return Block.empty()
        if len(rows) == 1:
            _, codes, st, va, wt = rows[0]
            return Block(codes, st, va, wt)
        order = np.concatenate([r[0] for r in rows])
        perm = np.argsort(order, kind="stable")
        return Block(*(np.concatenate([r[k] for r in rows])[perm] for k in range(1, 5)))

    @staticmethod
    def _is_scalars_meta(buf: np.ndarray, pos: np.ndarray) -> np.ndarray:
        meta = np.frombuffer(_SCALARS_META, dtype=np.uint8)
        ok = np.ones(pos.shape, dtype=bool)
        for k, byte in enumerate(meta):
            ok &= buf[pos + k] == byte
        return ok

    def _tag_codes(
        self, raw: memoryview, buf: np.ndarray, ts: np.ndarray, tl: np.ndarray
    ) -> np.ndarray:
        """Factorise tag bytes (hash of 8-byte words, verified per group) into reader codes."""
        import pandas as pd

        u64 = _view(buf, "<u8")
        nwords = (int(tl.max()) + 7) // 8 if tl.size else 0
        h = tl.astype(np.uint64) * _U64(0x9E3779B97F4A7C15)
        words = []
        for k in range(nwords):
            # no clipping: a word read starts < 8 * 16 bytes past a tag that starts inside
            # the block, so inside its padding; bytes past a tag's end are masked off
            w = u64[ts + 8 * k] & _TAG_MASKS[k][tl]
            words.append(w)
            h = (h ^ w) * _U64(0x100000001B3) + _U64(k + 1)
        local, uniq = pd.factorize(h)
        first = np.empty(len(uniq), dtype=np.int64)
        first[local[::-1]] = np.arange(local.size - 1, -1, -1)
        same = tl == tl[first][local]
        for w in words:
            same &= w == w[first][local]
        lut = np.empty(len(uniq), dtype=np.int32)
        for j, i in enumerate(first.tolist()):
            s = int(ts[i])
            lut[j] = self._code(bytes(raw[s : s + int(tl[i])]).decode("utf-8", "replace"))
        codes = lut[local]
        if not same.all():  # a hash collision: settle those rows byte by byte
            for i in np.flatnonzero(~same).tolist():
                s = int(ts[i])
                codes[i] = self._code(bytes(raw[s : s + int(tl[i])]).decode("utf-8", "replace"))
        return codes

    def _code(self, tag: str) -> int:
        return intern_tag(self.tags, self._tag_index, tag)

    def _decode_slow(
        self, raw: memoryview, order: np.ndarray, d: np.ndarray, e: np.ndarray
    ) -> tuple[np.ndarray, ...]:
        from tensorboard.compat.proto import event_pb2

        out_order, codes, steps, values, walls = [], [], [], [], []
        for o, s, t in zip(order.tolist(), d.tolist(), e.tolist(), strict=False):
            try:
                event = event_pb2.Event.FromString(bytes(raw[s:t]))
            except Exception:
                self.bad_records += 1
                self.warnings.append(
                    f"{self.path}: undecodable event at byte {self.offset + s - 12}"
                )
                continue
            if not event.HasField("summary"):
                continue
            for v in event.summary.value:
                scalar = self._scalar_of(v)
                if scalar is None:
                    continue
                out_order.append(o)
                codes.append(self._code(v.tag))
                steps.append(event.step)
                values.append(scalar)
                walls.append(event.wall_time)
        return (
            np.asarray(out_order, np.int64),
            np.asarray(codes, np.int32),
            np.asarray(steps, np.int64),
            np.asarray(values, np.float64),
            np.asarray(walls, np.float64),
        )

    def _scalar_of(self, v: object) -> float | None:
        """The scalar a summary value carries; records hparams and text as facts."""
        kind = v.WhichOneof("value")  # type: ignore[attr-defined]
        tag = v.tag  # type: ignore[attr-defined]
        plugin = v.metadata.plugin_data.plugin_name  # type: ignore[attr-defined]
        if plugin:
            self._plugins[tag] = plugin
        else:
            plugin = self._plugins.get(tag, "")
        if kind == "simple_value":
            return float(v.simple_value)  # type: ignore[attr-defined]
        if kind == "tensor":
            if plugin == "hparams":
                try:
                    self._hparams_of(v.metadata.plugin_data.content)  # type: ignore[attr-defined]
                except Exception:  # a corrupt hparams proto costs the hparams, nothing else
                    self.warnings.append(f"{self.path}: corrupt hparams record ignored")
                return None
            tensor = v.tensor  # type: ignore[attr-defined]
            if plugin == "text":
                if tensor.string_val:
                    self.texts[tag] = tensor.string_val[0].decode("utf-8", "replace")
                return None
            if plugin in ("", "scalars"):
                if _declared_elements(tensor) != 1:  # not a scalar (maybe a declared-huge
                    self.huge_tensors += 1  # tensor: never materialised)
                    return None
                x = _tensor_scalar(tensor)
                if x is not None:
                    return x
        self.other_events += 1
        return None

    def _hparams_of(self, content: bytes) -> None:
        from tensorboard.plugins.hparams import plugin_data_pb2

        data = plugin_data_pb2.HParamsPluginData.FromString(content)
        if data.HasField("session_start_info"):
            for key, val in data.session_start_info.hparams.items():
                kind = val.WhichOneof("kind")
                if kind:
                    self.hparams[key] = getattr(val, kind)


def intern_tag(tags: list[str], index: dict[str, int], tag: str) -> int:
    """The code of `tag` in a tag table (appended when new)."""
    code = index.get(tag)
    if code is None:
        code = index[tag] = len(tags)
        tags.append(tag)
    return code


def _declared_elements(tensor: object) -> int:
    """How many elements a TensorProto's shape declares (without allocating them)."""
    shape = tensor.tensor_shape  # type: ignore[attr-defined]
    if shape.unknown_rank:
        return -1
    n = 1
    for dim in shape.dim:
        if dim.size < 0:
            return -1
        n *= dim.size
        if n > 1 << 40:
            return n
    return n


def _tensor_scalar(tensor: object) -> float | None:
    """The value of a 0-d (or one-element) numeric TensorProto, else None."""
    from tensorboard.util import tensor_util

    try:
        array = tensor_util.make_ndarray(tensor)
    except Exception:
        return None
    if array.size != 1 or array.dtype.kind not in "fiub":
        return None
    return float(array.reshape(()))
