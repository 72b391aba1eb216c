"""Many-run targets: list every run of an MLflow experiment, a W&B project or a trackio project,
filter them (`--filter`), and hand back one unit per run for the executor.

Filters (repeatable, all must hold): `status=finished` (MLflow's FINISHED/FAILED/RUNNING/KILLED,
W&B's finished/crashed/failed/running; case-insensitive), `tag=<name>` (a W&B tag, or an MLflow
tag key that is set), `tags.<key>=<value>` (an MLflow tag), `params.<key>=<value>` (an MLflow
param, a W&B or trackio config key; values compare as text, numbers as numbers). `!=` negates.
Listing pages through the service (MLflow `runs/search` 1,000 runs a page, W&B GraphQL `Runs`
1,000 a page); filters are applied to the listed runs, so the cost of listing is one request per
page whatever the filter.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlwatch.errors import SourceError, UsageError

_FILTER = re.compile(r"^(?P<key>status|tag|tags\.[^=!]+|params\.[^=!]+)(?P<op>!=|=)(?P<value>.*)$")
PAGE = 1000


@dataclass(frozen=True)
class Filter:
    key: str
    value: str
    negate: bool = False


@dataclass
class Listed:
    """A run as a listing returns it."""

    run_id: str
    name: str
    status: str
    tags: dict[str, str]
    params: dict[str, Any]


def parse_filters(items: list[str]) -> list[Filter]:
    out = []
    for item in items:
        m = _FILTER.match(item.strip())
        if not m:
            raise UsageError(
                f"--filter {item!r}: expected status=..., tag=..., tags.<key>=... or "
                "params.<key>=... (!= to negate)"
            )
        out.append(Filter(m["key"], m["value"], m["op"] == "!="))
    return out


def _same(have: Any, want: str) -> bool:
    if have is None:
        return False
    if str(have) == want:
        return True
    try:
        return float(have) == float(want)
    except (TypeError, ValueError):
        return str(have).lower() == want.lower()


def keep(run: Listed, filters: list[Filter]) -> bool:
    for f in filters:
        if f.key == "status":
            ok = run.status.lower() == f.value.lower()
        elif f.key == "tag":
            ok = f.value in run.tags
        elif f.key.startswith("tags."):
            ok = _same(run.tags.get(f.key[5:]), f.value)
        else:
            ok = _same(run.params.get(f.key[7:]), f.value)
        if ok == f.negate:
            return False
    return True


def _unique(runs: list[Listed]) -> dict[str, Listed]:
    """Name -> run; a name used twice gets the run id's head."""
    count: dict[str, int] = {}
    for r in runs:
        count[r.name] = count.get(r.name, 0) + 1
    return {(r.name if count[r.name] == 1 else f"{r.name}-{r.run_id[:8]}"): r for r in runs}


def many_run(
    target: str, tracking_uri: str | None, filters: list[Filter], timeout: float | None = None
) -> list[Any] | None:
    """Units for a many-run target, or None when `target` names one run (or is a path)."""
    from rlwatch.executor import Unit

    if target.startswith("mlflow:"):
        ref = target[len("mlflow:") :].strip("/")
        from rlwatch.sources import mlflow_source

        if not ref or "/" in ref or mlflow_source.RUN_ID.match(ref):
            return None
        uri = mlflow_source.tracking_uri(tracking_uri)
        runs = [r for r in mlflow_runs(ref, uri) if keep(r, filters)]
        if not runs:
            raise SourceError(
                f"MLflow experiment {ref!r} at {mlflow_source.redact(uri)} has no run"
                + (" matching the filters" if filters else "")
            )
        return [
            Unit(name, "mlflow", (r.run_id, uri, timeout), f"mlflow:{r.run_id}")
            for name, r in _unique(runs).items()
        ]
    if target.startswith("wandb:"):
        parts = [p for p in target[len("wandb:") :].strip("/").split("/") if p]
        if len(parts) != 2:
            return None
        path = "/".join(parts)
        runs = [r for r in wandb_runs(path) if keep(r, filters)]
        if not runs:
            raise SourceError(
                f"W&B project {path} has no run" + (" matching the filters" if filters else "")
            )
        return [
            Unit(name, "wandb", (f"{path}/{r.run_id}", timeout), f"wandb:{path}/{r.run_id}")
            for name, r in _unique(runs).items()
        ]
    from rlwatch.sources import trackio

    tr = trackio.parse(target)
    if tr is None and Path(target).is_file() and trackio.is_store(Path(target)):
        tr = (Path(target), None)
    if tr is not None and tr[1] is None:
        db = tr[0]
        names = trackio.list_runs(db)
        listed = [
            Listed(k, n, "", {}, cfg)
            for (k, n), cfg in zip(names, _trackio_configs(db, names), strict=True)
        ]
        runs = [r for r in listed if keep(r, filters)]
        if len(runs) < 2 and not filters:
            return None
        return [
            Unit(name, "trackio", (str(db), r.run_id), f"{db} run {r.name}")
            for name, r in _unique(runs).items()
        ]
    return None


