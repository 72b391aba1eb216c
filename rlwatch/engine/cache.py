"""A small on-disk cache of plain data (JSON, never pickle), keyed by the content hash of inputs.

Used for the compiled rule pack (validated rules as plain data) and the YAML tables read on every
start (metrics.yaml). Lives in $XDG_CACHE_HOME/rlwatch (else ~/.cache/rlwatch); RLWATCH_NO_CACHE=1
turns it off. A missing, corrupt or unwritable cache is ignored: the inputs are parsed again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import Any

FORMAT = 1  # bump when the cached shapes change
KEEP = 64  # entries kept per kind (oldest removed)


def directory() -> Path | None:
    if os.environ.get("RLWATCH_NO_CACHE", "") not in ("", "0"):
        return None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rlwatch"


def key(*parts: bytes | str) -> str:
    h = hashlib.sha256(f"rlwatch-cache-{FORMAT}".encode())
    for p in parts:
        b = p.encode("utf-8", "surrogateescape") if isinstance(p, str) else p
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()[:32]


def code_stamp(*modules: str) -> str:
    """Where and when the code that builds a cached value was last changed (cheap: stat only)."""
    import importlib.util

    out = []
    for m in modules:
        spec = importlib.util.find_spec(m)
        origin = spec.origin if spec is not None else None
        try:
            st = os.stat(origin) if origin else None
        except OSError:
            st = None
        out.append(f"{m}:{origin}:{st.st_mtime_ns if st else 0}:{st.st_size if st else 0}")
    return ";".join(out)


def get(kind: str, k: str) -> Any | None:
    d = directory()
    if d is None:
        return None
    try:
        with open(d / f"{kind}-{k}.json", encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("key") != k:
        return None
    return doc.get("data")


def put(kind: str, k: str, data: Any) -> None:
    d = directory()
    if d is None:
        return
    try:
        text = json.dumps({"format": FORMAT, "key": k, "data": data}, allow_nan=False)
    except (TypeError, ValueError):
        return  # not plain JSON data: not cached
    with contextlib.suppress(OSError):
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / f".{kind}-{k}.{os.getpid()}.tmp"
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, d / f"{kind}-{k}.json")
        _prune(d, kind)


def _prune(d: Path, kind: str) -> None:
    entries = sorted(d.glob(f"{kind}-*.json"), key=lambda p: p.stat().st_mtime)
    for old in entries[:-KEEP]:
        with contextlib.suppress(OSError):
            old.unlink()


def yaml_data(path: str | Path) -> Any:
    """The plain data of a YAML file, from the cache when its bytes were seen before.

    Raises OSError when the file cannot be read, yaml.YAMLError when it is not YAML.
    """
    raw = Path(path).read_bytes()
    k = key(raw)
    hit = get("yaml", k)
    if hit is not None:
        return hit
    import yaml

    from rlwatch.engine.yamlpos import loader

    data = yaml.load(raw.decode("utf-8"), Loader=loader())
    with contextlib.suppress(TypeError, ValueError):
        if json.loads(json.dumps(data, allow_nan=False)) == data:  # plain JSON data only
            put("yaml", k, data)
    return data
