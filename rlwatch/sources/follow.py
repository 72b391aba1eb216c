"""Following targets: `follow(target)` is `resolve(target)` for live runs.

A follower's `poll()` returns the rows written since its last poll as a RunFrame whose runs
are named exactly as `load([target])` names them, and `notices()` the one-line reports of
files that moved (rotated, truncated in place, recreated, deleted) since the last call. A
folder is resolved the way `resolve` resolves it, once something readable is in it; until
then the follower is `waiting`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from rlwatch.errors import RlwatchError, UsageError
from rlwatch.frame import RunFrame

CATCH_UP = 16 << 20  # bytes of an event file read per poll while catching up (memory stays flat)


class WandbFollower:
    """A .wandb file or a folder of them; a file is re-read when it grows (records are
    small), and only steps after the last one sent are returned. Two runs with the same name
    get the names `load` gives them."""

    def __init__(self, target: Path):
        self.target = target
        self.sizes: dict[Path, int] = {}
        self.sent: dict[Path, int] = {}
        self.names: dict[Path, str] = {}
        self.waiting = True

    def poll(self) -> RunFrame:
        from rlwatch.sources import wandb_local

        frames = []
        for f in wandb_local.run_files(self.target):
            try:
                size = f.stat().st_size
            except OSError:
                continue
            if self.sizes.get(f) == size:
                continue
            self.sizes[f] = size
            try:
                frame = wandb_local.load_file(f)
            except (RlwatchError, OSError):
                continue  # not readable yet; looked at again when it grows
            (name,) = frame.runs
            if f not in self.names:
                taken = set(self.names.values())
                self.names[f] = name if name not in taken else f"{name} ({f.parent.name})"
            if self.names[f] != name:
                frame = frame.renamed({name: self.names[f]})
            last = self.sent.get(f)
            data = frame.data if last is None else frame.data[frame.data["step"] > last]
            if len(data):
                self.waiting = False
                self.sent[f] = int(frame.data["step"].max())
                frames.append(RunFrame(data.reset_index(drop=True), frame.runs))
        return RunFrame.concat(frames)

    def notices(self) -> list[str]:
        return []


class LogDirFollower:
    """A folder of logs: every readable log file below it is a run, as in `logs.load_dir`;
    a file that disappears is reported and never stops the others."""

    def __init__(self, target: Path, log_format: str | None):
        self.target, self.log_format = target, log_format
        self.followers: dict[Path, Any] = {}
        self.names: dict[str, Path] = {}
        self._notices: list[str] = []
        self.waiting = True

    def poll(self) -> RunFrame:
        from rlwatch.sources import logs

        for f in logs.log_files(self.target):
            if f not in self.followers:
                try:
                    if not f.stat().st_size:
                        continue
                    fmt = self.log_format or logs.sniff(f)
                except (RlwatchError, OSError):
                    continue  # not a log (yet); looked at again next poll
                self.followers[f] = logs.Follower(f, fmt)
        frames = []
        for f, fol in self.followers.items():
            try:
                frame = fol.poll()
            except (RlwatchError, OSError) as exc:
                self._notices.append(str(exc))
                continue
            self._notices += _notices_of(fol)
            if not frame.runs:
                continue
            (name,) = frame.runs
            owner = self.names.setdefault(name, f)
            if owner != f:
                frame = frame.renamed({name: str(f.relative_to(self.target))})
            self.waiting = False
            frames.append(frame)
        return RunFrame.concat(frames)

    def notices(self) -> list[str]:
        out, self._notices = self._notices, []
        return out


class FolderFollower:
    """A folder, resolved like `resolve` resolves it (TensorBoard runs, else W&B run files,
    else log files) once something readable appears in it."""

    def __init__(self, target: Path, log_format: str | None):
        self.target, self.log_format = target, log_format
        self.inner: Any = None

    @property
    def waiting(self) -> bool:
        return self.inner is None or getattr(self.inner, "waiting", False)

    @property
    def more(self) -> bool:
        """Rows already written are left for the next poll (a big run being caught up)."""
        return bool(getattr(self.inner, "more", False))

    def _decide(self) -> Any:
        from rlwatch.sources import tensorboard

        if tensorboard.find_runs(self.target):
            return _budgeted(tensorboard.Follower(self.target))
        if next(self.target.rglob("*.wandb"), None) is not None:
            return WandbFollower(self.target)
        logs = LogDirFollower(self.target, self.log_format)
        frame = logs.poll()
        if frame.runs:
            self._first = frame
            return logs
        return None

    def poll(self) -> RunFrame:
        if self.inner is None:
            self._first = RunFrame.empty()
            self.inner = self._decide()
            if self.inner is None:
                return RunFrame.empty()
            if self._first.runs:
                return self._first
        return self.inner.poll()

    def notices(self) -> list[str]:
        return _notices_of(self.inner) if self.inner is not None else []


class FileFollower:
    """One file whose kind is known from its name, or a log file sniffed when it has bytes."""

    def __init__(self, inner: Any):
        self.inner = inner

    @property
    def waiting(self) -> bool:
        return getattr(self.inner, "waiting", False)

    @property
    def more(self) -> bool:
        return bool(getattr(self.inner, "more", False))

    def poll(self) -> RunFrame:
        return self.inner.poll()

    def notices(self) -> list[str]:
        return _notices_of(self.inner)


def _budgeted(follower: Any) -> Any:
    follower.budget = CATCH_UP
    return follower


def _notices_of(follower: Any) -> list[str]:
    fn = getattr(follower, "notices", None)
    return fn() if callable(fn) else []


def follow(target: str, log_format: str | None = None, tracking_uri: str | None = None) -> Any:
    """A follower for one target (the live counterpart of `resolve`)."""
    from rlwatch.sources import logs, tensorboard, wandb_api

    logs.check_format(log_format)
    if target.startswith("mlflow:"):
        from rlwatch.sources import mlflow_source

        ref = target[len("mlflow:") :].strip("/")
        if not ref:
            raise UsageError("mlflow: needs a run: mlflow:<run_id> or mlflow:<experiment>/<run>")
        return FileFollower(mlflow_source.Follower(ref, mlflow_source.tracking_uri(tracking_uri)))
    if wandb_api.parse(target) is not None:
        raise UsageError(
            f"{target}: following W&B server runs is not supported; follow the "
            "run's local wandb/ folder instead"
        )
    path = Path(target)
    if not path.exists():
        from rlwatch.sources import ACCEPTED, mlflow_source

        if mlflow_source.RUN_ID.match(target) and (
            tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
        ):
            uri = mlflow_source.tracking_uri(tracking_uri)
            return FileFollower(mlflow_source.Follower(target, uri))
        raise UsageError(f"{target}: no such file or directory (accepted: {ACCEPTED})")
    if path.is_dir():
        return FolderFollower(path, log_format)
    if tensorboard.is_event_file(path) and log_format is None:
        return FileFollower(_budgeted(tensorboard.Follower(path)))
    if path.suffix == ".wandb":
        return FileFollower(WandbFollower(path))
    return FileFollower(logs.Follower(path, log_format))
