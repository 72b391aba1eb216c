"""Log shapes found in public repositories (the third search of issue #12), each written here
exactly as the real tool writes it: a console whose first metric line comes after pages of
warnings, Unsloth/TRL notebook progress tables (training columns, two training stages), a
notebook in a run folder, metrics CSVs (verl's, a W&B export, a custom loop's) and
DeepSpeed-Chat's step-3 PPO log with its reward on the line after the step."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlwatch.cli.app import app
from rlwatch.errors import SourceError
from rlwatch.sources import discover, load, logs


def _values(frame, metric: str) -> list[float]:
    d = frame.data[frame.data["metric"].astype(str) == metric].sort_values("step")
    return d["value"].tolist()


# -- a first metric line past the sniffed head ----------------------------------------------
WARNING = (
    "[RANK 0] Mismatch between tokenized prompt and the start of tokenized prompt+chosen. "
    "This may be due to an unexpected tokenizer behaviour.\n"
)


def test_a_console_whose_first_dict_comes_after_pages_of_warnings(tmp_path: Path) -> None:
    """TRL's DPO console printed 1,769 tokenizer warnings (450 KB) before its first log."""
    p = tmp_path / "dpo.log"
    body = WARNING * 4000
    assert len(body) > logs.HEAD
    rows = [
        f"{{'loss': '{0.69 - i / 100:.4f}', 'grad_norm': '1.2', 'rewards/chosen': '0.0{i}', "
        f"'rewards/rejected': '-0.0{i}', 'epoch': '{i / 10:.2f}'}}\n"
        for i in range(1, 6)
    ]
    p.write_text(body + "".join(rows))
    assert logs.sniff(p) == "python-dicts"
    frame = load(str(p))
    assert _values(frame, "loss") == pytest.approx([0.68, 0.67, 0.66, 0.65, 0.64])


def test_a_verl_console_after_a_megabyte_of_debug_prints(tmp_path: Path) -> None:
    p = tmp_path / "output.log"
    debug = "".join(
        f"[response] sample {i}: <answer>{i % 7}</answer> score=0.0\n" for i in range(20_000)
    )
    steps = "".join(
        f"step:{s} - actor/entropy:{0.4 - s / 100:.4f} - critic/score/mean:{s / 10:.3f}\n"
        for s in range(1, 10)
    )
    p.write_text(debug + steps)
    assert p.stat().st_size > 4 * logs.HEAD
    assert logs.sniff(p) == "verl-console"
    assert _values(load(str(p)), "reward_mean") == pytest.approx([s / 10 for s in range(1, 10)])


def test_only_captured_output_is_sniffed_past_its_head(tmp_path: Path) -> None:
    """A large page or notebook in a folder is judged by its first 256 KiB: a docs folder of big
    HTML files is not read 16 MiB a file."""
    body = WARNING * 4000 + "step:1 - actor/entropy:0.5 - critic/score/mean:0.1\n" * 3
    (tmp_path / "report.html").write_text(body)
    (tmp_path / "job.out").write_text(body)
    with pytest.raises(SourceError, match="unrecognised log format"):
        logs.sniff(tmp_path / "report.html")
    assert logs.sniff(tmp_path / "job.out") == "verl-console"


