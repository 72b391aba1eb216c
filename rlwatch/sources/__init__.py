"""Target resolution: what the user typed -> a reader -> a RunFrame."""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rlwatch.errors import UsageError
from rlwatch.frame import RunFrame

ACCEPTED = (
    "a TensorBoard log directory or event file, a W&B run folder or .wandb file, a "
    "log file (verl console or JSONL, trainer_state.json, TRL console capture, JSONL "
    "with a step field), mlflow:<run_id>, mlflow:<experiment>/<run name>, a bare "
    "MLflow run id with MLFLOW_TRACKING_URI set, wandb:<entity>/<project>/<run_id> or "
    "a W&B run URL, a trackio project (.db file, trackio:<project>[/<run>]), a SwanLab "
    "run folder or run-*.swanlab file"
)


def resolve(
    target: str, log_format: str | None = None, tracking_uri: str | None = None
) -> Callable[[], RunFrame]:
    """A loader for one target, or a UsageError naming the forms that are accepted."""
    from rlwatch.sources import logs, tensorboard, wandb_local

    logs.check_format(log_format)
    if target.startswith("mlflow:"):
        from rlwatch.sources import mlflow_source

        ref = target[len("mlflow:") :].strip("/")
        if not ref:
            raise UsageError("mlflow: needs a run: mlflow:<run_id> or mlflow:<experiment>/<run>")
        uri = mlflow_source.tracking_uri(tracking_uri)
        return lambda: mlflow_source.load(ref, uri)
    from rlwatch.sources import swanlab, trackio, wandb_api

    tr = trackio.parse(target)
    if tr is not None:
        return lambda: trackio.load(*tr)
    wandb_path = wandb_api.parse(target)
    if wandb_path is not None:
        return lambda: wandb_api.load(wandb_path)
    path = Path(target)
    if not path.exists():
        from rlwatch.sources import mlflow_source

        if mlflow_source.RUN_ID.match(target) and (
            tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
        ):
            uri = mlflow_source.tracking_uri(tracking_uri)
            return lambda: mlflow_source.load(target, uri)
        raise UsageError(f"{target}: no such file or directory (accepted: {ACCEPTED})")
    if path.is_dir():
        if tensorboard.find_runs(path):
            return lambda: tensorboard.load(path)
        if next(path.rglob("*.wandb"), None) is not None:
            return lambda: wandb_local.load(path)
        if swanlab.find_runs(path):
            return lambda: swanlab.load(path)
        return lambda: logs.load_dir(path, log_format)
    if tensorboard.is_event_file(path) and log_format is None:
        return lambda: tensorboard.load(path)
    if path.suffix == ".wandb":
        return lambda: wandb_local.load(path)
    if swanlab.is_record_file(path):
        return lambda: swanlab.load(path)
    if trackio.is_store(path):
        return lambda: trackio.load(path)
    return lambda: logs.load_file(path, log_format)


def load(
    targets: list[str],
    *,
    log_format: str | None = None,
    tracking_uri: str | None = None,
    workers: int | None = None,
) -> RunFrame:
    """Read every target (in parallel) into one RunFrame; run names are made unique."""
    if not targets:
        raise UsageError("no target given (accepted: " + ACCEPTED + ")")
    # every bad target fails before any reading
    loaders = [resolve(t, log_format, tracking_uri) for t in targets]
    if len(loaders) == 1:
        frames = [loaders[0]()]
    else:
        with ThreadPoolExecutor(max_workers=workers or min(4, os.cpu_count() or 1)) as pool:
            frames = list(pool.map(lambda f: f(), loaders))
    seen: set[str] = set()
    unique = []
    for target, frame in zip(targets, frames, strict=False):
        clash = {n: f"{target.rstrip('/')}:{n}" for n in frame.runs if n in seen}
        if clash:
            frame = frame.renamed(clash)
        seen.update(frame.runs)
        unique.append(frame)
    return RunFrame.concat(unique)
