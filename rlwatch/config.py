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


def _toml(path: Path) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"{path}: cannot read configuration: {exc}") from None


def find(start: Path | None = None) -> Config:
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        own = d / "rlwatch.toml"
        if own.is_file():
            return _validated(own, _toml(own))
        py = d / "pyproject.toml"
        if py.is_file():
            section = _toml(py).get("tool", {}).get("rlwatch")
            if section is not None:
                return _validated(py, section)
    return Config()


def _validated(path: Path, values: dict[str, Any]) -> Config:
    where = f"{path} [tool.rlwatch]" if path.name == "pyproject.toml" else str(path)
    for key, value in values.items():
        want = KEYS.get(key)
        if want is None:
            raise UsageError(f"{where}: unknown key {key!r} (valid: {', '.join(KEYS)})")
        if not isinstance(value, want) or (
            want is list and not all(isinstance(x, str) for x in value)
        ):
            kind = "a list of strings" if want is list else "a string"
            raise UsageError(f"{where}: {key} must be {kind}, got {value!r}")
    if "rules" in values:  # rule files are relative to the configuration file
        values = {**values, "rules": [str(path.parent / r) for r in values["rules"]]}
    return Config(str(path), values)
