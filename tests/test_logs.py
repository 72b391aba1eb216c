"""Log readers: verl console and JSONL, trainer_state.json, TRL console dicts, generic JSONL.

Real runs come from ../shared/realruns (read in place, never copied, unless their SOURCE.md
grants redistribution: those are also in fixtures/)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from conftest import FIXTURES, REALRUNS
from typer.testing import CliRunner

from rlwatch.cli.app import app
from rlwatch.engine.evaluate import evaluate_frame
from rlwatch.engine.rules import load_rules
from rlwatch.errors import SourceError, UsageError
from rlwatch.sources import load, logs

RULES = load_rules()
runner = CliRunner()

# run -> (framework, error-level rules that must fire; empty = healthy: no error may fire)
REAL = {
    "verl-ppo-gsm8k-qwen05b-resp512": ("verl", set()),
    "verl-ppo-gsm8k-qwen05b-resp256": ("verl", set()),
    "verl-ppo-gsm8k-gemma2-2b": ("verl", set()),
    "verl-gpg-math-qwen2-7b-fsdp": ("verl", {"EX03", "LN02"}),
    "verl-gpg-math-qwen2-7b-megatron": ("verl", set()),
    "verl-grpo-gsm8k-deepseek7b": ("verl", set()),
    "verl-ppo-gsm8k-deepseek7b": ("verl", set()),
    "verl-ppo-gsm8k-dstack": ("verl", set()),
    "verl-grpo-multiturn-gui-cursor": ("verl", set()),
    "verl-filelogger-jsonl-gsm8k-ppo-collapse": ("verl", {"MM02", "ST05"}),
    "trl-grpo-hotpotqa-kl-drift": ("trl", {"KL02"}),
    "trl-grpo-chaos-economy-truncation": ("trl", {"LN02"}),
    "trl-grpo-redteam-zero-signal": ("trl", {"RW03"}),
    "tinker-rlvr-qwen3-4b-rubric": ("tinker", set()),
}
NOT_RUNS = {"SOURCE.md", "config.json", "wandb-summary.json", "wandb-config.yaml"}


def _real(name: str) -> Path:
    d = REALRUNS / name
    if not d.exists():
        pytest.skip(f"{d} is absent (shared/realruns holds the unlicensed real runs; CI has it)")
    (f,) = [p for p in d.iterdir() if p.name not in NOT_RUNS and p.suffix != ".wandb"]
    return f


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_runs_get_the_right_verdicts(name: str) -> None:
    framework, must = REAL[name]
    frame = load([str(_real(name))])
    (info,) = frame.runs.values()
    assert info.framework == framework
    errors = {v.code for v in evaluate_frame(frame, RULES) if v.fired and v.severity == "error"}
    if must:
        assert must <= errors, errors
    else:
        assert not errors, errors


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("verl-gpg-math-qwen2-7b-fsdp", 1),
        ("verl-ppo-gsm8k-dstack", 0),
        ("trl-grpo-redteam-zero-signal", 1),
    ],
)
def test_real_runs_gate_in_the_cli(name: str, code: int) -> None:
    r = runner.invoke(app, ["diagnose", str(_real(name))])
    assert r.exit_code == code, r.output


def test_verl_console_era_and_precision() -> None:
    old = logs.load_file(_real("verl-ppo-gsm8k-gemma2-2b"))
    (info,) = old.runs.values()
    assert (info.framework_version, info.decimals) == ("v0.1", 3)
    assert info.metrics["lr"] == "actor/lr(1e-4)"
    new = logs.load_file(_real("verl-grpo-multiturn-gui-cursor"))
    (info,) = new.runs.values()
    assert info.decimals is None  # v0.5 prints full precision
    dstack = logs.load_file(_real("verl-ppo-gsm8k-dstack"))
    assert dstack.steps(next(iter(dstack.runs))) == (335, 101, 435)  # resumed at 101


def test_the_licensed_runs_shipped_in_fixtures_read_without_shared() -> None:
    frame = load(
        [
            str(FIXTURES / "verl-gpg-math-qwen2-7b-fsdp" / "qwen2-7b_math.log"),
            str(FIXTURES / "verl-filelogger-jsonl-gsm8k-ppo-collapse" / "gsm8k.jsonl"),
            str(FIXTURES / "tinker-rlvr-qwen3-4b-rubric" / "metrics.jsonl"),
        ]
    )
    assert set(frame.runs) == {"qwen2-7b_math", "gsm8k", "tinker-rlvr-qwen3-4b-rubric/metrics"}
    jsonl = frame.runs["gsm8k"]
    assert any("non-numeric values ignored (keys: resize/mode" in w for w in jsonl.warnings)
    # JSON null is NaN, kept as evidence
    w = frame.wide("gsm8k")
    assert math.isnan(
        frame.data[(frame.data["run"] == "gsm8k") & (frame.data["tag"] == "actor/pg_loss")][
            "value"
        ].iloc[-1]
    )
    assert w["rollout_kl"].loc[1] == pytest.approx(9.97, abs=0.01)


def test_console_lines_with_ray_prefix_ansi_tqdm_numpy_reprs_and_nan(tmp_path: Path) -> None:
    f = tmp_path / "run.log"
    f.write_text(
        "Training Progress:  10%|#   | 1/10 [00:01<00:09]"
        "\x1b[36m(TaskRunner pid=14640)\x1b[0m step:1 - actor/entropy:np.float64(0.5) - "
        "actor/grad_norm:nan - actor/lr(1e-4):0.1 - val-core/gsm8k/acc/mean@1:0.25 - "
        "response/aborted_ratio:np.int64(0) - bad_item\n"
        "(TaskRunner pid=1) step:2 - actor/entropy:0.4 - actor/grad_norm:inf - "
        "actor/pg_clipfrac:-0.0\n"
        "(TaskRunner pid=1) Final validation metrics: {'val-core/other/acc/mean@1': "
        "np.float64(0.7)}\n"
        "wandb: Run history:\n"
        "wandb:   actor/entropy ▁█\n"
        "wandb: Run summary:\n"
        "wandb:   actor/entropy 0.4\n"
    )
    frame = logs.load_file(f)
    (info,) = frame.runs.values()
    assert info.source == "verl-console" and info.decimals is None
    rows = {(r.tag, r.step): r.value for r in frame.data.itertuples()}
    assert rows[("actor/entropy", 1)] == 0.5 and math.isnan(rows[("actor/grad_norm", 1)])
    assert rows[("actor/grad_norm", 2)] == math.inf
    assert rows[("val-core/other/acc/mean@1", 2)] == 0.7  # from the Final validation dict
    assert len(frame.data) == 9
    assert any("1 items without 'key:value' ignored" in w for w in info.warnings)


def test_jsonl_with_a_cut_off_last_line_keeps_every_complete_record(tmp_path: Path) -> None:
    f = tmp_path / "train.jsonl"
    lines = [json.dumps({"step": i, "data": {"actor/entropy": 0.5, "x": None}}) for i in range(5)]
    f.write_text("\n".join(lines) + '\n{"step": 5, "data": {"actor/ent')
    frame = logs.load_file(f)
    (info,) = frame.runs.values()
    assert info.source == "verl-jsonl"
    assert frame.steps(info.name) == (5, 0, 4)
    assert any("last line incomplete, not read" in w for w in info.warnings)


def test_truncated_trainer_state_keeps_complete_entries(tmp_path: Path) -> None:
    entries = [{"step": i, "loss": 0.1, "reward": 0.5 + i / 10, "kl": 0.01} for i in range(1, 6)]
    text = json.dumps({"global_step": 5, "log_history": entries}, indent=2)
    f = tmp_path / "trainer_state.json"
    f.write_text(text[: text.index('"step": 5') - 10])
    frame = logs.load_file(f)
    (info,) = frame.runs.values()
    assert info.name == f"{tmp_path.name}/trainer_state"
    assert frame.steps(info.name)[0] == 4
    assert any("read the 4 complete log_history entries" in w for w in info.warnings)


def test_python_dict_console_with_ordinal_steps_and_summary(tmp_path: Path) -> None:
    f = tmp_path / "grpo.log"
    f.write_text(
        "  0%|          | 0/30 [00:00<?, ?it/s]\n"
        "{'loss': 0.0, 'grad_norm': tensor(2.0), 'reward': 0.5, 'kl': nan, 'epoch': 0.1}\n"
        " 33%|###       | 10/30 [00:10<00:20]\n"
        "{'loss': 0.1, 'grad_norm': 1.5, 'reward': 0.6, 'kl': 0.02, 'epoch': 0.2}\n"
        "{'train_runtime': 100.0, 'train_loss': 0.05, 'epoch': 1.0}\n"
    )
    frame = logs.load_file(f)
    (info,) = frame.runs.values()
    assert info.framework == "trl" and frame.steps(info.name) == (2, 1, 2)
    assert info.hparams["summary/train_runtime"] == 100.0
    assert info.hparams["steps"].startswith("log ordinals")
    kl = frame.wide(info.name)["kl_ref"]
    assert math.isnan(kl.loc[1]) and kl.loc[2] == 0.02


def test_python_dicts_skip_config_printouts_and_eval_dicts_share_their_step(
    tmp_path: Path,
) -> None:
    """A DeepSpeed launch prints its config as `name ....... {...}` dicts with numbers in them:
    not metric logs. transformers prints an evaluation's dict right after the training log of
    the same step: it shares that step instead of taking the next ordinal."""
    f = tmp_path / "dpo.log"
    f.write_text(
        "[2025-02-20 20:25:29,318] [INFO] [config.py:1000:print]   aio_config ......... "
        "{'block_size': 1048576, 'queue_depth': 8, 'thread_count': 1}\n"
        "[INFO] [config.py:1000:print]   data_efficiency_config ....... {'seed': 1234, "
        "'num_workers': 0}\n"
        "global_rank_mapping=defaultdict(<class 'list'>, {'localhost': [0, 1], 'n': 2})\n"
        "{'loss': 0.6931, 'grad_norm': 24.8, 'learning_rate': 5e-06, 'epoch': 0.1}\n"
        "{'eval_loss': 0.69, 'eval_runtime': 3.1, 'epoch': 0.1}\n"
        "{'loss': 0.61, 'grad_norm': 20.1, 'learning_rate': 5e-06, 'epoch': 0.2}\n"
        "{'eval_loss': 0.65, 'eval_runtime': 3.0, 'epoch': 0.2}\n"
    )
    frame = logs.load_file(f)
    (info,) = frame.runs.values()
    rows = {(r.tag, r.step): r.value for r in frame.data.itertuples()}
    assert frame.steps(info.name) == (2, 1, 2)
    assert rows[("eval_loss", 1)] == 0.69 and rows[("eval_loss", 2)] == 0.65
    assert rows[("loss", 2)] == 0.61
    assert not {"block_size", "seed", "num_workers", "n"} & {t for t, _ in rows}


def test_an_unrecognised_file_names_the_formats_tried(tmp_path: Path) -> None:
    f = tmp_path / "notes.txt"
    f.write_text("just some text\nnothing to see\n")
    with pytest.raises(SourceError, match=r"unrecognised log format \(tried: verl console log"):
        load([str(f)])
    r = runner.invoke(app, ["diagnose", str(f)])
    assert r.exit_code == 2 and "force one with --log-format" in r.output


def test_a_flag_forces_the_format(tmp_path: Path) -> None:
    f = tmp_path / "odd.txt"
    f.write_text('{"step": 1, "entropy": 0.5}\n{"step": 2, "entropy": 0.4}\n')
    frame = load([str(f)], log_format="jsonl")
    assert len(frame.data) == 2
    with pytest.raises(UsageError, match="--log-format 'yaml' is not a known format"):
        load([str(f)], log_format="yaml")


def test_a_directory_of_logs_is_a_set_of_runs(tmp_path: Path) -> None:
    (tmp_path / "a.log").write_text("step:1 - actor/entropy:0.500 - actor/pg_clipfrac:0.001\n")
    (tmp_path / "b.jsonl").write_text('{"step": 1, "reward": 0.5}\n')
    (tmp_path / "README.txt").write_text("hello\n")  # not a run: not listed
    (tmp_path / "c.log").write_text("hello\n")  # named like a run: listed as skipped
    frame = load([str(tmp_path)])
    assert set(frame.runs) == {"a", "b"}
    assert [Path(s.path).name for s in frame.skipped] == ["c.log"]
    assert "unrecognised log format" in frame.skipped[0].reason


def test_follower_reads_only_new_complete_lines(tmp_path: Path) -> None:
    f = tmp_path / "run.log"
    f.write_text("step:1 - actor/entropy:0.5 - actor/grad_norm:1.0\n")
    follower = logs.Follower(f)
    assert len(follower.poll().data) == 2
    with open(f, "a") as fh:
        fh.write("step:2 - actor/entropy:0.4 - actor/gra")  # a line still being written
    assert len(follower.poll().data) == 0
    with open(f, "a") as fh:
        fh.write("d_norm:1.1\nstep:3 - actor/entropy:0.3\n")
    delta = follower.poll().data
    assert sorted(delta["step"].tolist()) == [2, 2, 3]
    assert len(follower.poll().data) == 0


def test_follower_rereads_a_rewritten_trainer_state(tmp_path: Path) -> None:
    f = tmp_path / "trainer_state.json"
    f.write_text(json.dumps({"log_history": [{"step": 1, "loss": 0.1}]}))
    follower = logs.Follower(f)
    assert len(follower.poll().data) == 1
    f.write_text(json.dumps({"log_history": [{"step": 1, "loss": 0.1}, {"step": 2, "loss": 0.2}]}))
    delta = follower.poll().data
    assert delta["step"].tolist() == [2]


def test_printed_dicts_of_torch_and_numpy_scalars_with_their_keyword_arguments(
    tmp_path: Path,
) -> None:
    """A loop that prints its metrics dict prints torch's and numpy 2's reprs: `tensor(0.5000,
    dtype=torch.bfloat16)`, `tensor(1., grad_fn=<MulBackward0>)`, on a GPU `tensor(0.5,
    device='cuda:0')`, `np.float64(0.3)`. The value is the first argument; the keyword
    arguments are no part of it (they made the whole line unreadable). The same in a verl
    console line."""
    torch = pytest.importorskip("torch")
    f = tmp_path / "train.log"
    with f.open("w") as out:
        for step in range(1, 21):
            loss = torch.tensor(0.25 * step, requires_grad=True) * 2  # grad_fn=<MulBackward0>
            metrics = {
                "step": step,
                "loss": loss,
                "reward": torch.tensor(0.5, dtype=torch.bfloat16) + step / 64,
                "kl": np.float64(step / 100),
                "grad_norm": f"tensor({step}.5, device='cuda:0')",  # as printed on a GPU
            }
            out.write(
                "{"
                + ", ".join(
                    f"'{k}': {v!s}" if k == "grad_norm" else f"{k!r}: {v!r}"
                    for k, v in metrics.items()
                )
                + "}\n"
            )
    text = f.read_text()
    assert "grad_fn=<MulBackward0>" in text and "dtype=torch.bfloat16" in text
    assert "np.float64(" in text and "device='cuda:0'" in text
    frame = logs.load_file(f)
    rows = {(r.tag, r.step): r.value for r in frame.data.itertuples()}
    assert rows[("loss", 3)] == 1.5 and rows[("grad_norm", 7)] == 7.5
    assert rows[("kl", 20)] == 0.2 and rows[("reward", 16)] == 0.75
    assert {t for t, _ in rows} == {"loss", "reward", "kl", "grad_norm"}

    def read(name: str, line) -> dict[tuple[str, int], float]:
        (tmp_path / name).write_text("".join(map(line, range(1, 8))))
        return {(r.tag, r.step): r.value for r in logs.load_file(tmp_path / name).data.itertuples()}

    rows = read(
        "verl.log",
        lambda s: (
            f"step:{s} - actor/grad_norm:tensor({s}.25, device='cuda:0') - "
            f"critic/score/mean:np.float64(0.{s}) - actor/entropy:0.5\n"
        ),
    )
    assert rows[("actor/grad_norm", 3)] == 3.25 and rows[("critic/score/mean", 7)] == 0.7
    rows = read(  # `name: value` pairs after a step counter, a JAX 0-d array
        "loop.log",
        lambda s: (
            f"Step {s} | loss: tensor({s}.5, device='cuda:0', grad_fn=<AddBackward0>) | "
            f"reward: 0.{s} | kl: Array(0.0{s}, dtype=float32)\n"
        ),
    )
    assert {t for t, _ in rows} == {"loss", "reward", "kl"}
    assert rows[("loss", 4)] == 4.5 and rows[("kl", 6)] == 0.06
