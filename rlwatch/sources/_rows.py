"""Rows collected one by one by the text and record readers, and what they could not read."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rlwatch.frame import RunFrame, RunInfo

# How JSON writers spell non-finite numbers: MLflow's REST API, W&B (API and .wandb files), trackio.
NONFINITE_STRINGS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def nonfinite_string(value: str) -> float | None:
    """`"NaN"` -> nan, `"Infinity"` -> inf, `"-Infinity"` -> -inf; None for any other string."""
    return NONFINITE_STRINGS.get(value)


STEP_KEYS = ("step", "global_step", "_step", "train/global_step", "trainer/global_step")


class Rows:
    """Rows in write order plus what was dropped, shared by every parser."""

    def __init__(self) -> None:
        self.steps: list[int] = []
        self.tags: list[str] = []
        self.values: list[float] = []
        self.walls: list[float] = []
        self.index: dict[str, int] = {}
        self.codes: list[int] = []
        self.skipped: dict[str, int] = {}  # reason -> count
        self.examples: dict[str, list[str]] = {}  # reason -> a few keys it hit
        self.facts: dict[str, object] = {}
        self.numbers_seen = 0
        self.numbers_3dp = 0

    def add(self, step: int, key: str, value: float, wall: float = math.nan) -> None:
        code = self.index.get(key)
        if code is None:
            code = self.index[key] = len(self.tags)
            self.tags.append(key)
        self.steps.append(step)
        self.codes.append(code)
        self.values.append(value)
        self.walls.append(wall)

    def skip(self, reason: str, n: int = 1, key: str | None = None) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + n
        if key is not None:
            seen = self.examples.setdefault(reason, [])
            if key not in seen and len(seen) < 3:
                seen.append(key)

    def add_mapping(self, step: int, data: dict[str, Any], prefix: str = "") -> None:
        for key, value in data.items():
            if key in STEP_KEYS and not prefix:
                continue
            name = f"{prefix}{key}"
            if isinstance(value, bool):
                self.skip("boolean values", key=name)
            elif isinstance(value, int | float):
                self.add(step, name, float(value))
            elif value is None:
                self.add(step, name, math.nan)  # verl's FileLogger writes NaN as null
            elif isinstance(value, dict):
                self.add_mapping(step, value, f"{name}/")
            else:
                self.skip("non-numeric values", key=name)

    def warnings(self, where: object) -> list[str]:
        """One line per kind of value that was not read, with a few of the keys it hit."""
        out = []
        for reason, n in self.skipped.items():
            keys = self.examples.get(reason)
            out.append(
                f"{where}: {n} {reason} ignored"
                + (f" (keys: {', '.join(keys)}{', ...' if n > len(keys) else ''})" if keys else "")
            )
        return out

    def frame(self, info: RunInfo) -> RunFrame:
        return RunFrame.from_arrays(
            info,
            self.tags,
            np.asarray(self.codes, dtype=np.int32),
            np.asarray(self.steps, dtype=np.int64),
            np.asarray(self.values, dtype=np.float64),
            np.asarray(self.walls, dtype=np.float64),
        )
