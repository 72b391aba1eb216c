"""Log formats in the wild, each written in exactly the shape the real tool writes (the real
transformers callbacks where they are installed; the writers' own code otherwise, quoted from
their source), sniffed without --log-format."""

from __future__ import annotations

import io
import json
import math
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from conftest import followed_rows
from hypothesis import example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from rlwatch.cli.app import app
from rlwatch.errors import UsageError
from rlwatch.sources import load, logs

runner = CliRunner()


def _rows(frame) -> dict[tuple[str, int], float]:
    return {(r.tag, r.step): r.value for r in frame.data.itertuples()}


def _transformers_function(module: str, name: str):
    """A function from the installed transformers' source (its module imports IPython, which a
    notebook has and CI does not: the function itself is plain Python)."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec("transformers")
    assert spec is not None and spec.origin is not None
    src = (Path(spec.origin).parent / module).read_text()
    (fn,) = [n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef) and n.name == name]
    scope: dict = {}
    exec(compile(ast.Module([fn], []), module, "exec"), scope)
    return scope[name]


def test_transformers_console_with_every_float_printed_as_a_string(tmp_path: Path) -> None:
    """transformers' PrinterCallback prints floats as f"{v:.4g}" strings ({'loss': '0.03797'})."""
    from transformers import TrainingArguments
    from transformers.trainer_callback import PrinterCallback, TrainerControl, TrainerState

    args = TrainingArguments(output_dir=str(tmp_path / "out"), report_to=[])
    state, control = TrainerState(), TrainerControl()
    out = io.StringIO()
    with redirect_stdout(out):
        for step, loss in enumerate([0.03797, 0.02512, float("nan")], 1):
            state.global_step = step
            logs_ = {"loss": loss, "grad_norm": 0.2 * step, "learning_rate": 1e-5, "epoch": 0.05}
            PrinterCallback().on_log(args, state, control, logs=logs_)
        PrinterCallback().on_log(
            args, state, control, logs={"train_runtime": 12.5, "train_loss": 0.03, "epoch": 1.0}
        )
    text = out.getvalue()
    assert "'loss': '0.03797'" in text  # the shape this test is about
    f = tmp_path / "train.log"
    f.write_text("Updated tokens: {'<think>': 151665, '</think>': 151666}\n" + text)
    frame = logs.load_file(f)
    (info,) = frame.runs.values()
    assert info.source == "python-dicts"
    rows = _rows(frame)
    assert rows[("loss", 1)] == 0.03797 and rows[("grad_norm", 2)] == 0.4
    assert math.isnan(rows[("loss", 3)])
    assert frame.steps(info.name) == (3, 1, 3)  # the token dict is not a row
    assert not any(t.startswith("<") for t, _ in rows)
    assert info.hparams["summary/train_runtime"] == 12.5


def test_a_second_training_in_the_same_console_is_a_restart(tmp_path: Path) -> None:
    """A notebook's output (or a log) holding two calls of train(), each ended by its summary,
    printed by transformers' PrinterCallback with no step in the dicts: the file's run is its
    last training, counted from 1 again; the first one's rows are left out with a warning
    (read as one run of ordinals 1..7 before: the second training as the first's
    continuation). `tail`, fed the file in random bursts, ends with the same rows."""
    from transformers import TrainingArguments
    from transformers.trainer_callback import PrinterCallback, TrainerControl, TrainerState

    args = TrainingArguments(output_dir=str(tmp_path / "out"), report_to=[])
    state, control = TrainerState(), TrainerControl()
    out = io.StringIO()
    with redirect_stdout(out):
        for losses in ([0.69, 0.6, 0.5, 0.4], [0.7, 0.3, 0.2]):
            for i, loss in enumerate(losses, 1):
                logs_ = {"loss": loss, "rewards/margins": i / 10, "epoch": i / len(losses)}
                PrinterCallback().on_log(args, state, control, logs=logs_)
            summary = {"train_runtime": 10.0, "train_loss": 0.5, "epoch": 1.0}
            PrinterCallback().on_log(args, state, control, logs=summary)
    text = out.getvalue()
    assert text.count("'train_runtime'") == 2 and "'step'" not in text
    f = tmp_path / "console.log"
    f.write_text(text)
    frame = logs.load_file(f)
    (info,) = frame.runs.values()
    rows = _rows(frame)
    assert [rows[("loss", s)] for s in (1, 2, 3)] == [0.7, 0.3, 0.2]
    assert ("loss", 4) not in rows  # the first training's last log is not mixed in
    assert frame.segment_starts(info.name) == []
    assert any("1 earlier training(s) in the file" in w for w in info.warnings)
    assert "last training" in info.hparams["steps"]
    assert followed_rows(tmp_path, "console.log", [text], [1, 7, 40, 200], seed=3) == rows


def test_a_dict_after_the_summary_sharing_no_key_with_the_logs_is_no_new_training(
    tmp_path: Path,
) -> None:
    """The 38th search's pasted TRL DPO console: after the training's summary, a vLLM server
    warns `... overridden by the model's generation_config.json: {'temperature': 0.6,
    'top_p': 0.9}`. That dict had been taken for a second training: the DPO run's rows were
    dropped, exit 2. It shares no key with the training's logs: ignored, named in a warning."""
    from transformers import TrainingArguments
    from transformers.trainer_callback import PrinterCallback, TrainerControl, TrainerState

    args = TrainingArguments(output_dir=str(tmp_path / "out"), report_to=[])
    state, control = TrainerState(), TrainerControl()
    out = io.StringIO()
    with redirect_stdout(out):
        for i in range(1, 9):
            logs_ = {"loss": 0.69 - i / 50, "rewards/margins": i / 10, "epoch": i / 8}
            PrinterCallback().on_log(args, state, control, logs=logs_)
        summary = {"train_runtime": 10.0, "train_loss": 0.5, "epoch": 1.0}
        PrinterCallback().on_log(args, state, control, logs=summary)
    text = out.getvalue() + (
        "(APIServer pid=9995) WARNING 02-19 17:10:17 [model.py:1371] Default vLLM sampling "
        "parameters have been overridden by the model's `generation_config.json`: "
        "`{'temperature': 0.6, 'top_p': 0.9}`. If this is not intended, please relaunch.\n"
    )
    f = tmp_path / "logs_runpod.md"
    f.write_text(text)
    frame = logs.load_file(f)
    (info,) = frame.runs.values()
    rows = _rows(frame)
    assert sorted({s for t, s in rows if t == "loss"}) == list(range(1, 9))
    assert not {t for t, _ in rows} & {"temperature", "top_p"}
    assert any("share no key with its logs" in w for w in info.warnings), info.warnings
    assert followed_rows(tmp_path, "logs_runpod.md", [text], [1, 7, 40, 200], seed=5) == rows


def _progress_console(tmp_path: Path, every: int, steps: int, evals: bool = False) -> str:
    """A console as transformers' ProgressCallback writes it (tqdm's bar on stderr, each log
    printed by ``tqdm.write`` on stdout, both captured into one file like `> log 2>&1`): the
    trainer's own callback, driven the way Trainer drives it (on_step_end, then on_log)."""
    from transformers import TrainingArguments
    from transformers.trainer_callback import ProgressCallback, TrainerControl, TrainerState

    args = TrainingArguments(output_dir=str(tmp_path / "out"), report_to=[])
    state, control, cb = TrainerState(), TrainerControl(), ProgressCallback()
    state.max_steps = steps
    f = tmp_path / "console.log"
    with open(f, "w", newline="") as out, redirect_stdout(out), redirect_stderr(out):
        cb.on_train_begin(args, state, control)
        for step in range(1, steps + 1):
            state.global_step = step
            cb.on_step_end(args, state, control)
            if step % every == 0:
                logs_ = {"loss": 1.0 / step, "grad_norm": 0.5, "reward": step / steps}
                cb.on_log(args, state, control, logs=logs_ | {"epoch": step / steps})
                if evals:
                    cb.on_log(args, state, control, logs={"eval_loss": 2.0 / step})
        cb.on_log(args, state, control, logs={"train_runtime": 1.5, "train_loss": 0.2})
        cb.on_train_end(args, state, control)
    with open(f, newline="") as fh:
        return fh.read()


