"""Benchmark: reading a run's whole metric history from MLflow, rlwatch against MlflowClient.

    python bench/bench_mlflow.py                 # 150 keys x 2,000 steps = 300,000 points
    python bench/bench_mlflow.py --steps 500

Starts a real `mlflow server` (sqlite backend, 127.0.0.1, a free port), logs the run with the
real client, then in one run times (a) rlwatch over the server's REST API, (b) the baseline
`MlflowClient.get_metric_history` per key against the same server (both in turn, best of
`--http-repeat`), and (c)/(d) the same two on the sqlite store without a server (after the
server stopped; both in turn, best of `--repeat`); wall and CPU apart. Targets (issue #15):
>= 3x the client over HTTP (one `get-history-bulk-interval` request per key, 8 in flight),
>= 20x on the sqlite store.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=150)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3, help="sqlite store: best of N, both sides")
    ap.add_argument("--http-repeat", type=int, default=2, help="http: best of N, both sides")
    args = ap.parse_args()
    from mlflow import MlflowClient
    from mlflow.entities import Metric

    from rlwatch.sources import mlflow_source

    d = Path(tempfile.mkdtemp(prefix="rlwatch-mlflow-bench-"))
    db = f"sqlite:///{d}/mlflow.db"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--backend-store-uri",
            db,
            "--default-artifact-root",
            str(d / "art"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    uri = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(f"{uri}/health", timeout=1)
                break
            except OSError:
                time.sleep(0.2)
        client = MlflowClient(uri)
        run = client.create_run(client.create_experiment("bench"), run_name="bench")
        rid = run.info.run_id
        keys = [f"actor/metric_{k:03d}" for k in range(args.keys)]
        t0 = time.perf_counter()
        batch: list[Metric] = []
        for step in range(args.steps):
            for j, key in enumerate(keys):
                batch.append(Metric(key, float(j + step % 7), 1_700_000_000_000 + step, step))
                if len(batch) == 1000:
                    client.log_batch(rid, metrics=batch)
                    batch = []
        if batch:
            client.log_batch(rid, metrics=batch)
        print(
            f"logged {args.keys * args.steps:,} points in {time.perf_counter() - t0:.0f} s",
            file=sys.stderr,
        )

        def timed(fn):
            t, c = time.perf_counter(), time.process_time()
            n = fn()
            return time.perf_counter() - t, n, time.process_time() - c

        # over HTTP, both sides in turn too (the first read after logging finds the server's
        # caches cold: it is not always rlwatch's)
        rest_runs: dict[str, list[tuple[float, int, float]]] = {"rl": [], "base": []}
        for _ in range(args.http_repeat):
            rest_runs["rl"].append(timed(lambda: len(mlflow_source.load(rid, uri).data)))
            rest_runs["base"].append(
                timed(lambda: sum(len(client.get_metric_history(rid, k)) for k in keys))
            )
    finally:
        server.terminate()
        server.wait(timeout=30)
    # the sqlite store: both sides in turn, `--repeat` times, best of each (wall and CPU
    # apart); the client's store is created (schema check) before the first timing, as
    # rlwatch's imports are
    local = MlflowClient(db)
    local.get_metric_history(rid, keys[0])
    sql_runs: dict[str, list[tuple[float, int, float]]] = {"rl": [], "base": []}
    for _ in range(args.repeat):
        sql_runs["rl"].append(timed(lambda: len(mlflow_source.load(rid, db).data)))
        sql_runs["base"].append(
            timed(lambda: sum(len(local.get_metric_history(rid, k)) for k in keys))
        )

    def best(runs: list[tuple[float, int, float]]) -> tuple[float, int, float]:
        return min(r[0] for r in runs), runs[0][1], min(r[2] for r in runs)

    rl_sql, base_sql = best(sql_runs["rl"]), best(sql_runs["base"])
    rl_rest, base_rest = best(rest_runs["rl"]), best(rest_runs["base"])
    total = args.keys * args.steps
    print(
        f"run: {args.keys} keys x {args.steps:,} steps = {total:,} points; load average "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; best of {args.http_repeat} (http) and "
        f"{args.repeat} (sqlite) each, wall and cpu apart; http walls rlwatch "
        f"{', '.join(f'{r[0]:.1f}' for r in rest_runs['rl'])} s, client "
        f"{', '.join(f'{r[0]:.1f}' for r in rest_runs['base'])} s"
    )
    print(f"{'method':<66}{'seconds':>9}{'cpu s':>8}{'points':>10}")
    for label, (sec, n, cpu) in [
        ("rlwatch, http server (bulk-interval, 8 at a time)", rl_rest),
        ("MlflowClient.get_metric_history per key, http", base_rest),
        (f"rlwatch, sqlite store (SQL), best of {args.repeat}", rl_sql),
        (f"MlflowClient.get_metric_history per key, sqlite, best of {args.repeat}", base_sql),
    ]:
        print(f"{label:<66}{sec:>9.2f}{cpu:>8.2f}{n:>10,}")
    print(
        f"\nspeed-up over the client, http server: {base_rest[0] / rl_rest[0]:5.1f}x (target >= 3x)"
        " (cpu of this process only: the server's is not counted)"
    )
    print(
        f"speed-up over the client, sqlite store: {base_sql[0] / rl_sql[0]:5.1f}x (target >= 20x);"
        f" cpu {base_sql[2] / rl_sql[2]:5.1f}x"
    )
    shutil.rmtree(d, ignore_errors=True)  # the store and its artifacts: ~77 MB a run


if __name__ == "__main__":
    main()