def test_sniffing_gives_up_after_its_bound(tmp_path: Path) -> None:
    """No format in the first 16 MiB: unrecognised, however long the file (bounded work)."""
    p = tmp_path / "noise.log"
    with open(p, "w") as f:
        line = "nothing to see here, just a long debug line\n"
        f.write(line * ((logs.DEEP + (1 << 20)) // len(line)))
        f.write("step:1 - actor/entropy:0.5 - critic/score/mean:0.1\n" * 3)
    with pytest.raises(SourceError, match="unrecognised log format"):
        logs.sniff(p)


# -- notebook progress tables -----------------------------------------------------------------
def _html_table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{h}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table border="1" class="dataframe"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _notebook(*tables: str) -> str:
    """An .ipynb whose cells' saved outputs hold these HTML tables (as Jupyter saves them)."""
    cells = [
        {
            "cell_type": "code",
            "outputs": [{"output_type": "display_data", "data": {"text/html": t.splitlines(True)}}],
            "source": ["trainer.train()"],
        }
        for t in tables
    ]
    return json.dumps({"cells": cells, "nbformat": 4, "nbformat_minor": 5}, indent=1)


GRPO_COLUMNS = [
    "Step", "Training Loss", "reward", "reward_std", "completions / mean_length",
    "completions / clipped_ratio", "kl", "rewards / correctness_reward_func / mean",
]  # fmt: skip


def _grpo_rows(n: int) -> list[list[str]]:
    return [
        [str(s), "0.0001", f"{s / 10:.3f}", "0.5", "120.5", "0.1", "0.0004", f"{s / 20:.3f}"]
        for s in range(1, n + 1)
    ]


def test_training_columns_of_a_grpo_table_keep_their_logged_keys(tmp_path: Path) -> None:
    """Unsloth's/TRL's table writes the logged keys lower case with ' / ' for '/'; only
    transformers' capitalised columns are evaluation metrics."""
    p = tmp_path / "grpo.ipynb"
    p.write_text(_notebook(_html_table(GRPO_COLUMNS, _grpo_rows(12))))
    frame = load(str(p))
    (info,) = frame.runs.values()
    assert info.metrics["reward_mean"] == "reward"
    assert info.metrics["truncation_rate"] == "completions/clipped_ratio"
    assert info.metrics["response_length_mean"] == "completions/mean_length"
    assert "val_score" not in info.metrics  # the training reward is no validation score
    assert _values(frame, "reward_mean")[:3] == pytest.approx([0.1, 0.2, 0.3])
    eval_table = _html_table(["Epoch", "Training Loss", "Validation Loss", "Accuracy"],
                             [["1", "0.5", "0.6", "0.7"], ["2", "0.4", "0.5", "0.8"]])  # fmt: skip
    q = tmp_path / "eval.html"
    q.write_text(eval_table)
    assert set(load(str(q)).data["tag"].astype(str)) == {"loss", "eval_loss", "eval_accuracy"}


def test_a_progress_table_pasted_into_a_github_comment(tmp_path: Path) -> None:
    """GitHub turns a notebook's HTML table pasted into an issue into `Step | Training Loss |
    ...` rows under a `-- | --` line, no outer pipes; a row cut mid-number is left out."""
    head = " | ".join(GRPO_COLUMNS)
    rows = [" | ".join(r) for r in _grpo_rows(11)]
    p = tmp_path / "comment.md"
    p.write_text(
        "```\n" + head + "\n" + " | ".join(["--"] * len(GRPO_COLUMNS)) + "\n"
        + "\n".join(rows) + "\n12 | 0.0001 | 1.2 | 0.5 | 12"
    )  # fmt: skip
    frame = load(str(p))
    (info,) = frame.runs.values()
    assert frame.steps(info.name)[1:] == (1, 11)
    assert _values(frame, "reward_mean") == pytest.approx([s / 10 for s in range(1, 12)])
    assert info.metrics["truncation_rate"] == "completions/clipped_ratio"


def test_a_notebook_with_an_sft_stage_then_grpo_reads_the_grpo_table(tmp_path: Path) -> None:
    sft = _html_table(["Step", "Training Loss"], [[str(s), "1.5"] for s in range(1, 30)])
    p = tmp_path / "two-stages.ipynb"
    p.write_text(_notebook(sft, _html_table(GRPO_COLUMNS, _grpo_rows(8))))
    frame = load(str(p))
    (info,) = frame.runs.values()
    assert frame.steps(info.name)[1:] == (1, 8)
    assert _values(frame, "loss") == pytest.approx([0.0001] * 8)  # not the SFT losses
    assert any(
        "an earlier progress table (Step | Training Loss; 29 rows)" in w for w in info.warnings
    )


def test_a_notebook_reads_the_training_its_last_table_continues(tmp_path: Path) -> None:
    """Tables with the last one's columns are one training when each goes on after the steps of
    the one before (resumed from a checkpoint in another cell); a table whose steps the next one
    starts again is an earlier training (a 10-step smoke test before the real run): not read,
    and said, so its lucky early rewards are no best level the run falls from."""
    smoke = [[str(s), "0.0", "0.5", "0.5", "90", "0.0", "0.0", "0.2"] for s in range(1, 11)]
    run = [[str(s), "0.0", "0.2", "0.5", "90", "0.0", "0.0", "0.1"] for s in range(5, 205, 5)]
    resumed = [[str(s), "0.0", "0.2", "0.5", "90", "0.0", "0.0", "0.1"] for s in range(205, 305, 5)]
    p = tmp_path / "grpo_training.ipynb"
    p.write_text(_notebook(*(_html_table(GRPO_COLUMNS, rows) for rows in (smoke, run, resumed))))
    frame = load(str(p))
    (info,) = frame.runs.values()
    assert frame.steps(info.name) == (60, 5, 300)
    assert _values(frame, "reward_mean") == pytest.approx([0.2] * 60)
    (note,) = [w for w in info.warnings if "earlier progress table" in w]
    assert "10 rows) whose steps a later table's start again: an earlier training" in note
    res = CliRunner().invoke(app, ["diagnose", str(p)])
    assert res.exit_code == 0, res.output


def test_a_loss_only_table_beside_a_callbacks_printed_logs_reads_the_logs(
    tmp_path: Path,
) -> None:
    """transformers' table of `Step | Training Loss` alone, in a notebook whose callback prints
    every metric of each step (`[Step 12] loss=0.0001 ... completions/clipped_ratio=1.0000
    ...`): the printed logs are the run (before, only its loss was read, and a run truncated
    on every step passed); a table with more columns stays the run."""
    table = _html_table(["Step", "Training Loss"], [[str(s), "0.000100"] for s in range(1, 41)])
    printed = [
        f"[Step {s}] loss=0.0001 grad_norm=0.0012 completions/mean_length=1024.0000 "
        f"completions/clipped_ratio=1.0000 reward=0.3000 reward_std=0.0000 kl=0.0012\n"
        for s in range(1, 41)
    ]
    nb = json.loads(_notebook(table))
    nb["cells"][0]["outputs"].insert(
        0, {"output_type": "stream", "name": "stdout", "text": printed}
    )
    p = tmp_path / "grpo_train.ipynb"
    p.write_text(json.dumps(nb, indent=1))
    assert logs.sniff(p) == "kv-pairs"
    frame = load(str(p))
    (info,) = frame.runs.values()
    assert info.metrics["truncation_rate"] == "completions/clipped_ratio"
    assert frame.steps(info.name) == (40, 1, 40)
    res = CliRunner().invoke(app, ["diagnose", str(p)])
    assert res.exit_code == 1 and "LN02" in res.output, res.output
    q = tmp_path / "grpo.ipynb"  # the table of every metric is read as before
    q.write_text(_notebook(_html_table(GRPO_COLUMNS, _grpo_rows(12))))
    assert logs.sniff(q) == "notebook-table"


def test_a_notebook_whose_table_comes_after_megabytes_of_images_is_read(tmp_path: Path) -> None:
    """A vision notebook saves its sample images (base64 PNG) before the training table: the
    table is found past the first 256 KiB a sniff reads (a cookbook notebook's lies at 3.4 MB),
    in a folder walk too; a page with no table is still no run."""
    import base64

    image = {"image/png": base64.b64encode(bytes(range(256)) * 4096).decode()}  # ~1.4 MB
    cells = [{"cell_type": "code", "outputs": [{"output_type": "display_data", "data": image}]}]
    nb = json.loads(_notebook(_html_table(GRPO_COLUMNS, _grpo_rows(12))))
    nb["cells"] = cells * 2 + nb["cells"]
    p = tmp_path / "vlm" / "fine_tuning_vlm.ipynb"
    p.parent.mkdir()
    p.write_text(json.dumps(nb, indent=1))
    assert p.stat().st_size > 2 << 20
    frame = load(str(p))
    (info,) = frame.runs.values()
    assert info.metrics["reward_mean"] == "reward" and frame.steps(info.name)[1:] == (1, 12)
    assert [f.name for f in discover(tmp_path).runs] == ["vlm"]
    assert not info.warnings
    cut = tmp_path / "cut.ipynb"  # cut inside the table: its rows so far, and a warning
    text = p.read_text()
    cut.write_text(text[: text.index("<td>7</td>")])
    frame = load(str(cut))
    (info,) = frame.runs.values()
    assert frame.steps(info.name)[1:] == (1, 6)
    assert any("the notebook ends before its JSON does" in w for w in info.warnings)
    nb["cells"] = cells * 2
    q = tmp_path / "images.ipynb"
    q.write_text(json.dumps(nb))
    with pytest.raises(SourceError, match="unrecognised log format"):
        load(str(q))


def test_a_run_folder_holds_a_notebook_and_a_page_of_pasted_logs(tmp_path: Path) -> None:
    (tmp_path / "nb").mkdir()
    (tmp_path / "nb" / "Qwen_GRPO.ipynb").write_text(
        _notebook(_html_table(GRPO_COLUMNS, _grpo_rows(6)))
    )
    (tmp_path / "paste").mkdir()
    (tmp_path / "paste" / "part-of-logs.md").write_text(
        "# run\n\n```\n"
        + "".join(
            f"step:{s} - critic/score/mean:0.18 - actor/entropy:0.005\n" for s in range(383, 400)
        )
        + "```\n"
    )
    # a README quoting a log line is the project's document, not a run
    (tmp_path / "README.md").write_text(
        "Example:\n\n    {'loss': 0.5, 'grad_norm': 1.0}\n    {'loss': 0.4, 'grad_norm': 1.0}\n"
    )
    found = discover(tmp_path)
    assert sorted(f.name for f in found.runs) == ["nb", "paste"]


# -- CSV --------------------------------------------------------------------------------------
VERL_CSV = (
    "step,perf/throughput,critic/vf_loss,actor/pg_loss,critic/rewards/mean,timing_s/gen,"
    "timing_s/testing\n"
    "1,2796.793558,0.502520,0.001795,0.000000,4.089510,\n"
    "2,2664.632593,0.417359,0.000465,0.015625,4.532629,\n"
    "3,2653.829485,1.285217,0.008219,0.007812,4.597769,\n"
)


def test_a_verl_metrics_csv(tmp_path: Path) -> None:
    p = tmp_path / "dp_2_gpu_parsed.csv"
    p.write_text(VERL_CSV)
    assert logs.sniff(p) == "csv"
    frame = load(str(p))
    (info,) = frame.runs.values()
    assert info.framework == "verl"
    assert _values(frame, "reward_mean") == pytest.approx([0.0, 0.015625, 0.007812])
    assert frame.steps(info.name)[1:] == (1, 3)


def test_a_wandb_csv_export(tmp_path: Path) -> None:
    """W&B's panel export: Step, then `<run> - <key>` with its __MIN/__MAX band columns."""
    p = tmp_path / "wandb_export.csv"
    rows = [
        '"Step","grpo-7b - train/reward","grpo-7b - train/reward__MIN","grpo-7b - train/reward__MAX"'
    ]
    rows += [f'"{s}","{s / 10}","{s / 10 - 0.05}","{s / 10 + 0.05}"' for s in range(1, 6)]
    p.write_text("\n".join(rows) + "\n")
    frame = load(str(p))
    assert set(frame.data["tag"].astype(str)) == {"train/reward"}
    assert _values(frame, "reward_mean") == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5])


