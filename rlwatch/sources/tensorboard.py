"""TensorBoard log directories: runs found as TensorBoard finds them, read fast, followed live."""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np

from rlwatch.errors import SourceError
from rlwatch.frame import RunFrame, RunInfo
from rlwatch.sources._tfrecord import Block, EventFileReader, intern_tag

SOURCE = "tensorboard"
_STAMP = re.compile(r"tfevents\.(\d+(?:\.\d+)?)")


def is_event_file(path: str | os.PathLike[str]) -> bool:
    """TensorBoard's own test: the file name contains 'tfevents'."""
    return "tfevents" in os.path.basename(path)


def _file_order(path: Path) -> tuple[float, str]:
    m = _STAMP.search(path.name)
    return (float(m.group(1)) if m else 0.0, path.name)


def find_runs(target: Path) -> dict[str, list[Path]]:
    """Run name -> its event files in write order.

    Every directory that directly holds event files is a run (nested runs too), named by
    its path relative to `target`; files are ordered by the timestamp in their names. An
    event file given directly is a run of its own.
    """
    if target.is_file():
        return {target.parent.name or target.name: [target]}
    runs: dict[str, list[Path]] = {}
    root_name = target.resolve().name or str(target)
    for dirpath, dirnames, filenames in os.walk(target):
        dirnames.sort()
        files = [Path(dirpath) / f for f in filenames if is_event_file(f)]
        if files:
            rel = os.path.relpath(dirpath, target)
            name = root_name if rel == "." else rel.replace(os.sep, "/")
            runs[name] = sorted(files, key=_file_order)
    return runs


class _Run:
    """The readers of one run and its run-level tag table."""

    def __init__(self, name: str, address: str):
        self.name, self.address = name, address
        self.readers: list[EventFileReader] = []
        self.tags: list[str] = []
        self._index: dict[str, int] = {}
        self._warned = 0

    def add(self, path: Path) -> None:
        self.readers.append(EventFileReader(str(path)))

    def read(self, *, final: bool, max_bytes: int | None = None) -> RunFrame | None:
        parts: list[tuple[int, Block]] = []
        for i, reader in enumerate(self.readers):
            block = reader.read(None if final else max_bytes)
            if final:
                reader.finish()
            if len(block):
                lut = np.asarray([self._code(t) for t in reader.tags], dtype=np.int32)
                parts.append((i, Block(lut[block.tag], block.step, block.value, block.wall_time)))
        warnings = [w for r in self.readers for w in r.warnings]
        if not final and not parts and len(warnings) == self._warned:
            return None  # nothing new: a followed idle run costs a read of 0 bytes, no frame
        info = RunInfo(self.name, SOURCE, self.address, files=[r.path for r in self.readers])
        for r in self.readers:
            info.hparams.update(r.hparams)
            info.texts.update(r.texts)
        info.warnings = warnings if final else warnings[self._warned :]
        self._warned = len(warnings)
        if not parts:
            return RunFrame.from_arrays(
                info,
                self.tags,
                *(np.empty(0, t) for t in (np.int32, np.int64, np.float64, np.float64)),
            )
        cols = [
            np.concatenate([getattr(b, f) for _, b in parts])
            if len(parts) > 1
            else getattr(parts[0][1], f)
            for f in ("tag", "step", "value", "wall_time")
        ]
        where = (
            np.repeat([i for i, _ in parts], [len(b) for _, b in parts]) if len(parts) > 1 else None
        )
        return RunFrame.from_arrays(
            info, self.tags, *cols, where=where, places=[r.path for r in self.readers]
        )

    def _code(self, tag: str) -> int:
        return intern_tag(self.tags, self._index, tag)


def _check_target(target: Path) -> None:
    if not target.exists():
        raise SourceError(f"{target}: no such file or directory")


def load(target: str | os.PathLike[str]) -> RunFrame:
    """Read every run under a TensorBoard logdir (or one event file) into a RunFrame."""
    path = Path(target)
    _check_target(path)
    runs = find_runs(path)
    if not runs:
        raise SourceError(
            f"{path}: no TensorBoard event files (events.out.tfevents.*) in it or below"
        )
    frames = []
    for name, files in runs.items():
        run = _Run(name, str(files[0].parent))
        for f in files:
            run.add(f)
        frame = run.read(final=True)
        assert frame is not None
        frames.append(frame)
    return RunFrame.concat(frames)


def load_files(name: str, files: list[Path]) -> RunFrame:
    """One run from its event files (in write order)."""
    run = _Run(name, str(files[0].parent))
    for f in files:
        run.add(f)
    frame = run.read(final=True)
    assert frame is not None
    return frame


class Follower:
    """Follows a logdir: each `poll()` returns only the rows written since the last poll.

    Remembers per event file the offset after the last complete record, so a poll costs in
    proportion to what was appended; new event files and new runs are picked up.
    """

    def __init__(self, target: str | os.PathLike[str]):
        self.target = Path(target)
        _check_target(self.target)
        self.runs: dict[str, _Run] = {}
        self._known: set[Path] = set()
        self.budget: int | None = None  # bytes read per run and poll at most (None: all)
        self.more = False

    def poll(self) -> RunFrame:
        for name, files in find_runs(self.target).items():
            run = self.runs.get(name)
            if run is None:
                run = self.runs[name] = _Run(name, str(files[0].parent))
            for f in files:
                if f not in self._known:
                    self._known.add(f)
                    run.add(f)
        frames = [
            f
            for r in self.runs.values()
            if (f := r.read(final=False, max_bytes=self.budget)) is not None
        ]
        # catching up on a big run a budget at a time keeps a live follower's memory flat
        self.more = any(x.more for r in self.runs.values() for x in r.readers)
        return RunFrame.concat(frames)
