"""Target resolution: what the user typed -> a reader -> a RunFrame."""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rlwatch.errors import SourceError, UsageError
from rlwatch.frame import RunFrame

ACCEPTED = "a TensorBoard log directory or an events.out.tfevents.* file"


def resolve(target: str) -> Callable[[], RunFrame]:
    """A loader for one target, or a UsageError naming the forms that are accepted."""
    path = Path(target)
    if path.exists():
        from rlwatch.sources import tensorboard

        if path.is_dir() or tensorboard.is_event_file(path):
            return lambda: tensorboard.load(path)
        raise SourceError(f"{target}: not a recognised run file (accepted: {ACCEPTED})")
    raise UsageError(f"{target}: no such file or directory (accepted: {ACCEPTED})")


def load(targets: list[str], *, workers: int | None = None) -> RunFrame:
    """Read every target (in parallel) into one RunFrame; run names are made unique."""
    if not targets:
        raise UsageError("no target given (accepted: " + ACCEPTED + ")")
    loaders = [resolve(t) for t in targets]  # every bad target fails before any reading
    if len(loaders) == 1:
        frames = [loaders[0]()]
    else:
        with ThreadPoolExecutor(max_workers=workers or min(4, os.cpu_count() or 1)) as pool:
            frames = list(pool.map(lambda f: f(), loaders))
    seen: set[str] = set()
    unique = []
    for target, frame in zip(targets, frames, strict=False):
        clash = {n: f"{target.rstrip('/')}:{n}" for n in frame.runs if n in seen}
        if clash:
            frame = frame.renamed(clash)
        seen.update(frame.runs)
        unique.append(frame)
    return RunFrame.concat(unique)
