"""Severity: the one order of verdict severities, used by rules, the gate, renderers and the CLI."""

from __future__ import annotations

import enum


class Severity(enum.IntEnum):
    """info < warning < error. `str(Severity.ERROR) == "error"`, the spelling in rule files."""

    INFO = 0
    WARNING = 1
    ERROR = 2

    def __str__(self) -> str:
        return self.name.lower()

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)

    def __eq__(self, other: object) -> bool:
        """Also equal to its spelling: `Severity.ERROR == "error"` (rule files, JSON, tests)."""
        if isinstance(other, str):
            return str(self) == other
        return int.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return int.__hash__(self)

    @classmethod
    def parse(cls, text: str | Severity) -> Severity:
        """`"warning"` -> `Severity.WARNING`; ValueError naming the valid spellings otherwise."""
        if isinstance(text, Severity):
            return text
        try:
            return cls[str(text).upper()]
        except KeyError:
            valid = ", ".join(str(s) for s in cls)
            raise ValueError(f"bad severity {text!r} (valid: {valid})") from None