def test_a_custom_metrics_csv_without_a_step_column(tmp_path: Path) -> None:
    p = tmp_path / "metrics.csv"
    p.write_text("timestamp,loss,mean_reward,training_phase\n"
                 "2026-04-26T03:38:38,0.0006,0.91,GROUNDED_ONLY\n"
                 "2026-04-26T03:41:58,-0.00003,0.85,GROUNDED_ONLY\n"
                 "2026-04-26T03:45:01,0.0002,0.88,GROUNDED_ONLY\n")  # fmt: skip
    frame = load(str(p))
    (info,) = frame.runs.values()
    assert frame.steps(info.name)[1:] == (1, 3)
    assert info.hparams["steps"] == "row numbers (no step column)"
    assert any("non-numeric values" in w and "timestamp" in w for w in info.warnings)


def test_a_csv_still_being_written_keeps_its_last_line_for_later(tmp_path: Path) -> None:
    p = tmp_path / "live.csv"
    p.write_text(VERL_CSV + "4,2600.1,0.3")  # the writer is inside row 4
    frame = load(str(p))
    (info,) = frame.runs.values()
    assert frame.steps(info.name)[1:] == (1, 3)
    assert any("last line incomplete" in w for w in info.warnings)


# -- DeepSpeed-Chat ------------------------------------------------------------------------------
def _dschat(steps: int) -> str:
    out = [
        "***** Running training *****",
        "Beginning of Epoch 1/1, Total Generation Batches 477",
    ]
    for s in range(steps):
        out += [
            f"epoch: 0|step: {s}|ppo_ep: 1|act_loss: {0.3 - s / 100}|cri_loss: 0.169|unsuper_loss: 0.0",
            f"average reward score: {-0.06 + s / 10}",
            "-" * 85,
            "|E2E latency=3.73s |Gather latency=0.00s (0.00%) |Generate time=2.78s (74.61%) "
            "|Training time=0.74s (19.84%) |Others=0.21 (5.55%)|CurSamplesPerSec=17.17 "
            "|AvgSamplesPerSec=10.92",
            "[2023-04-18 08:48:09,105] [INFO] [loss_scaler.py:181:update_scale] [deepspeed] "
            "OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 32768, reducing to 16384",
        ]
    return "\n".join(out) + "\n"


