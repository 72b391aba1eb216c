"""Jupyter notebooks read as what their cells printed (the twenty-fifth search of issue #12):
a hand-written loop's notebook saved by Kaggle (its outputs each one string, its code beside
them), and notebooks whose cells each run a training of their own (nanochat's RL, DPO and PPO
scripts a cell each), written here in the shapes Jupyter and Kaggle save."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import followed_rows
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from rlwatch.cli.app import app
from rlwatch.sources import discover, load, logs
from rlwatch.sources.logs import _text


def _rows(frame) -> dict[tuple[str, int], float]:
    return {(r.run, r.tag, r.step): r.value for r in frame.data.itertuples()}


def _cell(source: str, printed: str | None = None, lines: bool = False) -> dict:
    """A code cell; its stdout one string (Kaggle, Colab) or a list of lines (Jupyter)."""
    out = []
    if printed is not None:
        text = printed.splitlines(keepends=True) if lines else printed
        out = [{"name": "stdout", "output_type": "stream", "text": text}]
    src = source.splitlines(keepends=True) if lines else source
    return {
        "cell_type": "code",
        "execution_count": 1,
        "metadata": {},
        "outputs": out,
        "source": src,
    }


def _notebook(cells: list[dict], kaggle: bool) -> str:
    nb = {"metadata": {"kernelspec": {"name": "python3"}}, "nbformat": 4, "nbformat_minor": 4}
    nb["cells"] = cells
    if kaggle:  # one line of JSON, no newline at its end
        return json.dumps(nb, separators=(",", ":"), ensure_ascii=False)
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


LOOP = """for step in range(100):
    r, sd, loss = train_step()
    if step % 5 == 0:
        print(f"step={step:4d}  reward={r:+.3f} (\u00b1{sd:.2f})  loss={loss:+.4f}")
# expected output:
# step=  99  reward=+99.000 (\u00b10.00)  loss=+9.0000
lr = 5e-6
"""


def _loop_output(steps: range) -> str:
    return "".join(
        f"step={s:4d}  reward={1 + s / 100:+.3f} (\u00b1{s / 1000:.2f})  loss={-s / 1e4:+.4f}  "
        f"fmt=100%  elapsed={s * 3}s  d0=accept\n"
        + (f"  [eval@{s}] profit=44.48  reward=37.67\n" if s and s % 25 == 0 else "")
        for s in steps
    )


@pytest.mark.parametrize("kaggle", [True, False])
def test_a_notebook_is_read_as_what_its_cells_printed_not_their_code(
    tmp_path: Path, kaggle: bool
) -> None:
    """A hand-written loop's notebook (the OpenEnv hackathon's, saved by Kaggle: each output
    one string of many lines) is read as the lines its outputs hold: the loop's 20 logs, not
    the `step=  99` in its code (before: the code and outputs read as one text, one log, exit
    2). Jupyter's shape (a list of lines) reads alike."""
    nb = tmp_path / "FinalTrainingScript.ipynb"
    steps = range(0, 100, 5)
    nb.write_text(
        _notebook(
            [
                _cell("import torch\nprint('ok')", "ok\n", lines=not kaggle),
                _cell(LOOP, "Loaded model.\n" + _loop_output(steps), lines=not kaggle),
            ],
            kaggle,
        ),
        encoding="utf-8",
    )
    assert logs.sniff(nb) == "kv-pairs"
    rows = {(t, s): v for (_, t, s), v in _rows(logs.load_file(nb)).items()}
    assert sorted(s for t, s in rows if t == "reward") == list(steps)
    assert rows[("reward", 15)] == 1.15 and rows[("loss", 15)] == -0.0015
    assert not any(s == 99 for _, s in rows)  # the code's line is no log
    r = subprocess.run(
        [sys.executable, "-m", "rlwatch", "diagnose", str(nb), "--format", "json"],
        capture_output=True,
        text=True,
    )
    assert r.returncode in (0, 1), r.stderr
    (run,) = json.loads(r.stdout)["runs"]
    assert run["name"] == "FinalTrainingScript"


