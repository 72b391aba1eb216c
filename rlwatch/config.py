"""Configuration: `[tool.rlwatch]` in pyproject.toml or an rlwatch.toml, found from the current
directory upwards (the nearest wins). Flags override it."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlwatch.errors import UsageError

KEYS = {
    "rules": list,
    "select": list,
    "ignore": list,
    "fail_on": str,
    "require": list,
    "log_format": str,
}


@dataclass
class Config:
    path: str | None = None
    values: dict[str, Any] = field(default_factory=dict)

    def get(self, key: str, flag: Any) -> Any:
        """The flag when given, else the configured value."""
        if flag not in (None, [], ()):
            return flag
        return self.values.get(key)


MAX_BYTES = 1 << 20  # a configuration file is small; anything bigger is not one


def _toml(path: Path) -> dict[str, Any]:
    """The parsed file, or a UsageError saying why not (never a traceback)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"{path}: cannot read configuration ({exc.strerror or exc})") from None
    if len(raw) > MAX_BYTES:
        raise UsageError(f"{path}: larger than {MAX_BYTES >> 20} MiB — not a configuration file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise UsageError(
            f"{path}:{line}: not UTF-8 (byte {exc.start}) — TOML files must be UTF-8"
        ) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: invalid TOML: {exc} — fix the file or remove it") from None
    except (RecursionError, MemoryError):
        raise UsageError(f"{path}: nested too deeply to be a configuration file") from None


def _is_file(p: Path) -> bool:
    try:
        return p.is_file()
    except OSError:
        return False


def find(start: Path | None = None) -> Config:
    try:
        here = (start or Path.cwd()).resolve()
    except OSError:  # the working directory was deleted
        return Config()
    for d in (here, *here.parents):
        own = d / "rlwatch.toml"
        if _is_file(own):
            return _validated(own, _toml(own))
        py = d / "pyproject.toml"
        if _is_file(py):
            try:
                doc = _toml(py)
            except UsageError as exc:
                if _mentions_rlwatch(py):
                    raise
                # another project's broken pyproject.toml above us is none of our business
                _warn(f"ignored {exc} (it has no [tool.rlwatch])")
                continue
            tool = doc.get("tool", {})
            if not isinstance(tool, dict):
                if "rlwatch" in str(tool):
                    raise UsageError(f"{py}: [tool] must be a table, got {type(tool).__name__}")
                continue
            section = tool.get("rlwatch")
            if section is not None:
                return _validated(py, section)
    return Config()


def _mentions_rlwatch(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return b"rlwatch" in f.read(MAX_BYTES)
    except OSError:
        return False


def _warn(message: str) -> None:
    from rlwatch.errors import redact_secrets

    print(f"rlwatch: warning: {redact_secrets(message)}", file=sys.stderr)


def _validated(path: Path, values: dict[str, Any]) -> Config:
    where = f"{path} [tool.rlwatch]" if path.name == "pyproject.toml" else str(path)
    if not isinstance(values, dict):
        got = "an array of tables" if isinstance(values, list) else type(values).__name__
        raise UsageError(
            f"{where}: must be a table of settings, got {got} — write [tool.rlwatch] with "
            f"keys {', '.join(KEYS)}"
        )
    for key, value in values.items():
        want = KEYS.get(key)
        if want is None:
            raise UsageError(f"{where}: unknown key {key!r} (valid: {', '.join(KEYS)})")
        if not isinstance(value, want) or (
            want is list and not all(isinstance(x, str) for x in value)
        ):
            kind = "a list of strings" if want is list else "a string"
            shown = repr(value)
            shown = shown if len(shown) <= 80 else shown[:77] + "..."
            raise UsageError(f"{where}: {key} must be {kind}, got {shown}")
    if "rules" in values:  # rule files are relative to the configuration file
        values = {**values, "rules": [str(path.parent / r) for r in values["rules"]]}
    return Config(str(path), values)
