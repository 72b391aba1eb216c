"""Following targets: `follow(target)` is the live counterpart of `resolve(target)`.

A folder or file is looked at with `discover` -- the function `load` uses -- so tail and
diagnose see the same runs with the same names. Each run found gets a follower of its kind:
TensorBoard runs are read incrementally from the byte after the last complete record (new event
files of the run are added as they appear), log files line by line through `FileTail` (by inode
and name: rotation, copytruncate, recreate and deletion are reported, nothing lost or read
twice), and sources without an incremental reader (W&B run files, SwanLab, trackio) are read
again when their files change, only steps after the last one sent being returned.

`poll()` returns the rows written since the last poll as a RunFrame; `notices()` the one-line
reports of files that moved; `waiting` is true while nothing readable has been found; `more`
says that rows already written were left for the next poll (a big run is caught up a budget
at a time, so memory stays flat).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from rlwatch.errors import RlwatchError, UsageError
from rlwatch.frame import RunFrame

CATCH_UP = 16 << 20  # bytes of an event file read per poll while catching up (memory stays flat)
MAX_STAMPED_DIRS = 2000  # folders whose mtimes are checked each poll for new runs
SNIFFED = 64 * 1024  # a file not yet a run smaller than this is looked at again when it grows
DEEP = 16 << 20  # logs.DEEP: the bytes a sniff reads at most
REDISCOVER = 5.0  # seconds between two looks for new runs under a folder (once a run is found)


class _TensorBoardRun:
    def __init__(self, found: Any):
        from rlwatch.sources import tensorboard

        self.run = tensorboard._Run(found.name, found.address)
        self.files: list[Path] = []
        self.update(found)

    def update(self, found: Any) -> None:
        self.found = found
        for p in found.paths:
            if p not in self.files:
                self.files.append(p)
                self.run.add(p)

    @property
    def more(self) -> bool:
        return any(r.more for r in self.run.readers)

    def poll(self) -> RunFrame:
        frame = self.run.read(final=False, max_bytes=CATCH_UP)
        return frame if frame is not None else RunFrame.empty()


class _LogRun:
    def __init__(self, found: Any):
        from rlwatch.sources import logs

        self.found = found
        self.follower = logs.Follower(found.paths[0], found.log_format)

    def update(self, found: Any) -> None:
        self.found = found

    def notices(self) -> list[str]:
        return self.follower.notices()

    def poll(self) -> RunFrame:
        frame = self.follower.poll()
        return _named(frame, self.found)


class _ReloadRun:
    """A run re-read whole when one of its files changes; only new steps are returned."""

    def __init__(self, found: Any):
        self.found = found
        self.stamp: tuple | None = None
        self.sent: int | None = None
        self.axis: object = None  # where the steps come from (a W&B run may change it)

    def update(self, found: Any) -> None:
        self.found = found

    def poll(self) -> RunFrame:
        stamp = tuple(_stat(p) for p in self.found.paths)
        if stamp == self.stamp:
            return RunFrame.empty()
        self.stamp = stamp
        try:
            frame = self.found.load()
        except (RlwatchError, OSError):
            return RunFrame.empty()  # not readable yet; read again when it changes
        if frame.data.empty:
            return RunFrame.empty()
        last = int(frame.data["step"].max())
        axis = [i.hparams.get("steps") for i in frame.runs.values()]
        if self.sent is not None and axis != self.axis:  # steps from elsewhere now: afresh
            self.sent = None
            for info in frame.runs.values():
                info.replaces = True
        self.axis = axis
        if self.sent is not None:
            data = frame.data[frame.data["step"] > self.sent].reset_index(drop=True)
            frame = RunFrame(data, frame.runs)
        self.sent = last if self.sent is None else max(last, self.sent)
        return _named(frame, self.found)


EVIDENCE = 1000  # a run's first rows, kept to tell whether another run is a copy of it


def _rows(parts: list[Any]) -> Any:
    import pandas as pd

    if not parts:
        return pd.DataFrame({"metric": [], "step": [], "value": []})
    return pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]


def _stat(p: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(p)
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns)


def _named(frame: RunFrame, found: Any) -> RunFrame:
    """The run named as diagnose names it: a run under a folder by its `Found` name (its path
    below the folder), a file given itself by the name its source gives."""
    if not frame.runs or list(frame.runs) == [found.name]:
        return frame
    if found.own_name and not getattr(found, "in_folder", False):
        return frame  # the source's own name stands
    (old,) = frame.runs
    return frame.renamed({old: found.name})


class Follower:
    """Every run under a file or folder target, as `discover` finds them."""

    def __init__(self, target: Path, log_format: str | None):
        self.target, self.log_format = target, log_format
        self.runs: dict[tuple[str, ...], Any] = {}
        self.names: dict[tuple[str, ...], str] = {}
        self.skipped: dict[str, str] = {}
        self._notices: list[str] = []
        self._looked = 0.0
        self.renames: dict[str, str] = {}  # old -> new run names, for the watcher to apply
        self._stamp: tuple = ()
        self.more = False
        self.seen = False  # some run delivered rows
        # runs near each other that may be one run written twice (see copies): their first
        # rows, kept until a comparison tells; a copy is then dropped, as diagnose drops it
        self._evidence: dict[tuple[str, ...], list[Any]] = {}
        self._told: set[frozenset] = set()  # pairs known to be two runs
        self.retired: dict[tuple[str, ...], tuple[str, ...]] = {}  # copy key -> kept key
        self.dropped: dict[str, str] = {}  # run names dropped as copies -> the name kept
        self._last: dict[tuple[str, ...], int] = {}  # the last step each run delivered
        self._kept: dict[tuple[str, ...], str] = {}  # a run kept for its copies -> its name
        self._folders: dict[tuple[str, ...], str] = {}

    @property
    def waiting(self) -> bool:
        return not self.seen

    def _dir_stamp(self) -> tuple:
        """Modification times and file names of the folders below the target (a new file or
        folder anywhere changes one of them); only the known runs' folders when there are very
        many. The names are listed anyway by the walk and make the stamp exact where folder
        mtimes are coarse (a file created in the tick of the folder's last change)."""
        dirs = {str(self.target)}
        names: list[tuple[str, tuple[str, ...]]] = []
        known = {str(p) for run in self.runs.values() for p in run.found.paths}
        sizes: list[tuple[str, tuple[int, int] | None]] = []
        if self.target.is_dir():
            for n, (d, subdirs, files) in enumerate(os.walk(self.target, followlinks=False)):
                dirs.add(d)
                dirs.update(os.path.join(d, x) for x in subdirs)
                names.append((d, tuple(sorted(files))))
                # a file that is not (yet) part of a run: it may become one as it grows (a log
                # whose first line was still being written when the folder was last looked at)
                sizes += [(q, _stat(Path(q))) for q in (os.path.join(d, x) for x in files)]
                if n > MAX_STAMPED_DIRS:
                    break
        # a small file by its size; a larger one by its size's power of two, up to the bytes a
        # sniff reads (logs.DEEP): a growing file that is not a run (a W&B debug.log) makes a
        # look each time it doubles, not every poll, and one past DEEP never does
        sizes = [
            (q, st if st[0] < SNIFFED else (st[0].bit_length(), 0))
            for q, st in sizes
            if q not in known and st is not None and st[0] < DEEP
        ]
        for run in self.runs.values():
            dirs.update(str(p.parent) for p in run.found.paths)
        return (
            tuple(sorted((d, _stat(Path(d))) for d in dirs)),
            tuple(sorted(names)),
            tuple(sorted(sizes)),
        )

    def _discover(self) -> None:
        from rlwatch.sources import discover

        now = time.monotonic()
        stamp = self._dir_stamp()
        if self.runs and now - self._looked < REDISCOVER and stamp == self._stamp:
            return  # no file created or removed in a folder of a known run: nothing new
        self._looked, self._stamp = now, stamp
        try:
            found = discover(self.target, self.log_format)
        except RlwatchError:
            if not self.runs:
                raise
            return  # the target went away: its runs' followers say what happened
        for s in found.skipped:
            if self.skipped.get(s.path) != s.reason and self.runs:
                self._notices.append(f"{s.path}: skipped ({s.reason})")
            self.skipped[s.path] = s.reason
        # diagnose names the runs of a many-run folder by their path below it (`Found.name`),
        # a single run as its reader names it (a trackio project's runs each on their own)
        runs = found.runs
        many = self.target.is_dir() and len(runs) > 1
        for f in runs:
            f.in_folder = many
            # stable while a run gains files
            key = (f.kind, f.address) if f.run is None else (f.kind, f.address, f.run)
            run = self.runs.get(key)
            if key in self.retired:  # a copy of another run: nothing more of it
                continue
            if key in self._kept:  # named after its copies' folder (_fold), as diagnose does
                f.name = self._kept[key]
            old = self.names.get(key)
            if old is not None and (many or not f.own_name) and old != f.name:
                self._rename(old, f.name)  # a second run appeared: names by path now
                self.names[key] = f.name
            if run is None:
                if f.kind == "tensorboard":
                    run = _TensorBoardRun(f)
                elif f.kind == "log" and len(f.paths) == 1 and f.run is None and not f.parts:
                    run = _LogRun(f)  # one run, one file: read as it grows
                else:
                    run = _ReloadRun(f)
                self.runs[key] = run
            else:
                run.update(f)
        self._claimed(runs)

    def _claimed(self, runs: list[Any]) -> None:
        """A log followed before a `.wandb` file appeared beside it: the W&B run claims its
        folder (discovery lists the log no more, as diagnose never lists it), so the log is
        that run printed another way. It stops, and its name goes (the W&B run is read whole
        under its own name)."""
        wandb_dirs = {
            os.path.dirname(os.path.realpath(f.address)): f for f in runs if f.kind == "wandb"
        }
        if not wandb_dirs:
            return
        listed = {
            (f.kind, f.address) if f.run is None else (f.kind, f.address, f.run) for f in runs
        }
        for key, run in self.runs.items():
            if key in listed or key in self.retired or run.found.kind != "log":
                continue
            claim = wandb_dirs.get(os.path.dirname(os.path.realpath(run.found.address)))
            if claim is None:
                continue
            self.retired[key] = (claim.kind, claim.address)
            self._evidence.pop(key, None)
            name = self.names.pop(key, None)
            if name is not None:
                self.dropped[name] = claim.name

    def poll(self) -> RunFrame:
        self._discover()
        polled, more = [], False
        for key, run in self.runs.items():
            if key in self.retired:
                continue
            try:
                frame = run.poll()
            except (RlwatchError, OSError) as exc:
                if key in self.names:  # not readable yet is waiting, not news
                    self._notices.append(str(exc))  # one run's trouble never stalls the others
                continue
            self._notices += _notices_of(run)
            more = more or bool(getattr(run, "more", False))
            polled.append((key, frame))
        self._fold(polled)
        frames = []
        for key, frame in polled:
            if key in self.retired:
                continue
            frame = self._unique(key, frame)
            if frame.runs and not frame.data.empty:
                self.seen = True
            frames.append(frame)
        self.more = more
        return RunFrame.concat(frames)

    def _fold(self, polled: list[tuple[tuple[str, ...], RunFrame]]) -> None:
        """Drop a run that turns out to be a copy of another near it (`copies.fold`'s test
        and choice, on the first rows of each)."""
        from rlwatch.sources import copies

        if not self.target.is_dir():
            return  # the runs of one file (a trackio project) are its runs, as diagnose has them
        self._remember(polled)
        if len(self.runs) - len(self.retired) < 2:
            return
        # groups over every run found, copies too: a copy in the output folder joins the
        # runs below it (tb/, wandb/run-*/) as diagnose, which sees them all at once, joins them
        every = list(self.runs)
        for g in copies.groups([self._folder(k) for k in every]):
            keys = [every[i] for i in g if every[i] not in self.retired]
            open_ = [
                k
                for k in keys
                if k in self._evidence
                and any(frozenset((k, o)) not in self._told for o in keys if o != k)
            ]
            if len(open_) < 2:
                continue
            rows = {k: _rows(self._evidence[k]) for k in open_}
            for i, a in enumerate(open_):
                for b in open_[i + 1 :]:
                    if copies.compare(rows[a], rows[b]) is False:
                        self._told.add(frozenset((a, b)))
            infos = [(self._info(k), rows[k]) for k in open_]
            found = copies.copies_of(infos, [self._last.get(k, -1) for k in open_])
            for kept in set(found.values()):
                self._keep(open_[kept], [open_[c] for c, k in found.items() if k == kept])

    def _remember(self, polled: list[tuple[tuple[str, ...], RunFrame]]) -> None:
        """Every run's first rows and last step, to compare with a copy found later."""
        for k, frame in polled:
            if any(i.replaces for i in frame.runs.values()):  # read again: compare afresh
                self._evidence.pop(k, None)
                self._last.pop(k, None)
                self._told = {pair for pair in self._told if k not in pair}
            if frame.data.empty:
                continue
            self._last[k] = max(self._last.get(k, -1), int(frame.data["step"].max()))
            buf = self._evidence.setdefault(k, [])
            room = EVIDENCE - sum(map(len, buf))
            if room > 0:
                # a copy of the first rows alone: a view would keep the whole piece alive
                buf.append(frame.data.iloc[:room][["metric", "step", "value"]].copy())

    def _keep(self, kept: tuple[str, ...], dropped: list[tuple[str, ...]]) -> None:
        """`kept` goes on for itself and its copies `dropped`, named after the shallowest
        folder of them all (earlier copies too), as diagnose names it; the copies stop."""
        from rlwatch.sources import _rel

        same = [kept, *dropped, *(c for c, k in self.retired.items() if k == kept)]
        top = min((self._folder(k) for k in same), key=len)
        root = os.path.realpath(self.target)
        new = _rel(top, root, Path(os.path.abspath(self.target)).name or str(self.target))
        for c in dropped:  # the copies' names are free from now on
            if c in self.names:
                gone = self.names.pop(c)
                self.dropped[gone] = new
                for was, now in list(self.renames.items()):  # known by its old name
                    if now == gone:
                        del self.renames[was]
                        self.dropped[was] = new
        old = self.names.get(kept)
        if new not in self.names.values():
            if old is not None and old != new:
                self._rename(old, new)
            self.names[kept] = new
            self.runs[kept].found.name = new
            self._kept[kept] = new
        name = self.names.get(kept, self.runs[kept].found.name)
        for c in dropped:
            self.retired[c] = kept
            self._evidence.pop(c, None)
            self._notices.append(
                f"{self.runs[c].found.address}: the same run as {name} (its values agree); "
                "followed once"
            )

    def _rename(self, old: str, new: str) -> None:
        """Tell the watcher a run's new name; a rename not yet taken is followed to the end
        (console -> `x (console.log)` -> x, when a fold renames what discovery just did)."""
        for was, now in list(self.renames.items()):
            if now == old:
                self.renames[was] = new
        self.renames[old] = new

    def _folder(self, key: tuple[str, ...]) -> str:
        from rlwatch.sources import copies

        folder = self._folders.get(key)
        if folder is None:  # a run's key is its address: its folder never changes
            found = self.runs[key].found
            folder = self._folders[key] = copies.folder_of(found.kind, found.address)
        return folder

    def _info(self, key: tuple[str, ...]) -> Any:
        from rlwatch.frame import RunInfo

        f = self.runs[key].found
        # the kind as the loaded run's source says it (copies.KIND_ORDER)
        source = {"wandb": "wandb-local", "log": ""}.get(f.kind, f.kind)
        if f.kind == "log" and f.paths[0].name == "trainer_state.json":
            source = "trainer-state"
        return RunInfo(name=f.name, source=source, address=f.address)

    def notices(self) -> list[str]:
        out, self._notices = self._notices, []
        return list(dict.fromkeys(out))

    def _unique(self, key: tuple[str, ...], frame: RunFrame) -> RunFrame:
        """Two runs that call themselves the same (two W&B runs named `debug`) stay two runs:
        the second is named after its folder, as `load` names it."""
        if not frame.runs:
            return frame
        (name,) = frame.runs
        mine = self.names.get(key)
        if mine is None:
            mine = name
            if mine in self.names.values():
                run = self.runs[key]
                where = run.found.paths[0].parent.name
                mine = f"{name} ({where})"
            self.names[key] = mine
        return frame if mine == name else frame.renamed({name: mine})


class RemoteFollower:
    """A remote run (MLflow) through its own incremental reader."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.seen = False
        self.more = False

    @property
    def waiting(self) -> bool:
        return not self.seen

    def poll(self) -> RunFrame:
        frame = self.inner.poll()
        if frame.runs and not frame.data.empty:
            self.seen = True
        return frame

    def notices(self) -> list[str]:
        return _notices_of(self.inner)


def _notices_of(follower: Any) -> list[str]:
    fn = getattr(follower, "notices", None)
    return fn() if callable(fn) else []


def follow(target: str, log_format: str | None = None, tracking_uri: str | None = None) -> Any:
    """A follower for one target (the live counterpart of `resolve`)."""
    from rlwatch.sources import ACCEPTED

    if log_format is not None:  # the log readers are loaded only where logs are followed
        from rlwatch.sources import logs

        logs.check_format(log_format)
    if target.startswith("mlflow:"):
        from rlwatch.sources import mlflow_source

        ref = target[len("mlflow:") :].strip("/")
        if not ref:
            raise UsageError("mlflow: needs a run: mlflow:<run_id> or mlflow:<experiment>/<run>")
        uri = mlflow_source.tracking_uri(tracking_uri)
        return RemoteFollower(mlflow_source.Follower(ref, uri))
    if target.startswith("wandb:") or "://" in target:  # a W&B ref is one or a run URL
        from rlwatch.sources import wandb_api

        remote = wandb_api.parse(target)
    else:
        remote = None
    if remote is not None:
        raise UsageError(
            f"{target}: following W&B server runs is not supported; follow the "
            "run's local wandb/ folder instead"
        )
    path = Path(target)
    if not os.path.lexists(path):
        from rlwatch.sources import mlflow_source

        if mlflow_source.RUN_ID.match(target) and (
            tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
        ):
            uri = mlflow_source.tracking_uri(tracking_uri)
            return RemoteFollower(mlflow_source.Follower(target, uri))
        raise UsageError(f"{target}: no such file or directory (accepted: {ACCEPTED})")
    return Follower(path, log_format)