def _trainings(kaggle: bool) -> str:
    """Three cells of nanochat's scripts (a fork's Kaggle pipeline): an RL run, an evaluation,
    a DPO run whose steps start again, and the DPO run resumed in the next cell."""
    rl = "".join(  # a 0/1 reward no sample earns: no learning signal (RW07)
        f"Step {s}/30 | Example step 0 | Pass 0 | loss: -0.000000 | Average reward: 0.0\n"
        f"Step {s}/30 | Average reward: 0.0 | Average sequence length: 250.5\n"
        for s in range(30)
    )
    dpo = "".join(
        f"Step {s} | epoch 0 | dpo_loss: {0.693 - s / 1000:.6f} | pref_acc: 0.7500\n"
        for s in range(0, 40, 2)
    )
    more = "".join(
        f"Step {s} | epoch 0 | dpo_loss: {0.653 - s / 1000:.6f} | pref_acc: 0.8000\n"
        for s in range(40, 60, 2)
    )
    cells = [
        {"cell_type": "markdown", "metadata": {}, "source": "## RL run"},
        _cell("!python -m scripts.chat_rl", rl, lines=not kaggle),
        _cell("!python -m scripts.chat_eval", "Step 30 | Pass@1: 0.1000, Pass@2: 0.2000\n"),
        {"cell_type": "markdown", "metadata": {}, "source": "## DPO run"},
        _cell("!python -m scripts.chat_dpo", dpo, lines=not kaggle),
        _cell("!python -m scripts.chat_dpo --resume", more, lines=not kaggle),
    ]
    return _notebook(cells, kaggle)


@pytest.mark.parametrize("kaggle", [True, False])
def test_a_notebook_of_several_trainings_is_a_run_each(tmp_path: Path, kaggle: bool) -> None:
    """Each training a cell printed is a run of its own, named by its first cell; a cell that
    goes on from the steps before (a resumed training) and one printing after it (an
    evaluation) belong to it (before: one run of RL and DPO rows mixed, its steps restarting)."""
    nb = tmp_path / "nanochat_d8_rl_and_dpo.ipynb"
    nb.write_text(_trainings(kaggle), encoding="utf-8")
    assert logs.notebook_runs(nb) == ["cell-2", "cell-5"]
    rows = _rows(load(str(nb)))
    rl, dpo = "nanochat_d8_rl_and_dpo/cell-2", "nanochat_d8_rl_and_dpo/cell-5"
    assert sorted(s for run, t, s in rows if run == rl and t == "reward") == list(range(30))
    assert rows[(rl, "Pass@1", 30)] == 0.1  # the evaluation after it
    assert sorted(s for run, t, s in rows if run == dpo and t == "dpo_loss") == list(
        range(0, 60, 2)
    )
    assert rows[(dpo, "dpo_loss", 42)] == 0.611 and rows[(dpo, "pref_acc", 4)] == 0.75
    assert not any(t == "dpo_loss" for run, t, _ in rows if run == rl)
    # in a folder, under the notebook's name; a notebook of one training is one run as before
    (tmp_path / "one.ipynb").write_text(
        _notebook([_cell("train()", _loop_output(range(0, 50, 5)), lines=not kaggle)], kaggle)
    )
    names = sorted(f.name for f in discover(str(tmp_path)).runs)
    assert names == ["nanochat_d8_rl_and_dpo/cell-2", "nanochat_d8_rl_and_dpo/cell-5", "one"]


def test_tail_and_diagnose_name_and_judge_a_notebooks_trainings_alike(tmp_path: Path) -> None:
    """The RL cell's reward is 0 on every step with a loss of 0 (no sample ever earns it):
    that run fails, the DPO run does not; `tail` names the runs and gates as `diagnose`."""
    nb = tmp_path / "runs.ipynb"
    nb.write_text(_trainings(kaggle=True), encoding="utf-8")
    r = CliRunner().invoke(app, ["diagnose", str(nb), "--format", "json"])
    assert r.exit_code == 1, r.output
    report = json.loads(r.stdout)
    assert sorted(run["name"] for run in report["runs"]) == ["runs/cell-2", "runs/cell-5"]
    fired = {(v["run"], v["code"]) for v in report["verdicts"] if v["state"] == "firing"}
    assert ("runs/cell-2", "RW07") in fired and not any(r == "runs/cell-5" for r, _ in fired)
    t = CliRunner().invoke(app, ["tail", str(nb), "--once", "--plain", "--exit-on", "error"])
    assert t.exit_code == 1, t.output
    assert sorted(re.findall(r" (\S+): appeared", t.stdout)) == ["runs/cell-2", "runs/cell-5"]
    assert "runs/cell-2" in t.stdout.split("RW07")[0].splitlines()[-1] + t.stdout


