"""MLflow runs: whole metric histories, never sampled, with bounded failure.

Tracking URIs: an http(s) server (REST, every key's full history fetched in parallel over
keep-alive connections, paged), a `sqlite:///` store (read directly with SQL, read-only, after
checking MLflow's schema), or a file store (`./mlruns`, `file:///...`, read directly).
Targets: `mlflow:<run_id>`, `mlflow:<experiment>/<run name>`, or a bare 32-hex run id when
MLFLOW_TRACKING_URI is set. Keys that verl sanitised (`@` -> `_at_`) map back to canonical
names through rules/metrics.yaml; params become run facts.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import math
import os
import re
import sqlite3
import threading
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from rlwatch.errors import SourceError, UsageError
from rlwatch.frame import RunFrame, RunInfo
from rlwatch.sources._rows import nonfinite_string

SOURCE = "mlflow"
RUN_ID = re.compile(r"^[0-9a-f]{32}$")
TIMEOUT = 8.0  # seconds per request; MLflow's own client retries for minutes
PAGE = 25_000  # the server's max_results for metric history
BULK = 2_500  # the server's max_results for get-history-bulk-interval (MAX_RESULTS_PER_RUN)
INT32_MAX = 2**31 - 1  # start_step/end_step of get-history-bulk-interval are int32
WORKERS = 8  # concurrent requests; the server answers them on its worker processes


def redact(uri: str) -> str:
    """The URI with any user:password removed, however the password is written (encoded or
    not, with '@ # / ? :' inside)."""
    from rlwatch.errors import redact_secrets

    return redact_secrets(uri)


def tracking_uri(flag: str | None) -> str:
    from rlwatch.errors import register_secret, register_secret_uri

    uri = flag or os.environ.get("MLFLOW_TRACKING_URI")
    register_secret_uri(uri)
    register_secret(os.environ.get("MLFLOW_TRACKING_PASSWORD"))
    register_secret(os.environ.get("MLFLOW_TRACKING_TOKEN"))
    if not uri:
        raise UsageError(
            "no MLflow tracking URI: pass --tracking-uri or set "
            "MLFLOW_TRACKING_URI (http(s)://host:port, sqlite:///path.db, or a "
            "./mlruns folder)"
        )
    return uri


Since = int | dict[str, int] | None  # after this step: one for all keys, or per key


def _since(since: Since, key: str) -> int | None:
    return since.get(key) if isinstance(since, dict) else since


@dataclass
class Run:
    run_id: str
    name: str
    experiment: str
    params: dict[str, str]
    keys: list[str]
    warnings: list[str] = field(default_factory=list)


# -- stores ---------------------------------------------------------------------------------
class _Rest:
    def __init__(self, uri: str):
        from rlwatch.errors import register_secret_uri, split_userinfo

        register_secret_uri(uri)
        self.uri = uri.rstrip("/")
        parts = split_userinfo(self.uri)  # a password may hold '@ # / ? :' unencoded
        userinfo = parts[1] if parts else ""
        bare = f"{parts[0]}{parts[2]}" if parts else self.uri
        p = urllib.parse.urlsplit(bare)
        try:
            port = p.port
        except ValueError:
            raise UsageError(
                f"{redact(uri)}: bad port — a tracking URI is http(s)://host:PORT with a port "
                "from 1 to 65535"
            ) from None
        if p.scheme not in ("http", "https") or not p.hostname:
            raise UsageError(f"{redact(uri)}: not an http(s) tracking URI")
        self.scheme, self.host, self.port = p.scheme, p.hostname, port
        self.base = p.path
        self.headers = {"Accept": "application/json", "Content-Type": "application/json"}
        u, _, pw = userinfo.partition(":")
        user = urllib.parse.unquote(u or os.environ.get("MLFLOW_TRACKING_USERNAME", ""))
        password = urllib.parse.unquote(pw or os.environ.get("MLFLOW_TRACKING_PASSWORD", ""))
        self._conns: list[http.client.HTTPConnection] = []
        self.aborted = False
        if user:
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            self.headers["Authorization"] = f"Basic {token}"
        elif os.environ.get("MLFLOW_TRACKING_TOKEN"):
            self.headers["Authorization"] = f"Bearer {os.environ['MLFLOW_TRACKING_TOKEN']}"
        self._local = threading.local()
        self._has_bulk = True

    def _conn(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            cls = (
                http.client.HTTPSConnection
                if self.scheme == "https"
                else http.client.HTTPConnection
            )
            if self.aborted:
                raise SourceError(f"MLflow server {redact(self.uri)}: read abandoned (deadline)")
            conn = self._local.conn = cls(self.host, self.port, timeout=TIMEOUT)
            self._conns.append(conn)
        return conn

    def abort(self) -> None:
        """Stop every request in flight (the overall deadline passed)."""
        import socket

        self.aborted = True
        for conn in list(self._conns):
            sock = getattr(conn, "sock", None)
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def call(
        self,
        method: str,
        endpoint: str,
        params: dict[str, Any] | None = None,
        body: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        path = f"{self.base}/api/2.0/mlflow/{endpoint}"
        if params:
            path += "?" + urllib.parse.urlencode(params, doseq=True)
        data = json.dumps(body).encode() if body is not None else None
        for attempt in (0, 1):  # one retry, only for a dropped keep-alive connection
            conn = self._conn()
            try:
                conn.request(method, path, body=data, headers=self.headers)
                resp = conn.getresponse()
                payload = resp.read()
                break
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                conn.close()
                self._local.conn = None
                if attempt:
                    raise SourceError(
                        f"MLflow server {redact(self.uri)} closed the connection"
                    ) from None
            except OSError as exc:
                self._local.conn = None
                if self.aborted:
                    raise SourceError(f"MLflow server {redact(self.uri)}: deadline") from None
                raise SourceError(
                    f"MLflow server {redact(self.uri)} unreachable: {exc.strerror or exc}"
                ) from None
            except http.client.HTTPException as exc:  # BadStatusLine, LineTooLong, ...
                self._local.conn = None
                raise SourceError(
                    f"MLflow server {redact(self.uri)} did not answer in HTTP "
                    f"({type(exc).__name__}) — is this an MLflow tracking server?"
                ) from None
        if resp.status in (401, 403):
            raise SourceError(
                f"MLflow server {redact(self.uri)} refused the credentials "
                f"(HTTP {resp.status}); set MLFLOW_TRACKING_USERNAME/PASSWORD "
                "or MLFLOW_TRACKING_TOKEN"
            )
        try:
            doc = json.loads(payload or b"{}")
            if not isinstance(doc, dict):
                raise ValueError("not an object")
        except (ValueError, RecursionError):
            raise SourceError(
                f"MLflow server {redact(self.uri)}: HTTP {resp.status}, not JSON "
                "(is this an MLflow tracking server?)"
            ) from None
        if resp.status >= 400:
            if doc.get("error_code") == "RESOURCE_DOES_NOT_EXIST":
                raise SourceError(f"MLflow server {redact(self.uri)}: {doc.get('message')}")
            raise SourceError(
                f"MLflow server {redact(self.uri)}: HTTP {resp.status} "
                f"{doc.get('error_code', '')} {doc.get('message', '')}".rstrip()
            )
        return doc

    def run(self, ref: str) -> Run:
        if "/" in ref and not RUN_ID.match(ref):
            exp, _, name = ref.partition("/")
            e = self.call("GET", "experiments/get-by-name", {"experiment_name": exp})
            eid = e["experiment"]["experiment_id"]
            found = self.call(
                "POST",
                "runs/search",
                body={
                    "experiment_ids": [eid],
                    "filter": f"attributes.run_name = '{name}'",
                    "max_results": 2,
                },
            )
            ref = _one(
                [r["info"]["run_id"] for r in found.get("runs", [])], exp, name, redact(self.uri)
            )
        r = self.call("GET", "runs/get", {"run_id": ref})["run"]
        exp = self.call("GET", "experiments/get", {"experiment_id": r["info"]["experiment_id"]})[
            "experiment"
        ]["name"]
        data = r.get("data", {})
        out = Run(
            ref,
            r["info"].get("run_name") or ref,
            exp,
            {p["key"]: p["value"] for p in data.get("params", [])},
            sorted({m["key"] for m in data.get("metrics", [])}),
        )
        if r["info"].get("lifecycle_stage") == "deleted":
            out.warnings.append(
                f"MLflow run {ref} is deleted (in the trash of {redact(self.uri)}); read anyway"
            )
        return out

    def history(self, run: Run, since: Since = None) -> list[tuple[str, np.ndarray]]:
        def one(key: str) -> tuple[str, np.ndarray]:
            after = _since(since, key)
            bulk = self._bulk(run, key, after)
            return (key, bulk) if bulk is not None else self._paged(run, key, after)

        with ThreadPoolExecutor(max_workers=WORKERS) as pool:
            return list(pool.map(one, run.keys))

    def _bulk(self, run: Run, key: str, since: int | None) -> np.ndarray | None:
        """One key's whole history in one request (`get-history-bulk-interval`), or None.

        The endpoint samples only when a key has more than `BULK` values in the range, so a
        full page means "maybe sampled": that key is then read page by page instead. Servers
        without the endpoint (MLflow < 2.12) are remembered and read page by page too.
        """
        if not self._has_bulk:
            return None
        params: dict[str, Any] = {"run_ids": run.run_id, "metric_key": key, "max_results": BULK}
        if since is not None:
            if since + 1 > INT32_MAX:
                return None
            params.update(start_step=since + 1, end_step=INT32_MAX)
        try:
            doc = self.call("GET", "metrics/get-history-bulk-interval", params)
        except SourceError as exc:
            if "HTTP 404" in str(exc) or "ENDPOINT_NOT_FOUND" in str(exc):
                self._has_bulk = False
                return None
            raise
        metrics = doc.get("metrics", [])
        if len(metrics) >= BULK:
            return None
        return _columns(
            [
                (int(m.get("step", 0)), _value(m.get("value")), int(m.get("timestamp", 0)) / 1e3)
                for m in metrics
                if since is None or int(m.get("step", 0)) > since
            ]
        )

    def _paged(self, run: Run, key: str, since: int | None) -> tuple[str, np.ndarray]:
        """One key's history through `metrics/get-history`, page by page (every server)."""
        rows: list[tuple[float, float, float]] = []
        token = None
        while True:
            params = {"run_id": run.run_id, "metric_key": key, "max_results": PAGE}
            if token:
                params["page_token"] = token
            doc = self.call("GET", "metrics/get-history", params)
            for m in doc.get("metrics", []):
                step = int(m.get("step", 0))
                if since is None or step > since:
                    rows.append((step, _value(m.get("value")), int(m.get("timestamp", 0)) / 1000.0))
            token = doc.get("next_page_token")
            if not token:
                return key, _columns(rows)


