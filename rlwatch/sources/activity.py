"""The time a run of files is judged at when it is diagnosed (the `now` of `stalled`).

A file's modification time alone says nothing: a copy, a `git checkout`, an `scp` or a download
sets it, so every copied healthy run would look stalled. So `diagnose` judges a run at

- the current time, when a process on this machine still holds one of the run's files open
  for writing (Linux: /proc/<pid>/fd and fdinfo) and that file was last written within
  `BOUND` of the run's latest record (the records' clock is the writer's clock, not data
  replayed or converted long after it was logged);
- otherwise the latest wall time of any record read for the run: nothing was written after
  it, so a finished, crashed or copied run is never called stalled.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable

BOUND = 86_400.0  # seconds: the file's last write at most this long after its latest record
_SCAN_TTL = 1.0  # seconds a scan of /proc is reused (a sweep judges many runs)
_scan: tuple[float, dict[tuple[int, int], int]] | None = None


def writers() -> dict[tuple[int, int], int]:
    """(device, inode) -> pid of every file open for writing by a process we may inspect."""
    global _scan
    now = time.monotonic()
    if _scan is not None and now - _scan[0] < _SCAN_TTL:
        return _scan[1]
    out: dict[tuple[int, int], int] = {}
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        pids = []
    for pid in pids:
        fd_dir = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:  # gone, or another user's
            continue
        for fd in fds:
            try:
                with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                    flags = next((ln for ln in f if ln.startswith("flags:")), "")
                if not flags or int(flags.split()[1], 8) & 0o3 == 0:  # read-only
                    continue
                st = os.stat(f"{fd_dir}/{fd}")
            except (OSError, ValueError, IndexError):
                continue
            out.setdefault((st.st_dev, st.st_ino), int(pid))
    _scan = (time.monotonic(), out)
    return out


def judged_at(files: Iterable[str], latest: float | None) -> tuple[float, str] | None:
    """(now, how it was chosen) for a run whose latest record was written at `latest`."""
    if latest is None:
        return None
    stats = []
    for f in files:
        try:
            stats.append((f, os.stat(f)))
        except OSError:
            continue
    if stats:
        open_ = writers()
        for f, st in stats:
            pid = open_.get((st.st_dev, st.st_ino))
            if pid is not None and st.st_mtime - latest <= BOUND:
                name = os.path.basename(f)
                return time.time(), f"judged now: process {pid} still has {name} open for writing"
    return latest, "judged at the run's latest record"