def test_a_notebook_of_one_training_followed_as_it_is_written(tmp_path: Path) -> None:
    """Jupyter's shape written in bursts (a notebook saved as it grows): `tail` ends with the
    rows `diagnose` reads."""
    text = _notebook([_cell(LOOP, _loop_output(range(0, 100, 5)), lines=True)], kaggle=False)
    f = tmp_path / "loop.ipynb"
    f.write_text(text, encoding="utf-8")
    want = {(t, s): v for (_, t, s), v in _rows(logs.load_file(f)).items()}
    assert len(want) > 40
    assert followed_rows(tmp_path, "loop.ipynb", [text], [7, 64, 500, 4096], seed=3) == want


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_a_notebook_read_in_any_blocks_gives_the_same_text(data: st.DataObject) -> None:
    """NotebookText over any split of the file into blocks gives what one read gives: a string,
    an escape or a key cut at a block's end waits for the next block."""
    kaggle = data.draw(st.booleans())
    text = _trainings(kaggle)
    whole = _text.NotebookText().feed(text)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=12)))
    nb, got, at = _text.NotebookText(), [], 0
    for c in [*cuts, len(text)]:
        got.append(nb.feed(text[at:c]))
        at = c
    assert "".join(got) == whole
    assert "Average sequence length: 250.5" in whole and "chat_rl" not in whole


@pytest.mark.parametrize(
    "text",
    [
        '{"cells": ' + "[" * 100_000 + "]" * 100_000 + "}",  # nested past any notebook
        '{"cells": [{"outputs": [{"text": "step 1 loss 0.5\\u12"}]}]}',  # a bad escape
        '{"cells": [{"outputs": [{"text": ["step 1 loss 0.5\\n", 7, null, {"a": "b"}]}]}]}',
        '{"nbformat": 4, "cells": [{"outputs": [{"text": "step 1',  # cut in a string
        '{"metadata": {"x": "\\"cells\\": ["}, "cells": []}',
    ],
)
def test_a_hostile_notebook_is_read_in_bounds(text: str) -> None:
    nb = _text.NotebookText()
    out = nb.feed(text)
    assert isinstance(out, str) and len(nb.kind) <= _text.NB_DEPTH


LAB_PPO = """for step, batch in tqdm(enumerate(ppo_trainer.dataloader)):
    stats = ppo_trainer.step(prompt_tensors, summary_tensors, reward_tensors)
    ppo_trainer.log_stats(stats, batch, reward_tensors)
    print(f'objective/kl: {stats["objective/kl"]}')
    print(f'ppo/returns/mean: {stats["ppo/returns/mean"]}')
    print(f'ppo/policy/advantages_mean: {stats["ppo/policy/advantages_mean"]}')
    print('-'.join('' for x in range(100)))
"""


def _lab_cell(kls: list[float], names: tuple[str, ...], kaggle: bool) -> dict:
    """DeepLearning.AI's PPO lab (TRL's PPOTrainer detoxifying FLAN-T5): a stream output per
    step, three `name: value` lines then 99 dashes (Jupyter: a list of lines; Kaggle and
    Colab: one string), and a tqdm bar on stderr before them."""
    out = [{"name": "stderr", "output_type": "stream", "text": ["0it [00:00, ?it/s]"]}]
    for i, kl in enumerate(kls):
        text = f"{names[0]}: {kl}\n{names[1]}: {-0.5 - i / 100}\n{names[2]}: {i * 1e-9}\n"
        text += "-" * 99 + "\n"
        lines = text if kaggle else text.splitlines(keepends=True)
        out.append({"name": "stdout", "output_type": "stream", "text": lines})
    cell = _cell(LAB_PPO, lines=True)
    cell["outputs"] = out
    return cell