def test_progress_bar_console_reads_each_dicts_step_from_the_bar(tmp_path: Path) -> None:
    """A console captured with tqdm's bar (transformers' default, ``disable_tqdm=False``): the
    dicts carry no step, but the bar redrawn right after each one shows the global step. Read
    from it, a run that logs every 10 steps has steps 10, 20, ... (not ordinals 1, 2, ...), so the
    rules know its logging interval; an evaluation dict shares its training log's step."""
    text = _progress_console(tmp_path, every=10, steps=60, evals=True)
    assert "\r" in text and "{'loss'" in text  # the shape this test is about
    frame = logs.load_file(tmp_path / "console.log")
    (info,) = frame.runs.values()
    assert info.source == "python-dicts"
    assert frame.steps(info.name) == (6, 10, 60)
    rows = _rows(frame)
    assert rows[("loss", 20)] == 0.05 and rows[("reward", 60)] == 1.0
    assert abs(rows[("eval_loss", 30)] - 2 / 30) < 1e-4  # printed as '0.06667'
    assert info.hparams["steps"].startswith("the progress bar")
    assert not info.warnings


def test_progress_bar_console_cut_after_a_dict_waits_for_its_bar(tmp_path: Path) -> None:
    """A console still being written can end on a dict whose bar is not drawn yet: the batch
    reader names it in a warning rather than guess its step; `tail` holds it until the bar comes,
    then gives it the bar's step."""
    text = _progress_console(tmp_path, every=5, steps=20)
    cut = text.index("\n", text.index("{'loss'", text.index("15/20"))) + 1  # after the 4th dict
    live = tmp_path / "live.log"
    live.write_text(text[:cut], newline="")
    frame = logs.load_file(live)
    (info,) = frame.runs.values()
    assert frame.steps(info.name) == (3, 5, 15)
    assert any("before the progress bar" in w for w in info.warnings)
    follower = logs.Follower(live)
    assert follower.poll().steps(info.name) == (3, 5, 15)
    with open(live, "a", newline="") as fh:
        fh.write(text[cut:])
    assert follower.poll().steps(info.name) == (1, 20, 20)


def _printed_logs(n: int) -> list[str]:
    """TRL GRPO logs as transformers' PrinterCallback prints them (str of the logs dict)."""
    from transformers import TrainingArguments
    from transformers.trainer_callback import PrinterCallback, TrainerControl, TrainerState

    args = TrainingArguments(output_dir="/tmp/rlwatch-unused", report_to=[])
    state, control, out = TrainerState(), TrainerControl(), io.StringIO()
    with redirect_stdout(out):
        for i in range(1, n + 1):
            logs_ = {
                "loss": 0.0578 - 0.01 * i,
                "grad_norm": 5.026931285858154 / i,
                "learning_rate": 5e-07,
                "completions/mean_length": 212.6875 + i,
                "completions/clipped_ratio": 0.03125 * i,
                "rewards/xmlcount_reward_func/mean": 0.12674999609589577 * i,
                "reward": 0.15799999982118607 + 0.1 * i,
                "reward_std": 0.21001071110367775,
                "kl": 0.0004943923449900467 * i,
                "entropy": 1.0277012687176466 / i,
                "epoch": 0.01 * i,
            }
            state.global_step = i
            PrinterCallback().on_log(args, state, control, logs=logs_)
    return out.getvalue().splitlines()


def _cut_at(width: int, line: str) -> list[str]:
    """A line as a terminal capture shows it on a pane `width` columns wide (`tmux
    capture-pane` without -J, `screen` hardcopy): cut every `width` characters."""
    return [line[i : i + width] for i in range(0, max(len(line), 1), width)]


def test_a_terminal_capture_cut_at_the_pane_width(tmp_path: Path) -> None:
    """Printed dicts cut into rows of a pane's width (a tmux capture of a TRL run; the first
    dict after a tqdm bar on the same row) are joined back and read exactly as the uncut log,
    whatever the width: also where a cut falls inside the opening `{'loss'` or a number."""
    printed = _printed_logs(6)
    bar = "  5%|██▍                   | 1/20 [05:56<1:52:59, 356.80s/it]"
    whole = [bar + printed[0], *printed[1:]]
    (tmp_path / "whole.log").write_text("\n".join(whole) + "\n")
    expected = _rows(logs.load_file(tmp_path / "whole.log"))
    assert len(expected) == 6 * 11
    opening = len(bar) + len("{'lo")  # a width that cuts the first dict's opening key
    for width in (opening, 17, 80, 120, 208):
        f = tmp_path / f"capture-{width}.log"
        f.write_text("\n".join(row for line in whole for row in _cut_at(width, line)) + "\n")
        frame = logs.load_file(f)
        (info,) = frame.runs.values()
        assert info.source == "python-dicts", width
        assert _rows(frame) == expected, width
        assert not info.warnings, width


def test_pretty_printed_dicts_and_dicts_cut_off(tmp_path: Path) -> None:
    """pprint's one key per line is joined back; a dict cut off by a crash before its end is
    counted and named, and the dict after it is still read; so is one cut by the end of the
    file (a capture taken mid-print)."""
    import pprint

    f = tmp_path / "train.log"
    body = pprint.pformat({"loss": 0.5, "grad_norm": 1.25, "reward": 0.75}, width=30)
    assert body.count("\n") == 2  # the shape this test is about
    f.write_text(
        body + "\n"
        "{'loss': 0.4, 'grad_norm': 1.5, 'rew\n"  # cut off: the next dict starts
        "Traceback (most recent call last):\n"
        "{'loss': 0.3, 'grad_norm': 1.0, 'reward': 0.8}\n"
        "{'loss': 0.2, 'grad_norm'\n"  # cut by the end of the capture
    )
    frame = logs.load_file(f)
    (info,) = frame.runs.values()
    rows = _rows(frame)
    assert rows == {
        ("loss", 1): 0.5, ("grad_norm", 1): 1.25, ("reward", 1): 0.75,
        ("loss", 2): 0.3, ("grad_norm", 2): 1.0, ("reward", 2): 0.8,
    }  # fmt: skip
    assert any("1 printed dicts cut off before their end" in w for w in info.warnings)
    assert any("1 printed dicts cut off at the end of the file" in w for w in info.warnings)


def test_a_followed_capture_joins_a_dict_split_between_polls(tmp_path: Path) -> None:
    f = tmp_path / "capture.log"
    rows = [row for line in _printed_logs(2) for row in _cut_at(50, line)]
    half = len(rows) // 2 + 1  # inside the second dict
    f.write_text("\n".join(rows[:half]) + "\n")
    follower = logs.Follower(f)
    first = follower.poll()
    assert sorted(set(first.data["step"])) == [1]
    with open(f, "a") as fh:
        fh.write("\n".join(rows[half:]) + "\n")
    second = follower.poll()
    assert sorted(set(second.data["step"])) == [2]
    assert len(second.data) == 11


