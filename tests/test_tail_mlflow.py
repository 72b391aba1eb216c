"""`tail` following an MLflow run on a real `mlflow server` while the real client logs to it:
what tail saw (rows, verdicts with their steps) is what `diagnose` reads from the final run."""

from __future__ import annotations

import json
import random
import threading
import time

import pytest
from typer.testing import CliRunner

from rlwatch.cli.app import app
from rlwatch.engine.rules import load_rules
from rlwatch.live import Watch
from rlwatch.sources import load

pytest.importorskip("mlflow", reason="the mlflow extra is part of rlwatch[test]")


def _write(uri: str, run_id: str, steps: int, done: threading.Event) -> None:
    """verl-shaped training metrics one batch per step; validation every 5 steps in a call of
    its own (as TRL's callback logs eval after train at the same step); bursts of 1-6 steps."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric

    client = MlflowClient(uri)
    rng = random.Random(0)
    s = 0
    try:
        while s < steps:
            for _ in range(rng.randint(1, 6)):
                if s >= steps:
                    break
                t = int(time.time() * 1000)
                entropy = 0.5 if s < 40 else 0.5 * 0.85 ** (s - 39)
                grad = float("nan") if 55 <= s <= 57 else 0.3 + 0.01 * (s % 3)
                train = [
                    Metric("actor/entropy", entropy, t, s),
                    Metric("actor/grad_norm", grad, t, s),
                    Metric("critic/score/mean", 0.2 + s / 300, t, s),
                    Metric("actor/pg_loss", 0.01, t, s),
                ]
                client.log_batch(run_id, metrics=train)
                if s % 5 == 4:
                    time.sleep(rng.choice([0, 0.05]))  # a poll may fall between the two calls
                    val = [Metric("val-core/openai/gsm8k/acc/mean_at_1", 0.3 + s / 400, t, s)]
                    client.log_batch(run_id, metrics=val)
                s += 1
            time.sleep(rng.uniform(0.05, 0.3))
        client.set_terminated(run_id)
    finally:
        done.set()


def _episodes(verdicts: list[dict]) -> list[tuple[str, int, int]]:
    return sorted(
        (v["code"], e["first_step"], e["last_step"]) for v in verdicts for e in v["episodes"]
    )


def test_tail_follows_an_mlflow_run_as_diagnose_reads_it(mlflow_server: str) -> None:
    from mlflow import MlflowClient

    client = MlflowClient(mlflow_server)
    exp = client.create_experiment(f"tail-live-{time.time_ns()}")
    run_id = client.create_run(exp, run_name="live").info.run_id
    target = f"mlflow:{run_id}"
    watch = Watch(
        [target], load_rules(), tracking_uri=mlflow_server, keep_rows=True, stall_floor=1e9
    )
    done = threading.Event()
    writer = threading.Thread(target=_write, args=(mlflow_server, run_id, 90, done))
    writer.start()
    events = []
    polls = 0
    try:
        while not done.is_set():
            events += watch.poll()
            polls += 1
            time.sleep(0.1)
    finally:
        writer.join()
    events += watch.poll()
    assert polls > 5  # followed while it was written, not read once at the end

    final = load([target], tracking_uri=mlflow_server)
    key = ["metric", "step", "value"]

    def rows(d):
        d = d[key].astype({"metric": str}).fillna(-1.0)
        return sorted(map(tuple, d.itertuples(index=False)))

    assert len(final.data) == 90 * 4 + 90 // 5
    assert rows(watch.rows()) == rows(final.data)  # nothing lost, nothing twice

    r = CliRunner().invoke(
        app,
        ["diagnose", target, "--tracking-uri", mlflow_server, "--format", "json", "--exit-zero"],
    )
    assert r.exit_code == 0, r.output
    diagnose = _episodes(json.loads(r.stdout)["verdicts"])
    tail = _episodes([v.to_dict() for v in watch.verdicts()])
    assert tail == diagnose
    assert ("ST03", 55, 57) in tail  # the NaN burst, with its steps
    fired = [e for e in events if e.kind == "fired" and e.verdict.code == "ST03"]
    assert fired and ("steps 55-57" in fired[0].message or "since step 55" in fired[0].message)