def _columns(rows: list[Any]) -> np.ndarray:
    """(n, 3) float64: step, value, wall time (s). One flat pass (half the time of converting
    the nested rows); a NULL value (the sqlite store's NaN) takes the nested way, None -> NaN."""
    try:
        flat = np.fromiter(chain.from_iterable(rows), np.float64, count=3 * len(rows))
    except (TypeError, ValueError):
        return np.asarray(rows, dtype=np.float64).reshape(-1, 3)
    return flat.reshape(-1, 3)


def _one(ids: list[str], exp: str, name: str, where: str) -> str:
    """The id of the one run with that name, or a one-line error."""
    if not ids:
        raise SourceError(f"no MLflow run named {name!r} in experiment {exp!r} at {where}")
    if len(ids) > 1:
        raise SourceError(
            f"more than one run named {name!r} in experiment {exp!r}; use mlflow:<run_id>"
        )
    return ids[0]


def _value(v: Any) -> float:
    if isinstance(v, str):  # the REST API writes NaN / Infinity as strings
        f = nonfinite_string(v)
        return math.nan if f is None else f
    return math.nan if v is None else float(v)


MMAP = 1 << 30  # bytes of the store SQLite may map (address space, not memory)
# a run's distinct keys, one index seek each (the (run_uuid, key, step) index): `SELECT
# DISTINCT key` walks every row of the run instead (25 ms for 300,000 rows); same keys, in the
# same (binary) order
KEYS = (
    "WITH RECURSIVE k(key) AS (SELECT min(key) FROM metrics WHERE run_uuid = ?1 UNION ALL "
    "SELECT (SELECT min(key) FROM metrics WHERE run_uuid = ?1 AND key > k.key) FROM k "
    "WHERE k.key IS NOT NULL) SELECT key FROM k WHERE key IS NOT NULL"
)