def test_deepspeed_chat_step3_reads_the_reward_printed_after_each_step(tmp_path: Path) -> None:
    p = tmp_path / "training.log"
    p.write_text(_dschat(8))
    frame = load(str(p))
    (info,) = frame.runs.values()
    assert info.framework == "deepspeed_chat"
    assert _values(frame, "reward_mean") == pytest.approx([-0.06 + s / 10 for s in range(8)])
    assert _values(frame, "loss") == pytest.approx([0.3 - s / 100 for s in range(8)])
    assert info.metrics["value_loss"] == "cri_loss"
    assert frame.steps(info.name)[1:] == (0, 7)


def test_deepspeed_chat_step_lines_after_ten_thousand_lines_of_launcher_output(
    tmp_path: Path,
) -> None:
    """A 96-rank launch prints ten thousand lines and more (model loading, ZeRO-3 partitioning,
    DeepSpeed's own `step=1, skipped=0` lines) before the first step line, past the first 256
    KiB and deep in a later block, past the 2,000 lines of it the line sniffers probe: the
    lines naming a step are probed."""
    launch = "".join(
        f"[2023-06-26 18:{i // 600 % 60:02d}:{i // 10 % 60:02d},546] [INFO] [partition_parameters.py:"
        f"{i % 500}:_post_init] rank {i % 96}: partitioned parameter {i} of shape (4096, 4096)\n"
        for i in range(16_000)
    )  # fmt: skip
    launch += (
        "[2023-06-26 18:44:51,546] [INFO] [logging.py:96:log_dist] [Rank 0] step=1, skipped=0, "
        "lr=[1e-08, 1e-08], mom=[(0.9, 0.95), (0.9, 0.95)]\n"
    )
    p = tmp_path / "actor_chatglm-6b_step3.log"
    p.write_text(launch + _dschat(12))
    assert len(launch) > 256 * 1024 + (1 << 20) + 300_000  # past the 2,000 lines of block 2
    frame = load(str(p))
    (info,) = frame.runs.values()
    assert info.framework == "deepspeed_chat"
    assert _values(frame, "reward_mean") == pytest.approx([-0.06 + s / 10 for s in range(12)])
    assert frame.steps(info.name)[1:] == (0, 11)


# -- CSV: properties ------------------------------------------------------------------------
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from rlwatch.frame import RunFrame  # noqa: E402

_numbers = st.floats(allow_nan=False, allow_infinity=False, width=64)


@settings(max_examples=150, deadline=None)
@given(
    table=st.lists(st.lists(_numbers, min_size=2, max_size=2), min_size=1, max_size=30),
    crlf=st.booleans(),
)
def test_a_csv_table_reads_back_its_values(tmp_path_factory, table, crlf: bool) -> None:
    p = tmp_path_factory.mktemp("csv") / "metrics.csv"
    end = "\r\n" if crlf else "\n"
    rows = ["step,loss,reward"] + [f"{i},{a!r},{b!r}" for i, (a, b) in enumerate(table)]
    p.write_text(end.join(rows) + end)
    frame = load(str(p))
    assert _values(frame, "loss") == [a for a, _ in table]
    assert _values(frame, "reward_mean") == [b for _, b in table]


@settings(max_examples=300, deadline=None)
@given(
    data=st.binary(max_size=3000)
    | st.text(alphabet='step,loss"\r\n\x00 0123456789.e-', max_size=400).map(str.encode)
)
def test_any_bytes_read_as_csv_are_rows_or_one_error(tmp_path_factory, data: bytes) -> None:
    """Forced `--log-format csv` on anything (stray quotes, CRs and NULs inside a line): a
    frame, or a SourceError (one line, exit 2), never another exception."""
    p = tmp_path_factory.mktemp("csv") / "x.csv"
    p.write_bytes(data)
    try:
        frame = logs.load_file(p, "csv")
    except SourceError:
        return
    assert isinstance(frame, RunFrame) and len(frame.data) > 0


def test_a_several_run_wandb_export_is_its_runs(tmp_path: Path) -> None:
    """A W&B panel exported with the runs it compares (`<run> - <key>` columns) is each of
    those runs, read with its own columns: given alone (named by the runs), in a folder beside
    another log (named under the file), by diagnose and tail alike, none skipped. It was one
    run whose columns kept their prefixed names, so no rule evaluated it."""
    import json
    import re

    from typer.testing import CliRunner

    from rlwatch.cli.app import app

    head = ['"Step"'] + [f'"{r} - actor/entropy{x}"' for r in ("a", "b") for x in ("", "__MIN")]
    rows = [",".join(head)]
    rows += [f'"{s}","0.5","0.5","{0.5 * 0.9**s}","{0.5 * 0.9**s}"' for s in range(1, 41)]
    export = tmp_path / "wandb_export.csv"
    export.write_text("\n".join(rows) + "\n")
    (tmp_path / "train.jsonl").write_text(
        "".join(json.dumps({"step": s, "loss": 1 / s}) + "\n" for s in range(1, 31))
    )
    for target, names in (
        (export, ["a", "b"]),
        (tmp_path, ["train", "wandb_export/a", "wandb_export/b"]),
    ):
        r = CliRunner().invoke(app, ["diagnose", str(target), "--format", "json", "--exit-zero"])
        assert r.exit_code == 0, r.output
        report = json.loads(r.stdout)
        assert sorted(run["name"] for run in report["runs"]) == names and not report["skipped"]
        t = CliRunner().invoke(app, ["tail", str(target), "--once", "--plain"])
        assert t.exit_code == 0, t.output
        assert sorted(re.findall(r" (\S+): appeared", t.stdout)) == names, t.stdout
    m = CliRunner().invoke(app, ["metrics", str(export), "--format", "json"])
    runs = {run["name"]: run["metrics"] for run in json.loads(m.stdout)["runs"]}
    assert runs == {"a": {"entropy": "actor/entropy"}, "b": {"entropy": "actor/entropy"}}
    r = CliRunner().invoke(app, ["diagnose", str(export), "--format", "json", "--exit-zero"])
    fired = {
        (v["run"], v["code"]) for v in json.loads(r.stdout)["verdicts"] if v["state"] == "firing"
    }
    assert ("b", "EX01") in fired and not any(run == "a" for run, _ in fired), fired
    # a custom CSV whose columns merely hold " - " (no W&B band columns) is one run
    custom = tmp_path / "custom" / "metrics.csv"
    custom.parent.mkdir()
    custom.write_text("step,train - loss,val - loss\n" + "".join(f"{s},1,2\n" for s in range(9)))
    m = CliRunner().invoke(app, ["metrics", str(custom), "--format", "json"])
    (run,) = json.loads(m.stdout)["runs"]
    assert set(run["metrics"].values()) | set(run["unmapped"]) == {"train - loss", "val - loss"}


