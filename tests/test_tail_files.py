"""Files that move while tail follows them: a real writer thread rotates (rename + new file),
copy-truncates, recreates or deletes its log; tail must see every row exactly once (compared
with a final batch read of every file the writer wrote), say what happened in one line, and
keep following the other files of a folder when one disappears."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlwatch.cli.app import app
from rlwatch.engine.rules import load_rules
from rlwatch.live import Watch
from rlwatch.sources import load

RULES = load_rules()
N = 400


def _line(step: int) -> str:
    return json.dumps({"step": step, "data": {"actor/entropy": 0.5, "actor/grad_norm": 1.0}}) + "\n"


def _writer(path: Path, how: str, done: threading.Event) -> None:
    fh = open(path, "a", buffering=1)  # noqa: SIM115 - the writer reopens it
    for step in range(N):
        if step == N // 2:
            if how == "rotate":  # logrotate's default: rename, then the writer reopens
                os.rename(path, path.with_name(path.name + ".1"))
                fh.write(_line(step))  # a late line still lands in the rotated file
                fh.close()
                time.sleep(0.02)
                fh = open(path, "a", buffering=1)  # noqa: SIM115 - the writer reopens it
                continue
            if how == "copytruncate":
                fh.flush()
                shutil.copy2(path, path.with_name(path.name + ".1"))
                with open(path, "r+") as t:
                    t.truncate(0)
                fh.close()
                fh = open(path, "a", buffering=1)  # noqa: SIM115 - the writer reopens it
            if how == "recreate":
                fh.close()
                shutil.copy2(path, path.with_name(path.name + ".old"))  # what the batch reads
                path.unlink()
                time.sleep(0.02)
                fh = open(path, "a", buffering=1)  # noqa: SIM115 - the writer reopens it
        text = _line(step)
        if step % 5 == 0:  # a line written in two pieces
            fh.write(text[:10])
            fh.flush()
            time.sleep(0.001)
            text = text[10:]
        fh.write(text)
        time.sleep(0.0005)
    fh.close()
    done.set()


def _follow(target: Path, path: Path, how: str) -> tuple[Watch, list]:
    watch = Watch([str(target)], RULES, keep_rows=True)
    done = threading.Event()
    t = threading.Thread(target=_writer, args=(path, how, done))
    t.start()
    events = []
    while not done.is_set():
        events += watch.poll()
        time.sleep(0.003)
    t.join()
    events += watch.poll()
    return watch, events


@pytest.mark.parametrize(
    ("how", "said"),
    [
        ("rotate", "rotated to train.jsonl.1"),
        ("copytruncate", "truncated in place (copytruncate)"),
        ("recreate", None),
    ],
)
def test_no_row_lost_or_read_twice_when_the_file_moves(tmp_path: Path, how, said) -> None:
    path = tmp_path / "train.jsonl"
    path.write_text("")
    watch, events = _follow(path, path, how)
    rows = watch.rows()
    seen = Counter(rows[rows["tag"] == "actor/entropy"]["step"].tolist())
    lost = [s for s in range(N) if s not in seen]
    duplicated = [s for s, c in seen.items() if c > 1]
    print(f"{how}: lost {len(lost)}, duplicated {len(duplicated)}")
    assert lost == [] and duplicated == []
    # the final batch read of every file the writer wrote holds the same rows
    batch = set()
    for f in tmp_path.iterdir():
        d = load([str(f)]).data
        batch |= set(d[d["tag"] == "actor/entropy"]["step"].tolist())
    assert batch == set(seen)
    notes = [e.message for e in events if e.kind == "file"]
    assert len(notes) == 1, notes
    if said:
        assert said in notes[0]
    else:
        assert "recreated" in notes[0] or "deleted" in notes[0]


def test_one_missing_file_never_stalls_the_others(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text(_line(0))
    b.write_text(_line(0))
    watch = Watch([str(tmp_path)], RULES, keep_rows=True)
    watch.poll()
    a.unlink()
    events = []
    for step in range(1, 30):
        with open(b, "a") as fh:
            fh.write(_line(step))
        events += watch.poll()
    assert watch.runs["b"].last_step == 29
    notes = [e.message for e in events if e.kind == "file"]
    assert len(notes) == 1 and "a.jsonl: deleted" in notes[0]
    a.write_text(_line(0) + _line(1))  # it comes back
    watch.poll()
    assert watch.runs["a"].last_step == 1


def test_a_new_log_whose_first_line_was_still_being_written_is_found_when_it_grows(
    tmp_path: Path,
) -> None:
    """A run file created between two polls with half a line in it is not a run yet; once its
    first line is complete (the folder's names and mtimes unchanged) the next poll finds it,
    not a poll REDISCOVER seconds later."""
    (tmp_path / "a.jsonl").write_text(_line(0))
    watch = Watch([str(tmp_path)], RULES, keep_rows=True)
    watch.poll()
    b = tmp_path / "b.jsonl"
    whole = _line(0) + _line(1)
    b.write_text(whole[:7])  # the writer is in the middle of its first line
    watch.poll()
    assert "b" not in watch.runs
    with open(b, "a") as fh:
        fh.write(whole[7:])
    watch.poll()
    assert watch.runs["b"].last_step == 1


def test_a_wandb_folder_with_two_runs_named_debug(tmp_path: Path) -> None:
    """Two offline W&B runs with the same display name: two runs, named as diagnose names them,
    no crash."""
    pytest.importorskip("wandb")
    import subprocess
    import sys

    env = {
        **os.environ,
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "WANDB_DIR": str(tmp_path),
        "WANDB_CACHE_DIR": str(tmp_path / "cache"),
        "WANDB_CONFIG_DIR": str(tmp_path / "config"),
        "WANDB_DATA_DIR": str(tmp_path / "data"),
    }
    script = (
        "import wandb\n"
        "for k in range(2):\n"
        "    run = wandb.init(project='p', name='debug', reinit='create_new')\n"
        "    for s in range(20):\n"
        "        run.log({'train/entropy': 0.5, 'train/grad_norm': 1.0 + k}, step=s)\n"
        "    run.finish()\n"
    )
    subprocess.run([sys.executable, "-c", script], env=env, cwd=tmp_path, check=True, timeout=180)
    assert len(list(tmp_path.rglob("*.wandb"))) == 2
    watch = Watch([str(tmp_path)], RULES)
    watch.poll()
    watch.poll()
    r = CliRunner().invoke(app, ["diagnose", str(tmp_path), "--format", "json", "--exit-zero"])
    assert r.exit_code == 0, r.output
    runs = {v["run"] for v in json.loads(r.stdout)["verdicts"]}
    assert len(watch.runs) == 2
    assert sorted(watch.runs) == sorted(runs)


def _first_cut_read_otherwise(data: bytes, whole: str, tmp: Path) -> int | None:
    """The first line end in the file's head where the file cut there sniffs as another
    format than the whole file."""
    from rlwatch.errors import RlwatchError
    from rlwatch.sources import logs

    part = tmp / "part.log"
    for cut in (i + 1 for i, b in enumerate(data[: logs.HEAD]) if b == 10):
        part.write_bytes(data[:cut])
        try:
            if logs.sniff(part) != whole:
                return cut
        except RlwatchError:
            continue
    return None


@pytest.mark.parametrize("run", ["verl-gpg-math-qwen2-7b-fsdp", "verl-gpg-math-qwen2-7b-megatron"])
def test_a_log_tailed_from_its_first_lines_is_read_as_diagnose_reads_it(
    tmp_path: Path, run: str
) -> None:
    """A real verl console prints its config, a Python dict pretty-printed over hundreds of
    lines, before its first step line. Its pieces (` 'wrap_policy': {'min_num_params': 0}},`)
    once read as printed logs, so tail started with the job saw a head of `python-dicts` and
    had to read the file again when the step lines came (the grown head overruling the first
    format is tested below on its own). A dict that is the value of a key on a line before is
    no log now: the head cut at any line is verl's console or no log yet, never another
    format, and tail fed from the first lines ends with diagnose's verdicts."""
    from conftest import FIXTURES

    from rlwatch.sources import logs

    (src,) = (FIXTURES / run).glob("*.log")
    data = src.read_bytes()
    whole = logs.sniff(src)
    assert _first_cut_read_otherwise(data, whole, tmp_path) is None
    cut = data.index(b"\n", 4096) + 1  # tail starts with the job: a few lines in
    live = tmp_path / "live"
    live.mkdir()
    out = live / src.name
    out.write_bytes(data[:cut])
    watch = Watch([str(live)], RULES, stale_after=1e9, stall_floor=1e9)
    watch.poll()
    for at in range(cut, len(data), 1 << 16):
        with open(out, "ab") as fh:
            fh.write(data[at : at + (1 << 16)])
        watch.poll()

    def episodes(verdicts: list[dict]) -> list[tuple[str, int, int]]:
        return sorted(
            (v["code"], e["first_step"], e["last_step"]) for v in verdicts for e in v["episodes"]
        )

    r = CliRunner().invoke(app, ["diagnose", str(live), "--format", "json", "--exit-zero"])
    assert r.exit_code == 0, r.output
    diagnose = episodes(json.loads(r.stdout)["verdicts"])
    assert diagnose, "no verdict to compare"
    assert episodes([v.to_dict() for v in watch.verdicts()]) == diagnose


def test_rows_read_in_a_format_the_grown_head_overrules_are_replaced(tmp_path: Path) -> None:
    """Rows already handed out in the first format (metric dicts printed before verl's step
    lines) are dropped: the run is evaluated again from its first line, and tail says so."""
    dicts = "".join(f"{{'loss': {0.5 - i / 100}, 'epoch': {i}}}\n" for i in range(3))
    steps = "".join(
        f"step:{i} - actor/entropy:{0.6 - i / 1000:.4f} - actor/grad_norm:1.0\n" for i in range(40)
    )
    log = tmp_path / "job.log"
    log.write_text(dicts)
    watch = Watch([str(log)], RULES, keep_rows=True)
    watch.poll()
    (state,) = watch.runs.values()
    assert state.info.source == "python-dicts"
    with open(log, "a") as fh:
        fh.write(steps)
    events = watch.poll()
    assert any("read as verl-console now" in e.message for e in events), events
    (state,) = watch.runs.values()
    assert state.info.source == "verl-console"
    assert state.last_step == 39
    (diagnosed,) = load(str(log)).runs.values()
    assert diagnosed.source == "verl-console"
