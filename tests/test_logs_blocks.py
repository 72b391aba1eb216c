"""Consoles that print a step's results as a block: a header line naming the step, then one
`Name: number` per line. NeMo RL's GRPO loop prints each step so (`nemo_rl/algorithms/grpo.py`:
`===== Step 3/100 =====`, then `📊 Training Results:` and `  • Avg Reward: 0.4567`, then
`⏱️  Timing:` and `  • generation: 20.10s (50.0%)`); custom loops print `Step 12:` and indented
`loss: 0.31` lines. The kv-pairs reader reads them at the header's step, in `diagnose` and in
`tail` alike."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlwatch.cli.app import app
from rlwatch.errors import SourceError
from rlwatch.sources import load, logs


def _values(frame, metric: str) -> list[float]:
    d = frame.data[frame.data["metric"].astype(str) == metric].sort_values("step")
    return d["value"].tolist()


def _nemo(rewards: list[float], *, dynamic: bool = False) -> str:
    """A NeMo RL GRPO console, line for line as grpo.py prints it (Ray's prefixes, the
    generation progress, the results and timing blocks, a validation block every 10 steps)."""
    n = len(rewards)
    out = [
        "INFO:nemo_rl.utils.venvs:NEMO_RL_VENV_DIR is set to /opt/nemo_rl_venv.",
        "(VllmGenerationWorker pid=4012) INFO 06-12 10:01:22 model_runner.py:1115] Loading model weights took 2.87 GB",
        "▶ Setting up compute cluster...",
    ]  # fmt: skip
    for s in range(1, n + 1):
        r = rewards[s - 1]
        out += [
            "",
            f"{'=' * 25} Step {s}/{n} {'=' * 25}",
            "▶ Preparing batch...",
            "▶ Generating responses for batch of size 512...",
            "▶ Processing rewards...",
            "▶ Computing logprobs...",
            "▶ Preparing for training...",
            "▶ Training policy...",
            "",
            "📊 Training Results:",
            f"  • Loss: {0.01 - s / 1e4:.4f}",
            f"  • Generation KL Error: {0.0011 + s / 1e5:.4f}",
        ]
        if dynamic:
            out += [f"  • Avg Filtered Reward: {r:.4f}", f"  • Avg Total Reward: {r - 0.05:.4f}"]
        else:
            out.append(f"  • Avg Reward: {r:.4f}")
        out += [
            f"  • Mean Generation Length: {300 + s:.4f}",
            "",
            "⏱️  Timing:",
            f"  • Total step time: {40 + s / 10:.2f}s",
            f"  • generation: {20 + s / 20:.2f}s (50.0%)",
            f"  • policy_training: {10.5:.2f}s (25.0%)",
            "",
            "🔍 Performance Metrics:",
            "  - E2E (Tokens/sec/gpu): 1523.40",
        ]
        if s % 10 == 0:
            out += [
                f"▶ Starting validation at step {s}...",
                "",
                "📊 Validation Results:",
                "    • Accuracy: 0.4120",
                "    • Average response length: 512.3 tokens",
                "    • Samples processed: 500",
            ]
    return "\n".join(out) + "\n"


def test_nemo_rl_grpo_console_reads_each_step_block(tmp_path: Path) -> None:
    p = tmp_path / "grpo_console.log"
    rewards = [0.3 + s / 100 for s in range(1, 31)]
    p.write_text(_nemo(rewards))
    assert logs.sniff(p) == "kv-pairs"
    frame = load(str(p))
    (info,) = frame.runs.values()
    assert info.framework == "nemo_rl"
    assert frame.steps(info.name)[1:] == (1, 30)
    assert _values(frame, "reward_mean") == pytest.approx(rewards)
    assert _values(frame, "loss") == pytest.approx([0.01 - s / 1e4 for s in range(1, 31)])
    assert _values(frame, "response_length_mean") == pytest.approx([300 + s for s in range(1, 31)])
    assert _values(frame, "step_time") == pytest.approx([40 + s / 10 for s in range(1, 31)])
    kl = [round(0.0011 + s / 1e5, 4) for s in range(1, 31)]  # printed to 4 decimals
    assert _values(frame, "rollout_kl") == pytest.approx(kl)
    # a unit after the number is read off, a note in brackets after it ignored
    assert info.metrics["step_time"] == "total_step_time"
    raw = frame.data[frame.data["metric"].astype(str).str.startswith("generation")]
    assert set(raw["metric"].astype(str)) <= {"generation", "generation_kl_error"}


def test_nemo_rl_dynamic_sampling_prints_the_filtered_reward(tmp_path: Path) -> None:
    p = tmp_path / "dapo.log"
    rewards = [0.5 + s / 200 for s in range(1, 21)]
    p.write_text(_nemo(rewards, dynamic=True))
    frame = load(str(p))
    assert _values(frame, "reward_mean") == pytest.approx(rewards)


def test_a_nemo_rl_reward_collapse_fails_the_gate(tmp_path: Path) -> None:
    """The block console goes through the whole gate: a reward that falls from 0.6 to 0.05 and
    stays there exits 1 with reward.crash; the healthy run beside it exits 0."""
    bad = tmp_path / "bad" / "grpo.log"
    good = tmp_path / "good" / "grpo.log"
    bad.parent.mkdir()
    good.parent.mkdir()
    noise = [0.02 * math.sin(s * 1.7) for s in range(60)]
    bad.write_text(_nemo([(0.6 if s < 25 else 0.05) + noise[s] for s in range(60)]))
    good.write_text(_nemo([0.4 + s / 200 + noise[s] for s in range(60)]))
    runner = CliRunner()
    r = runner.invoke(app, ["diagnose", str(bad), "--format", "json"])
    assert r.exit_code == 1, r.output
    codes = {v["code"] for v in json.loads(r.stdout)["verdicts"] if v.get("failing")}
    assert "RW01" in codes
    r = runner.invoke(app, ["diagnose", str(good), "--format", "json"])
    assert r.exit_code == 0, r.output


def test_a_custom_loop_printing_indented_pairs_under_step_headers(tmp_path: Path) -> None:
    p = tmp_path / "train.log"
    out = ["loading model...", "config: lr=1e-6 beta=0.04"]
    for s in range(0, 100, 10):
        out += [f"Step {s}:", f"    loss = {0.5 - s / 1000:.4f}", f"    reward: {s / 100:.3f}"]
        out += [f"    kl: {0.001 * s:.4f}", "    saving samples to samples.jsonl"]
    p.write_text("\n".join(out) + "\n")
    frame = load(str(p))
    assert _values(frame, "reward_mean") == pytest.approx([s / 100 for s in range(0, 100, 10)])
    (info,) = frame.runs.values()
    assert frame.steps(info.name)[1:] == (0, 90)


@pytest.mark.parametrize(
    "body",
    [
        # headers with prose under them: no metrics
        "".join(
            f"===== Step {s}/50 =====\nSaving checkpoint to ckpt/{s}\nDone.\n" for s in range(9)
        ),
        # one pair under each header is too little to tell a block from a stray line
        "".join(f"Step {s}/50\n  loss: 0.{s}\nwaiting for workers\n" for s in range(9)),
    ],
    ids=["prose", "one-pair"],
)
def test_headers_without_blocks_of_pairs_are_no_log(tmp_path: Path, body: str) -> None:
    p = tmp_path / "run.log"
    p.write_text(body)
    with pytest.raises(SourceError, match="unrecognised log format"):
        logs.sniff(p)


def test_a_header_line_is_only_a_counter_and_decoration(tmp_path: Path) -> None:
    """Lines that name a step among other words and numbers open no block. A progress bar
    inside a block (vLLM's `Processed prompts` bar before the results) leaves it open; any
    other such line (a checkpoint message naming another step) closes it: the pairs after it
    are not read at the header's step."""
    p = tmp_path / "run.log"
    out = []
    for s in range(1, 9):
        out += [f"Step {s}/8", f"  loss: {s / 10:.2f}", f"  reward: {s / 20:.3f}"]
        out += [f"Processed prompts: 100%|██████| {s + 200}/1000 [00:10<00:00, 9.9it/s]"]
        out += ["  lr: 0.7", f"Saved checkpoint at step {s + 100} in 3.2s", "  lr: 0.5"]
    p.write_text("\n".join(out) + "\n")
    frame = load(str(p))
    (info,) = frame.runs.values()
    assert frame.steps(info.name)[1:] == (1, 8)
    assert _values(frame, "lr") == pytest.approx([0.7] * 8)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tail_of_a_block_console_written_in_bursts_agrees_with_diagnose(
    tmp_path: Path, seed: int
) -> None:
    from test_tail_parity import _episodes, _replay

    noise = [0.02 * math.sin(s * 1.7) for s in range(60)]
    src, run = tmp_path / "src", tmp_path / "run"
    src.mkdir()
    run.mkdir()
    (src / "grpo.log").write_text(_nemo([(0.6 if s < 25 else 0.05) + noise[s] for s in range(60)]))
    watch = _replay(src, run, seed)
    tail = _episodes([v.to_dict() for v in watch.verdicts()])
    r = CliRunner().invoke(app, ["diagnose", str(run), "--format", "json", "--exit-zero"])
    assert r.exit_code == 0, r.output
    assert tail == _episodes(json.loads(r.stdout)["verdicts"])
    assert any(code == "RW01" for _, code, _, _ in tail)


def test_the_nemo_console_head_is_no_log_of_its_own(tmp_path: Path) -> None:
    """NeMo RL prints its whole configuration pretty-printed over lines before the first step,
    Ray prefixes every worker's line, vLLM's progress bars show rates and torch's warnings name
    source lines: none of it is a metric."""
    config = (
        "Final config:\n"
        "{'checkpointing': {'checkpoint_dir': 'results/grpo',\n"
        "                   'enabled': True,\n"
        "                   'keep_top_k': 3,\n"
        "                   'save_period': 10},\n"
        " 'loss_fn': {'reference_policy_kl_penalty': 0.01, 'ratio_clip_min': 0.2},\n"
        " 'policy': {'scheduler': [{'name': 'torch.optim.lr_scheduler.LinearLR',\n"
        "                           'kwargs': {'start_factor': 0.1, 'total_iters': 50}},\n"
        "                          {'milestones': [50]}],\n"
        "            'train_global_batch_size': 512}}\n"
    )
    noise = (
        "(VllmGenerationWorker pid=588925, ip=10.228.0.122) Processed prompts:  58%|#####  | "
        "37/64 [00:13<00:08,  3.01it/s, est. speed input: 225.57 toks/s, output: 775.35 toks/s]\n"
        "(VllmGenerationWorker pid=588925, ip=10.228.0.122) [rank0]:W0226 04:13:00.947000 588925 "
        "/torch/_dynamo/convert_frame.py:1358] [0/8]    last reason: 0/7: 2 <= x.size()[1]  # "
        "vllm/model_executor/layers/layernorm.py:282\n"
    )
    rewards = [0.3 + s / 100 for s in range(1, 13)]
    body = _nemo(rewards)
    head, sep, rest = body.partition("\n\n")
    p = tmp_path / "job.log"
    p.write_text(head + "\n" + config + sep + rest.replace("▶ Training policy...\n", noise, 5))
    assert logs.sniff(p) == "kv-pairs"
    frame = load(str(p))
    (info,) = frame.runs.values()
    assert frame.steps(info.name)[1:] == (1, 12)
    assert _values(frame, "reward_mean") == pytest.approx(rewards)
    tags = set(frame.data["metric"].astype(str)) | set(info.unmapped)
    for junk in ("pid", "input", "output", "reason", "keep_top_k", "save_period", "milestones"):
        assert not any(t.split("/")[-1] == junk for t in tags), junk
    assert not any(t.endswith(".py") for t in tags)
    # the configuration alone, without the steps, is no log
    only = tmp_path / "config.log"
    only.write_text(config * 3)
    with pytest.raises(SourceError, match="unrecognised log format"):
        logs.sniff(only)


def test_a_capture_without_a_suffix_is_a_log_in_a_folder(tmp_path: Path) -> None:
    """A job's output saved as `rl_loop_logs` (no suffix) is found by a folder's walk; a file
    without a suffix that does not name a capture (`Makefile`) is not tried."""
    run = tmp_path / "job"
    run.mkdir()
    (run / "rl_loop_logs").write_text(_nemo([0.3 + s / 100 for s in range(1, 13)]))
    (run / "Makefile").write_text("step 1: loss: 0.5 reward: 0.2\nstep 2: loss: 0.4 reward: 0.3\n")
    (run / "LICENSE").write_text("step 1 loss: 0.5 reward: 0.2\nstep 2 loss: 0.4 reward: 0.3\n")
    frame = load(str(run))
    (info,) = frame.runs.values()
    assert info.files == [str(run / "rl_loop_logs")]
    assert frame.steps(info.name)[1:] == (1, 12)
    assert logs.is_log_name(Path("train_log")) and logs.is_log_name(Path("stdout"))
    assert not logs.is_log_name(Path("Makefile")) and not logs.is_log_name(Path(".gitlog"))


def test_a_nemo_console_whose_first_step_comes_after_a_large_clusters_start_up(
    tmp_path: Path,
) -> None:
    """Hundreds of workers each print their start-up before the first step: the first header
    comes past the 256 KiB sniffed first and past the 2,000 lines of a later block the line
    sniffers probe; the deep sniff probes the lines naming a step with the pair lines among
    them."""
    start = "".join(
        f"(VllmGenerationWorker pid={4000 + i % 512}, ip=10.0.{i % 64}.1) INFO 02-26 03:55:44 "
        f"[gpu_worker.py:142] worker {i}: model weights loaded, KV cache blocks allocated\n"
        for i in range(12_000)
    )
    rewards = [0.3 + s / 100 for s in range(1, 21)]
    p = tmp_path / "grpo.log"
    p.write_text(start + _nemo(rewards))
    assert len(start) > logs.HEAD + (1 << 20)
    assert logs.sniff(p) == "kv-pairs"
    assert _values(load(str(p)), "reward_mean") == pytest.approx(rewards)


@pytest.mark.parametrize("header", ["=== Step {i} ===", "Step {i}", "Iteration {i}/40"])
def test_a_header_then_a_line_of_pairs_behind_a_logging_prefix(tmp_path: Path, header) -> None:
    """A loop that prints its counter on a line of its own, then the step's metrics on one
    line through `logging` (`2025-09-23 09:01:00,984 - train - INFO - loss: 0.1, reward:
    0.3`): every pair of that line is read at the header's step. A reward that crashes to zero
    fails the run; a progress bar's line in a block stays no metric."""
    rewards = [0.5 + i / 100 if i < 20 else 0.0 for i in range(40)]
    lines = []
    for i, r in enumerate(rewards):
        lines.append(header.format(i=i))
        if i == 3:
            lines.append(
                "Processed prompts: 58%|#####  | 37/64 [00:13<00:08, 3.01it/s, "
                "est. speed input: 225.57 toks/s, output: 775.35 toks/s]"
            )
        lines.append(
            f"2025-09-23 09:01:{i:02d},984 - train - INFO - loss: 0.1, "
            f"token_entropy: {0.8 - i / 200:.4f}, reward: {r}"
        )
    p = tmp_path / "train.log"
    p.write_text("\n".join(lines) + "\n")
    assert logs.sniff(p) == "kv-pairs"
    frame = load(str(p))
    (info,) = frame.runs.values()
    assert frame.steps(info.name)[1:] == (0, 39)
    assert _values(frame, "reward_mean") == pytest.approx(rewards)
    assert set(frame.data["metric"].astype(str)) == {"reward_mean", "entropy", "loss"}
    res = CliRunner().invoke(app, ["diagnose", str(p)])
    assert res.exit_code == 1 and "RW01" in res.output, res.output


def test_a_headers_line_of_many_pairs_is_read_whole(tmp_path: Path) -> None:
    """A step's line of pairs longer than a block's one-pair lines (400 characters) is still
    read whole, up to 4,000 characters; a longer one is not read (bounded work per line)."""
    names = [f"rewards/func_{j}/mean" for j in range(20)]
    p = tmp_path / "train.log"
    lines = []
    for i in range(1, 9):
        lines.append(f"----- step {i} -----")
        lines.append(", ".join(f"{n}: {i / 10:.4f}" for n in names) + ", reward: 0.5")
    lines.append("----- step 9 -----")
    lines.append(", ".join(f"metric_{j}: 1.0" for j in range(300)))  # > 4,000 characters
    assert 400 < len(lines[1]) < 4000 < len(lines[-1])
    p.write_text("\n".join(lines) + "\n")
    rows = {(r.tag, r.step): r.value for r in logs.load_file(p).data.itertuples()}
    assert rows[("rewards/func_19/mean", 8)] == 0.8 and rows[("reward", 3)] == 0.5
    assert len(rows) == 8 * 21
