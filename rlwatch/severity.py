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