class _Sqlite:
    """Read-only SQL on MLflow's sqlite store (verl's default tracking URI)."""

    NEED: ClassVar[dict[str, set[str]]] = {
        "metrics": {"key", "value", "timestamp", "run_uuid", "step", "is_nan"},
        "runs": {"run_uuid", "name", "experiment_id"},
        "experiments": {"experiment_id", "name"},
        "params": {"key", "value", "run_uuid"},
    }

    def __init__(self, uri: str):
        path = uri[len("sqlite:///") :]
        if not Path(path).is_file():
            raise SourceError(f"{uri}: no such MLflow sqlite store")
        self.uri = uri
        self.db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        # reads through a memory map, not a read() and a copy per page: ~15% of a whole
        # history's CPU (the file only grows while MLflow writes it; SQLite remaps)
        self.db.execute(f"PRAGMA mmap_size = {MMAP}")
        for table, cols in self.NEED.items():
            have = {r[1] for r in self.db.execute(f"PRAGMA table_info({table})")}
            if not cols <= have:
                raise SourceError(
                    f"{uri}: not an MLflow store rlwatch can read (table {table} "
                    f"lacks {', '.join(sorted(cols - have))})"
                )

    def run(self, ref: str) -> Run:
        if "/" in ref and not RUN_ID.match(ref):
            exp, _, name = ref.partition("/")
            rows = self.db.execute(
                "SELECT r.run_uuid FROM runs r JOIN experiments e USING (experiment_id) "
                "WHERE e.name = ? AND r.name = ? AND r.lifecycle_stage != 'deleted'",
                (exp, name),
            ).fetchall()
            ref = _one([r[0] for r in rows], exp, name, self.uri)
        row = self.db.execute(
            "SELECT r.name, e.name FROM runs r JOIN experiments e "
            "USING (experiment_id) WHERE r.run_uuid = ?",
            (ref,),
        ).fetchone()
        if row is None:
            raise SourceError(f"no MLflow run {ref!r} at {self.uri}")
        params = dict(
            self.db.execute("SELECT key, value FROM params WHERE run_uuid = ?", (ref,)).fetchall()
        )
        return Run(ref, row[0] or ref, row[1], params, [])

    def history(self, run: Run, since: Since = None) -> list[tuple[str, np.ndarray]]:
        """Per key, numbers only (no per-row strings): the (run_uuid, key, step) index serves
        each query, in write order (timestamp, step)."""
        keys = [k for (k,) in self.db.execute(KEYS, (run.run_id,))]
        q = (
            "SELECT step, CASE WHEN is_nan THEN NULL ELSE value END, timestamp / 1000.0 "
            "FROM metrics WHERE run_uuid = ? AND key = ? AND step > ?"
            " ORDER BY timestamp, step"
        )
        out = []
        for k in keys:
            after = _since(since, k)
            low = -(2**63) if after is None else int(after)
            out.append((k, _columns(self.db.execute(q, (run.run_id, k, low)).fetchall())))
        return out