def test_a_json_array_of_log_history_rows(tmp_path: Path) -> None:
    rows = [
        {"loss": 0.5 - i / 100, "grad_norm": 1.0, "epoch": i / 10, "step": i} for i in range(1, 9)
    ]
    f = tmp_path / "log_history.json"
    f.write_text(json.dumps(rows, indent=2))
    frame = logs.load_file(f)
    (info,) = frame.runs.values()
    assert info.source == "json-array" and frame.steps(info.name) == (8, 1, 8)
    assert _rows(frame)[("loss", 3)] == pytest.approx(0.47)


def test_a_scripts_own_dump_of_the_log_history(tmp_path: Path) -> None:
    """A script that saves `trainer.state.log_history` under a key of its own beside other
    series ({"learning_rate": [...], "raw_log_history": [...], ...}), the key past the first
    lines; cut before its end, the complete rows before the cut are read, with a warning."""
    history = [
        {"loss": 0.69 - i / 100, "rewards/margins": i / 10, "logps/chosen": -30.0, "step": i}
        for i in range(1, 41)
    ]
    doc = {
        "eval_loss": [],
        "learning_rate": [{"learning_rate": 1e-6 * i, "step": float(i)} for i in range(1, 41)],
        "metadata": {"run_name": "dpo"},
        "raw_log_history": history,
        "scalar_series": {"loss": [[i, 0.5] for i in range(1, 41)]},
    }
    f = tmp_path / "dpo_history.json"
    text = json.dumps(doc, indent=2)
    f.write_text(text)
    frame = logs.load_file(f)
    (info,) = frame.runs.values()
    assert info.source == "trainer-state" and frame.steps(info.name) == (40, 1, 40)
    assert _rows(frame)[("rewards/margins", 7)] == pytest.approx(0.7)
    one_line = tmp_path / "one_line.json"  # json.dumps' compact form: no JSON line of a log
    one_line.write_text(json.dumps(doc))
    compact = logs.load_file(one_line)
    (name,) = compact.runs
    assert compact.steps(name) == (40, 1, 40)
    cut = tmp_path / "cut.json"
    cut.write_text(text[: text.rindex('"step": 30') + 3])
    frame = logs.load_file(cut)
    (info,) = frame.runs.values()
    assert frame.steps(info.name) == (29, 1, 29)
    assert any("29 complete log_history entries" in w for w in info.warnings), info.warnings


def test_llamafactory_trainer_log_jsonl(tmp_path: Path) -> None:
    """LLaMA-Factory's LogCallback.on_log: current_steps, total_steps, loss, lr, epoch,
    percentage, elapsed_time, remaining_time (None values removed), one json.dumps per line."""
    f = tmp_path / "trainer_log.jsonl"
    with open(f, "w", encoding="utf-8") as fh:
        for step in range(5, 55, 5):
            logs_ = dict(
                current_steps=step,
                total_steps=50,
                loss=1.5 - step / 100,
                eval_loss=None,
                predict_loss=None,
                lr=5e-5 * (1 - step / 50),
                epoch=step / 25,
                percentage=round(step / 50 * 100, 2),
                elapsed_time=f"0:00:{step:02d}",
                remaining_time=f"0:00:{50 - step:02d}",
            )
            if step == 50:
                logs_["eval_loss"] = 1.1
            logs_ = {k: v for k, v in logs_.items() if v is not None}
            fh.write(json.dumps(logs_) + "\n")
    frame = logs.load_file(f)
    (info,) = frame.runs.values()
    assert info.source == "llamafactory" and frame.steps(info.name) == (10, 5, 50)
    tags = set(frame.data["tag"].astype(str))
    assert {"loss", "lr", "epoch", "eval_loss"} <= tags
    assert not tags & {"current_steps", "total_steps", "elapsed_time", "remaining_time"}
    assert info.hparams["total_steps"] == 50
    assert not info.warnings


def _swift_logs(steps: int) -> list[dict]:
    """What ms-swift's `swift rlhf --rlhf_type grpo` logs: TRL's GRPO keys, then its
    ProgressCallbackNew.on_log -> add_train_message (swift/trainers/callback.py): the progress
    as text, floats rounded to 8 digits; an evaluation every 10 steps."""

    def format_time(seconds: float) -> str:  # swift/utils/utils.py
        days, rem = divmod(int(seconds), 86400)
        hours, rem = divmod(rem, 3600)
        minutes, seconds = divmod(rem, 60)
        out = f"{days}d " if days else ""
        out += f"{hours}h " if hours else ""
        out += f"{minutes}m " if minutes else ""
        return out + f"{seconds}s"

    out = []
    for step in range(1, steps + 1):
        records = [
            {
                "loss": 0.01 / step,
                "grad_norm": 0.3 + step / 100,
                "learning_rate": 1e-6,
                "memory(GiB)": 52.21,
                "train_speed(iter/s)": 0.010115,
                "kl": 0.001 * step,
                "clip_ratio/region_mean": 0.0,
                "completions/mean_length": 280.0 + step,
                "completions/clipped_ratio": 0.03125,
                "rewards/AccuracyORM/mean": 0.2 + step / 50,
                "rewards/AccuracyORM/std": 0.3,
                "reward": 0.2 + step / 50,
                "reward_std": 0.3,
                "frac_reward_zero_std": 0.125,
                "epoch": step / 40,
            }
        ]
        if step % 10 == 0:
            records.append({"eval_loss": 0.5 - step / 100, "eval_runtime": 3.2, "epoch": step / 40})
        for logs_ in records:
            logs_["global_step/max_steps"] = f"{step}/{steps}"
            logs_["percentage"] = f"{step / steps * 100:.2f}%"
            logs_["elapsed_time"] = format_time(step * 61.5)
            logs_["remaining_time"] = format_time((steps - step) * 61.5)
            out.append({k: round(v, 8) if isinstance(v, float) else v for k, v in logs_.items()})
    return out


def test_ms_swift_logging_jsonl_and_console(tmp_path: Path) -> None:
    """ms-swift writes each log to <output_dir>/logging.jsonl (append_to_jsonl: json.dumps,
    ensure_ascii=False) and prints it (PrinterCallbackNew: print(logs)); the step is only in
    "global_step/max_steps": "N/M". At the end sft.py appends its trainer state (log_history
    and all) as one more line: no log, and in a short run it is inside the sniffed head."""
    records = _swift_logs(30)
    out = tmp_path / "v0-20250510-185809"
    out.mkdir()
    jsonl = out / "logging.jsonl"
    summary = {"train_runtime": 2959.8, "train_steps_per_second": 0.148, "train_loss": 0.28}
    summary |= {k: v for k, v in records[-1].items() if k in ("epoch", "global_step/max_steps")}
    state = {
        "train_dataset": "287.505147±102.300820, min=63.000000, max=1005.000000, size=6994",
        "last_model_checkpoint": str(out / "checkpoint-30"),
        "best_model_checkpoint": None,
        "best_metric": None,
        "global_step": 30,
        "log_history": records[:5],
        "memory": {"cuda:0": "52.21GiB"},
    }
    jsonl.write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in [*records, summary, state]),
        encoding="utf-8",
    )
    console = tmp_path / "swift_grpo.out"
    console.write_text("".join(f"{r!r}\n" for r in [*records, summary]))
    for f, fmt in [(jsonl, "ms-swift"), (console, "python-dicts")]:
        frame = logs.load_file(f)
        (info,) = frame.runs.values()
        assert info.source == fmt, f
        assert frame.steps(info.name) == (30, 1, 30), f
        rows = _rows(frame)
        assert rows[("reward", 30)] == pytest.approx(0.8) and rows[("eval_loss", 20)] == 0.3, f
        tags = set(frame.data["tag"].astype(str))
        assert not tags & {"global_step/max_steps", "percentage", "elapsed_time", "global_step"}
        assert not info.warnings, (f, info.warnings)
        assert "train_runtime" not in tags and info.hparams["summary/train_runtime"] == 2959.8
    assert logs.run_name(jsonl) == "v0-20250510-185809/logging"
    # the same run through `tail`, as a folder
    result = runner.invoke(app, ["tail", str(out), "--once", "--plain"])
    assert result.exit_code == 0, result.output
    assert "v0-20250510-185809" in result.output