def _trackio_configs(db: Path, runs: list[tuple[str, str]]) -> list[dict[str, Any]]:
    import sqlite3

    from rlwatch.sources import trackio

    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        cols = {r[1] for r in con.execute("PRAGMA table_info(metrics)")}
        key = "run_id" if "run_id" in cols else "run_name"
        cfg = trackio._configs(con, key)
    finally:
        con.close()
    return [cfg.get(k, {}) for k, _ in runs]


# -- MLflow -------------------------------------------------------------------------------------
def mlflow_runs(experiment: str, uri: str) -> list[Listed]:
    """Every active run of an experiment, in creation order."""
    from rlwatch.sources import mlflow_source as ms

    st = ms.store(uri)
    if isinstance(st, ms._Rest):
        e = st.call("GET", "experiments/get-by-name", {"experiment_name": experiment})
        eid = e["experiment"]["experiment_id"]
        out: list[Listed] = []
        token = None
        while True:
            body: dict[str, Any] = {
                "experiment_ids": [eid],
                "max_results": PAGE,
                "run_view_type": "ACTIVE_ONLY",
                "order_by": ["attributes.start_time ASC"],
            }
            if token:
                body["page_token"] = token
            doc = st.call("POST", "runs/search", body=body)
            for r in doc.get("runs", []):
                info, data = r["info"], r.get("data", {})
                tags = {t["key"]: t["value"] for t in data.get("tags", [])}
                out.append(
                    Listed(
                        info["run_id"],
                        info.get("run_name") or tags.get("mlflow.runName") or info["run_id"],
                        info.get("status", ""),
                        tags,
                        {p["key"]: p["value"] for p in data.get("params", [])},
                    )
                )
            token = doc.get("next_page_token")
            if not token:
                return out
    if isinstance(st, ms._Sqlite):
        db = st.db
        row = db.execute(
            "SELECT experiment_id FROM experiments WHERE name = ? AND lifecycle_stage != 'deleted'",
            (experiment,),
        ).fetchone()
        if row is None:
            raise SourceError(f"no MLflow experiment {experiment!r} at {uri}")
        runs = db.execute(
            "SELECT run_uuid, name, status FROM runs WHERE experiment_id = ? "
            "AND lifecycle_stage != 'deleted' ORDER BY start_time, run_uuid",
            (row[0],),
        ).fetchall()
        tags: dict[str, dict[str, str]] = {}
        params: dict[str, dict[str, str]] = {}
        q = (
            "SELECT t.run_uuid, t.key, t.value FROM {} t JOIN runs r USING (run_uuid) "
            "WHERE r.experiment_id = ?"
        )
        for rid, k, v in db.execute(q.format("tags"), (row[0],)):
            tags.setdefault(rid, {})[k] = v
        for rid, k, v in db.execute(q.format("params"), (row[0],)):
            params.setdefault(rid, {})[k] = v
        return [
            Listed(rid, name or rid, status or "", tags.get(rid, {}), params.get(rid, {}))
            for rid, name, status in runs
        ]
    root: Path = st.root  # file store
    for meta in sorted(root.glob("*/meta.yaml")):
        m = ms._meta(meta)
        if m.get("name") == experiment and m.get("lifecycle_stage", "active") != "deleted":
            out = []
            for rm in sorted(meta.parent.glob("*/meta.yaml")):
                d, r = rm.parent, ms._meta(rm)
                if r.get("lifecycle_stage", "active") == "deleted":
                    continue
                status = {1: "RUNNING", 2: "SCHEDULED", 3: "FINISHED", 4: "FAILED", 5: "KILLED"}
                out.append(
                    Listed(
                        d.name,
                        r.get("run_name") or d.name,
                        status.get(r.get("status"), str(r.get("status", ""))),
                        _files(d / "tags"),
                        _files(d / "params"),
                    )
                )
            return out
    raise SourceError(f"no MLflow experiment {experiment!r} at {uri}")


def _files(d: Path) -> dict[str, str]:
    if not d.is_dir():
        return {}
    return {str(p.relative_to(d)): p.read_text().strip() for p in d.rglob("*") if p.is_file()}


# -- W&B ----------------------------------------------------------------------------------------
def wandb_runs(path: str) -> list[Listed]:
    """Every run of a W&B project (paged GraphQL `Runs`, 1,000 a page), oldest first."""
    os.environ.setdefault("WANDB_SILENT", "true")
    import wandb
    from wandb import errors

    base = os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")
    try:
        api = wandb.Api(timeout=30)
        out = []
        for r in api.runs(path, per_page=PAGE, lazy=False):
            config = {
                k: (v.get("value") if isinstance(v, dict) and "value" in v else v)
                for k, v in dict(r.config).items()
                if not k.startswith("_")
            }
            out.append(
                Listed(r.id, r.name or r.id, str(r.state or ""), {t: "" for t in r.tags}, config)
            )
        return out
    except errors.AuthenticationError:
        raise SourceError(
            f"W&B at {base} refused the credentials; set WANDB_API_KEY (or run `wandb login`)"
        ) from None
    except (errors.CommError, errors.Error, ValueError) as exc:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SourceError(f"W&B project {path} at {base}: {message}") from None
