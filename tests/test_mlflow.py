"""MLflow: a real `mlflow server` (sqlite backend, 127.0.0.1, a free port) started by the test
suite, runs logged with the real client, read back by id and by name; the sqlite store read
directly; bounded failure for unreachable servers and wrong ids."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from conftest import free_port
from typer.testing import CliRunner

from rlwatch.cli.app import app
from rlwatch.sources import load, mlflow_source

mlflow = pytest.importorskip("mlflow", reason="the mlflow extra is part of rlwatch[test]")
runner = CliRunner()


def log_run(uri: str, experiment: str, name: str, steps: int = 60, *, broken: bool = False) -> str:
    """Log a verl-shaped run with the real MLflow client (keys sanitised as verl does)."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric, Param

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment)
    eid = exp.experiment_id if exp else client.create_experiment(experiment)
    run = client.create_run(eid, run_name=name)
    t = int(time.time() * 1000)
    metrics = []
    for s in range(steps):
        entropy = 0.4 if not broken or s < 30 else 0.01
        metrics += [
            Metric("actor/entropy", entropy, t + s, s),
            Metric("actor/grad_norm", float("nan") if broken and s == steps - 1 else 0.3, t + s, s),
            Metric("critic/score/mean", 0.2 + s / 200, t + s, s),
            Metric("response_length/clip_ratio", 0.5 if broken and s >= 30 else 0.01, t + s, s),
            Metric("val-core/openai/gsm8k/acc/mean_at_1", 0.3 + s / 300, t + s, s),
        ]
    for i in range(0, len(metrics), 900):
        client.log_batch(
            run.info.run_id,
            metrics=metrics[i : i + 900],
            params=[Param("actor_rollout_ref/actor/optim/lr", "1e-06")] if i == 0 else [],
        )
    client.set_terminated(run.info.run_id)
    return run.info.run_id


@pytest.fixture
def server(mlflow_server: str) -> str:
    """The suite's real `mlflow server` (conftest.py: one for the whole session)."""
    return mlflow_server


def test_a_run_on_a_server_by_id_and_by_name(server: str) -> None:
    rid = log_run(server, "grpo-nightly", "healthy")
    by_id = load([f"mlflow:{rid}"], tracking_uri=server)
    (info,) = by_id.runs.values()
    assert info.name == "healthy" and info.framework == "verl"
    assert info.metrics["val_score"] == "val-core/openai/gsm8k/acc/mean_at_1"  # '@' -> '_at_'
    assert info.hparams["actor_rollout_ref/actor/optim/lr"] == "1e-06"
    assert len(by_id.data) == 60 * 5  # whole histories, never sampled
    by_name = load(["mlflow:grpo-nightly/healthy"], tracking_uri=server)
    assert by_name.data["value"].sum() == pytest.approx(by_id.data["value"].sum())


def test_diagnose_gates_on_an_mlflow_run(server: str) -> None:
    bad = log_run(server, "grpo-nightly", "broken", broken=True)
    good = log_run(server, "grpo-nightly", "fine")
    r = runner.invoke(app, ["diagnose", f"mlflow:{bad}", "--tracking-uri", server])
    assert r.exit_code == 1 and "ST03 stability.grad_norm_nonfinite" in r.output
    env = {"MLFLOW_TRACKING_URI": server}
    r = runner.invoke(app, ["diagnose", good], env=env)  # a bare run id
    assert r.exit_code == 0, r.output