def test_openrlhf_console_tqdm_postfix(tmp_path: Path) -> None:
    """OpenRLHF's PPO trainer logs through its progress bar: one tqdm bar per episode
    (`desc=f"Episode [{episode + 1}/{num_episodes}]"`), `pbar.set_postfix(logs_dict)` then
    `pbar.update()` per step; redirected to a file, every redraw follows a carriage return on
    one long line. Written here by the real tqdm. The step is the bar's count, after the
    steps of the episodes before."""
    from tqdm import tqdm

    f = tmp_path / "train_ppo.log"
    with open(f, "w") as fh:
        for episode in range(2):
            pbar = tqdm(range(20), desc=f"Episode [{episode + 1}/2]", file=fh, mininterval=0)
            for i in range(20):
                step = episode * 20 + i + 1
                logs_dict = {"policy_loss": 0.5 / step, "kl": 1e-3 * step, "reward": step / 40}
                pbar.set_postfix(logs_dict)
                pbar.update()
            pbar.close()
    frame = logs.load_file(f)
    (info,) = frame.runs.values()
    assert info.source == "kv-pairs"
    rows = _rows(frame)
    # set_postfix redraws the bar at its count before the update: step n's logs are drawn at
    # n - 1 first, then at n; each step holds its own logs, and no step 0
    assert sorted({s for (t, s) in rows if t == "reward"}) == list(range(1, 41))
    for step in range(1, 41):
        assert rows[("reward", step)] == pytest.approx(step / 40), step
        assert rows[("kl", step)] == pytest.approx(1e-3 * step), step
    assert not info.warnings, info.warnings
    # a trainer that updates the bar first and then sets the logs draws them at their count
    g = tmp_path / "update_first.log"
    with open(g, "w") as fh:
        pbar = tqdm(range(20), desc="Train", file=fh, mininterval=0)
        for step in range(1, 21):
            pbar.update()
            pbar.set_postfix({"loss": 0.5 / step, "reward": step / 20})
        pbar.close()
    rows = _rows(logs.load_file(g))
    assert sorted({s for (t, s) in rows if t == "reward"}) == list(range(1, 21))
    assert all(rows[("reward", s)] == pytest.approx(s / 20) for s in range(1, 21))


def test_an_openrlhf_bar_being_drawn_is_followed_redraw_by_redraw(tmp_path: Path) -> None:
    """A bar has no newline until it closes (an episode can last days): its redraws are read
    as they come, the one being drawn waits (diagnose warns of it), and tail and diagnose
    read the same steps."""
    from tqdm import tqdm

    from rlwatch.sources.logs import Follower

    f = tmp_path / "train_ppo.log"
    fh = open(f, "w")  # noqa: SIM115 - the job's stderr, open while it trains
    pbar = tqdm(range(100), desc="Episode [1/1]", file=fh, mininterval=0)
    follower = Follower(f)
    seen: list[int] = []
    for step in range(1, 31):
        pbar.set_postfix({"policy_loss": 0.1, "kl": 1e-3 * step, "reward": step / 30})
        pbar.update()
        fh.flush()
        if step % 7 == 0:
            frame = follower.poll()
            seen += sorted(set(frame.data["step"].tolist()))
            assert seen[-1] == step - 1  # all but the redraw still on screen
    frame = logs.load_file(f)
    (info,) = frame.runs.values()
    assert frame.steps(info.name) == (29, 1, 29)
    assert any("last line incomplete" in w for w in info.warnings)
    seen += sorted(set(follower.poll().data["step"].tolist()))
    assert seen == list(range(1, 30))
    pbar.close()
    fh.close()
    assert sorted(set(follower.poll().data["step"].tolist())) == [30]
    assert logs.load_file(f).steps(info.name) == (30, 1, 30)


def test_notebook_progress_table_html_markdown_and_text(tmp_path: Path) -> None:
    text_to_html_table = _transformers_function("utils/notebook.py", "text_to_html_table")
    header = ["Step", "Training Loss", "Validation Loss", "Accuracy"]
    lines = [header, [100, "No log", 0.69, 0.52], [200, 0.6512, 0.61, 0.7], [300, 0.5, 0.55, 0.8]]
    html = text_to_html_table(lines)
    for name, text in [
        ("progress.html", html),
        ("notebook.md", "## Training\n\n" + html + "\n"),
        ("copied.txt", "\n".join("\t".join(str(c) for c in r) for r in lines) + "\n"),
        (
            "table.md",
            "| "
            + " | ".join(header)
            + " |\n|---|---|---|---|\n"
            + "".join("| " + " | ".join(str(c) for c in r) + " |\n" for r in lines[1:]),
        ),
    ]:
        f = tmp_path / name
        f.write_text(text)
        frame = logs.load_file(f)
        (info,) = frame.runs.values()
        assert info.source == "notebook-table", name
        rows = _rows(frame)
        assert rows[("eval_loss", 100)] == 0.69 and rows[("loss", 200)] == 0.6512, name
        assert ("loss", 100) not in rows and rows[("eval_accuracy", 300)] == 0.8, name


def test_custom_trainer_name_number_lines_with_a_step_counter(tmp_path: Path) -> None:
    f = tmp_path / "train.out"
    f.write_text(
        "Loading model...\n"
        "Epoch:[1/2](120/9751), Reward: 0.1032, KL_ref: 0.0012, Loss: -0.31, lr: 1e-6\n"
        "Epoch:[1/2](240/9751), Reward: 0.1500, KL_ref: 0.0020, Loss: -0.29, lr: 1e-6\n"
        "Epoch:[2/2](120/9751), Reward: 0.2000, KL_ref: 0.0030, Loss: nan, lr: 1e-6\n"
        "step 9990 | reward=0.3 | kl=0.004\n"
    )
    frame = logs.load_file(f)
    (info,) = frame.runs.values()
    assert info.source == "kv-pairs"
    rows = _rows(frame)
    assert rows[("Reward", 120)] == 0.1032 and rows[("KL_ref", 240)] == 0.002
    assert rows[("Reward", 9751 + 120)] == 0.2 and math.isnan(rows[("Loss", 9871)])
    assert rows[("reward", 9990)] == 0.3


def test_a_bare_counter_opening_the_line_and_percent_values(tmp_path: Path) -> None:
    """Tinker-API scripts print `[run]   N/100 | loss=... | reward=... | acc=62.5%` (the line
    shape of fixtures/public/tinker-api-grpo-*): the counter is the step, 62.5% is 0.625, and
    summary lines with a ratio (`Zero-loss steps: 17/100 (17%)`) are not records."""
    f = tmp_path / "grpo.log"
    f.write_text(
        "[gsm8k_8B] 7473 GSM8K examples | model=Qwen/Qwen3-8B seed=42 rank=32 lr=5e-06\n"
        "[gsm8k_8B]   1/100 | loss=-4.6162 | reward=0.625 | acc=62.5%\n"
        "[gsm8k_8B]   2/100 | loss=0.0000 | reward=0.000 | acc=0.0%\n"
        "  12/100 | loss=-0.5 | reward=0.25\n"
        "[gsm8k_8B] Zero-loss steps: 17/100 (17%)\n"
        "[gsm8k_8B] eval 3/4 done, 10/20 ok\n"
    )
    frame = logs.load_file(f)
    (info,) = frame.runs.values()
    assert info.source == "kv-pairs"
    rows = _rows(frame)
    assert rows[("loss", 1)] == -4.6162 and rows[("acc", 1)] == 0.625
    assert rows[("reward", 2)] == 0.0 and rows[("reward", 12)] == 0.25
    assert sorted({s for _, s in rows}) == [1, 2, 12]


