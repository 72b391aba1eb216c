"""One error hierarchy. The CLI turns any of these into a one-line message and exit code 2."""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """The CI contract: what rlwatch's exit status means."""

    HEALTHY = 0  # nothing at or above --fail-on is firing
    UNHEALTHY = 1  # an error verdict (at or above --fail-on) fired
    FAILED = 2  # rlwatch could not do its job: bad input, unreadable source, crash


class RlwatchError(Exception):
    """Base class: rlwatch could not do its job. Carries a one-line, user-facing message."""

    exit_code = ExitCode.FAILED


class UsageError(RlwatchError):
    """Bad arguments or configuration."""


class SourceError(RlwatchError):
    """A source (log directory, event file, tracking server) could not be read."""


class RuleFileError(RlwatchError):
    """A rule or metrics file is invalid; points at file:line:col."""

    def __init__(self, message: str, path: str, line: int | None = None, col: int | None = None):
        self.path, self.line, self.col = path, line, col
        where = path if line is None else f"{path}:{line}:{col or 1}"
        super().__init__(f"{where}: {message}")