@pytest.mark.parametrize("kaggle", [True, False])
def test_a_loop_printing_a_step_per_block_between_rules_is_read_a_step_a_block(
    tmp_path: Path, kaggle: bool
) -> None:
    """No counter: each block of namespaced `name: value` lines closed by a rule is a step
    (the 34th search's copy of the DeepLearning.AI PPO lab was unreadable, exit 2)."""
    kls = [29.31, 32.64, 24.77, 26.39, 23.62, 28.0, 27.2, 28.84, 30.64, 28.26]
    names = ("objective/kl", "ppo/returns/mean", "ppo/policy/advantages_mean")
    p = tmp_path / "Lab_3_fine_tune_model_to_detoxify_summaries.ipynb"
    p.write_text(_notebook([_lab_cell(kls, names, kaggle)], kaggle), encoding="utf-8")
    frame = load(str(p))
    d = frame.data
    kl = d[d["tag"] == "objective/kl"].sort_values("step")
    assert kl["step"].tolist() == list(range(1, 11)) and kl["value"].tolist() == kls
    assert set(d["tag"]) == set(names) and len(d) == 30
    r = CliRunner().invoke(app, ["diagnose", str(p), "--format", "json"])
    assert r.exit_code == 0, r.output
    # the same loop printing bare names (a configuration dump looks so): no run
    q = tmp_path / "bare.ipynb"
    q.write_text(_notebook([_lab_cell(kls, ("kl", "returns", "advantages"), kaggle)], kaggle))
    r = CliRunner().invoke(app, ["diagnose", str(q)])
    assert r.exit_code == 2 and "unrecognised log format" in r.stderr, r.output


def test_ruled_blocks_in_a_console_and_what_breaks_them(tmp_path: Path) -> None:
    """The same blocks in a console: a line that is no pair drops the pairs before it (a
    warning inside a block leaves that block out), a rule after fewer than two pairs counts
    nothing, and after a counted line the file is a counted one (no ruled steps)."""
    block = "objective/kl: {kl}\nppo/returns/mean: -0.5\n" + "=" * 40 + "\n"
    text = "".join(block.format(kl=k) for k in (1.0, 2.0))
    text += "objective/kl: 3.0\nUserWarning: something\nppo/returns/mean: -0.5\n" + "-" * 20 + "\n"
    text += "ppo/returns/mean: -0.5\n" + "-" * 20 + "\n"
    text += "".join(block.format(kl=k) for k in (4.0, 5.0))
    p = tmp_path / "ppo.log"
    p.write_text(text)
    d = load(str(p)).data
    kl = d[d["tag"] == "objective/kl"].sort_values("step")
    assert kl["value"].tolist() == [1.0, 2.0, 4.0, 5.0] and kl["step"].tolist() == [1, 2, 3, 4]
    q = tmp_path / "counted.log"
    q.write_text("step 7: loss=0.5, reward=0.2\nstep 8: loss=0.4, reward=0.3\n" + text)
    d = load(str(q)).data
    assert sorted(set(d["step"])) == [7, 8] and "objective/kl" not in set(d["tag"])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ruled_blocks_followed_as_they_are_written(tmp_path: Path, seed: int) -> None:
    """The lab's console and its notebook written in random bursts (a rule or a pair cut
    anywhere): `tail` ends with the rows `diagnose` reads."""
    kls = [28 + i / 7 for i in range(30)]
    names = ("objective/kl", "ppo/returns/mean", "ppo/policy/advantages_mean")
    nb = _notebook([_lab_cell(kls, names, kaggle=False)], kaggle=False)
    console = "".join(
        f"objective/kl: {kl}\nppo/returns/mean: {-kl / 50}\n" + "-" * 99 + "\n" for kl in kls
    )
    for name, text in (("lab.ipynb", nb), ("lab_output.txt", console)):
        f = tmp_path / name
        f.write_text(text, encoding="utf-8")
        want = {(t, s): v for (_, t, s), v in _rows(logs.load_file(f)).items()}
        assert len(want) >= 60
        live = tmp_path / name.replace(".", "_")
        live.mkdir()
        got = followed_rows(live, name, [text], [3, 50, 400], seed)
        assert got == want