def test_a_long_history_is_paged_completely(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    rid = log_run(server, "paging", "long", steps=130)
    monkeypatch.setattr(mlflow_source, "BULK", 50)  # a full bulk answer may be sampled ...
    monkeypatch.setattr(mlflow_source, "PAGE", 50)  # ... so the key is read in several pages
    frame = load([f"mlflow:{rid}"], tracking_uri=server)
    assert len(frame.data) == 130 * 5
    assert frame.steps("long") == (130, 0, 129)


@pytest.mark.parametrize(
    ("target", "message"),
    [
        (
            "mlflow:0123456789abcdef0123456789abcdef",
            "id=0123456789abcdef0123456789abcdef not found",
        ),
        ("mlflow:no-such-exp/run", "no-such-exp"),
    ],
)
def test_wrong_runs_are_one_line_errors(server: str, target: str, message: str) -> None:
    r = runner.invoke(app, ["diagnose", target, "--tracking-uri", server])
    assert r.exit_code == 2 and message in r.output and "Traceback" not in r.output


def test_an_unreachable_server_fails_fast_with_the_uri_redacted() -> None:
    """The behaviour (exit 2, "unreachable", the password never shown) and a bound with slack:
    connection refused is answered at once, so even a loaded machine stays far below the
    client's own minutes of retries; timed in-process (no interpreter start-up in the bound)."""
    uri = f"http://alice:s3cret@127.0.0.1:{free_port()}"
    t0 = time.perf_counter()
    r = runner.invoke(app, ["diagnose", "mlflow:exp/run", "--tracking-uri", uri])
    elapsed = time.perf_counter() - t0
    assert r.exit_code == 2
    assert "unreachable" in r.output and "s3cret" not in r.output and "***@127.0.0.1" in r.output
    assert elapsed < 30, f"took {elapsed:.1f} s"


def test_no_tracking_uri_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    r = runner.invoke(app, ["diagnose", "mlflow:abc"])
    assert r.exit_code == 2 and "no MLflow tracking URI" in r.output


def test_a_local_sqlite_store_without_a_server(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path}/mlruns.db"
    rid = log_run(uri, "local", "sq", broken=True)
    frame = load(["mlflow:local/sq"], tracking_uri=uri)
    (info,) = frame.runs.values()
    assert len(frame.data) == 60 * 5 and frame.data["value"].isna().sum() == 1
    follower = mlflow_source.Follower(rid, uri)
    assert len(follower.poll().data) == 60 * 5
    assert len(follower.poll().data) == 0
    from mlflow import MlflowClient

    MlflowClient(uri).log_metric(rid, "actor/entropy", 0.2, step=60)
    delta = follower.poll().data
    assert delta["step"].tolist() == [60]
    assert info.address.startswith("sqlite:///")


def test_an_mlruns_folder_is_read_as_a_folder_of_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A repository commits the client's file store (`mlruns/<experiment>/<run id>/metrics/..`):
    a folder target finds each run in it, names it by its run name and gates on it, with no
    `mlflow:` reference and no tracking URI; a damaged line of a metric file is counted in a
    warning, the others read."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # the client keeps writing it
    store = tmp_path / "repo" / "mlruns"
    uri = store.as_uri()
    good = log_run(uri, "grpo", "healthy")
    bad = log_run(uri, "grpo", "collapse", broken=True)
    r = runner.invoke(app, ["diagnose", str(tmp_path / "repo"), "--format", "json"])
    assert r.exit_code == 1, r.output
    report = json.loads(r.stdout)
    failing = {v["run"] for v in report["verdicts"] if v.get("failing")}
    assert failing == {"collapse"}
    assert {v["run"] for v in report["verdicts"]} == {"healthy", "collapse"}
    run_dir = next(store.glob(f"*/{good}"))
    r = runner.invoke(app, ["diagnose", str(run_dir)])
    assert r.exit_code == 0, r.output
    with open(run_dir / "metrics" / "critic" / "score" / "mean", "a") as fh:
        fh.write("17000000000 0.5\x00garbage 61\n")
    frame = load(str(run_dir))
    (info,) = frame.runs.values()
    assert info.name == "healthy" and info.source == "mlflow"
    assert any("1 line(s) not `timestamp value step`" in w for w in info.warnings)
    assert len(frame.data) == 60 * 5
    assert bad != good
    # a metric file still being written ends inside a line (`timestamp value` and no step yet):
    # not read as step 0, said in a warning
    with open(run_dir / "metrics" / "actor" / "entropy", "a") as fh:
        fh.write("17000000000 0.9")
    frame = load(str(run_dir))
    (info,) = frame.runs.values()
    assert any("last line incomplete" in w for w in info.warnings)
    entropy = frame.data[frame.data["metric"].astype(str) == "entropy"]
    assert len(entropy) == 60 and 0.9 not in entropy["value"].tolist()


def test_a_sqlite_file_that_is_not_an_mlflow_store(tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "other.db"
    sqlite3.connect(db).execute("CREATE TABLE metrics (x)").connection.commit()
    r = runner.invoke(app, ["diagnose", "mlflow:e/r", "--tracking-uri", f"sqlite:///{db}"])
    assert r.exit_code == 2 and "not an MLflow store rlwatch can read" in r.output


def test_uri_redaction() -> None:
    assert mlflow_source.redact("https://u:p@host:5000/x") == "https://***@host:5000/x"
    assert mlflow_source.redact("sqlite:///tmp/a.db") == "sqlite:///tmp/a.db"
    os.environ.pop("RLWATCH_UNUSED", None)


def test_rest_reads_equal_the_mlflow_client(server: str) -> None:
    """The bulk-interval path returns every logged value, as MlflowClient.get_metric_history
    does: NaN/inf, a step logged twice, and the steps after `since` for a live poll."""
    import math

    from mlflow import MlflowClient
    from mlflow.entities import Metric

    client = MlflowClient(server)
    eid = client.create_experiment("parity-rest")
    rid = client.create_run(eid, run_name="p").info.run_id
    t = int(time.time() * 1000)
    values = [0.5, float("nan"), float("inf"), -1e30, 2.0, 2.5]
    metrics = [Metric("actor/entropy", v, t + i, i) for i, v in enumerate(values)]
    metrics.append(Metric("actor/entropy", 9.0, t + 99, 3))  # step 3 logged again
    client.log_batch(rid, metrics=metrics)
    store = mlflow_source.store(server)
    run = store.run(rid)
    ((key, got),) = store.history(run)
    want = sorted(
        (m.step, m.value, m.timestamp / 1000)
        for m in client.get_metric_history(rid, "actor/entropy")
    )
    assert key == "actor/entropy" and len(got) == len(want) == 7
    for (s1, v1, w1), (s2, v2, w2) in zip(sorted(map(tuple, got)), want, strict=True):
        assert s1 == s2 and w1 == w2 and (v1 == v2 or (math.isnan(v1) and math.isnan(v2)))
    ((_, later),) = store.history(run, since=3)
    assert sorted(later[:, 0].tolist()) == [4, 5]


def test_sqlite_reads_equal_the_mlflow_client(tmp_path: Path) -> None:
    """The sqlite store read directly returns exactly what MlflowClient.get_metric_history
    returns for every key of the run and only those keys (another run in the same store logs
    other keys and the same ones): NaN/inf, a step logged twice, keys that sort around each
    other, and the steps after `since` for a live poll."""
    import math

    from mlflow import MlflowClient
    from mlflow.entities import Metric

    uri = f"sqlite:///{tmp_path}/parity.db"
    client = MlflowClient(uri)
    eid = client.create_experiment("parity-sqlite")
    rid = client.create_run(eid, run_name="p").info.run_id
    other = client.create_run(eid, run_name="o").info.run_id
    t = int(time.time() * 1000)
    values = [0.5, float("nan"), float("inf"), -1e30, 2.0, 2.5, 5e-324, -0.0, 0.1 + 0.2]
    keys = ["a", "a/b", "a_b", "actor/entropy", "b"]
    metrics = [
        Metric(k, v * (j + 1), t + i, i) for j, k in enumerate(keys) for i, v in enumerate(values)
    ]
    metrics.append(Metric("a/b", 9.0, t + 99, 3))  # step 3 logged again
    metrics.append(Metric("a/b", 8.0, t + 3, 3))  # and again at the same time
    client.log_batch(rid, metrics=metrics)
    client.log_batch(other, metrics=[Metric(k, 1.0, t, 0) for k in ("0", "a", "a/c", "z")])
    store = mlflow_source.store(uri)
    run = store.run(rid)
    got = dict(store.history(run))
    assert sorted(got) == keys

    for k in keys:
        want = sorted(
            ((m.step, m.value, m.timestamp / 1000) for m in client.get_metric_history(rid, k)),
            key=lambda r: (r[0], r[2], str(r[1])),
        )
        have = sorted(map(tuple, got[k].tolist()), key=lambda r: (r[0], r[2], str(r[1])))
        assert len(have) == len(want) >= len(values), k
        for (s1, v1, w1), (s2, v2, w2) in zip(have, want, strict=True):
            assert s1 == s2 and w1 == w2, k
            assert (math.isnan(v1) and math.isnan(v2)) or (
                v1 == v2 and math.copysign(1, v1) == math.copysign(1, v2)
            ), (k, v1, v2)
    later = dict(store.history(run, since=3))
    assert sorted(later["a/b"][:, 0].tolist()) == [4, 5, 6, 7, 8]