def test_name_number_pairs_without_separators_when_the_line_is_made_of_them(
    tmp_path: Path,
) -> None:
    """A custom GRPO loop prints `pass 1/4 step 3/128 lr 4.997e-06 reward 0.034` (no `:` or
    `=`): read when the line holds such pairs and nothing else; prose with a counter in it
    (`saving step 100 to disk`) and lines with fewer than two pairs are not records."""
    f = tmp_path / "train_stdout.log"
    f.write_text(
        "Loading weights: 100%|##########| 272/272 [00:00<00:00, 3628.15it/s]\n"
        "pass 1/4 step 1/128 lr 5.000e-06 reward 0.055\n"
        "pass 1/4 step 2/128 lr 4.999e-06 reward 0.043\n"
        "saving step 2 to disk in 3 s\n"
        "step 3 | lr 4.997e-06 | reward 0.034\n"
        "step 4 reward 0.5\n"
    )
    frame = logs.load_file(f)
    (info,) = frame.runs.values()
    assert info.source == "kv-pairs"
    rows = _rows(frame)
    assert rows[("reward", 1)] == 0.055 and rows[("lr", 2)] == 4.999e-06
    assert rows[("reward", 3)] == 0.034
    assert sorted({s for _, s in rows}) == [1, 2, 3]
    assert ("in", 2) not in rows


def test_a_user_regex_is_the_escape_hatch(tmp_path: Path) -> None:
    f = tmp_path / "odd.txt"
    f.write_text("it step 1 loss 0.5 ent 1.2\nit step 2 loss 0.4 ent 1.1\nnoise\n")
    spec = r"regex:step (?P<step>\d+) loss (?P<loss>\S+) ent (?P<actor__entropy>\S+)"
    frame = load([str(f)], log_format=spec)
    rows = _rows(frame)
    assert rows[("loss", 2)] == 0.4 and rows[("actor/entropy", 1)] == 1.2
    with pytest.raises(UsageError, match=r"needs a \(\?P<step>"):
        load([str(f)], log_format="regex:loss (?P<loss>\\S+)")
    with pytest.raises(UsageError, match="--log-format regex:"):
        load([str(f)], log_format="regex:(?P<step>")
    r = runner.invoke(app, ["diagnose", str(f), "--log-format", "regex:(unclosed"])
    assert r.exit_code == 2


def test_prime_rl_metrics_jsonl_and_a_metric_that_vanishes(tmp_path: Path) -> None:
    """prime-rl's FileMonitor: {"step", "time", **metrics} with non-finite values dropped."""
    f = tmp_path / "metrics.jsonl"
    with open(f, "w") as fh:
        for step in range(10):
            metrics = {"loss/mean": 0.5, "entropy/mean": 1.0, "optim/grad_norm": 1.0}
            if step >= 6:
                metrics["optim/grad_norm"] = float("inf")
            sanitized = {k: v for k, v in metrics.items() if math.isfinite(v)}
            fh.write(json.dumps({"step": step, "time": time.time(), **sanitized}) + "\n")
    frame = logs.load_file(f)
    (info,) = frame.runs.values()
    assert info.source == "prime-rl"
    assert frame.data["wall_time"].notna().all()
    assert "time" not in set(frame.data["tag"].astype(str))
    assert any("'optim/grad_norm'" in w and "from step 6" in w for w in info.warnings)
    assert "optim/grad_norm@6" in str(info.hparams["vanished_metrics"])


# -- a console of stdout alone: the printed dicts without tqdm's bars ---------------------
CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "realgen" / "runs"


