"""Following one growing text file by inode and name, as `tail -F` does, without losing or
repeating a line.

- rotation (the file is renamed and a new one created under the name): the rest of the old
  file is read through the descriptor still open on it, then the new file from its start;
- copytruncate (copied, then truncated in place): the lines written between the last read and
  the truncation are read from the copy (a sibling named `<name>.*` whose bytes up to the
  offset match), then the file from its start;
- recreate (deleted and written again): the new file is read from its start;
- deletion: the rest of the old file is read; the name is watched until it comes back.

Each case is reported once, as one line, through `notices()`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

# a JSON array's close after its last element on the line before: a Kaggle kernel's log ends
# `,{"stream_name":...,"data":"..."}]` or on a `]` of its own, with no newline
_ARRAY_END = re.compile(rb'(?:[,\[]\{"stream_name":"[^\n]*\})?\][ \t\r]*')


def complete_last(path: object, tail: bytes) -> bool:
    """Whether a file's last line, which has no newline, is complete: a notebook's JSON ends on
    its closing `}` (all of a notebook saved on one line), a Kaggle kernel's log on its `]`."""
    tail = tail.rstrip()
    if str(path).endswith(".ipynb") and tail.endswith(b"}"):
        return True
    return tail.endswith(b"]") and _ARRAY_END.fullmatch(tail) is not None


MAX_LINE = 64 << 20  # a line longer than this is dropped rather than held


class FileTail:
    def __init__(self, path: Path, cr: bool = False):
        self.path = path
        self.cr = cr  # a carriage return ends a record too (tqdm's redraws of one bar)
        self.fd: int | None = None
        self.ino: tuple[int, int] | None = None
        self.offset = 0  # bytes of the open file consumed (complete lines handed out)
        self.pending = b""  # a partial last line, kept for the next read
        self.head = b""  # the file's first bytes, to recognise its copy after copytruncate
        self.gone = False
        self._notices: list[str] = []

    def notices(self) -> list[str]:
        out, self._notices = self._notices, []
        return out

    def exists(self) -> bool:
        return self.fd is not None or self.path.exists()

    def _open(self) -> bool:
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            return False
        st = os.fstat(fd)
        self.fd, self.ino, self.offset, self.pending, self.head = (
            fd,
            (st.st_dev, st.st_ino),
            0,
            b"",
            b"",
        )
        return True

    def _drain(self) -> bytes:
        """Everything from the offset to the end of the open file."""
        assert self.fd is not None
        chunks = []
        while True:
            b = os.pread(self.fd, 1 << 20, self.offset + sum(len(c) for c in chunks))
            if not b:
                break
            chunks.append(b)
        data = b"".join(chunks)
        if len(self.head) < 4096 and self.offset < 4096:
            self.head = (self.head + data)[:4096]
        return data

    def close(self) -> None:
        self._close()

    def _close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
        self.fd = None

    def read(self) -> bytes:
        """The complete lines appended since the last read (a partial last line waits)."""
        if self.fd is None:
            if not self._open():
                return b""
            if self.gone:  # it came back after a deletion already reported
                self.gone = False
        try:
            st = os.stat(self.path)
            here: tuple[int, int] | None = (st.st_dev, st.st_ino)
        except OSError:
            here, st = None, None
        if here is None:  # gone: read what the old file still gets, say so once
            out = self._lines(self._drain(), final=False)
            if not self.gone:
                self.gone = True
                moved = _renamed_to(self.path, self.ino)
                self._notices.append(
                    f"{self.path}: rotated to {moved.name}; waiting for a new file"
                    if moved
                    else f"{self.path}: deleted; waiting for it to come back"
                )
            return out
        out = b""
        if here != self.ino:  # rotated or recreated: the rest of the old file, then the new
            out = self._lines(self._drain(), final=True)
            if not self.gone:
                moved = _renamed_to(self.path, self.ino)
                what = f"rotated to {moved.name}" if moved else "recreated"
                self._notices.append(f"{self.path}: {what}; reading the new file from its start")
            self.gone = False
            self._close()
            if not self._open():
                return out
        elif st is not None and st.st_size < self.offset:
            # truncated in place: first whatever the copy holds beyond what was read
            rest, copy = self._from_copy()
            out = self._lines(rest, final=True)
            self.offset, self.pending, self.head = 0, b"", b""
            where = f"; {len(rest)} bytes read from the copy {copy.name}" if copy else ""
            self._notices.append(f"{self.path}: truncated in place (copytruncate){where}")
        elif self.head and os.pread(self.fd, len(self.head), 0) != self.head:
            self.offset, self.pending, self.head = 0, b"", b""
            self._notices.append(f"{self.path}: rewritten in place; reading it from its start")
        return out + self._lines(self._drain(), final=False)

    def blocks(self, size: int = 1 << 20) -> Iterator[str]:
        """`read()` decoded, in pieces of about `size` bytes cut at line ends."""
        data = self.read()
        at = 0
        while at < len(data):
            end = self._end(data, min(at + size, len(data)) - 1)
            end = len(data) if end < 0 else end + 1
            yield data[at:end].decode("utf-8", "replace")
            at = end

    def _end(self, data: bytes, start: int) -> int:
        """The first record end at or after `start` (-1: none)."""
        nl = data.find(b"\n", start)
        if not self.cr:
            return nl
        cr = data.find(b"\r", start)
        return cr if nl < 0 or 0 <= cr < nl else nl

    def _lines(self, data: bytes, *, final: bool) -> bytes:
        self.offset += len(data)
        data = self.pending + data
        if final:
            self.pending = b""
            return data if not data or data.endswith(b"\n") else data + b"\n"
        end = data.rfind(b"\n")
        if self.cr:
            end = max(end, data.rfind(b"\r"))
        self.pending = data[end + 1 :]
        if len(self.pending) > MAX_LINE:  # a line too long to hold: dropped, not kept growing
            self.pending = b""
        done = data[: end + 1]
        if self.pending and complete_last(self.path, self.pending):
            # a document's close without a newline: complete, as the batch reader takes it
            done, self.pending = done + self.pending + b"\n", b""
        return done

    def _from_copy(self) -> tuple[bytes, Path | None]:
        consumed = self.offset
        for sib in sorted(
            self.path.parent.glob(self.path.name + ".*"), key=lambda p: -p.stat().st_mtime
        ):
            try:
                with open(sib, "rb") as f:
                    if f.read(len(self.head)) != self.head:
                        continue
                    f.seek(consumed)
                    return f.read(), sib
            except OSError:
                continue
        return b"", None


def _renamed_to(path: Path, ino: tuple[int, int] | None) -> Path | None:
    try:
        for sib in path.parent.iterdir():
            st = sib.stat()
            if (st.st_dev, st.st_ino) == ino:
                return sib
    except OSError:
        pass
    return None
