"""A local stand-in for the W&B service, for tests only.

No W&B server can run here, so this answers, on 127.0.0.1, the requests the real wandb client
(0.31) sends for `wandb.Api().run(path).scan_history()`: the GraphQL queries Viewer,
GetDefaultEntity, Run, RunHistoryKeys and RunParquetHistory, then a GET of the parquet file
the service would point at, with responses shaped like the real service's. It also answers the
project run listing `wandb.Api().runs("entity/project", per_page=N)` sends: the GraphQL query
`Runs` (variables project, entity, cursor, perPage, order, filters), paged as the service pages
it: `project { internalId runCount readOnly runs(first, after) { edges { node, cursor }
pageInfo { endCursor hasNextPage } } }`, cursors opaque, runs oldest first; each run may carry
"state" and "tags" (defaults "finished", []). `filters` are not interpreted (rlwatch filters
client-side).
"""

from __future__ import annotations

import base64
import io
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeWandb:
    def __init__(self, runs: dict[str, dict[str, Any]], api_key: str = "k" * 40):
        self.runs = runs  # "entity/project/run_id" -> {"name", "config", "rows": [dict, ...]}
        self.api_key = api_key
        self.requests: list[str] = []
        self.status: int | None = None  # force every response to this HTTP status
        self.pages = 0  # Runs listing pages served
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # the parquet history file
                outer.requests.append(f"GET {self.path}")
                path = self.path.strip("/").removesuffix(".parquet").replace("__", "/")
                run = outer.runs.get(path)
                if run is None:
                    return self._send(404, b"")
                import pyarrow as pa
                import pyarrow.parquet as pq

                keys = sorted({k for r in run["rows"] for k in r})
                table = pa.table({k: [r.get(k) for r in run["rows"]] for k in keys})
                buf = io.BytesIO()
                pq.write_table(table, buf)
                self._send(200, buf.getvalue(), "application/octet-stream")

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if not self.path.startswith("/graphql"):  # the client's telemetry
                    return self._send(200, b"{}")  # (`/sdk/otel/v1/metrics`, an empty body)
                body = json.loads(raw)
                query = body.get("query", "")
                outer.requests.append(query.split("(")[0].split("{")[0].strip()[:60])
                if outer.status:
                    return self._send(outer.status, b'{"errors": [{"message": "forced"}]}')
                import base64

                auth = self.headers.get("Authorization", "")
                user = base64.b64decode(auth.split()[-1]).decode() if auth else ""
                if not user.endswith(outer.api_key):
                    return self._send(401, b'{"errors": [{"message": "invalid api key"}]}')
                self._send(
                    200,
                    json.dumps(
                        {
                            "data": outer.answer(
                                query, body.get("variables") or {}, self.server.server_address[1]
                            )
                        }
                    ).encode(),
                )

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def answer(self, query: str, v: dict[str, Any], port: int) -> dict[str, Any]:
        if "viewer" in query:
            return {
                "viewer": {
                    "id": "VXNlcjox",
                    "entity": "team",
                    "username": "tester",
                    "email": "t@example.com",
                    "flags": "{}",
                    "admin": False,
                    "teams": {"edges": []},
                }
            }
        if "query Runs(" in query:
            return self._runs_page(v)
        name = v.get("name") or v.get("runName")
        path = f"{v.get('entity')}/{v.get('project')}/{name}"
        run = self.runs.get(path)
        if run is None:
            return {"project": {"run": None}}
        rows = run["rows"]
        if "parquetHistory" in query:
            url = f"http://127.0.0.1:{port}/{path.replace('/', '__')}.parquet"
            return {"project": {"run": {"parquetHistory": {"parquetUrls": [url], "liveData": []}}}}
        if "historyKeys" in query and "RunFragment" not in query:
            keys = {
                k: {"typeCounts": [{"type": "number", "count": len(rows)}]} for r in rows for k in r
            }
            return {
                "project": {
                    "run": {
                        "historyKeys": {"lastStep": max(r["_step"] for r in rows), "keys": keys}
                    }
                }
            }
        return {"project": {"run": self._node(name, run)}}

    def _node(self, run_id: str, run: dict[str, Any]) -> dict[str, Any]:
        rows = run["rows"]
        return {
            "projectId": 1,
            "id": base64.b64encode(f"Run:v1:{run_id}".encode()).decode(),
            "tags": list(run.get("tags", [])),
            "name": run_id,
            "displayName": run.get("name", run_id),
            "sweepName": None,
            "state": run.get("state", "finished"),
            "config": json.dumps({k: {"value": x} for k, x in run.get("config", {}).items()}),
            "group": None,
            "jobType": None,
            "commit": None,
            "readOnly": False,
            "createdAt": "2026-11-01T00:00:00",
            "heartbeatAt": "2026-11-01T01:00:00",
            "description": None,
            "notes": None,
            "systemMetrics": "{}",
            "summaryMetrics": "{}",
            "historyLineCount": len(rows),
            "user": {"name": "tester", "username": "tester"},
            "historyKeys": None,
        }

    def _runs_page(self, v: dict[str, Any]) -> dict[str, Any]:
        prefix = f"{v.get('entity')}/{v.get('project')}/"
        mine = [(p[len(prefix) :], r) for p, r in self.runs.items() if p.startswith(prefix)]
        if not mine:
            return {"project": None}
        start = int(base64.b64decode(v["cursor"]).decode()) if v.get("cursor") else 0
        page = mine[start : start + int(v.get("perPage") or 50)]
        self.pages += 1
        end = start + len(page)
        return {
            "project": {
                "internalId": "UHJvamVjdDox",
                "runCount": len(mine),
                "readOnly": False,
                "runs": {
                    "edges": [
                        {
                            "node": self._node(rid, run),
                            "cursor": base64.b64encode(str(start + i + 1).encode()).decode(),
                        }
                        for i, (rid, run) in enumerate(page)
                    ],
                    "pageInfo": {
                        "endCursor": base64.b64encode(str(end).encode()).decode(),
                        "hasNextPage": end < len(mine),
                    },
                },
            }
        }