def _stdout_alone(run: Path) -> str:
    """What a real run printed to stdout: its console (stdout and stderr in one file, as the
    corpus keeps it) without tqdm's bars and cursor moves, which go to stderr -- a Slurm job's
    `.out` file, or `> out.log` without `2>&1` (fixtures/realgen/stdout_only.py)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("stdout_only", CORPUS.parent / "stdout_only.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.stdout_alone((run / "console.log").read_text(errors="replace"))


@pytest.mark.parametrize(
    "name",
    [
        "ho10-grpo-healthy-steps200-s26",  # logging_steps 10, linear decay
        "ho12-grpo-first-ga2-steps150-s30",  # logging_first_step, gradient accumulation 2
        "ho12-orpo-first-log5-s30",  # logging_first_step, logging_steps 5, 2 epochs
        "ho11-rm-overfit-24pairs-30ep-s28",  # evaluations at every epoch's end (steps 3, 6, ..)
        "ho10-rm-flip50-s26",  # evaluation at the last step, 128, off the logging grid
    ],
)
def test_a_console_of_stdout_alone_takes_its_steps_from_the_epochs(
    tmp_path: Path, name: str
) -> None:
    """Real TRL runs' stdout: no dict carries a step, and no bar follows it. Once the run's
    summary is printed, train_runtime x train_steps_per_second is the run's step count, so
    each dict's epoch gives its step: every step equals trainer_state.json's, the evaluations'
    (at epochs' ends) included; `tail` reading the finished file says the same."""
    run = CORPUS / name
    f = tmp_path / "train.out"
    f.write_text(_stdout_alone(run))
    state = json.loads((run / "trainer_state.json").read_text())
    want = {}
    for h in state["log_history"]:
        for k, v in h.items():
            if k not in ("step", "epoch") and "train_runtime" not in h and isinstance(v, float):
                want[(k, h["step"])] = v
    frame = logs.load_file(f)
    (info,) = frame.runs.values()
    assert info.hparams["steps"].startswith("each printed dict's epoch")
    got = _rows(frame)
    assert {s for _, s in got} == {s for _, s in want}
    for (k, step), v in want.items():  # printed to 4 significant digits
        assert got[(k, step)] == pytest.approx(v, rel=6e-4, abs=1e-12), (k, step)
    followed = logs.Follower(f).poll()
    assert _rows(followed) == got


def _printed(logs_: list[dict]) -> str:
    from transformers import TrainingArguments
    from transformers.trainer_callback import PrinterCallback, TrainerControl, TrainerState

    args = TrainingArguments(output_dir="/nonexistent", report_to=[])
    state, control, out = TrainerState(), TrainerControl(), io.StringIO()
    with redirect_stdout(out):
        for d in logs_:
            PrinterCallback().on_log(args, state, control, logs=d)
    return out.getvalue()


def _training(steps: range, per_epoch: int) -> list[dict]:
    return [{"loss": 1 / s, "grad_norm": 0.5, "epoch": s / per_epoch} for s in steps]


def _summary(steps: int, epoch: float, runtime: float = 12.5) -> dict:
    return {
        "train_runtime": runtime,
        "train_steps_per_second": round(steps / runtime, 3),
        "train_loss": 0.1,
        "epoch": epoch,
    }


@pytest.mark.parametrize(
    ("case", "printed"),
    [
        # resumed at step 60: the summary counts the 40 steps of this call
        ("resumed", [*_training(range(70, 101, 10), 50), _summary(40, 2.0)]),
        # the head of the console is missing (logs from step 50 on)
        ("cut head", [*_training(range(50, 101, 10), 50), _summary(100, 2.0)]),
        # the last training log is two intervals before the end
        ("last log early", [*_training(range(10, 81, 10), 50), _summary(100, 2.0)]),
        # two trainings in one console
        ("two runs", _training(range(10, 31, 10), 30) + [_summary(30, 1.0)] * 2),
        (
            "log after",
            [*_training(range(10, 31, 10), 30), _summary(30, 1.0), *_training(range(40, 41), 30)],
        ),
        ("no epochs", [{"loss": 0.5}] * 3 + [_summary(30, 1.0)]),
    ],
)
def test_a_console_of_stdout_alone_keeps_ordinals_when_the_epochs_do_not_fit(
    tmp_path: Path, case: str, printed: list[dict]
) -> None:
    """No step is guessed when the dicts and the summary do not fit one run from step 0,
    logged at a fixed interval, to its end."""
    f = tmp_path / "train.out"
    f.write_text(_printed(printed))
    frame = logs.load_file(f)
    (info,) = frame.runs.values()
    assert info.hparams["steps"].startswith("log ordinals"), case
    assert frame.steps(info.name)[1] == 1


def test_a_console_of_transformers_4_keeps_its_ordinals(tmp_path: Path) -> None:
    """transformers < 5 printed numbers as numbers and its summary counted the planned steps:
    a run stopped early (here at 20 of 100 steps) would fit a grid 5x too wide, so the
    summary is not taken from it."""
    printed = [{"loss": 0.5, "epoch": 0.2}, {"loss": 0.4, "epoch": 0.4}]
    printed.append({"train_runtime": 12.5, "train_steps_per_second": 8.0, "epoch": 0.4})
    f = tmp_path / "train.out"
    f.write_text("".join(f"{d}\n" for d in printed))
    frame = logs.load_file(f)
    (info,) = frame.runs.values()
    assert info.hparams["steps"].startswith("log ordinals")
    assert frame.steps(info.name) == (2, 1, 2)


def test_a_console_of_stdout_alone_fits_the_grid_at_scale(tmp_path: Path) -> None:
    """5,001 steps logged every 10 over 3 epochs of 1,667 steps, epochs printed to 4
    significant digits and the summary's figures too (5,001 steps within ~0.1%): every
    training log's step exact; an evaluation at its own step where its printed epoch pins it,
    else left out and said; a live `tail` that handed out ordinals hands out the whole run
    again, renumbered, when the summary comes."""
    printed = []
    for s in range(1, 5002):
        if s % 10 == 0:
            printed.append({"loss": 1 / s, "epoch": s / 1667})
        if s % 1667 == 0:
            printed.append({"eval_loss": 0.5, "epoch": s / 1667})
    text = _printed([*printed, _summary(5001, 3.0, runtime=3721.37)])
    f = tmp_path / "train.out"
    f.write_text(text)
    frame = logs.load_file(f)
    (info,) = frame.runs.values()
    rows = _rows(frame)
    assert sorted(s for t, s in rows if t == "loss") == list(range(10, 5001, 10))
    evals = sorted(s for t, s in rows if t == "eval_loss")
    assert evals and set(evals) <= {1667, 3334, 5001}  # pinned by the epoch, or left out:
    if len(evals) < 3:
        assert any("evaluation dicts whose printed epoch" in w for w in info.warnings)
    live = tmp_path / "live.out"
    cut = text.index("{'train_runtime'")
    live.write_text(text[:cut])
    follower = logs.Follower(live)
    first = follower.poll()
    (said,) = first.runs.values()
    assert first.steps(said.name)[2] == 500 and not said.replaces  # ordinals so far
    with live.open("a") as fh:
        fh.write(text[cut:])
    again = follower.poll()  # the whole run again, renumbered, as diagnose reads it
    (info_again,) = again.runs.values()
    assert info_again.replaces
    assert _rows(again) == rows
    assert follower.poll().data.empty


def _g4(x: float) -> str:
    return f"{x:.4g}"  # how transformers >= 5 prints every float of a log


@given(
    steps=st.integers(1, 30_000),
    interval=st.integers(1, 700),
    per_epoch=st.integers(1, 8_000),
    first=st.booleans(),
    runtime=st.floats(0.5, 500_000),
    resumed_at=st.integers(0, 30_000),
)
# a run whose 28 printed epochs all round one way: a least-squares epoch size was 0.023% off,
# more than its assumed error, and placed the evaluation at epoch 9 one step early
@example(steps=4872, interval=174, per_epoch=295, first=False, runtime=1.0, resumed_at=0)
@settings(max_examples=400, deadline=None)
def test_steps_from_epochs_are_exact_or_not_given(
    steps: int, interval: int, per_epoch: int, first: bool, runtime: float, resumed_at: int
) -> None:
    """Whatever the run's length, logging interval, epoch size and speed, with every number
    printed to 4 significant digits as transformers prints it: the steps given back are the
    true ones (training logs, and evaluations at epochs' ends where the printed epoch pins
    them; the others are left out), or none are given. A resumed
    run (its summary counting only the steps after the resume) is never renumbered wrongly."""
    from rlwatch.sources.logs._text import epoch_steps

    # resumed from a checkpoint saved after the first log (one saved before it, save_steps <
    # logging_steps, is a run of fewer steps logged at a smaller interval to every figure)
    start = resumed_at if interval <= resumed_at < steps else 0
    truth = [s for s in range(start + 1, steps + 1) if s % interval == 0 or (first and s == 1)]
    every, want = [], []
    for s in range(start + 1, steps + 1):
        if s % interval == 0 or (first and s == 1 and not start):
            every.append((float(_g4(s / per_epoch)), False))
            want.append(s)
        if s % per_epoch == 0:
            every.append((float(_g4(s / per_epoch)), True))
            want.append(s)
    train = [e for e, ev in every if not ev]
    if not train or len(every) > 4000:
        return
    trained = steps - start
    summary = {
        "train_runtime": _g4(round(runtime, 4)),
        "train_steps_per_second": _g4(round(trained / round(runtime, 4), 3)),
        "epoch": _g4(steps / per_epoch),
    }
    got = epoch_steps(train, every, summary)
    if got is not None:  # an evaluation whose epoch does not pin its step is left out (-1)
        assert len(got) == len(want)
        for g, w, (_, evaluation) in zip(got, want, every, strict=True):
            assert g == w or (g == -1 and evaluation), (g, w, truth[:3])


def test_tail_of_a_console_of_stdout_alone_ends_where_diagnose_does(tmp_path: Path) -> None:
    """`tail` follows a real run's stdout while it is written (log ordinals: no step anywhere);
    when the summary comes, the run is handed out again renumbered and evaluated afresh (one
    event says so, no second "appeared"), and its verdicts are diagnose's on the whole file."""
    from rlwatch.api import load_rules
    from rlwatch.live import Watch

    text = _stdout_alone(CORPUS / "ho11-online-dpo-lr4e-2-noclip-s28")
    cut = text.index("{'train_runtime'")
    f = tmp_path / "train.out"
    f.write_text(text[:cut])
    watch = Watch([str(f)], load_rules(), stale_after=1e9, stall_floor=1e9)
    assert [e.kind for e in watch.poll()] == ["appeared"]
    with f.open("a") as fh:
        fh.write(text[cut:])
    events = watch.poll()
    assert events[0].kind == "file" and "evaluated again" in events[0].message
    assert "appeared" not in [e.kind for e in events]
    live = {(v.code, v.state) for v in watch.verdicts() if v.state != "skipped"}
    r = runner.invoke(app, ["diagnose", str(f), "--format", "json", "--exit-zero"])
    batch = {(v["code"], v["state"]) for v in json.loads(r.stdout)["verdicts"]}
    assert live == {x for x in batch if x[1] != "skipped"}
    assert ("RW06", "firing") in live


def test_a_console_with_more_dicts_than_kept_keeps_all_its_ordinals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the bound on the dicts remembered for renumbering, the summary that follows does
    not renumber the ones remembered: every row keeps its ordinal, none is mixed."""
    from rlwatch.sources.logs import _text

    monkeypatch.setattr(_text, "MAX_DICTS", 6)  # the 7th dict, an evaluation's, is not kept
    f = tmp_path / "train.out"
    printed = [*_training(range(10, 61, 10), 60), {"eval_loss": 0.5, "epoch": 1.0}]
    f.write_text(_printed([*printed, _summary(60, 1.0)]))
    frame = logs.load_file(f)
    (info,) = frame.runs.values()
    assert info.hparams["steps"].startswith("log ordinals")
    assert sorted({s for _, s in _rows(frame)}) == [1, 2, 3, 4, 5, 6]


def test_torchtune_disk_logger_lines(tmp_path: Path) -> None:
    """torchtune's DiskLogger writes `Step N | name:value name:value ` (0-d tensors printed
    as numbers). A PPO run whose responses never stop (num_stop_tokens 0 on every log) is
    read with torchtune's names and fails on LN08."""
    torch = pytest.importorskip("torch")
    p = tmp_path / "log_1732700000.txt"
    with p.open("w") as f:  # as DiskLogger.log_dict writes it
        for step in range(1, 25):
            payload = {
                "scores": torch.tensor(0.5 + step / 100).mean(),
                "num_stop_tokens": torch.tensor(0),
                "kl": torch.tensor(0.02 * step),
                "loss": torch.tensor(0.3),
                "clipfrac": torch.tensor(0.01),
                "ratios": torch.tensor(1.0),
                "approx_policy_kl": torch.tensor(1e-4),
                "response_lengths": torch.tensor(256.0),
            }
            f.write(f"Step {step} | ")
            for name, data in payload.items():
                f.write(f"{name}:{data} ")
            f.write("\n")
    frame = load(str(p))
    (info,) = frame.runs.values()
    assert info.framework == "torchtune"
    assert info.metrics["reward_mean"] == "scores"
    assert info.metrics["eos_count"] == "num_stop_tokens"
    rows = _rows(frame)
    assert [rows["scores", s] for s in range(1, 25)] == pytest.approx(
        [0.5 + s / 100 for s in range(1, 25)], rel=1e-6
    )
    res = runner.invoke(app, ["diagnose", str(p)])
    assert res.exit_code == 1, res.output
    assert "LN08" in res.output