class _Files:
    """MLflow's file store: mlruns/<experiment>/<run>/metrics/<key> with 'ts value step' lines."""

    def __init__(self, uri: str):
        root = uri[len("file://") :] if uri.startswith("file://") else uri
        self.root = Path(root)
        if not self.root.is_dir():
            raise SourceError(f"{uri}: no such MLflow file store")
        self.uri = uri

    def _run_dir(self, ref: str) -> Path:
        if "/" in ref and not RUN_ID.match(ref):
            exp, _, name = ref.partition("/")
            for meta in self.root.glob("*/meta.yaml"):
                if _meta(meta).get("name") == exp:
                    for run in meta.parent.glob("*/meta.yaml"):
                        if _meta(run).get("run_name") == name:
                            return run.parent
            raise SourceError(f"no MLflow run named {name!r} in experiment {exp!r} at {self.uri}")
        found = next(iter(self.root.glob(f"*/{ref}")), None)
        if found is None:
            raise SourceError(f"no MLflow run {ref!r} at {self.uri}")
        return found

    def run(self, ref: str) -> Run:
        d = self._run_dir(ref)
        exp = _meta(d.parent / "meta.yaml").get("name", d.parent.name)
        params = {
            str(p.relative_to(d / "params")): p.read_text().strip()
            for p in (d / "params").rglob("*")
            if p.is_file()
        }
        keys = [
            str(p.relative_to(d / "metrics")) for p in (d / "metrics").rglob("*") if p.is_file()
        ]
        return Run(
            d.name, _meta(d / "meta.yaml").get("run_name") or d.name, str(exp), params, sorted(keys)
        )

    def history(self, run: Run, since: Since = None) -> list[tuple[str, np.ndarray]]:
        d = self._run_dir(run.run_id)
        out = []
        for key in run.keys:
            after = _since(since, key)
            rows = []
            bad = 0
            text = (d / "metrics" / key).read_text(errors="replace")
            cut = bool(text) and not text.endswith("\n")  # a line still being written
            if cut:
                text = text[: text.rfind("\n") + 1]
                run.warnings.append(
                    f"{d / 'metrics' / key}: last line incomplete, not read (still being written?)"
                )
            for line in text.splitlines():
                parts = line.split()
                if len(parts) < 2:
                    continue
                try:
                    step = int(parts[2]) if len(parts) > 2 else 0
                    row = (step, float(parts[1]), int(parts[0]) / 1000.0)
                except (ValueError, OverflowError):
                    bad += 1  # a line cut or damaged: counted, the others read
                    continue
                if after is None or step > after:
                    rows.append(row)
            if bad:
                run.warnings.append(
                    f"{d / 'metrics' / key}: {bad} line(s) not `timestamp value step`, not read"
                )
            out.append((key, _columns(rows)))
        return out


