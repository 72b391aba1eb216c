"""rlwatch: run monitor and health diagnoser for RL post-training of language models.

>>> import rlwatch
>>> report = rlwatch.diagnose(["runs/grpo"])           # doctest: +SKIP
>>> frame = rlwatch.load_run(["runs/grpo"])            # doctest: +SKIP
"""

from typing import Any

__version__ = "0.1.0"
__all__ = ["Report", "RunFrame", "__version__", "diagnose", "load_rules", "load_run"]


def __getattr__(name: str) -> Any:  # the API is imported lazily: `rlwatch --help` stays instant
    if name in {"Report", "RunFrame", "diagnose", "load_rules", "load_run"}:
        from rlwatch import api

        return getattr(api, name)
    raise AttributeError(f"module 'rlwatch' has no attribute {name!r}")
