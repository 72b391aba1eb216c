"""Consoles found in the sixteenth search of issue #12, each written here as the real code
prints it: mlx-lm's `Iter N:` lines of `Name number unit` items, prime-rl's `Step N | ...` lines
of its orchestrator and trainer (names of several words, units, a bare duration), and a Kaggle
kernel's log (a JSON array of the notebook's output chunks). From the seventeenth search: a
hand-written loop's `Epoch N/M` header with its results on the lines below it, and a JSONL loop
counting its `update`s."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import followed_rows

from rlwatch import names
from rlwatch.errors import SourceError
from rlwatch.sources import logs


def _rows(frame) -> dict[tuple[str, int], float]:
    return {(r.tag, r.step): r.value for r in frame.data.itertuples()}


def _mlx_lines(steps: range) -> str:
    """mlx-lm's trainer (`mlx_lm.lora`, its DPO variant adds the implicit rewards): a train
    report every 10 iterations, a validation report every 50."""
    out = []
    for it in steps:
        if it % 50 == 0:
            out.append(f"Iter {it}: Val loss {0.7 - it / 2000:.3f}, Val took {3.21:.3f}s")
        out.append(
            f"Iter {it}: Train loss {0.69 - it / 1000:.3f}, Chosen reward {-it / 100:.3f}, "
            f"Rejected reward {-it / 50:.3f}, Learning Rate {1e-5:.3e}, It/sec {1.015:.3f}, "
            f"Tokens/sec {582.556:.3f}, Trained Tokens {it * 530}, Peak mem {2.334:.3f} GB"
        )
    return "Loading pretrained model\nStarting training..., iters: 200\n" + "\n".join(out) + "\n"


def test_mlx_lm_iter_lines_of_words_numbers_and_units(tmp_path: Path) -> None:
    """`Iter 30: Train loss 0.660, ..., It/sec 1.015, ..., Peak mem 2.334 GB`: every item is a
    name of words (a slash inside one), a number and maybe a unit; `Train`/`Val` name the split.
    Before, the slash and the unit made the line unreadable (exit 2)."""
    f = tmp_path / "train.log"
    f.write_text(_mlx_lines(range(10, 210, 10)))
    frame = logs.load_file(f)
    rows = _rows(frame)
    assert sorted({s for k, s in rows if k == "loss"}) == list(range(10, 210, 10))
    assert rows[("loss", 30)] == 0.66 and rows[("eval/loss", 100)] == 0.65
    assert rows[("chosen_reward", 40)] == -0.4 and rows[("rejected_reward", 40)] == -0.8
    assert rows[("peak_mem", 10)] == 2.334 and rows[("it/sec", 10)] == 1.015
    assert rows[("eval/took", 50)] == 3.21
    r = names.resolve(sorted({k for k, _ in rows}))
    assert r.canonical["dpo_chosen_reward"] == "chosen_reward"
    assert r.canonical["dpo_rejected_reward"] == "rejected_reward"
    assert r.canonical["loss"] == "loss" and r.canonical["lr"] == "learning_rate"


def _prime_orchestrator(steps: range, old: bool) -> str:
    """prime-rl's orchestrator (`orchestrator.py`): loguru's `HH:mm:ss SUCCESS` before it; the
    older releases wrote `Name: value unit`, the newer `Name value` with a bare duration."""
    out = []
    for s in steps:
        out.append("Generating rollouts (train): 100%|##########| 512/512 [01:13<00:00,  6.97it/s]")
        if old:
            msg = (
                f"Step {s} | Time: {70 + s / 10:.2f}s | Reward: {0.3 + s / 1000:.4f} | "
                f"Throughput: {2400.5:.1f} tokens/s | Seq. Length: {340 + s:.1f} tokens/sample | "
                f"Async Level: 1 | Max. Off-Policy Level: 0"
            )
        else:
            msg = (
                f"Step {s} | {'1m 13s':>7} | Reward {0.3 + s / 1000:.4f} | "
                f"Trainable {60}/{64} ({60 / 64:.1%}) | Turns {1.0:.1f} | Branches {1.0:.1f} | "
                f"Max Off-Policy {1} | Error {0.0:.1%} | Cancelled {0.0:.1%} | "
                f"Truncation {s / 1000:.1%}"
            )
        out.append(f"02:33:{s % 60:02d} SUCCESS {msg}")
        out.append(f"02:33:{s % 60:02d}    INFO Starting orchestrator step {s + 1}")
    return "\n".join(out) + "\n"


def test_prime_rl_orchestrator_lines_old_and_new(tmp_path: Path) -> None:
    """`Seq. Length: 345.6 tokens/sample` was read as `Length`, `Max. Off-Policy Level: 0` as
    `Level`; the newer `Reward 0.3887 | Trainable 60/64 (93.8%)` after a bare `1m 13s` was not
    read at all. Each item's name is now all its words, and the run is prime-rl's."""
    for old in (True, False):
        f = tmp_path / f"orchestrator-{old}.log"
        f.write_text(_prime_orchestrator(range(1, 41), old))
        rows = _rows(logs.load_file(f))
        assert sorted({s for k, s in rows if k == "reward"}) == list(range(1, 41)), old
        assert rows[("reward", 20)] == 0.32
        r = names.resolve(sorted({k for k, _ in rows}))
        assert r.framework == "prime_rl", old
        assert r.canonical["reward_mean"] == "reward"
        if old:
            assert rows[("seq_length", 5)] == 345.0 and rows[("time", 5)] == 70.5
            assert rows[("max_off_policy_level", 5)] == 0 and ("length", 5) not in rows
            assert r.canonical["response_length_mean"] == "seq_length"
        else:
            assert rows[("truncation", 20)] == 0.02 and rows[("trainable", 20)] == 60
            assert rows[("max_off_policy", 3)] == 1 and ("1m", 3) not in rows
            assert r.canonical["truncation_rate"] == "truncation"


def test_prime_rl_trainer_lines(tmp_path: Path) -> None:
    """The trainer's `Step N | 12.3s | Loss ... | Entropy ... | Mismatch KL ... | Grad. Norm
    ... | LR ... | Throughput 1234 tokens/s | MFU 12.3% | Peak Mem. 45.6 GiB`."""
    f = tmp_path / "trainer.log"
    f.write_text(
        "".join(
            f"02:34:{s % 60:02d} SUCCESS Step {s} | {12.3:>6.1f}s | Loss {0.01:.4f} | "
            f"Entropy {0.5 - s / 100:.4f} | Mismatch KL {0.001:.4f} | Grad. Norm {0.12:.4f} | "
            f"LR {1e-6:.2e} | Throughput {1234:.0f} tokens/s | MFU {12.3:.1f}% | "
            f"Peak Mem. {45.6:.1f} GiB\n"
            for s in range(1, 31)
        )
    )
    rows = _rows(logs.load_file(f))
    assert rows[("entropy", 10)] == 0.4 and rows[("grad_norm", 10)] == 0.12
    assert rows[("mismatch_kl", 10)] == 0.001 and abs(rows[("mfu", 10)] - 0.123) < 1e-12
    assert rows[("peak_mem", 10)] == 45.6 and rows[("lr", 10)] == 1e-6
    r = names.resolve(sorted({k for k, _ in rows}))
    assert r.framework == "prime_rl"
    assert r.canonical["rollout_kl"] == "mismatch_kl" and r.canonical["entropy"] == "entropy"


def test_a_name_of_one_word_keeps_its_case_as_before(tmp_path: Path) -> None:
    """Only a name of several words before a colon is read as an item of words: a line of
    one-word names (`KL_ref: 0.0012`) is read as it always was."""
    f = tmp_path / "train.log"
    f.write_text(
        "".join(
            f"Epoch:[1/1]({s}/200), Reward: {s / 100:.4f}, KL_ref: 0.0012, Loss: 0.5\n"
            for s in range(1, 21)
        )
    )
    rows = _rows(logs.load_file(f))
    assert rows[("KL_ref", 5)] == 0.0012 and rows[("Reward", 5)] == 0.05


def _kaggle_log(steps: range, cut: bool = False) -> str:
    """A Kaggle kernel's log as its "Logs" download holds it: a JSON array, an object a line,
    each a chunk of the notebook's stdout/stderr with its time; a tqdm bar redrawn with `\\r`
    and a TRL console dict of string values (transformers >= 4.56) split over two chunks."""
    chunks = [("stderr", "0.00s - Debugger warning: frozen modules\n")]
    for s in steps:
        bar = f"\r {s / 5:.0f}%|# | {s}/500 [03:00<4:01:23, 29.26s/it]"
        d = {"loss": f"{0.5 - s / 1000:.4g}", "grad_norm": "0.7478", "reward": f"{s / 100:.4g}"}
        text = repr(d)
        # tqdm.write: the bar cleared, the dict printed, the bar drawn again
        chunks += [("stdout", bar), ("stdout", "\r" + " " * 40 + "\r" + text[:20])]
        chunks += [("stdout", text[20:] + "\r\n"), ("stdout", bar)]
    end = {"train_runtime": "301.2", "train_loss": "0.4", "epoch": "1"}
    chunks += [("stdout", "\n"), ("stdout", repr(end) + "\n")]
    lines = [
        json.dumps({"stream_name": n, "time": 7.2 + i, "data": t}, separators=(",", ":"))
        for i, (n, t) in enumerate(chunks)
    ]
    out = "[" + "\n,".join(lines) + "]"  # the last line ends on `]`, no newline
    return out[: -len(lines[-1]) // 2] if cut else out


def test_a_kaggle_kernels_log_is_read_as_the_output_it_holds(tmp_path: Path) -> None:
    """Before, its JSON was read as text (`u003c00` and file names as keys, no rule could run).
    Its last line ends on `]` with no newline: complete, no warning; cut inside its last
    object, that line is left out with a warning."""
    f = tmp_path / "vsr.log"
    f.write_text(_kaggle_log(range(5, 105, 5)))
    assert logs.sniff(f) == "python-dicts"
    rows = _rows(logs.load_file(f))
    assert sorted({s for k, s in rows if k == "reward"}) == list(range(5, 105, 5))
    assert rows[("reward", 50)] == 0.5 and rows[("loss", 100)] == 0.4
    r = subprocess.run(
        [sys.executable, "-m", "rlwatch", "diagnose", str(f), "--format", "json"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert r.returncode in (0, 1) and "incomplete" not in r.stderr, r.stderr
    cut = tmp_path / "cut.log"
    cut.write_text(_kaggle_log(range(5, 105, 5), cut=True))
    r = subprocess.run(
        [sys.executable, "-m", "rlwatch", "diagnose", str(cut), "--format", "json"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert "last line incomplete" in r.stderr, r.stderr


def test_tail_reads_a_kaggle_log_as_diagnose_does(tmp_path: Path) -> None:
    text = _kaggle_log(range(5, 105, 5))
    f = tmp_path / "whole.log"
    f.write_text(text)
    whole = _rows(logs.load_file(f))
    followed = followed_rows(tmp_path, "k.log", [text], [64, 512, 4096], seed=3)
    assert followed == whole


def test_an_items_name_is_words_never_numbers(tmp_path: Path) -> None:
    """`loss 0.5 reward 0.3, time 2s`: an item's name is words of letters, so the numbers of
    space-separated pairs are never swallowed into a name (`loss_0_5_reward`)."""
    f = tmp_path / "train.log"
    f.write_text("".join(f"step {s}: loss 0.5 reward 0.3, time 2s\n" for s in range(1, 21)))
    try:
        keys = {k for k, _ in _rows(logs.load_file(f))}
    except SourceError:  # a line of two shapes at once: unreadable, not misread
        keys = set()
    assert not any(any(c.isdigit() for c in k) for k in keys), keys


def test_a_kaggle_like_line_inside_another_log_leaves_it_as_it_is(tmp_path: Path) -> None:
    """Only a file that begins as a Kaggle kernel's log is read as one: a console that prints
    such a line in its middle keeps its other lines."""
    chunk = json.dumps({"stream_name": "stdout", "time": 1.0, "data": "hi\n"})
    f = tmp_path / "train.log"
    f.write_text(
        "".join(
            f"step {s}: {{'loss': {0.5 - s / 100}, 'reward': {s / 100}}}\n"
            + (f",{chunk}\n" if s == 10 else "")
            for s in range(1, 21)
        )
    )
    rows = _rows(logs.load_file(f))
    assert sorted({s for k, s in rows if k == "reward"}) == list(range(1, 21))


def _epoch_blocks(epochs: int) -> str:
    """A hand-written GRPO loop (as a W&B run's output.log captured it): debug lines during the
    epoch, then `Epoch N/50` alone on its line and the epoch's results below it, tab-indented;
    an evaluation line every 5 epochs names the epoch too, with no `/total`."""
    out = ["You're using a Qwen2TokenizerFast tokenizer."]
    for e in range(1, epochs + 1):
        if e % 5 == 0:
            out.append(f"  [EVAL] Epoch {e}: Test Reward (greedy): {e / 500:.4f}")
        out += [f"  [DEBUG] gradient norm: {7 + e / 10:.6f}", "  [DEBUG] rewards: [0.05, 0.0]"]
        out += [f"Epoch {e}/50", f" \tLoss: {1 / e:.4f}", f" \tReward: {e / 100:.4f}"]
    return "\n".join(out) + "\n"


def test_an_epoch_header_alone_on_its_line_opens_a_block_of_results(tmp_path: Path) -> None:
    """`Epoch 3/50` and nothing else, then `\tLoss: 0.0055`, `\tReward: 0.0094`: the results
    below the header are that epoch's (before, no line had a counter and pairs: exit 2). Lines
    that only mention an epoch (`[EVAL] Epoch 5: ...`) open no block, and debug lines are no
    results."""
    f = tmp_path / "output.log"
    f.write_text(_epoch_blocks(16))
    rows = _rows(logs.load_file(f))
    assert {k for k, _ in rows} == {"loss", "reward"}
    assert sorted(s for k, s in rows if k == "reward") == list(range(1, 17))
    assert rows[("loss", 4)] == 0.25 and rows[("reward", 16)] == 0.16
    out = subprocess.run(
        [sys.executable, "-m", "rlwatch", "diagnose", str(f)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    # a header with words after it is a line that mentions an epoch, not a header
    g = tmp_path / "words.log"
    g.write_text(_epoch_blocks(16).replace("/50\n", "/50 starting\n"))
    try:
        rows = _rows(logs.load_file(g))
    except SourceError:
        rows = {}
    assert not rows


def test_a_jsonl_loop_counting_its_updates(tmp_path: Path) -> None:
    """A REINFORCE loop's `{"update": 3, "loss": ..., "reward": ...}`: `update` is its step,
    as `grpo_step` or `iteration` is another loop's (before: exit 2, no step)."""
    f = tmp_path / "train_metrics.jsonl"
    recs = [{"update": u, "loss": 1 / u, "reward": u / 40, "baseline": 0.3} for u in range(1, 41)]
    f.write_text("".join(json.dumps(r) + "\n" for r in recs))
    rows = _rows(logs.load_file(f))
    assert sorted(s for k, s in rows if k == "reward") == list(range(1, 41))
    assert rows[("reward", 20)] == 0.5 and ("update", 1) not in rows


def test_a_loops_list_of_sample_rewards_is_their_mean_and_spread(tmp_path: Path) -> None:
    """A hand-written GRPO loop logs each step's samples as a list (`"rewards": [0.0, 1.0]`):
    read as `rewards/mean` and `rewards/std` (population), the batch's reward and its spread,
    on Arrow's fast path and record by record alike; lists of anything else are no metric."""
    recs = [
        {"step": s, "rewards": [1.0, 1.0] if s % 5 else [0.0, 1.0], "loss": 0.1, "answers": ["7"]}
        for s in range(1, 41)
    ]
    for name, extra in [("plain.jsonl", {}), ("nulls.jsonl", {"note": None})]:
        f = tmp_path / name
        f.write_text("".join(json.dumps({**r, **extra}) + "\n" for r in recs))
        frame = logs.load_file(f)
        rows = _rows(frame)
        assert rows[("rewards/std", 5)] == 0.5 and rows[("rewards/mean", 5)] == 0.5
        assert rows[("rewards/std", 6)] == 0.0 and rows[("rewards/mean", 6)] == 1.0
        assert not any(k.startswith("answers") for k, _ in rows)
        canonical = names.resolve(sorted({k for k, _ in rows})).canonical
        assert canonical["reward_std"] == "rewards/std"
    # samples whose mean overflows, or beyond float: no number (and no numpy warning)
    f = tmp_path / "huge.jsonl"
    f.write_text(
        "".join(
            json.dumps({"step": s, "rewards": [1e308, 1.7e308] if s == 3 else [1, 10**400]}) + "\n"
            for s in range(1, 6)
        )
        + "".join(json.dumps({"step": s, "rewards": [0.5, 1.0]}) + "\n" for s in range(6, 9))
    )
    r = subprocess.run(
        [sys.executable, "-W", "error", "-m", "rlwatch", "metrics", str(f)],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0 and "RuntimeWarning" not in r.stderr, r.stderr
    rows = _rows(logs.load_file(f))
    assert sorted(s for k, s in rows if k == "rewards/std") == [6, 7, 8]


def test_a_notebooks_printed_results_after_long_cells(tmp_path: Path) -> None:
    """A notebook (LLMs-from-scratch's DPO chapter) whose loop prints `Ep 1 (Step 000005):
    Train loss 0.691, Val loss 0.692, Train reward margins 0.040, ...` below cells of code
    that fill its first 2,000 lines of JSON: sniffed by the counted lines (before: exit 2,
    "unrecognised log format")."""
    code = [f"x_{i} = {i}\n" for i in range(2100)]
    prints = [
        f"Ep 1 (Step {s:06d}): Train loss {0.69 - s / 1e3:.3f}, Val loss {0.69 - s / 2e3:.3f}, "
        f"Train reward margins {s / 50:.3f}, Val reward margins {s / 60:.3f}\n"
        for s in range(0, 120, 5)
    ]
    nb = {
        "cells": [
            {"cell_type": "code", "metadata": {}, "source": code, "outputs": []},
            {
                "cell_type": "code",
                "metadata": {},
                "source": ["train()"],
                "outputs": [{"name": "stdout", "output_type": "stream", "text": prints}],
            },
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    f = tmp_path / "dpo-from-scratch.ipynb"
    f.write_text(json.dumps(nb, indent=1))
    assert logs.sniff(f) == "kv-pairs"
    rows = _rows(logs.load_file(f))
    assert sorted(s for k, s in rows if k == "loss") == list(range(0, 120, 5))
    assert rows[("reward_margins", 50)] == 1.0


def test_a_jsonl_whose_step_is_a_namespaced_float(tmp_path: Path) -> None:
    """ROLL's metrics JSONL (its W&B mirror) counts in `"system/step": 3.0`, last of ~100 keys,
    among `timing_s/step`-like times: that whole float is the step (before: exit 2)."""
    f = tmp_path / "metrics.jsonl"
    recs = [
        {
            "actor/pg_loss": 0.01 * s,
            "time/step": 12.0,
            "reward/selected_mean": s / 40,
            "system/step": float(s),
        }
        for s in range(1, 31)
    ]
    f.write_text("".join(json.dumps(r) + "\n" for r in recs))
    rows = _rows(logs.load_file(f))
    assert sorted(s for k, s in rows if k == "reward/selected_mean") == list(range(1, 31))
    assert rows[("reward/selected_mean", 20)] == 0.5 and rows[("time/step", 3)] == 12.0
    assert not any(k == "system/step" for k, _ in rows)


def test_a_consoles_rich_table_of_each_steps_metrics(tmp_path: Path) -> None:
    """A Tinker cookbook loop's console: `=== Step N ===`, progress lines, then the step's
    metrics as a rich table titled `Step N` (box characters and ANSI colours around each cell,
    `│ mean_reward │ 0.648761 │`): each row read at that step (before: exit 2)."""

    def cell(text: str, colour: str) -> str:
        return f"\x1b[{colour}m \x1b[0m\x1b[{colour}m{text:<30}\x1b[0m\x1b[{colour}m \x1b[0m"

    out = []
    for s in range(12):
        out += [
            f"__main__:277 [INFO] === Step {s} ===",
            "__main__:300 [INFO] Sampling 8 x 16 completions...",
            "tinker_utils.log:171 [INFO] ",
            f"\x1b[3m                      Step {s}                       \x1b[0m",
            "\u250f" + "\u2501" * 32 + "\u2533" + "\u2501" * 16 + "\u2513",
            "\u2503" + cell("Metric", "1;35") + "\u2503" + cell("Value", "1;35") + "\u2503",
            "\u2521" + "\u2501" * 32 + "\u2547" + "\u2501" * 16 + "\u2529",
        ]
        for name, v in (("groups_skipped", 5), ("loss:sum", 7485.6 + s), ("mean_reward", s / 20)):
            out.append("\u2502" + cell(name, "36") + "\u2502" + cell(f"{v:.6f}", "32") + "\u2502")
        out.append("\u2514" + "\u2500" * 32 + "\u2534" + "\u2500" * 16 + "\u2518")
    f = tmp_path / "logs.log"
    f.write_text("\n".join(out) + "\n")
    assert logs.sniff(f) == "kv-pairs"
    rows = _rows(logs.load_file(f))
    assert sorted(s for k, s in rows if k == "mean_reward") == list(range(12))
    assert rows[("mean_reward", 10)] == 0.5 and rows[("loss:sum", 3)] == 7488.6
    assert not any(k.lower() in ("metric", "value") for k, _ in rows)


def _cr_only_capture(steps: range) -> str:
    """A console captured with carriage returns alone (HF Jobs' log of a TRL run): tqdm's
    redraws, its cursor-up codes and the printed dicts, never a newline; a dict is sometimes
    drawn right after a bar (no clearing redraw between them)."""
    out = [f"\r  0%|          | 0/{steps[-1]} [00:00<?, ?it/s]\x1b[A"]
    for s in steps:
        d = {"loss": round(0.5 - s / 1000, 4), "reward": s / 100, "epoch": round(s / 100, 2)}
        out.append(f"\r {s}%|#         | {s}/{steps[-1]} [00:{s:02d}<00:30, 1.2s/it]\x1b[A")
        out.append("" if s % 3 == 0 else "\r" + " " * 47 + "\r\x1b[A")  # glued on every third
        out.append(repr(d) + f"\r {s}%|#         | {s}/{steps[-1]} [00:{s:02d}<00:30, 1.2s/it]")
        out.append("\x1b[A")
    return "".join(out) + "\r100%|##########| done"  # the last redraw, still being drawn


def test_a_console_of_carriage_returns_alone_is_read_redraw_by_redraw(tmp_path: Path) -> None:
    """Every dict of a capture without a newline is read, at the count of the bar redrawn
    after it (before, the whole file was one unfinished line: nothing was read); what follows
    the last carriage return is the one record still being drawn. `tail` reads it alike."""
    text = _cr_only_capture(range(1, 41))
    assert "\n" not in text
    f = tmp_path / "job.log"
    f.write_text(text, newline="")
    rows = _rows(logs.load_file(f))
    assert sorted({s for k, s in rows if k == "reward"}) == list(range(1, 41))
    assert all(rows[("reward", s)] == s / 100 for s in range(1, 41))
    followed = followed_rows(tmp_path, "k.log", [text], [64, 512, 4096], seed=5)
    assert followed == rows


def _dpo_slurm(steps: int) -> str:
    """A custom DPO script's Slurm output (the 33rd search): the dataset's first examples
    printed as dicts, then a summary line every 3000 steps of `Name=number` items whose names
    are several words."""
    sample = {
        "prompt": "how can i develop a habit of drawing daily",
        "chosen": [{"content": "Developing a daily habit of drawing can be fun.", "role": "user"}],
        "score_chosen": 8.0,
        "score_rejected": 6.0,
    }
    out = [repr(sample), repr(sample)]
    for s in range(steps):
        out.append(f"Example Generation at Step {3000 * s}:")
        out.append("The quick brown fox jumps over the lazy dog.")
        out.append(
            f"Step {3000 * s}: Train Loss={0.69 - s / 50:.4f}, Eval Loss={0.69 - s / 100:.4f}, "
            f"Win Rate={0.5 + s / 100:.4f}"
        )
    return "\n".join(out) + "\n"


def test_items_named_by_several_words_with_an_equals_sign(tmp_path: Path) -> None:
    """`Train Loss=0.6914, Eval Loss=0.6914` are two metrics (PAIR alone read both as `Loss`,
    the last write winning); the printed dataset examples before them are no log (a dict
    holding a prompt's text), so the file is read by its step lines."""
    p = tmp_path / "log.out"
    p.write_text(_dpo_slurm(21))
    assert logs.sniff(p) == "kv-pairs"
    rows = _rows(logs.load_file(p))
    assert rows[("loss", 3000)] == 0.67 and rows[("eval/loss", 3000)] == 0.68
    assert rows[("win_rate", 60000)] == 0.7
    assert {t for t, _ in rows} == {"loss", "eval/loss", "win_rate"}


def test_a_printed_data_sample_among_trl_dicts_is_no_row(tmp_path: Path) -> None:
    """A console that prints a dataset example (`{'prompt': '...', 'score_chosen': 8.0}`)
    before TRL's logs: the example's numbers are not a log of the run."""
    sample = repr({"prompt": "Write a haiku about the sea, please.", "score_chosen": 8.0})
    dicts = [repr({"loss": 0.69 - s / 100, "grad_norm": 1.0, "epoch": s / 10}) for s in range(8)]
    p = tmp_path / "train.log"
    p.write_text("\n".join([sample, *dicts]) + "\n")
    frame = logs.load_file(p)
    assert "score_chosen" not in set(frame.data["tag"].astype(str))
    assert len(frame.data[frame.data["tag"].astype(str) == "loss"]) == 8