def _meta(path: Path) -> dict[str, Any]:
    import yaml

    try:
        return yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return {}


def store(uri: str) -> Any:
    if uri.startswith(("http://", "https://")):
        return _Rest(uri)
    if uri.startswith("sqlite:///"):
        return _Sqlite(uri)
    if uri.startswith("file://") or Path(uri).is_dir():
        return _Files(uri)
    raise UsageError(
        f"{redact(uri)}: unsupported MLflow tracking URI (valid: http(s)://..., "
        "sqlite:///path.db, file:///path/mlruns or a folder)"
    )


def _frame(run: Run, parts: list[tuple[str, np.ndarray]], uri: str) -> RunFrame:
    parts = [(k, a) for k, a in parts if len(a)]
    tags = [k for k, _ in parts]
    codes = np.repeat(np.arange(len(parts), dtype=np.int32), [len(a) for _, a in parts])
    cols = np.concatenate([a for _, a in parts]) if parts else np.empty((0, 3))
    info = RunInfo(
        run.name,
        SOURCE,
        f"{redact(uri)} run {run.run_id}",
        hparams={**run.params, "mlflow/experiment": run.experiment, "mlflow/run_id": run.run_id},
        warnings=list(run.warnings),
    )
    return RunFrame.from_arrays(
        info, tags, codes, cols[:, 0].astype(np.int64), cols[:, 1], cols[:, 2]
    )


DEADLINE = 60.0  # seconds for a whole read (--timeout)


def load(ref: str, uri: str, timeout: float | None = None) -> RunFrame:
    """One MLflow run, by id or experiment/run name, within an overall deadline (a server that
    trickles bytes is abandoned when it passes)."""
    st = store(uri)

    def work() -> RunFrame:
        run = st.run(ref)
        rows = st.history(run)
        if not any(len(a) for _, a in rows):
            raise SourceError(f"MLflow run {run.run_id} at {redact(uri)} has no metrics")
        return _frame(run, rows, uri)

    return _bounded(work, st, uri, DEADLINE if timeout is None else timeout)


def _bounded(work: Any, st: Any, uri: str, deadline: float) -> Any:
    """`work()` in a thread, joined with `deadline`; an answer that is not MLflow's is one line."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = work()
        except (KeyError, TypeError, AttributeError, IndexError, ValueError, OverflowError) as e:
            box["error"] = SourceError(
                f"MLflow server {redact(uri)} answered something that is not an MLflow reply "
                f"({type(e).__name__}: {str(e)[:80]}) — is this an MLflow tracking server?"
            )
        except BaseException as e:
            box["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(deadline)
    if t.is_alive():
        abort = getattr(st, "abort", None)
        if abort is not None:
            abort()
        raise SourceError(
            f"MLflow at {redact(uri)}: no complete answer within {deadline:g} s — raise "
            "--timeout, or check the server"
        )
    if "error" in box:
        raise box["error"]
    return box["value"]


class Follower:
    """Polls one MLflow run: each poll returns, per key, only rows after the last step seen of
    that key (keys are read one request each, while the run is being written: one step for
    all keys would lose what was logged between two keys' reads, or after another call at
    the same step -- TRL logs eval after train at the same step)."""

    def __init__(self, ref: str, uri: str):
        self.uri = uri
        self.store = store(uri)
        self.ref = ref
        self.last: dict[str, int] = {}

    def poll(self) -> RunFrame:
        run = self.store.run(self.ref)
        rows = self.store.history(run, dict(self.last))
        if not any(len(a) for _, a in rows):
            return RunFrame.empty()
        for key, a in rows:
            if len(a):
                self.last[key] = max(self.last.get(key, -(2**62)), int(a[:, 0].max()))
        return _frame(run, rows, self.uri)