def test_a_hand_written_trainers_jsonl_with_its_own_step_counter_and_record_kinds(
    tmp_path: Path,
) -> None:
    """A hand-written GRPO loop's metrics.jsonl (the shape of course code: `json.dumps` of a
    dict per event): no `step` key but `grpo_step`, records of several kinds told by `type`,
    None for what is turned off. The step is the loop's own counter; an evaluation's keys are
    `eval/...` and never overwrite the rollout's same-named reward of its step; a null is not
    logged (no all-NaN KL to fail the run), while a NaN written as NaN stays NaN."""
    f = tmp_path / "metrics.jsonl"
    with open(f, "w") as out:
        for step in range(0, 13):
            if step % 4 == 0:
                rec = {"type": "eval", "grpo_step": step, "optimizer_step": 2 * step}
                out.write(json.dumps(rec | {"reward": 0.9, "answer_accuracy": 0.5}) + "\n")
            if step == 0:
                continue
            rollout = {"type": "rollout", "grpo_step": step, "reward": step / 100}
            out.write(json.dumps(rollout | {"std_reward": 0.3, "mean_reward": step / 100}) + "\n")
            train = {"type": "train", "grpo_step": step, "optimizer_step": 2 * step}
            train |= {"loss": 0.1, "grad_norm": math.nan if step == 12 else 0.5}
            train |= {"token_entropy": 0.8, "reference_kl": None, "loss_type": "grpo"}
            out.write(json.dumps(train) + "\n")
    assert '"reference_kl": null' in f.read_text() and "NaN" in f.read_text()
    frame = logs.load_file(f)
    (info,) = frame.runs.values()
    w = frame.wide(info.name)
    assert list(w.index) == list(range(0, 13))
    assert w["reward_mean"].loc[4] == 0.04  # the rollout's, not the evaluation's 0.9
    assert w["val_score"].loc[4] == 0.9 and w["val_score"].loc[8] == 0.9
    assert w["entropy"].loc[3] == 0.8 and w["reward_std"].loc[3] == 0.3
    assert "kl_ref" not in w and "reference_kl" not in set(frame.data["tag"])
    assert math.isnan(w["grad_norm"].loc[12])
    assert not any(t in ("type", "grpo_step", "eval/grpo_step") for t in set(frame.data["tag"]))


def test_counted_lines_of_words_and_a_number_separated_by_commas(tmp_path: Path) -> None:
    """The print of LLMs-from-scratch's DPO loop, `Ep 1 (Step 000005): Train loss 0.687, Val
    loss 0.688, Train reward margins 0.026, Val reward margins 0.021`: after the counter,
    items of words and a number, a first word naming the split (`Train`, `Val`) out of the
    key. A counted line with any other item has no such pairs."""
    lines = ["Ep 1 (Step 000000): loading shards, done"]
    for i, step in enumerate(range(0, 40, 5)):
        train_loss, val_loss, tm, vm = 0.693 - 0.01 * i, 0.694 - 0.008 * i, 0.02 * i, 0.015 * i
        lines.append(
            f"Ep 1 (Step {step:06d}): Train loss {train_loss:.3f}, Val loss {val_loss:.3f}, "
            f"Train reward margins {tm:.3f}, Val reward margins {vm:.3f}"
        )
    f = tmp_path / "dpo.log"
    f.write_text("\n".join(lines) + "\n")
    frame = logs.load_file(f)
    (info,) = frame.runs.values()
    assert info.source == "kv-pairs"
    w = frame.wide(info.name)
    assert list(w.index) == list(range(0, 40, 5))
    assert w["loss"].loc[5] == 0.683 and w["eval_loss"].loc[35] == 0.638
    assert w["dpo_margin"].loc[35] == 0.14
    assert {"loss", "eval/loss", "reward_margins", "eval/reward_margins"} == set(frame.data["tag"])


def test_a_second_training_after_a_summary_that_gave_the_first_its_steps(tmp_path: Path) -> None:
    """A real stdout whose summary gives the dicts their steps back (transformers >= 5), the
    training run twice into one file: diagnose reads the last training, its steps from its own
    summary; `tail`, which renumbered the first training when its summary came, drops it when
    the second starts, and ends with diagnose's rows."""
    one = _stdout_alone(CORPUS / "ho11-online-dpo-lr4e-2-noclip-s28")
    assert "{'train_runtime'" in one
    f = tmp_path / "train.out"
    f.write_text(one)
    first = logs.load_file(f)
    (alone,) = first.runs.values()
    assert "epoch" in alone.hparams["steps"]  # renumbered from the summary
    text = one + one
    f.write_text(text)
    frame = logs.load_file(f)
    (info,) = frame.runs.values()
    assert "epoch" in info.hparams["steps"]
    assert any("1 earlier training(s)" in w for w in info.warnings)
    rows = _rows(frame)
    assert rows == _rows(first) and len(rows) > 20  # the last training, as read alone
    # the first training whole before the second: renumbered by its summary meanwhile
    assert followed_rows(tmp_path, "train.out", [one, one], [100, 1000, 5000], seed=5) == rows