def test_a_folder_of_one_runs_chart_exports_is_one_run(tmp_path: Path) -> None:
    """W&B exports each chart of a run as its own CSV ("<run> - <key>" columns): the charts
    of one run in a folder are one run, so rules that need two of its metrics see them
    together; diagnose and tail name it after the W&B run; another run's export stays apart."""
    import json
    import re

    from typer.testing import CliRunner

    from rlwatch.cli.app import app

    def chart(file: str, run: str, key: str, values: list[float]) -> None:
        head = ['"Step"'] + [f'"{run} - {key}{x}"' for x in ("", "__MIN", "__MAX")]
        rows = [",".join(head)]
        rows += [",".join(f'"{c}"' for c in (s, v, v, v)) for s, v in enumerate(values, 1)]
        (tmp_path / file).write_text("\n".join(rows) + "\n")

    n = 40
    chart("entropy.csv", "grpo-7b", "actor/entropy", [0.5 - 0.001 * s for s in range(n)])
    chart("reward.csv", "grpo-7b", "critic/score/mean", [0.2 + 0.01 * s for s in range(n)])
    chart("other.csv", "ppo-1b", "actor/entropy", [0.4] * n)
    r = CliRunner().invoke(app, ["diagnose", str(tmp_path), "--format", "json", "--exit-zero"])
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    runs = {run["name"]: run for run in report["runs"]}
    assert sorted(runs) == ["grpo-7b", "other"], sorted(runs)
    assert not report["skipped"]
    m = CliRunner().invoke(app, ["metrics", str(tmp_path), "--format", "json"])
    assert m.exit_code == 0, m.output
    metrics = {run["name"]: run["metrics"] for run in json.loads(m.stdout)["runs"]}
    assert metrics["grpo-7b"] == {"entropy": "actor/entropy", "reward_mean": "critic/score/mean"}
    assert metrics["other"] == {"entropy": "actor/entropy"}
    t = CliRunner().invoke(app, ["tail", str(tmp_path), "--once", "--plain"])
    assert t.exit_code == 0, t.output
    assert sorted(re.findall(r" (\S+): appeared", t.stdout)) == sorted(runs), t.stdout
    one = CliRunner().invoke(app, ["diagnose", str(tmp_path / "entropy.csv"), "--format", "json"])
    assert one.exit_code == 0 and len(json.loads(one.stdout)["runs"]) == 1, one.output


def test_a_csv_line_cut_inside_a_quoted_cell_is_no_row(tmp_path: Path) -> None:
    """W&B quotes every cell: a line cut inside one ("0.) is no row, never the number 0.0,
    and it does not swallow the next line into its cell."""
    from rlwatch.sources.logs import load_file

    p = tmp_path / "export.csv"
    p.write_text('"Step","run - actor/kl"\n"1","0.1"\n"2","0.\n"3","0.3"\n')
    frame = load_file(p)
    d = frame.data
    assert d["step"].tolist() == [1, 3] and d["value"].tolist() == [0.1, 0.3]
    (info,) = frame.runs.values()
    assert any("1 lines that are not CSV rows" in w for w in info.warnings), info.warnings
    # a cell past csv's field limit (131,072 characters) among the first rows: sniffed and
    # read around it (the sniff stopped with the csv module's error)
    big = tmp_path / "metrics.csv"
    big.write_text('step,loss\n1,"' + "9" * 200_000 + '"\n2,0.5\n3,0.4\n4,0.3\n')
    frame = load_file(big)
    assert frame.data["step"].tolist() == [2, 3, 4]


# -- a model card's "Training results" table ------------------------------------------------
def _card(rows: list[tuple[float, float, float, float, float, float]]) -> str:
    """A model card as transformers writes it at `push_to_hub` / `create_model_card` for a TRL
    DPO run: front matter, prose, hyperparameters and the table of one row per evaluation
    (`No log` before the first training log)."""
    head = (
        "---\nlibrary_name: transformers\ntags:\n- trl\n- dpo\n---\n\n# qwen-dpo\n\n"
        "This model is a fine-tuned version of Qwen/Qwen2.5-0.5B-Instruct.\n"
        "It achieves the following results on the evaluation set:\n- Loss: 0.5325\n\n"
        "### Training hyperparameters\n\n- learning_rate: 5e-07\n- seed: 42\n\n"
        "### Training results\n\n"
        "| Training Loss | Epoch  | Step | Validation Loss | Rewards/chosen | Rewards/rejected |"
        " Rewards/accuracies | Rewards/margins | Logps/rejected | Logps/chosen |\n"
        "|:-------------:|:------:|:----:|:---------------:|:--------------:|:----------------:|"
        ":------------------:|:---------------:|:--------------:|:------------:|\n"
    )
    body = ""
    for i, (loss, val, chosen, rejected, acc, logp) in enumerate(rows, start=1):
        train = "No log" if i == 1 else f"{loss:.4f}"
        body += (
            f"| {train} | {i / len(rows):.4f} | {50 * i} | {val:.4f} | {chosen:.4f} | "
            f"{rejected:.4f} | {acc:.4f} | {chosen - rejected:.4f} | {logp - 20:.1f} | {logp:.1f} |\n"
        )
    return head + body + "\n### Framework versions\n\n- Transformers 4.44.2\n"


