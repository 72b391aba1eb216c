"""W&B runs on a W&B server, through the public API's full history scan (never the sampled
`history()`): `wandb:<entity>/<project>/<run_id>` or a run URL
(`https://wandb.ai/<entity>/<project>/runs/<run_id>`). WANDB_BASE_URL and WANDB_API_KEY are
honoured as by wandb itself. Failures are one line, and bounded in time.
"""

from __future__ import annotations

import math
import os
import re
import threading
from typing import Any

from rlwatch.errors import SourceError, UsageError
from rlwatch.frame import RunFrame, RunInfo
from rlwatch.sources._rows import Rows, nonfinite_string

SOURCE = "wandb"
URL = re.compile(r"^https?://[^/]+/(?P<entity>[^/]+)/(?P<project>[^/]+)/runs/(?P<run>[^/?#]+)")
DEADLINE = 120.0  # seconds for the whole fetch; the client retries rate limits on its own


def parse(target: str) -> str | None:
    """entity/project/run_id from a wandb: target or a run URL; None if it is neither."""
    if target.startswith("wandb:"):
        path = target[len("wandb:") :].strip("/")
        if len(path.split("/")) != 3 or not all(path.split("/")):
            raise UsageError(f"{target}: expected wandb:<entity>/<project>/<run_id>")
        return path
    m = URL.match(target)
    if m:
        return f"{m['entity']}/{m['project']}/{m['run']}"
    return None


def _probe(base: str, timeout: float = 5.0) -> None:
    """Fail fast and clearly when the W&B server cannot be reached at all, or no key is set."""
    import socket
    import urllib.parse

    from rlwatch.errors import register_secret, register_secret_uri

    register_secret_uri(base)
    register_secret(os.environ.get("WANDB_API_KEY"))
    p = urllib.parse.urlsplit(base)
    try:
        port = p.port or (443 if p.scheme == "https" else 80)
    except ValueError:
        raise UsageError(f"WANDB_BASE_URL {base}: bad port (1-65535)") from None
    if not p.hostname:
        raise UsageError(f"WANDB_BASE_URL {base}: not an http(s) URL")
    try:
        socket.create_connection((p.hostname, port), timeout=timeout).close()
    except OSError as exc:
        raise SourceError(
            f"W&B at {base} unreachable ({exc.strerror or type(exc).__name__}) — check "
            "WANDB_BASE_URL and the network"
        ) from None
    if not os.environ.get("WANDB_API_KEY") and not os.path.exists(os.path.expanduser("~/.netrc")):
        raise SourceError(f"W&B at {base}: no API key — set WANDB_API_KEY (or run `wandb login`)")


def _fetch(path: str) -> tuple[Any, list[dict[str, Any]]]:
    os.environ.setdefault("WANDB_SILENT", "true")
    import wandb
    from wandb import errors

    base = os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")
    _probe(base)  # unreachable is said at once, not after the client's retries
    try:
        api = wandb.Api(timeout=15)
        run = api.run(path)
        rows = list(run.scan_history(page_size=10_000))
    except errors.AuthenticationError:
        raise SourceError(
            f"W&B at {base} refused the credentials (bad API key); set WANDB_API_KEY (or run "
            "`wandb login`)"
        ) from None
    except (errors.CommError, errors.Error, ValueError) as exc:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SourceError(f"W&B run {path} at {base}: {message}") from None
    return run, rows


def load(path: str, timeout: float | None = None) -> RunFrame:
    """Every history row of one W&B run, read with a deadline."""
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["result"] = _fetch(path)
        except BaseException as exc:
            box["error"] = exc

    t = threading.Thread(target=work, daemon=True)
    t.start()
    deadline = DEADLINE if timeout is None else timeout
    t.join(deadline)
    if t.is_alive():
        raise SourceError(
            f"W&B run {path}: no answer within {deadline:g} s (--timeout; rate-limited or "
            "unreachable?)"
        )
    if "error" in box:
        raise box["error"]
    run, rows = box["result"]
    out = Rows()
    for row in rows:
        step = row.get("_step")
        if not isinstance(step, int | float):
            out.skip("history rows without _step", len(row))
            continue
        wall = row.get("_timestamp")
        for key, value in row.items():
            if key.startswith("_") or value is None:
                continue
            if isinstance(value, str):
                value = nonfinite_string(value)
            if isinstance(value, bool) or not isinstance(value, int | float):
                out.skip("non-numeric history values (media, tables, strings)", key=key)
                continue
            out.add(
                int(step),
                key,
                float(value),
                float(wall) if isinstance(wall, int | float) else math.nan,
            )
    config = {
        k: (v.get("value") if isinstance(v, dict) and "value" in v else v)
        for k, v in dict(run.config).items()
        if not k.startswith("_")
    }
    info = RunInfo(
        run.name or path.split("/")[-1],
        SOURCE,
        f"wandb:{path}",
        hparams={
            k: v if isinstance(v, int | float | str | bool) else str(v) for k, v in config.items()
        },
    )
    info.warnings = out.warnings(f"wandb:{path}")
    if not out.steps:
        raise SourceError(f"W&B run {path} has no numeric history")
    return out.frame(info)