def test_halos_console_counts_its_logs_by_examples_seen(tmp_path: Path) -> None:
    """ContextualAI's HALOs prints `train stats after {examples} examples: {...}` and `eval
    after {examples}: {...}` (floats formatted as strings by its `formatted_dict`, counters as
    ints) between config dumps and warnings. The examples seen are the step, shared by train and
    eval; its DPO keys are read as DPO's, and a DPO whose chosen log-prob falls 200 nats fails
    on the likelihood collapse."""

    def formatted(d: dict) -> dict:  # as HALOs' utils.formatted_dict
        return {k: (f"{v:.5g}" if isinstance(v, float) else v) for k, v in d.items()}

    p = tmp_path / "halos_train_dpo.txt"
    with p.open("w") as f:
        f.write("seed: 1\nexp_name: llama2_7b_dpo\nloss:\n  name: dpo\n  beta: 0.01\n")
        f.write("eval after 0: " + str(formatted({"loss/eval": 0.69141})) + "\n")
        for i in range(1, 41):
            stats = {
                "rewards_train/chosen": -0.01 * i,
                "rewards_train/rejected": -0.03 * i,
                "rewards_train/accuracies": 0.6,
                "rewards_train/margins": 0.02 * i,
                "logps_train/rejected": -139.0 - 15.0 * i,
                "logps_train/chosen": -44.0 - 5.0 * i,
                "loss/train": 0.69 - 0.001 * i,
                "examples_per_second": 6.19,
                "grad_norm": 3.0,
                "counters/examples": 64 * i,
                "counters/updates": 4 * i,
            }
            f.write(f"train stats after {64 * i} examples: {formatted(stats)}\n")
            if i % 20 == 0:
                f.write(f"eval after {64 * i}: {formatted({'loss/eval': 0.7 + i / 100})}\n")
    assert "'grad_norm': '3', 'counters/examples': 64," in p.read_text()
    frame = logs.load_file(p)
    (info,) = frame.runs.values()
    assert info.framework == "halos" and "HALOs" in info.hparams["steps"]
    assert info.metrics["dpo_logps_chosen"] == "logps_train/chosen"
    assert info.metrics["eval_loss"] == "loss/eval"
    rows = _rows(frame)
    assert rows["logps_train/chosen", 64 * 40] == -244.0 and rows["loss/eval", 0] == 0.69141
    assert rows["loss/eval", 1280] == 0.9 and rows["counters/updates", 128] == 8
    res = runner.invoke(app, ["diagnose", str(p)])
    assert res.exit_code == 1 and "DP03" in res.output, res.output


def _mlx_report(it: int, reward: float, hit: float, clip: float) -> str:
    """mlx-lm-lora's GRPO report, as its trainer's `tqdm.write` f-string prints it."""
    return (
        f"\n{'=' * 80}\nIter {it}:\n{'-' * 80}\n"
        f"Loss: {0.02 + it / 1000:.3f}\n"
        f"Total Rewards:  \u03bc={reward:.3f}, \u03c3={reward / 10:.3f}\n"
        f"Group Rewards:  \u03bc={reward:.3f}, \u03c3=0.150\n"
        f"KL Divergence: {it / 1e5:.12f}\n"
        f"{'-' * 80}\nGeneration Stats:\n"
        f"  \u2022 Avg tokens: {800 + it:.1f}\n  \u2022 Min tokens: 701\n"
        f"  \u2022 Max tokens: 943 (limit: 2048)\n  \u2022 Hit limit: {hit:.1%}\n"
        f"{'-' * 80}\nIndividual Reward Functions:\n"
        f"  \u2022 check_answer: \u03bc={reward / 2:.3f}, \u03c3=0.000, cov=100.00%\n"
        f"{'-' * 80}\n"
        f"Clipping:  low={clip / 2:.3f}, high={clip / 2:.3f}, total={clip:.3f}\n"
        f"Learning Rate: 6.0000e-04\nSpeed: 0.015 it/s, 25.4 tok/s\nMemory: 13.269GB\n"
        f"{'=' * 80}\n"
    )


def test_mlx_lm_lora_grpo_reports_are_read_with_their_statistics(tmp_path: Path) -> None:
    """mlx-lm-lora's GRPO report block (`Iter N:`, then `Total Rewards:  μ=1.950, σ=0.150`,
    `  • Hit limit: 20.0%`, `Clipping:  low=.., high=.., total=..`): each statistic read under
    its label's name and mapped to the canonical metrics (before: the rewards and the clipping
    were not read, so a run whose every completion hit the limit passed on its loss)."""
    f = tmp_path / "grpo.log"
    f.write_text(
        "Starting GRPO training..., iters: 100\n"
        + "".join(_mlx_report(it, 1.9 - it / 100, 1.0, 0.3) for it in range(5, 105, 5)),
        encoding="utf-8",
    )
    frame = load(str(f))
    (info,) = frame.runs.values()
    assert info.framework == "mlx_lm_lora"
    d = frame.data
    got = {(m, s): v for m, s, v in zip(d.metric, d.step, d.value, strict=True)}
    assert got[("reward_mean", 10)] == 1.8 and got[("reward_std", 10)] == 0.18
    assert got[("truncation_rate", 50)] == 1.0 and got[("clip_frac", 50)] == 0.3
    assert got[("kl_ref", 100)] == 0.001 and got[("response_length_mean", 20)] == 820.0
    tags = set(d.tag.astype(str))
    assert {"check_answer/mean", "check_answer/cov", "clipping/low"} <= tags
    r = CliRunner().invoke(app, ["diagnose", str(f), "--format", "json"])
    assert r.exit_code == 1, r.output
    fired = {v["code"] for v in json.loads(r.stdout)["verdicts"] if v["state"] == "firing"}
    assert "LN02" in fired, fired


@pytest.mark.parametrize("kind_key", ["split", "log_type"])
def test_records_that_say_their_kind_keep_it_on_the_block_reader_too(
    tmp_path: Path, kind_key: str
) -> None:
    """A game-playing loop's JSONL (`{"log_type": "train"|"eval", "step", "final_reward",
    ...}`, one record per game, 25 evaluation games at every 30th step): plain records
    without a null go to Arrow's block reader, which must still tell the kinds apart. An
    evaluation's games are `eval/...`, never the training game of their step."""
    f = tmp_path / "training_metrics.jsonl"
    with open(f, "w") as out:
        for step in range(1, 91):
            rec = {kind_key: "train", "step": step, "word": "CRANE", "solved": step % 3 == 0}
            out.write(json.dumps(rec | {"final_reward": step / 100, "loss_at_step": 0.5}) + "\n")
            if step % 30 == 0:
                for _ in range(25):
                    ev = {kind_key: "eval", "step": step, "word": "SLATE", "solved": True}
                    out.write(json.dumps(ev | {"final_reward": 9.0, "loss_at_step": 0.0}) + "\n")
    assert "null" not in f.read_text()
    frame = logs.load_file(f)
    (info,) = frame.runs.values()
    w = frame.wide(info.name)
    assert list(w.index) == list(range(1, 91))
    assert w["reward_mean"].loc[30] == 0.3 and w["reward_mean"].loc[90] == 0.9
    tags = set(frame.data["tag"])
    assert "eval/final_reward" in tags and kind_key not in tags
    ev = frame.data[frame.data["tag"] == "eval/final_reward"]
    assert sorted(ev["step"]) == [30, 60, 90] and set(ev["value"]) == {9.0}