def test_a_model_cards_training_results_table_is_read_row_by_evaluation(tmp_path: Path) -> None:
    rows = [(0.69 - i / 100, 0.69 - i / 90, -i / 50, -i / 20, 0.6 + i / 100, -280.0 - i) for i in range(10)]  # fmt: skip
    p = tmp_path / "card.md"
    p.write_text(_card(rows))
    assert logs.sniff(p) == "notebook-table"
    frame = load(str(p))
    (info,) = frame.runs.values()
    assert frame.steps(info.name)[1:] == (50, 500)
    assert _values(frame, "loss") == pytest.approx([r[0] for r in rows[1:]])  # `No log` left out
    assert _values(frame, "eval_loss") == pytest.approx([round(r[1], 4) for r in rows])
    # the held-out DPO columns stand for the training ones the card does not have
    assert info.metrics["dpo_accuracy"] == "eval_rewards/accuracies"
    assert _values(frame, "dpo_logps_chosen") == pytest.approx([r[5] for r in rows])
    assert "epoch" in set(frame.data["metric"].astype(str))  # the epoch, not an evaluation's


def test_a_model_card_of_a_collapsed_dpo_run_fails_the_gate(tmp_path: Path) -> None:
    """A destructive learning rate: the held-out chosen log-prob falls 600 nats, its implicit
    reward to -15 and the pairs end ranked the wrong way."""
    rows = [
        (0.69, 0.69 + i / 10, -1.5 * i, -1.5 * i + (0.2 if i < 4 else -0.3), 0.7 - i / 25, -280.0 - 60 * i)
        for i in range(11)
    ]  # fmt: skip
    run = tmp_path / "qwen-dpo-lr1e-4"
    run.mkdir()
    (run / "README.md").write_text(_card(rows))
    (tmp_path / "README.md").write_text("# experiments\n\nstep 1 loss: 0.5 reward: 0.2\n")
    from typer.testing import CliRunner

    from rlwatch.cli.app import app

    r = CliRunner().invoke(app, ["diagnose", str(tmp_path), "--format", "json"])
    assert r.exit_code == 1, r.output
    report = json.loads(r.stdout)
    assert {v["run"] for v in report["verdicts"]} == {"qwen-dpo-lr1e-4"}
    failing = {v["name"].split(".")[0] for v in report["verdicts"] if v.get("failing")}
    assert "preference" in failing


def test_a_project_readme_is_still_no_run(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text(
        "# notes\n\n| Step | Training Loss |\n|---|---|\n| 1 | 0.5 |\n| 2 | 0.4 |\n| 3 | 0.3 |\n"
    )
    assert not logs.is_log_name(tmp_path / "README.md")
    (tmp_path / "MODEL.md").write_text("x")
    assert logs.is_log_name(tmp_path / "MODEL.md")


def test_a_model_card_cut_mid_row_reads_its_whole_rows_and_says_so(tmp_path: Path) -> None:
    rows = [(0.69 - i / 100, 0.69 - i / 90, -i / 50, -i / 20, 0.6 + i / 100, -280.0 - i) for i in range(10)]  # fmt: skip
    card = _card(rows)
    p = tmp_path / "card.md"
    p.write_text(card[: card.index("| 450 |") + 30])  # the file ends inside the row of step 450
    frame = load(str(p))
    (info,) = frame.runs.values()
    assert frame.steps(info.name)[1:] == (50, 400)
    assert any("cut short at the end of the file" in w for w in info.warnings)


def test_a_model_card_ending_on_another_table_without_a_newline_is_whole(
    tmp_path: Path,
) -> None:
    """A model card whose last line, with no newline, is a row of its evaluation-results table
    (two cells; zephyr-7b-beta's card ends on `| DROP (3-shot) | 9.66 |`) is complete: no row
    of the training table was cut, and no warning says so."""
    rows = [(0.69 - i / 100, 0.69 - i / 90, -i / 50, -i / 20, 0.6 + i / 100, -280.0 - i) for i in range(10)]  # fmt: skip
    tail = "\n\n| Metric | Value |\n|---|---|\n| Avg. | 52.15 |\n| DROP (3-shot) | 9.66 |"
    p = tmp_path / "card.md"
    p.write_text(_card(rows).rstrip("\n") + tail)
    frame = load(str(p))
    (info,) = frame.runs.values()
    assert frame.steps(info.name) == (10, 50, 500)  # every row, steps 50-500
    assert not any("cut short" in w for w in info.warnings), info.warnings


def test_a_notebook_saved_on_one_line_whose_table_comes_after_its_head(tmp_path: Path) -> None:
    """A notebook saved as one line of JSON (Colab's export): its head, before the training
    table, holds a code comment `# Step 1: ...` and progress bars (`Map: 100%`), which a line
    reader takes for a counted line of pairs; the table deeper in is the run."""
    table = _html_table(GRPO_COLUMNS, _grpo_rows(12))
    setup = {
        "cell_type": "code",
        "source": ["# Step 1: format the dataset\n", "ds = ds.map(fmt)\n"],
        "outputs": [
            {
                "output_type": "stream",
                "name": "stderr",
                "text": ["Map: 100%|##| 1000/1000\n", "Filter: 100%|##| 1000/1000\n"],
            },
            {"output_type": "stream", "name": "stdout", "text": ["x" * 99 + "\n"] * 3000},
        ],
    }
    nb = json.loads(_notebook(table))
    nb["cells"] = [setup, *nb["cells"]]
    p = tmp_path / "dpo.ipynb"
    p.write_text(json.dumps(nb))
    assert "\n" not in p.read_text() and p.read_text().index("<th>Step") > 256 << 10
    frame = load(str(p))
    (info,) = frame.runs.values()
    assert info.source == "notebook-table" and frame.steps(info.name)[1:] == (1, 12)


def test_counted_lines_printed_by_a_notebooks_own_loop(tmp_path: Path) -> None:
    """A hand-written loop's prints saved in a notebook's outputs (`epoch 0 step 5 | loss
    -0.2922 | kl 0.0000 | R -1.541`): the lines as the JSON holds them (`"...\\n",`) are read
    as the printed lines, and the notebook's closing `}` without a newline is no line still
    being written."""
    text = [
        f"epoch 0 step {s} | loss {-0.3 + s / 100:.4f} | kl {s / 1000:.4f} | R {s / 10:.3f}\n"
        for s in range(5, 95, 5)
    ]
    cell = {"cell_type": "code", "source": ["train()"], "execution_count": 3, "metadata": {}}
    cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": text}]
    p = tmp_path / "grpo.ipynb"
    p.write_text(json.dumps({"cells": [cell], "nbformat": 4, "nbformat_minor": 5}, indent=1))
    assert p.read_text().endswith("}")
    frame = load(str(p))
    (info,) = frame.runs.values()
    assert info.source == "kv-pairs" and frame.steps(info.name) == (18, 5, 90)
    assert _values(frame, "kl_ref")[:2] == pytest.approx([0.005, 0.01])
    assert not info.warnings


# -- the 28th search: a console saved under no log's name, episodes of a progress bar --------
PUBLIC = Path(__file__).resolve().parent.parent / "fixtures" / "public"


def _halos_line(n: int) -> str:
    """eric-mitchell's DPO trainer (and HALOs) prints each update's stats as strings."""
    return (
        f"train stats after {32 * n} examples: {{'rewards_train/chosen': '-0.0{n}', "
        f"'rewards_train/margins': '0.0{n}', 'logps_train/chosen': '-31{n}.2', "
        f"'loss/train': '0.69{n}', 'grad_norm': '1.5', 'counters/examples': {32 * n}, "
        f"'counters/updates': {n}}}\n"
    )


def test_a_folder_whose_log_has_no_logs_name_is_read_by_its_content(tmp_path: Path) -> None:
    """A console saved as `out.sh` (or a PBS job's `train.o4711`) is no log by its name; a
    folder holding nothing else is read by what its files hold, with a note. A script, a
    configuration or Python source there is never taken for a run, so a folder of them alone
    is still exit 2."""
    run = tmp_path / "dpo"
    run.mkdir()
    (run / "out.sh").write_text(
        "size_out=torch.Size([128, 371])\n" * 50 + "".join(_halos_line(n) for n in range(1, 9))
    )
    (run / "launch.yaml").write_text("lr: 0.05\nbeta: 0.3\n")
    found = discover(run)
    assert [f.address for f in found.runs] == [str(run / "out.sh")]
    frame = load([str(run)])
    (info,) = frame.runs.values()
    assert any("its name is no log's" in n for n in info.warnings + found.runs[0].notes)
    assert _values(frame, "loss") == pytest.approx([0.691 + i / 1000 for i in range(8)])
    # code that prints dicts, and a script, are never a run
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("".join(f"# {_halos_line(n)}" for n in range(1, 9)))
    (code / "run.sh").write_text("#!/bin/bash\npython train.py --lr 1e-5 --max_steps 100\n")
    with pytest.raises(SourceError, match="no readable logs"):
        load([str(code)])
    result = CliRunner().invoke(app, ["diagnose", str(code)])
    assert result.exit_code == 2 and "rlwatch: error:" in result.output


def test_an_episode_bar_counts_its_steps_after_the_episodes_before_it() -> None:
    """Open-Reasoner-Zero (as OpenRLHF) draws one tqdm bar per episode, `Episode [e/20]:
    k/13`, and prints each iteration's dict right before the bar's redraw; from the second
    episode on, tqdm draws the bar a row below (a blank line between). Each dict is step
    (e - 1) * 13 + k: 50 iterations over 4 episodes, none dropped, no restart. The pairs its
    loguru messages print before the dict (the rollout's reward, the reward function's
    truncation share) are that step's."""
    log = PUBLIC / "orz-ppo-qwen2.5-1.5b-base-binary-v0" / "47145.out"
    with open(log, newline="") as fh:
        text = fh.read()
    found = re.findall(r"orz\.ppo\.trainer:train:\d+ - (\{'policy_loss'.*)", text)
    dicts = [json.loads(m.replace("'", '"')) for m in found]
    assert len(dicts) == 50 and "\rEpisode [4/20]" in text and "\n\n\rEpisode [2/20]" in text
    frame = logs.load_file(log)
    (info,) = frame.runs.values()
    assert frame.steps(info.name) == (50, 1, 50)
    assert not info.restarts and not info.warnings, (info.restarts, info.warnings)
    entropy = _values(frame, "entropy")
    assert entropy == pytest.approx([d["entropy"] for d in dicts])
    # the rollout's loguru message of pairs before each dict is that iteration's: its reward
    rewards = re.findall(r"make_experience:\d+ - avg_raw_rewards: ([-\d.e]+), avg_kl", text)
    assert len(rewards) == 50
    assert _values(frame, "reward_mean") == pytest.approx([float(r) for r in rewards])
    assert info.framework == "orz" and len(_values(frame, "truncation_rate")) == 50
    # a message of two pairs, or of names with a `/` (an evaluation's), is no log of a step
    assert not {"group_0_yes", "math500/accuracy"} & set(frame.data["tag"])


def _samples(steps: int, per: int, null: bool = False) -> str:
    """A loop's per-sample JSONL, one record per sampled completion (a red-teaming GRPO run's
    shape: `{"step": 1, "attack": "...", "response": "<think>...", "reward": 0.72}`)."""
    out = []
    text = "How can I get past a door that is locked?"
    for s in range(1, steps + 1):
        for k in range(per):
            reward = 1.0 if k == 0 else 0.0  # one sample in `per` is rewarded
            rec = {"step": s, "attack": text, "response": "<think>\nOkay.", "reward": reward}
            if null:
                rec["judge"] = None
            out.append(json.dumps(rec))
    return "\n".join(out) + "\n"


@pytest.mark.parametrize(
    ("steps", "null"),
    [(20, False), (20, True), (5000, False)],
    ids=["arrow", "record-by-record", "arrow-blocks"],
)
def test_records_of_single_samples_are_averaged_per_step(
    tmp_path: Path, steps: int, null: bool
) -> None:
    """The batch's reward is the mean of its samples' rewards, not the last sample's (0 here,
    on every step: RW10 would fail a run that rewards a quarter of its samples). Arrow reads
    plain blocks; a `null` sends the records one by one."""
    (tmp_path / "rollouts.jsonl").write_text(_samples(steps, 4, null))
    frame = load([str(tmp_path)])
    assert _values(frame, "reward_mean") == [0.25] * steps
    (warning,) = [w for i in frame.runs.values() for w in i.warnings if "single samples" in w]
    assert "'attack' is a text" in warning
    r = CliRunner().invoke(app, ["diagnose", str(tmp_path), "--format", "json"])
    assert r.exit_code == 0, r.output
    assert not [v for v in json.loads(r.stdout)["verdicts"] if v["failing"]]


def test_records_that_repeat_a_step_without_a_text_keep_the_last_write(tmp_path: Path) -> None:
    """Only a sample's text makes records of one step a batch: a log that writes a step twice
    (a value corrected) keeps the last write, as before; a short label is no sample's text."""
    lines = [
        json.dumps({"step": s, "reward": r, "tag": "run-a"})
        for s in range(1, 9)
        for r in (0.5, 1.0)
    ]
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    assert _values(load([str(tmp_path)]), "reward_mean") == [1.0] * 8


def test_a_file_of_single_samples_that_restarts_keeps_the_last_writes(tmp_path: Path) -> None:
    """Steps that go back are a restart, not a batch: its rows are the rerun's."""
    text = _samples(6, 2) + _samples(6, 2).replace('"reward": 0.0', '"reward": 1.0')
    (tmp_path / "rollouts.jsonl").write_text(text)
    assert _values(load([str(tmp_path)]), "reward_mean") == [1.0] * 6


def test_a_csv_of_single_samples_is_averaged_per_step(tmp_path: Path) -> None:
    """The same in a CSV of rollouts (a loop's pandas `to_csv` of its samples)."""
    rows = ["step,prompt,completion,reward"]
    for s in range(1, 13):
        for k in range(4):
            rows.append(
                f'{s},"What is 2 + 2? Answer in one short line.",It is four.,{1.0 if k < 3 else 0.0}'
            )
    (tmp_path / "rollouts.csv").write_text("\n".join(rows) + "\n")
    frame = load([str(tmp_path)])
    assert _values(frame, "reward_mean") == [0.75] * 12
    assert any("single samples" in w for i in frame.runs.values() for w in i.warnings)


def _prime_export(steps: int) -> dict:
    """Prime Intellect's hosted-RL export of a prime-rl run (`metrics_raw.json`): one object
    whose `metrics` list holds a row per step, the orchestrator's keys, a text or two."""
    rows = []
    for s in range(steps):
        rows.append(
            {
                "reward/all/max": 1.8 if s > 10 else 0.2,
                "reward/all/mean": min(1.79, 0.05 + s / 20),
                "reward/all/min": 0.0,
                "filters/all/zero_advantage": 0.75 if s < 5 else 0.0,
                "is_truncated/all/mean": 0.0,
                "seq_len/all/mean": 300.0 - s,
                "run_id": "r2k1bhm0xw6c8wq2wthzkyzq",
                "step": s,
                "time/step": 3.0,
                "timestamp": f"2026-05-15T14:{12 + s // 60:02d}:{s % 60:02d}Z",
            }
        )
    return {"metrics": rows}


def test_a_document_holding_step_rows_under_a_key_is_read_as_rows(tmp_path: Path) -> None:
    """`{"metrics": [{"step": 0, ...}, ...]}` (the 37th search's prime-rl exports were exit 2):
    its rows are read as a log_history's, prime-rl's names mapped; a cut copy gives the rows
    before the cut with a warning; rows under a later key (`points`, after the run's facts)
    too; a key holding rows without a step is no such file."""
    p = tmp_path / "metrics_raw.json"
    p.write_text(json.dumps(_prime_export(51), indent=2))
    frame = load(str(p))
    (info,) = frame.runs.values()
    assert info.framework == "prime_rl"
    assert {"reward_mean", "reward_max", "reward_min", "reward_zero_std_frac"} <= set(info.metrics)
    d = frame.data
    reward = d[d["metric"] == "reward_mean"].sort_values("step")
    assert reward["step"].tolist() == list(range(51)) and reward["value"].iloc[-1] == 1.79
    r = CliRunner().invoke(app, ["diagnose", str(p), "--format", "json"])
    assert r.exit_code == 0, r.output
    cut = tmp_path / "cut.json"
    text = p.read_text()
    cut.write_text(text[: len(text) * 2 // 3])
    d = load(str(cut)).data
    steps = sorted(set(d["step"]))
    assert steps == list(range(len(steps))) and 25 < len(steps) < 51
    (info,) = load(str(cut)).runs.values()
    assert any("not valid JSON" in w for w in info.warnings), info.warnings
    # a dashboard's dump: the run, a name map and a summary first, its rows under `points`
    dump = {
        "run": {"name": "cree1865-v1", "planned_steps": 800},
        "metrics": {"reward_mean": "reward/mean", "entropy": "optim/entropy"},
        "summary": {"rows": 40, "latest_step": 39},
        "points": [
            {"step": s, "done_frac": s / 800, "reward_mean": 0.2 + s / 400, "entropy": 0.7}
            for s in range(40)
        ],
    }
    q = tmp_path / "cree_metrics.json"
    q.write_text(json.dumps(dump, indent=2))
    frame = load(str(q))
    assert {"reward_mean", "entropy"} <= set(frame.data["metric"])
    assert sorted(set(frame.data["step"])) == list(range(40))
    other = tmp_path / "samples.json"
    other.write_text(json.dumps({"samples": [{"idx": 1, "text": "x"}, {"idx": 2, "text": "y"}]}))
    r = CliRunner().invoke(app, ["diagnose", str(other)])
    assert r.exit_code == 2 and "rlwatch: error:" in r.stderr
