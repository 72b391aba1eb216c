"""Console text that is not verl's: dicts printed by transformers/TRL, a Jupyter notebook's
progress table (transformers' NotebookProgressCallback), custom trainers' `Name: number` lines
with a step counter, and a user's own regex (`--log-format 'regex:...'`).

Every pattern here is linear in its input: no nested or overlapping quantifiers, starts pinned
by a look-behind, and ends found with str methods rather than by backtracking.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from array import array
from collections.abc import Iterator
from typing import Any

import numpy as np

from rlwatch.errors import UsageError
from rlwatch.sources.logs._cols import SWIFT_STEP, SWIFT_TEXT, Cols, lines, sample_text, swift_step
from rlwatch.sources.logs._verl import ANSI, literal_dict, plain_scalars

# -- transformers / TRL printed dicts ------------------------------------------------------
DICT_START = re.compile(r"\{'[^'\n]{1,200}': ")
# `Updated tokens: {...}`, `cfg = {...}`, `f(x, {...}`, DeepSpeed's `aio_config ...... {...}`, and
# ` 'loss_fn': {...}`: a section of a configuration pretty-printed over lines (NeMo RL's `Final
# config:`), the value of a key of a dict opened on a line before
NOT_METRICS = re.compile(r"(?:[\w)\]']:\s+|=\s*|[(,]\s*|\.{3,}\s*)$")


def _dict_start(line: str) -> int:
    """Where the line's printed dict starts (after any tqdm bar, carriage return, ANSI colour or
    logging prefix), or -1: none, or the value of a `label: {...}` (but `Step 12: {...}`)."""
    m = DICT_START.search(line)
    if not m:
        return -1
    head = line[: m.start()]
    if "\r" in head:
        head = head[head.rfind("\r") + 1 :]
    head = head[-100:]
    if (
        NOT_METRICS.search(head)
        and not HEAD_STEP.search(head)
        and not ROLLOUT_HEAD.search(head)
        and not EXAMPLES_HEAD.search(head)
    ):
        return -1
    return m.start()


def head_step(line: str, start: int) -> tuple[str, str] | None:
    """(word, digits) of a counter printed before a dict: a step counter (`step 120 {...}`,
    `Step 120/500: {...}`; the word "step"), or slime's rollout id right before it (`rollout 3:
    {...}`, `perf 3: {...}`, `eval 3: {...}`; the word "rollout"), or HALOs' count of examples
    (`train stats after 64 examples: {...}`, `eval after 4000: {...}`; the word "examples"); or
    None."""
    m = ROLLOUT_HEAD.search(line, max(0, start - 40), start)
    if m is not None:
        return "rollout", m.group(1)
    m = EXAMPLES_HEAD.search(line, max(0, start - 60), start)
    if m is not None:
        return "examples", m.group(1)
    counters = list(STEP_COUNTER.finditer(line, max(0, start - 200), start))
    return ("step", counters[-1].group(1)) if counters else None


def find_dict(line: str) -> str | None:
    """The printed dict on a console line: a line of its own, never the value of a
    `label: {...}`."""
    start = _dict_start(line)
    if start < 0:
        return None
    end = line.rfind("}")
    return line[start : end + 1] if end > start else None


def metrics_dict(line: str) -> bool:
    """Whether a console line holds a printed dict with a number (a log, not a stray piece of
    a pretty-printed configuration such as `{'milestones': [50]}],`)."""
    body = find_dict(line)
    d = literal_dict(body) if body is not None else None
    if d is None or sample_text(d) is not None:  # a data sample printed (its prompt's text)
        return False
    return any(_numberish(v) for k, v in d.items() if k != "step")


# the opening of a printed dict cut by the end of a line: `{`, `{'los`, `{'loss'`, `{'loss':`
OPEN_TAIL = re.compile(r"\{(?:'[^'\n]{0,200}(?:':?)?)?\Z")
# ... and the opening once joined to the next line (a capture trims a row's trailing spaces)
DICT_JOINED = re.compile(r"\{'[^'\n]{1,200}': ?")
MAX_WRAPPED = 1 << 20  # a printed dict wrapped over lines is joined up to this many characters
MAX_WRAPPED_LINES = 4000


def _open_tail(line: str) -> re.Match[str] | None:
    """The opening of a printed dict that the line's end cuts (searched in its last 210
    characters: the opening is at most `{'` + a 200-character key + `':`)."""
    return OPEN_TAIL.search(line, max(0, len(line) - 210))


EVAL_PREFIXES = ("eval_", "test_")
# a loguru message of three or more `name: number` pairs between the printed dicts
# (Open-Reasoner-Zero's `... | orz.ppo.trainer:make_experience:317 - avg_raw_rewards: 0.41,
# avg_kl: 0.0, avg_response_length: 182.1`): the step's too, read with its next dict
_PAIR_NUM = r"(?:[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf))"
LOGURU_HINT = re.compile(r":\d{1,6} - (?=[A-Za-z_]\w{0,80}: ?[-+\d.ni])")
LOGURU_PAIRS = re.compile(
    rf"((?:[A-Za-z_]\w{{0,80}}: ?{_PAIR_NUM}, ?){{2,64}}[A-Za-z_]\w{{0,80}}: ?{_PAIR_NUM})[ \t]*$"
)
# tqdm's bar as transformers' ProgressCallback draws it: `  5%|▌         | 10/200 [00:00<...`
BAR_COUNTER = re.compile(r"\| {0,4}(\d{1,12})/(\d{1,12}) \[")


def bar_counter(line: str) -> tuple[int, int] | None:
    """The step and total on the progress bar that opens a line (its first carriage-return
    segment), or None. ``tqdm.write`` -- how ProgressCallback prints a log -- clears the bar,
    prints the dict and redraws the bar at once with its current count: the global step of
    that log (the bar drawn before the dict may lag, tqdm refreshes it at most ten times a
    second). A bar of one episode (OpenRLHF's `Episode [2/20]:  8%|.| 1/13 [`) counts within
    it: the step is after the episodes before it, 14 here, out of all episodes' 260."""
    if not line.startswith("\r"):  # a redraw starts with a carriage return; a line of a
        return None  # file written line by line (or a terminal capture) is not one
    seg = line.lstrip("\r")
    cut = seg.find("\r")
    m = BAR_COUNTER.search(seg, 0, cut if cut >= 0 else min(len(seg), 300))
    if m is None:
        return None
    count, total = int(m.group(1)), int(m.group(2))
    e = EPISODE.search(seg, 0, m.start())
    if e is None or len(e.group(1)) >= 7:
        return count, total
    return after_epochs(e, m.group(2)) + count, total * int(e.group(0).rsplit("/", 1)[1])


def after_epochs(e: re.Match[str], total: str) -> int:
    """The steps of the epochs (or episodes) before the one an `Epoch [e/E]` label names, of
    `total` steps each: 0 in the first, or for a label or a total too long to be one."""
    if len(e.group(1)) >= 7 or len(total) >= 12:
        return 0
    return max(int(e.group(1)) - 1, 0) * int(total)


class PythonDicts:
    """Dicts printed by transformers' ProgressCallback/PrinterCallback (newer versions print
    every float as a string: {'loss': '0.03797', 'epoch': '0.05'}); tqdm bars in between. A
    dict wrapped over several lines -- a terminal capture cut at the pane's width (`tmux
    capture-pane`, `screen` hardcopy, a copied terminal), or pprint's one key per line -- is
    joined back: its lines up to the one holding its `}`, with nothing put between them."""

    fmt = "python-dicts"

    def __init__(self, cols: Cols):
        self.cols = cols
        self.ordinal = 0
        self.ordinal_steps = False
        # each step-less dict's rows (start, end), epoch and whether it is an evaluation's,
        # and the end-of-training summary: together they give the steps back (`epoch_steps`)
        self.dicts: list[tuple[int, int, float, bool]] = []
        self.summary: dict[str, Any] | None = None
        # the ordinals stand for good: a training log after the summary, a second summary,
        # too many dicts, or (a follower) too many rows handed out, or a failed renumbering
        self.keep_ordinals = False
        self.step_of: np.ndarray | None = None  # ordinal -> step, once renumbered
        self.trained = False  # a summary printed since the last training log
        self.log_keys: set[str] = set()  # the keys of the training's logs (a few hundred)
        self.restarted = False  # a new training dropped the rows so far (a follower: replace)
        self.trainings = 1
        self.offset = 0  # rows a follower has handed out and cleared from `cols`
        # a dict without a step waits for the next line: tqdm's redrawn bar gives its step
        self.held: dict[str, Any] | None = None
        self.extras: dict[str, float] = {}  # loguru pairs (LOGURU_PAIRS) waiting for a dict
        self.nb = Output()
        self.rollout: int | None = None  # slime's rollout id, once a `rollout N: {...}` is seen
        self.bar_steps: bool | None = None  # decided by the first step-less dict
        self.last_bar_step = 0
        self.bar_total = 0  # the training bar's total (max_steps)
        self.after_cr = False  # the last block ended on a carriage return
        self.pending: list[str] | None = None  # the lines so far of a dict wrapped over lines
        self.pending_size = 0
        self.tentative = False  # the pending text is only the opening `{'lo` of a line's end

    def feed(self, text: str, lineno: int = 0) -> None:
        if (
            self.pending is None
            and self.held is None
            and "{" not in text
            and not LOGURU_HINT.search(text)
        ):
            self.after_cr = text.endswith("\r")
            return
        if "\x1b" in text:
            text = ANSI.sub("", text)
        for line in self._records(self.nb.split(text)):
            if self.held is not None and line.strip():
                # (a blank redraw, the bar cleared, is not the line that gives its step; nor
                # a blank line, tqdm's cursor moved down to a bar at another position)
                self._place(bar_counter(line))
            if self.pending is not None:
                self._more(line)
            elif "{" in line:
                self._line(line)
            elif " - " in line and (at := LOGURU_HINT.search(line)) is not None:
                m = LOGURU_PAIRS.match(line, at.end())
                for item in m.group(1).split(",") if m is not None else ():
                    k, _, v = item.partition(":")
                    self.extras[k.strip()] = float(v)

    def _records(self, text: str) -> Iterator[str]:
        """The lines of a block; a line holding more than one printed dict (a capture whose
        progress bar and logs are joined by carriage returns alone, HF Jobs' console) is read
        redraw by redraw, each after its carriage return as a redraw starts (`bar_counter`).
        A block may end on a carriage return (the reader cuts blocks there too): what follows
        it in the next block is a redraw."""
        parts = text.split("\n")
        rest = parts.pop()  # after the last newline: redraws, each ended by a carriage return
        after_cr, self.after_cr = self.after_cr, text.endswith("\r")
        for i, line in enumerate(parts):
            if i == 0 and after_cr:
                line = "\r" + line
            if line.count("{'") < 2 or "\r" not in line:
                yield line
                continue
            yield from self._redrawn(line)
        if rest:
            yield from self._redrawn(("\r" if after_cr and not parts else "") + rest, cut=True)

    @staticmethod
    def _redrawn(line: str, cut: bool = False) -> Iterator[str]:
        segs = line.split("\r")
        if cut:
            segs.pop()  # after the block's last carriage return: nothing (the block ends there)
        for j, seg in enumerate(segs):
            if seg:
                yield "\r" + seg if j else seg

    def _line(self, line: str) -> None:
        """A line outside any dict: a whole dict, the start of a wrapped one, or neither."""
        start = _dict_start(line) if "{'" in line else -1
        if start >= 0:
            end = line.rfind("}")
            if end > start:
                self.record(line[start : end + 1], head_step(line, start))
            else:
                self._open(line[start:], tentative=False)
            return
        m = _open_tail(line)
        if m and _dict_start(line[: m.start()] + "{'k': ") == m.start():
            self._open(m.group(), tentative=True)

    def _open(self, text: str, tentative: bool) -> None:
        self.pending, self.pending_size, self.tentative = [text], len(text), tentative

    def _more(self, line: str) -> None:
        """The next line while a dict is open: more of it, its end, or the sign it was not one."""
        pending = self.pending
        assert pending is not None
        if self.tentative:  # a line ended in `{'lo`: a dict only if the next lines go on with it
            self.pending = None
            joined = pending[0] + line
            if DICT_JOINED.match(joined):
                self._open(pending[0], tentative=False)
                self._more(line)
            elif OPEN_TAIL.fullmatch(joined):  # still only the opening (a very narrow pane)
                self._open(joined, tentative=True)
            elif "{" in line:
                self._line(line)
            return
        end = line.find("}")
        if (_dict_start(line) >= 0 and (end < 0 or DICT_START.search(line, 0, end))) or (
            end < 0 and _open_tail(line)
        ):
            # a new dict starts before this one closed: this one was cut off (a crash, a
            # truncated print); counted, and the line read on its own
            self.pending = None
            self.cols.skip("printed dicts cut off before their end")
            self._line(line)
            return
        if end < 0:
            pending.append(line)
            self.pending_size += len(line)
            if self.pending_size > MAX_WRAPPED or len(pending) > MAX_WRAPPED_LINES:
                self.pending = None
                self.cols.skip("printed dicts that never closed")
            return
        self.pending = None
        pending.append(line[: end + 1])
        self.record("".join(pending))
        rest = line[end + 1 :]
        if "{" in rest:
            self._line(rest)

    def record(self, body: str, counter: tuple[str, str] | None = None) -> None:
        """One printed dict; `counter`: the counter printed before it (`head_step`)."""
        cols = self.cols
        d = literal_dict(body)
        if d is None:
            cols.skip("printed dicts that could not be read")
            return
        if "train_runtime" in d or "train_loss" in d:
            cols.facts.update({f"summary/{k}": _fact(v) for k, v in d.items()})
            if self.summary is not None:  # a second training's summary
                self.keep_ordinals = True
            self.summary, self.trained = d, True
            return
        if not any(_numberish(v) for k, v in d.items() if k != "step"):
            cols.skip("printed dicts without a number")
            return
        if sample_text(d) is not None:  # `{'prompt': 'how can i ...', 'score_chosen': 8.0}`
            cols.skip("printed data samples (a dict holding a text)")
            return
        if self.extras and not _eval_only(d):  # the pairs printed since the last dict
            d, self.extras = {**self.extras, **d}, {}
        step = cols.step(d["step"]) if _int_like(d.get("step")) else None
        if step is None and counter is not None:  # `step 120 {...}`: the line's own counter
            word, digits = counter
            if word == "rollout":  # slime's `rollout 3: {...}`: the rollout id is the step
                step = self.rollout = cols.step_text(digits)
                cols.facts["steps"] = (
                    "slime's rollout ids (`rollout N:`); the train logs after a rollout's line at "
                    "its id, the last of them kept"
                )
            elif self.rollout is not None:  # its `step S: {...}` train logs: at their rollout
                step = self.rollout
            else:
                step = cols.step_text(digits)
                if word == "examples" and "steps" not in cols.facts:
                    cols.facts["steps"] = (
                        "HALOs' count of examples seen (`train stats after N examples:`, "
                        "`eval after N:`)"
                    )
        digits = swift_step(d.get(SWIFT_STEP)) if step is None else None
        if digits is not None:  # ms-swift's console: its progress "N/M" is the step
            step = cols.step_text(digits)
            if step is not None:
                cols.add_mapping(step, d, strings=True, drop=SWIFT_TEXT)
            return
        if step is not None:
            cols.add_mapping(step, d, strings=True)
        elif self.bar_steps is False:
            self._ordinal(d)
        else:
            self.held = d  # its step is on the progress bar redrawn on the next line

    def _ordinal(self, d: dict[str, Any]) -> None:
        # an evaluation's dict is printed right after the training log of its step
        evaluation = bool(self.ordinal) and _eval_only(d)
        if not evaluation:
            if self.trained and self.log_keys and not self.log_keys.intersection(d):
                # a dict printed after the summary that shares no key with the training's
                # logs (vLLM's `{'temperature': 0.6, 'top_p': 0.9}` in a warning) is no new
                # training: the run stays the training before it
                self.cols.skip(
                    "printed dicts after a training's summary that share no key with its logs"
                )
                return
            if self.trained:
                # a training log after a training's summary: train() called again (a
                # notebook's next experiment, a job run twice into one log). Its logs count
                # from 1 again, and the file's run is this training: the earlier ones' rows
                # are dropped (as TensorBoard purges a run's later steps when it restarts),
                # never read as one curve or mixed in past its last step. A follower that
                # gave the earlier training its steps from its summary drops them too.
                self.cols.clear_rows()
                self.cols.skip(
                    "earlier training(s) in the file (printed dicts that start again after a "
                    "training's summary)"
                )
                self.ordinal, self.dicts, self.offset, self.step_of = 0, [], 0, None
                self.summary, self.keep_ordinals = None, False  # its own summary may renumber it
                self.restarted = True
                self.trainings += 1
                self.log_keys = set()
            self.trained = False
            self.ordinal += 1
            if len(self.log_keys) < 512:
                self.log_keys.update(k for k in d if isinstance(k, str))
            if self.summary is not None:
                self.keep_ordinals = True
        if self.step_of is not None:  # renumbered already (`tail`): the summary's evaluation
            if self.ordinal < len(self.step_of):
                self.cols.add_mapping(int(self.step_of[self.ordinal]), d, strings=True)
            else:
                self.cols.skip("printed training logs after the run's summary")
            return
        self.ordinal_steps = True
        start = self.offset + len(self.cols.steps)
        self.cols.add_mapping(self.ordinal, d, strings=True)
        if len(self.dicts) < MAX_DICTS:
            epoch = _fact(d.get("epoch"))
            epoch = epoch if isinstance(epoch, float) else math.nan
            self.dicts.append((start, self.offset + len(self.cols.steps), epoch, evaluation))
        else:
            self.keep_ordinals = True  # too many to renumber

    def _place(self, counter: tuple[int, int] | None) -> None:
        """The held dict, now that the line after it is known: at the step of the bar redrawn
        there, or -- on a console without bars (PrinterCallback) -- at the next ordinal. A
        console's first step-less dict decides which for the whole file, so steps never mix.
        A training bar (the same total) whose count goes back is a job resumed from a
        checkpoint, its output appended: it logs those steps again, a later write of them."""
        d, self.held = self.held, None
        assert d is not None
        bar, total = counter if counter is not None else (None, None)
        if self.bar_steps is None:
            self.bar_steps = bar is not None and bar > 0
        if not self.bar_steps:
            self._ordinal(d)
        elif bar is not None and (
            bar > self.last_bar_step
            or (bar == self.last_bar_step and _eval_only(d))
            or (total == self.bar_total and bar > 0 and not _eval_only(d))
        ):
            self.last_bar_step, self.bar_total = bar, total or 0
            self.cols.add_mapping(bar, d, strings=True)
        elif bar is None and _eval_only(d) and self.last_bar_step:
            self.cols.add_mapping(self.last_bar_step, d, strings=True)
        else:  # a dict whose bar is missing or went back (a new bar): no step to trust
            self.cols.skip("printed dicts without the progress-bar count that gives their step")

    def finish(self) -> None:
        rest = self.nb.end()
        if rest:
            self.feed(rest)
        if self.pending is not None and not self.tentative:
            self.cols.skip("printed dicts cut off at the end of the file")
        self.pending = None
        if self.held is not None:
            if self.bar_steps:  # its bar is not written yet: the file ends on the dict
                self.held = None
                self.cols.skip(
                    "printed dicts at the end of the file, before the progress bar with their step"
                )
            else:
                self._place(None)
        self.settle_steps()

    def settle_steps(self) -> None:
        """Say where the steps came from; step-less dicts get their steps from their epochs
        when the run's summary is in (`steps_from_epochs`)."""
        if self.ordinal_steps and self.steps_from_epochs():
            self.cols.facts["steps"] = (
                "each printed dict's epoch, scaled by the steps of the run's summary "
                "(train_runtime x train_steps_per_second)"
            )
        elif self.ordinal_steps:
            last = " of the file's last training" if self.trainings > 1 else ""
            self.cols.facts["steps"] = f"log ordinals{last} (the printed dicts carry no step)"
        elif self.bar_steps:
            self.cols.facts["steps"] = "the progress bar's count printed with each dict"

    def steps_from_epochs(self) -> bool:
        """Give a console without steps (stdout alone: tqdm's bars went to stderr, or
        `disable_tqdm`) its steps back, once the run's summary is printed: renumber its rows
        from log ordinals to steps (`epoch_steps`). False, and the ordinals kept, when the
        dicts and the summary do not fit one run logged at a fixed interval."""
        if self.summary is None or self.keep_ordinals or not self.dicts or self.offset:
            return False
        steps = epoch_steps(
            [e for _, _, e, ev in self.dicts if not ev],
            [(e, ev) for _, _, e, ev in self.dicts],
            self.summary,
        )
        if steps is None:
            return False
        cols = self.cols
        view = np.frombuffer(cols.steps, np.int64)
        lookup = [0]  # ordinal -> step (a later evaluation's dict joins its training log)
        for (start, end, _, evaluation), step in zip(self.dicts, steps, strict=True):
            view[start:end] = step
            if not evaluation:
                lookup.append(step)
        self.step_of = np.array(lookup, np.int64)
        if -1 in steps:
            keep = view != -1
            cols.skip(
                "evaluation dicts whose printed epoch does not give their step",
                steps.count(-1),
            )
            for name, kind in (("codes", "i"), ("steps", "q"), ("values", "d"), ("walls", "d")):
                old = getattr(cols, name)
                if old is not None:
                    setattr(cols, name, array(kind, np.frombuffer(old, old.typecode)[keep]))
        self.ordinal_steps = False
        return True


MAX_DICTS = 1_000_000


def epoch_steps(
    train: list[float], every: list[tuple[float, bool]], summary: dict[str, Any]
) -> list[int] | None:
    """The step of each of a run's printed dicts (`every`: epoch, evaluation or not) from its
    epoch and the run's summary, or None when they do not fit one run logged at a fixed
    interval (`train`: the training logs' epochs).

    transformers' summary says how many steps the training ran: train_runtime x
    train_steps_per_second (printed to 4 significant digits, the steps a second rounded to 3
    decimals first: within 0.2-2%, or not used). It is taken only from transformers >= 5, which
    prints numbers as strings and counts the steps run (older versions count the planned steps:
    a run stopped early would be scaled). An epoch is then (that many steps) / (the summary's
    epoch) steps, and a log's step its epoch times that. Trainer logs every `logging_steps` (or
    every epoch), so the k-th training log is at k x interval (with `logging_first_step`, the
    first is at step 1) and the last is within one interval of the end: each estimate must be
    within the printed precision of that grid, else nothing is guessed. The training logs, their
    steps now exact, bound the epoch's size: the sizes for which each prints as printed. An
    evaluation (at an epoch's end, or with a training log) is at its own epoch's step when, for
    every size in those bounds, no other step prints the same epoch (else -1: left out). A run
    resumed after its first log (the summary counts only the steps of this call, so its first
    log is not the first multiple) or a console whose head is missing does not fit and keeps
    its ordinals; a resume before the first log cannot be told from a shorter run."""
    if not isinstance(summary.get("train_runtime"), str):
        return None  # transformers < 5 (numbers printed as numbers) counts the planned steps
    try:
        runtime, per_second, final = (
            float(summary[k]) for k in ("train_runtime", "train_steps_per_second", "epoch")
        )
    except (KeyError, TypeError, ValueError):
        return None
    if not all(math.isfinite(x) and x > 0 for x in (runtime, per_second, final)):
        return None
    if runtime * per_second > 1e12:
        return None  # no run is that long: not a summary to trust
    n = runtime * per_second  # the steps run, within `rel` of it:
    # every figure printed to 4 significant digits, and the steps a second rounded to 3
    # decimals first (0.033 steps/s, a GRPO step of 30 s, is known to 1.5%)
    rel = 0.002 + 0.0005 / per_second
    if rel > 0.02:
        return None  # slower than a step in 36 s: the run's length is not known well enough
    if not 3 <= len(train) <= n * (1 + rel) + 1 or not all(map(math.isfinite, train)):
        return None  # every training log needs its epoch; fewer than 3 leave nothing to check
    est = [e / final * n for e in train]
    first = 1 if abs(est[0] - 1) <= 0.25 + rel and est[1] - est[0] > 1.5 + 2 * rel * est[1] else 0
    grid = est[first:]
    ks = range(1, len(grid) + 1)
    fitted = sum(k * e for k, e in zip(ks, grid, strict=True)) / sum(k * k for k in ks)
    interval = round(fitted)
    if interval < 1 or rel * fitted > 0.4:
        return None  # the interval is not known to the step
    steps = [1] * first + [k * interval for k in ks]
    if any(abs(s - e) > 0.25 + rel * s for s, e in zip(steps, est, strict=True)):
        return None
    if not n * (1 - rel) - interval - 0.5 < steps[-1] <= n * (1 + rel) + 0.5:
        return None  # the last training log is the last multiple of the interval
    # the steps of an epoch: every size that prints each training log's epoch as printed (its
    # step now exact), an interval; taken from the logs rather than the summary's figures, and
    # never a fit, whose error would be a guess (a run's printed epochs can all round one way)
    sizes = _sizes(steps, train)
    out, k = [], -1  # k: the last training log so far
    for epoch, evaluation in every:
        if not evaluation:
            k += 1
            out.append(steps[k])
            continue
        low = steps[k] if k >= 0 else 0
        high = steps[k + 1] if k + 1 < len(steps) else n * (1 + rel) + 0.5
        if not math.isfinite(epoch) or epoch <= 0:
            out.append(low)
            continue
        if sizes[0] > sizes[1]:  # no epoch size prints every training log's epoch as printed
            out.append(-1)
            continue
        printed = f"{epoch:.4g}"
        if k >= 0 and epoch == train[k]:
            # with the training log of its step, if no other step prints the same epoch
            near = _steps_printing(printed, sizes)
            out.append(low if near == [low] else -1)
            continue
        near = _steps_printing(printed, sizes)
        # its step, if exactly one step prints its epoch (4 significant digits: '101' may be
        # 100.95) for every epoch size the training logs allow
        out.append(near[0] if len(near) == 1 and low < near[0] <= high else -1)
    return out


def _printed_range(printed: str) -> tuple[float, float]:
    """The numbers that print as `printed` (4 significant digits): `10` is printed for
    [9.9995, 10.005], the unit below a power of ten being the smaller one."""
    p = float(printed)
    if not math.isfinite(p) or p <= 0:
        return math.nan, math.nan
    return p - _half_unit(p * (1 - 1e-9)), p + _half_unit(p)


def _half_unit(x: float) -> float:
    """Half the unit of the last digit of `x` printed to 4 significant digits."""
    return 0.5 * 10.0 ** (math.floor(math.log10(abs(x))) - 3) if x else 0.0


def _sizes(steps: list[int], epochs: list[float]) -> tuple[float, float]:
    """The epoch sizes P for which every step s prints its epoch s / P as it was printed:
    (lowest, highest); lowest > highest when none does (then no evaluation is placed)."""
    low, high = 0.0, math.inf
    for s, e in zip(steps, epochs, strict=True):
        lo, hi = _printed_range(f"{e:.4g}")
        if not lo > 0:
            return math.inf, 0.0
        low, high = max(low, s / hi), min(high, s / lo)
    return low * (1 - 1e-12), high * (1 + 1e-12)


def _steps_printing(printed: str, sizes: tuple[float, float]) -> list[int]:
    """The steps whose epoch prints as `printed` for some epoch size in `sizes`: s / P within
    the printed range for a P in it, so s from lowest x low to highest x high (up to 3 of
    them: more is as ambiguous)."""
    lo, hi = _printed_range(printed)
    if not lo > 0 or sizes[0] > sizes[1]:
        return []
    first, last = math.ceil(lo * sizes[0]), math.floor(hi * sizes[1])
    return list(range(max(first, 1), min(last, first + 2) + 1))


def sniff_wrapped_dicts(lines: list[str]) -> bool:
    """Printed dicts wrapped over lines (a terminal capture cut at the pane's width, pprint)
    that read as metrics: the reader itself decides, on the file's head."""
    cols = Cols()
    reader = PythonDicts(cols)
    reader.feed("\n".join(lines) + "\n")
    reader.finish()
    return len(cols) > 0


def _eval_only(d: dict[str, Any]) -> bool:
    return all(k.startswith(EVAL_PREFIXES) for k in d if k != "epoch")


def _fact(v: Any) -> Any:
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return v
    return v


def _numberish(v: Any) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, int | float):
        return True
    if isinstance(v, str) and len(v) < 64:
        try:
            float(v)
        except ValueError:
            return False
        return True
    return False


def _int_like(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


# -- a Jupyter notebook's progress table ---------------------------------------------------
def _html_tables(text: str) -> list[list[list[str]]]:
    """The rows of every <table> in an HTML text (cells as text). html.parser is imported here:
    most logs hold no HTML, and its import is ~6 ms of every start-up."""
    from html.parser import HTMLParser

    class Tables(HTMLParser):
        def __init__(self) -> None:
            super().__init__(convert_charrefs=True)
            self.tables: list[list[list[str]]] = []
            self.row: list[str] | None = None
            self.cell: list[str] | None = None

        def handle_starttag(self, tag: str, attrs: Any) -> None:
            if tag == "table":
                self.tables.append([])
            elif tag == "tr" and self.tables:
                self.row = []
                self.tables[-1].append(self.row)
            elif tag in ("td", "th") and self.row is not None:
                self.cell = []

        def handle_endtag(self, tag: str) -> None:
            if tag in ("td", "th") and self.cell is not None and self.row is not None:
                self.row.append("".join(self.cell).strip())
                self.cell = None
            elif tag == "tr":
                self.row = None

        def handle_data(self, data: str) -> None:
            if self.cell is not None:
                self.cell.append(data)

    parser = Tables()
    with contextlib.suppress(AssertionError, ValueError):  # html.parser is lenient
        parser.feed(text)
    return parser.tables


FIRST_COLUMNS = ("Step", "Epoch")


# the "Training results" table transformers writes into a model card (`README.md` of an output
# folder or a Hub repository): one row per evaluation, `No log` before the first training log
MODEL_CARD = ["Training Loss", "Epoch", "Step"]


def _header(line: str) -> bool:
    return "Training Loss" in line and (
        _cells(line)[:2] in (["Step", "Training Loss"], ["Epoch", "Training Loss"])
        or _cells(line)[:3] == MODEL_CARD
    )


# a markdown table of one's own (`| epoch | step | loss | acc |` under a `|---|` line), pasted
# into a write-up: a column named like a step (CSV_STEPS) and at least two more
TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(?:\|\s*:?-{3,}:?\s*)+\|?\s*$")


def _step_table(line: str, after: str) -> bool:
    """Whether `line` heads a markdown table of its own with a step column (`after`: the
    line after it, the table's rule)."""
    if "|" not in line or not TABLE_RULE.match(after):
        return False
    cells = _cells(line)
    return (
        len(cells) >= 3
        and all(cells)
        and not any(_number(c) for c in cells)
        and _step_column(cells) is not None
    )


def _step_column(header: list[str]) -> int | None:
    """The step's column of a progress table: the model card's `Step`, the first column of
    transformers' tables, or a column named like a step in a table of one's own."""
    if header[:3] == MODEL_CARD:
        return 2
    if header[0] in FIRST_COLUMNS and len(header) > 1 and header[1] == "Training Loss":
        return 0
    lower = [h.lower() for h in header]
    return next((lower.index(n) for n in CSV_STEPS if n in lower), None)


def _cells(line: str) -> list[str]:
    s = line.strip()
    if s.startswith("|"):  # a Markdown cell's emphasis is no part of its value (`**0.301**`)
        return [_plain(c) for c in s.strip("|").split("|")]
    if " | " in s and "\t" not in s:  # a table pasted into a GitHub comment: no outer pipes
        return [_plain(c) for c in s.split("|")]
    if "\t" in s:
        return [c.strip() for c in s.split("\t")]
    return [c.strip() for c in re.split(r" {2,}", s)]


def _plain(cell: str) -> str:
    c = cell.strip()
    if len(c) > 2 and c[0] == c[-1] and c[0] in "*`":
        c = c.strip(c[0]).strip()
    return c


def notebook_tables(text: str, own: bool = False) -> list[list[list[str]]]:
    """The progress tables in a saved notebook output, each header + rows: HTML (also inside
    an .ipynb or a markdown export), markdown pipe tables, or tables copied as text; with
    `own`, markdown tables of one's own with a step column instead (`_step_table`)."""
    tables: list[list[list[str]]] = []
    if "<th" in text and not own:
        for table in _html_tables(text.replace("\\n", "\n").replace('\\"', '"')):
            if table and table[0] and table[0][0] in FIRST_COLUMNS:
                tables.append([table[0], *(r for r in table[1:] if len(r) == len(table[0]))])
        if tables:
            return tables
    text_lines = text.splitlines()
    for i, line in enumerate(text_lines):
        if own:
            heads = i + 1 < len(text_lines) and "|" in line and _step_table(line, text_lines[i + 1])
        else:
            heads = _header(line)
        if heads:
            tables.append([_cells(line)])
            continue
        if not tables:
            continue
        cells = _cells(line)
        at = _step_column(tables[-1][0]) or 0
        if len(cells) == len(tables[-1][0]) and cells[at].replace(".", "", 1).isdigit():
            tables[-1].append(cells)
    return tables


def loss_only_table(text: str) -> bool:
    """Whether the last progress table in `text` shows the training loss alone (`Step |
    Training Loss`: transformers' table of a trainer that logs nothing else to it)."""
    tables = notebook_tables(text)
    return bool(tables) and [h.strip() for h in tables[-1][0]] == ["Step", "Training Loss"]


def notebook_rows(text: str, skipped: list[str] | None = None) -> list[list[str]]:
    """Header + rows of the run's progress table: the last one, and the earlier ones with the
    same columns that it continues (a training resumed in another cell: its steps go on after
    theirs). A table with other columns is an earlier stage (an SFT warm-up before GRPO), and
    one whose steps the next table's start again is an earlier training (a smoke test, a
    snapshot of the same training drawn again): left out, and said in `skipped`."""
    tables = notebook_tables(text) or notebook_tables(text, own=True)
    if not tables:
        return []
    header = tables[-1][0]
    at = _step_column(header) or 0

    def step(row: list[str]) -> float:
        try:
            return float(row[at])
        except (ValueError, IndexError):
            return math.nan

    kept = [tables[-1]]
    notes: list[str] = []
    restarted = False
    for t in reversed(tables[:-1]):
        more = " ..." if len(t[0]) > 4 else ""
        if t[0] != header:
            why = "with other columns than the last one: another training stage"
        elif restarted or not (len(t) > 1 and len(kept[0]) > 1 and step(t[-1]) < step(kept[0][1])):
            restarted = True  # the tables before a training that starts again are not its
            why = "whose steps a later table's start again: an earlier training"
        else:
            kept.insert(0, t)
            continue
        notes.append(
            f"an earlier progress table ({' | '.join(t[0][:4])}{more}; {len(t) - 1} rows) {why},"
            " not read"
        )
    if skipped is not None:
        skipped += reversed(notes)
    return [header, *(r for t in kept for r in t[1:])]


def column_key(name: str) -> str:
    """A progress-table column back to the logged key. transformers' NotebookProgressCallback
    writes evaluation metrics capitalised ("Validation Loss" -> eval_loss, "Accuracy" ->
    eval_accuracy); the training columns that TRL's and Unsloth's tables add keep the logged
    key, lower case, with "/" spaced ("rewards / chosen" -> rewards/chosen, "kl" -> kl)."""
    if name == "Training Loss":
        return "loss"
    if name == "Validation Loss":
        return "eval_loss"
    if name[:1].islower():
        return re.sub(r"\s*/\s*", "/", name.strip())
    return "eval_" + "_".join(name.lower().split())


def read_notebook(text: str, cols: Cols, path: str) -> None:
    stages: list[str] = []
    rows = notebook_rows(text, stages)
    for note in stages:
        cols.notes.append(note)
    if not rows:
        return
    header, body = rows[0], rows[1:]
    *_, before, last = ["", *text.rstrip("\r\n ").rsplit("\n", 2)]
    last, before = last.strip(), before.strip()
    # a row of this table cut short: after a whole row of it (a model card may end, with no
    # newline, on a row of another table, its evaluation results)
    if (
        not text.endswith("\n")
        and last.startswith("|")
        and len(_cells(last)) != len(header)
        and before.startswith("|")
        and len(_cells(before)) == len(header)
    ):
        cols.skip("table rows cut short at the end of the file (still being written?)")
    at = _step_column(header) or 0
    own = "Training Loss" not in header  # a table of one's own: its names as written
    if own:
        keys = [re.sub(r"\s*/\s*", "/", h.strip()) for h in header]
    else:
        keys = ["epoch" if h == "Epoch" and at else column_key(h) for h in header]
    if header[0] == "Epoch" and not own:
        cols.facts["steps"] = "epochs (the table's first column)"
    if header[:3] == MODEL_CARD:
        cols.facts["table"] = "a model card's training results (a row per evaluation)"
    for row in body:
        try:
            step = cols.step(float(row[at]))
        except (ValueError, IndexError):
            cols.skip("table rows without a step")
            continue
        if step is None:
            continue
        for i, (key, cell) in enumerate(zip(keys, row, strict=False)):
            if i == at or cell in ("No log", "", "-"):
                continue
            x = cols.value(key, cell)
            if x is not None:
                cols.add(step, key, x)


def sniff_notebook(head: str, own: bool = False) -> bool:
    """A progress table in the head; with `own` (a page: .md, .html), a markdown table of one's
    own with a step column and at least 3 rows too."""
    if "<th" in head:
        return bool(
            re.search(r"<th>[ \t]*(?:Step|Epoch)[ \t]*</th>[\s\\n\",]{0,80}<th>Training Loss", head)
        )
    if any(_header(ln) for ln in head.splitlines()[:2000]):
        return True
    return own and any(len(t) > 3 for t in notebook_tables(head, own=True))


# -- custom trainers: `Name: number` pairs with a step counter -----------------------------
NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?(?![\w.])|[-+]?(?:nan|inf)(?!\w)"
# (a name after a colon is a source location's, `__main__:train:45`, as loguru prints it)
PAIR = re.compile(rf"(?<![\w/.@\[\]:-])([A-Za-z_][\w/.@\-]*)\s*[:=]\s*({NUM})(%?)", re.I)
# blanks between a counter's label and its number: bounded, so a label followed by a megabyte of
# blanks and no number is given up in constant time (an unbounded \s* backtracks through them all)
SP = r"\s{0,64}"
# step 120, Step: 120, global_step=120, [Step 120/1000], iter 120, iteration: 120
# = (?<![\w/])(?:global[_ ]?)?(?:step|iter|iteration)\b..., written to start with a character
# class (g, s or i) so the regex engine skips to candidate characters instead of trying the
# look-behind at every position of the line (7x faster on a long line without a counter)
STEP_COUNTER = re.compile(
    r"[gsi](?<![\w/].)(?:(?<=g)lobal[_ ]?[si]|)(?:(?<=s)tep|(?<=i)ter|(?<=i)teration)\b"
    rf"{SP}(?:[:=#]{SP})?(?:\[{SP})?(\d+)",
    re.I,
)
# a step counter right before a printed dict: `Step 120: {`, `[step 120/500] {`
HEAD_STEP = re.compile(
    STEP_COUNTER.pattern + r"(?:[ \t]{0,8}/[ \t]{0,8}\d+)?[ \t\])]{0,8}[:|,-]?[ \t]{0,8}$", re.I
)
# slime's console: `rollout 3: {...}`, `perf 3: {...}`, `eval 3: {...}` right before a dict
ROLLOUT_HEAD = re.compile(r"(?<![\w/])(?:rollout|perf|eval) (\d{1,12}): ?$")
# HALOs' console: `train stats after 64 examples: {...}`, `eval after 4000: {...}` (the examples
# seen so far count its logs)
EXAMPLES_HEAD = re.compile(r"(?<![\w/])(?:train stats|eval) after (\d{1,15})(?: examples)?: ?$")
COUNTERS = (
    # (120/9751) -- a step out of the total, after an epoch counter
    re.compile(r"\((\d+)\s*/\s*\d+\)"),
    # tqdm's bar with the logs as its postfix (OpenRLHF: `Episode [1/1]:  24%|##4  | 2431/10050
    # [12:59:12<20:32:20,  9.70s/it, policy_loss=0.0432, kl=0.0387, reward=0.827]`): its count
    BAR_COUNTER,
    STEP_COUNTER,
    # [120/9751] not preceded by an epoch label
    re.compile(r"\[(?<!epoch\[)(?<!epoch:\[)(?<!epoch: \[)(\d+)\s*/\s*\d+\]", re.I),
    # `  120/9751 | loss=...`: a bare counter opening the line (after any [name] prefixes)
    re.compile(r"^[ \t]{0,64}(?:\[[^\]\n]{0,200}\][ \t]{0,64}){0,4}(\d+)[ \t]*/[ \t]*\d+(?![\d.])"),
)
# a loop's own counter, taken only in a file where none of the above counts its lines:
# `Episode 12 | reward: ...`, `Batch 12/500: loss=...`, `Update 12: ...`, `train_step=12 ...`,
# `Epoch 3/10 - loss: ...` (a loop that logs once an epoch)
OWN_COUNTER = re.compile(
    rf"(?<![\w/])([a-z]{{1,16}}_step|episode|batch|update|round|rollout)\b{SP}"
    rf"(?:[:=#]{SP})?(?:\[{SP})?(\d+)(?:[ \t]{{0,4}}/[ \t]{{0,4}}(\d+))?",
    re.I,
)
# ... the epoch's, when the line names no inner counter
EPOCH_COUNTER = re.compile(OWN_COUNTER.pattern.replace("|rollout)", "|rollout|epoch)"), re.I)
# `pass 1/4 step 3/128 lr 4.997e-06 reward 0.034`: pairs without a separator, taken only from a
# line made of nothing else (a `/total` after a number belongs to its counter)
SPACED = re.compile(
    rf"(?<![\w/.@\[\]-])([A-Za-z_][\w/.@\-]*)[ \t]{{1,16}}({NUM})(%?)"
    r"(?:[ \t]{0,4}/[ \t]{0,4}\d+)?",
    re.I,
)
# `Ep 1 (Step 000005): Train loss 0.687, Val loss 0.688, Train reward margins 0.026`: after the
# counter, items of words and a number, separated by commas (or `;`, `|`), and nothing else
# an item's name is words of letters that may hold dots, dashes and slashes (prime-rl's
# `Seq. Length: 345.6 tokens/sample`, `Max. Off-Policy Level: 0`; mlx-lm's `It/sec 1.015`, `Peak
# mem 2.334 GB`) and a colon may follow it; a unit, a `/total` and a note in brackets may follow
# the number (`Trainable 60/64 (93.8%)`)
WORDS_ITEM = re.compile(
    r"[ \t]{0,16}([A-Za-z][A-Za-z_./-]{0,40}(?:[ \t]{1,4}[A-Za-z][A-Za-z_./-]{0,40}){0,5}?)"
    r"(?:[ \t]{1,16}|[ \t]{0,4}[:=][ \t]{0,16})"
    r"([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf))(%?)"
    r"(?:[ \t]{0,4}/[ \t]{0,4}\d+(?:\.\d+)?)?"
    r"(?:[ \t]{0,4}[A-Za-z]{1,12}(?:/[A-Za-z]{1,12})?)?"
    r"(?:[ \t]{0,8}\([^()]{0,40}\))?[ \t]{0,16}",
    re.I,
)
# an item that is a duration and no name: prime-rl's `|   1m 13s |` after the step
BARE_TIME = re.compile(r"[ \t]*(?:\d+(?:\.\d+)?[ \t]?(?:ms|d|h|m|s)[ \t]*){1,3}")
# a name of several words before a colon or `=` (`Seq. Length: 345.6`, `Train Loss=0.69`), which
# PAIR reads as its last word
WORDS_COLON = re.compile(r"[A-Za-z.][ \t]+[A-Za-z][\w./-]{0,40}[ \t]{0,4}[:=][ \t]{0,16}[-+.\d]")
ITEM_SEP = re.compile(r"[,;|]")
# a notebook's output line as its JSON holds it: `    "step 5 | loss 0.31\n",`
NB_LINE = re.compile(r'^[ \t]{0,64}"(.*?)(?:\\n)?",?[ \t]*$')
COUNTER_NAMES = {"step", "global_step", "globalstep", "iter", "iteration"}
RATE = re.compile(r"[ \t]{0,4}[A-Za-z]{1,16}/s\b")  # after a number: `toks/s`, `it/s`
SOURCE_SUFFIXES = (".py", ".pyx", ".c", ".cc", ".cpp", ".cu", ".h", ".hpp", ".rs", ".go", ".js")
RAY_PREFIX = re.compile(r"\([\w.\[\]=-]{1,80} pid=\d{1,10}(?:, ip=[\d.:a-fA-F]{1,64})?\)")
# a line that is one `words: number` pair (no counter): the step before's trailer
TRAIL_LINES = 6  # a step's trailer comes within this many lines after its counted line
TRAILER = re.compile(
    rf"^[ \t]{{0,16}}([A-Za-z][A-Za-z_ ]{{0,60}}[A-Za-z]){SP}[:=]{SP}({NUM})[ \t]*$"
)
EPOCH = re.compile(rf"epoch{SP}(?:[:=]{SP})?(?:\[{SP})?(\d+)\s*/\s*\d+", re.I)
# a block's header: a line that is a step counter and decoration only (NeMo RL's `=====
# Step 3/100 =====`, `Step 12:`, `--- iteration 7 ---`); what is left once the counter and any
# `/total` are taken out holds no digit and no letter but an `epoch N` label's
HEADER_REST = re.compile(r"^[\s=\-#*~_|:.,;()\[\]<>]*$")
HEADER_WORDS = re.compile(r"/\s*\d+|\b(?:step|iter(?:ation)?|global[_ ]?step)\b", re.I)
# a line of a block: one `Name: number` pair, a bullet before it, a unit and a note after it
# (`  • Total step time: 45.67s`, `  • generation: 20.10s (50.0%)`, `  loss = 0.31`)
BLOCK_PAIR = re.compile(
    r"^[ \t]{0,32}(?:[\u2022\u00b7*>|+-][ \t]{0,8})?"
    r"([A-Za-z][\w ./@-]{0,80}?(?:\([\w /.@%-]{0,40}\))?)[ \t]{0,16}[:=][ \t]{0,64}"
    r"([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf))"
    r"[ \t]{0,4}(%|[A-Za-z]{1,8}(?:/[A-Za-z]{1,8})?)?(?:[ \t]{0,16}\([^()\n]{0,64}\))?[ \t]*$",
    re.I,
)
# what is left of a block's line of pairs once they are taken out: separators only
PAIRS_REST = re.compile(r"^[\s,;|]*$")
# a label before a line of a value's statistics (`Total Rewards:  μ=1.950, σ=0.150`, a bullet
# before it): its words name them; the statistics' names, Greek letters said in words
STATS_LABEL = re.compile(
    r"[ \t]{0,32}(?:[\u2022\u00b7*>|+-][ \t]{0,8})?([A-Za-z][A-Za-z _.-]{0,60}?)[ \t]*:[ \t]*$"
)
STAT_NAMES = {"mean", "std", "min", "max", "low", "high", "total", "avg", "median", "cov"}
GREEK_STATS = re.compile(r"([\u03bc\u03c3])(?=[ \t]{0,4}=)")
GREEK_NAMES = {"\u03bc": "mean", "\u03c3": "std"}
# the same, found in a text of many lines (the deep sniff)
BLOCK_LINES = re.compile(BLOCK_PAIR.pattern, re.I | re.M)
# a row of a table of a step's metrics, `│ mean_reward │ 0.648761 │` (rich's box, as the Tinker
# cookbook's console prints a `Step N` table) or `| loss | 0.31 |`: a pair in a block
TABLE_ROW = re.compile(
    r"^[ \t]{0,32}[\u2502\u2503|][ \t]{0,8}([A-Za-z][\w./:@-]{0,80})[ \t]{0,64}[\u2502\u2503|]"
    r"[ \t]{0,8}([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf))"
    r"[ \t]{0,64}[\u2502\u2503|][ \t]*$"
)
# a rule between the steps of a loop that prints one `name: number` per line and no counter
# (DeepLearning.AI's PPO lab: `objective/kl: 29.3`, `ppo/returns/mean: -0.55`, then 99 dashes)
RULE_LINE = re.compile(r"^[ \t]{0,16}([-=_*#~])\1{9,}[ \t]*$")
MAX_RULED = 200  # pairs of one ruled block
MAX_BLOCK = 4000  # lines of a block read after its header (a few hundred lines of vLLM's
# progress and samples come between NeMo RL's header and its results)
# a section's title in a block: `📊 Validation Results:`, `⏱️  Timing:` (words and a colon)
SECTION = re.compile(r"^[^\w\n]{0,16}([A-Za-z][A-Za-z ]{0,60}):[ \t]*$")
EVAL_SECTION = re.compile(r"valid|\beval|\btest", re.I)
EPISODE = re.compile(rf"(?:episode|epoch){SP}(?:[:=]{SP})?(?:\[{SP})?(\d+)\s*/\s*\d+", re.I)


class KeyValues:
    """`Epoch:[1/1](120/9751), Reward: 0.1032, KL_ref: 0.0012, ...`: lines with a step counter
    and at least two `Name: number` (or `name=number`) pairs; `[run]  12/100 | loss=-4.6 |
    acc=62.5%` too (a bare counter opening the line; a number followed by % is read as a
    fraction), and `step 3/128 lr 4.997e-06 reward 0.034` when the line is made of such
    `name number` pairs alone."""

    fmt = "kv-pairs"

    def __init__(self, cols: Cols):
        self.cols = cols
        self.last: int | None = None  # the step of the line before, if it had a counter
        self.trail = 0  # lines since that counted line
        self.block: int | None = None  # the step of the last header line (block mode)
        self.block_lines = 0  # lines read since that header
        self.on_bar = False  # the last counted line was a progress bar's
        self.section = ""  # the prefix of the block's section (`validation/` under a title
        # naming validation, evaluation or a test)
        # a tqdm bar with the logs as its postfix: the count of its last redraw, and whether
        # the logs lead the count (set_postfix, then update: the first logs are drawn at 0)
        self.bar: int | None = None
        self.bar_leads = False
        self.counted = False  # a line was read at one of COUNTERS (OWN_COUNTER is not tried)
        # OWN_COUNTER's steps: its last count, and what is added to it (a count that goes back
        # is a new epoch's: after the epochs before it)
        self.own_last: int | None = None
        self.own_base = 0
        self.nb = Output()
        # ruled blocks (no counter in the file): the pairs read since the last rule, and the
        # blocks counted so far (each a step)
        self.ruled: list[tuple[str, float]] = []
        self.ruled_steps = 0

    def feed(self, text: str, lineno: int = 0) -> None:
        if "\x1b" in text:
            text = ANSI.sub("", text)
        for line in _redraws(self.nb.split(text)):
            line = plain_scalars(unwrap(line))
            if self.line(line):
                if not self.on_bar:
                    self.block = None  # a counted line of pairs ends a block, not a bar's redraw
            elif self.last is not None:
                self.trailer(line)
            elif self.block is not None:
                self.block_line(line)
            elif not self.counted and self.own_last is None:
                self.ruled_line(line)

    def trailer(self, line: str) -> None:
        """`average reward score: -0.06` on a line of its own after a counted line (DeepSpeed-
        Chat prints the step's reward so; its later versions `Average reward score: 0.1 | EMA
        reward score: 0.1`, after three lines of throughput): a line of nothing but `words:
        number` pairs (`|` between them), within TRAIL_LINES lines, read at that step."""
        self.trail += 1
        if self.trail >= TRAIL_LINES:
            self.last = None
        found = [TRAILER.match(part) for part in line.split(" | ")] if len(line) < 400 else []
        if not found or not all(found) or self.last is None:
            return
        step, self.last = self.last, None
        for m in filter(None, found):
            x = self.cols.value(m.group(1), m.group(2))
            if x is not None:
                self.cols.add(step, "_".join(m.group(1).lower().split()), x)

    def block_line(self, line: str) -> int:
        """A line after a block's header (`========== Step 3/100 ==========`): one `Name:
        number` pair (a bullet before it, a unit or a note after it) read at the header's step,
        as NeMo RL prints a step's results, one per line; the number of values read."""
        self.block_lines += 1
        if self.block_lines > MAX_BLOCK:
            self.block = None
            return 0
        if len(line) > 400:  # no pair of one line: a line of many pairs, at most 4,000 characters
            return self.block_pairs(line) if len(line) <= 4000 and self.block is not None else 0
        m = BLOCK_PAIR.match(line) or TABLE_ROW.match(line)
        if m is None and self.block is not None and (n := self.block_pairs(line)):
            return n
        if m is None or self.block is None:
            t = SECTION.match(line)
            if t is not None:  # `📊 Validation Results:`: its pairs are validation metrics
                self.section = "validation/" if EVAL_SECTION.search(t.group(1)) else ""
            return 0
        name, num, unit = (*m.groups(), None)[:3]
        key = self.section + "_".join(name.lower().split())
        if key in COUNTER_NAMES or key == "epoch":
            return 0
        x = self.cols.value(key, num)
        if x is None:
            return 0
        self.cols.add(self.block, key, x / 100 if unit == "%" else x)
        return 1

    def ruled_line(self, line: str) -> int:
        """A file with no counter whose loop prints one `name: number` per line and a rule
        after each step's (DeepLearning.AI's PPO lab prints `objective/kl`, `ppo/returns/mean`
        and `ppo/policy/advantages_mean`, then a line of dashes): a rule after two or more such
        lines, every name namespaced (`a/b`, as a counted JSONL record's), closes a step,
        counted from 1; any other line drops the pairs before it. The steps counted so far."""
        if RULE_LINE.match(line):
            pairs, self.ruled = self.ruled, []
            if len(pairs) >= 2 and all("/" in k.strip("/") for k, _ in pairs):
                self.ruled_steps += 1
                for key, x in pairs:
                    self.cols.add(self.ruled_steps, key, x)
            return self.ruled_steps
        m = BLOCK_PAIR.match(line) if len(line) <= 400 else None
        if m is None or m.group(3) or len(self.ruled) >= MAX_RULED:  # no unit: a metric's value
            self.ruled = []
            return self.ruled_steps
        x = self.cols.value(m.group(1), m.group(2))
        if x is None:
            self.ruled = []
        else:
            self.ruled.append((m.group(1).strip(), x))
        return self.ruled_steps

    def block_pairs(self, line: str) -> int:
        """A line of several `name: number` pairs after a block's header (`=== Step 3 ===`,
        then `loss: 0.31, reward: 0.52, kl: 0.01`, maybe behind a logging prefix): each pair
        read at the header's step. From its first pair on, the line is pairs and separators
        only (a progress bar's rates, `toks/s`, or a Ray worker's `pid=` is no such line).
        A label's statistics (mlx-lm-lora's `Total Rewards:  μ=1.950, σ=0.150`, `Clipping:
        low=0.006, high=0.005, total=0.011`) are the label's: `total_rewards/mean`."""
        assert self.block is not None
        if "\u03bc" in line or "\u03c3" in line:
            line = GREEK_STATS.sub(lambda m: GREEK_NAMES[m.group(1)], line)
        found = list(PAIR.finditer(line))
        if len(found) < 2 or not PAIRS_REST.match(PAIR.sub("", line[found[0].start() :])):
            return 0
        prefix = self.section
        label = STATS_LABEL.match(line, 0, found[0].start())
        if label is not None and all(m.group(1).lower() in STAT_NAMES for m in found):
            prefix += "_".join(label.group(1).lower().split()) + "/"
        n = 0
        for m in found:
            name, num, pct = m.groups()
            if name.lower() in COUNTER_NAMES or name.lower() == "epoch":
                continue
            x = self.cols.value(prefix + name, num)
            if x is not None:
                self.cols.add(self.block, prefix + name, x / 100 if pct else x)
                n += 1
        return n

    def header(self, line: str, found: re.Match[str]) -> bool:
        """Whether a counted line is a block's header (the counter and decoration only); if
        so its step opens a block."""
        if len(line) > 200:
            return False
        rest = line[: found.start()] + " " + line[found.end() :]
        rest = HEADER_WORDS.sub(" ", rest)
        if not HEADER_REST.match(rest):
            return False
        step = self.cols.step_text(found.group(1))
        if step is None:
            return False
        self.block, self.block_lines, self.section = step, 0, ""
        self.last = None  # the lines below are the block's, no trailer of a step before
        return True

    def own_header(self, line: str, found: re.Match[str]) -> None:
        """A line that is the loop's own counter and decoration only (`Epoch 3/50`, `===
        Episode 12 ===`), in a file no other counter counts: its step opens a block, whose
        `Name: number` lines follow it (a hand-written loop printing `Epoch 3/50`, then
        `\\tLoss: 0.0055`, `\\tReward: 0.0094`)."""
        if len(line) > 200 or not HEADER_REST.match(line[: found.start()] + line[found.end() :]):
            return
        step = self._own_step(found)
        if step is not None:
            self.block, self.block_lines, self.section = step, 0, ""
            self.last = None  # the lines below are the block's, no trailer of a step before

    def line(self, line: str) -> bool:
        found = None
        for pat in COUNTERS:
            found = pat.search(line)
            if found:
                break
        if found is None and not self.counted:
            found = OWN_COUNTER.search(line) or EPOCH_COUNTER.search(line)
        if found is None:
            return False
        if "pid=" in line:  # Ray's `(VllmGenerationWorker pid=588925, ip=10.0.0.1)` prefix
            line = RAY_PREFIX.sub("", line)
        found_pairs = PAIR.findall(line)
        # a rate a progress bar shows (vLLM's `est. speed input: 123.01 toks/s`) is no metric,
        # nor a source location (`layernorm.py:282` in a warning)
        if "/s" in line or any(k.endswith(SOURCE_SUFFIXES) for k, _, _ in found_pairs):
            found_pairs = [
                m.groups()
                for m in PAIR.finditer(line)
                if not RATE.match(line, m.end()) and not m.group(1).endswith(SOURCE_SUFFIXES)
            ]
        if not found_pairs and not SPACED.sub("", line).strip(" \t|,;:"):
            found_pairs = SPACED.findall(line)  # `step 12: loss 0.31 reward 0.2`
        if not found_pairs:
            found_pairs = _word_items(line[found.end() :])
        elif WORDS_COLON.search(line):  # `Seq. Length: 345.6`: the name is all its words
            found_pairs = _word_items(line[found.end() :]) or found_pairs
        if not found_pairs and '{"' in line:
            found_pairs = _json_items(line, found.end())
        own = found.re in (OWN_COUNTER, EPOCH_COUNTER)
        word = found.group(1).lower() if own else "epoch"
        pairs = [
            (k, float(v) / 100 if pct else float(v))  # 62.5% is 0.625
            for k, v, pct in found_pairs
            if k.lower() not in COUNTER_NAMES and k.lower() not in ("epoch", word)
        ]
        self.on_bar = found.re is BAR_COUNTER
        if len(pairs) < 2 and own:
            if not pairs:  # `Epoch 3/50` alone on its line: a block's header, as below
                self.own_header(line, found)
            return False
        if len(pairs) < 2:
            # a block's header opens a block; a line naming a later step closes the open one
            # (NeMo RL's `Starting validation at step 10...` inside step 10's block leaves it,
            # as do a progress bar, vLLM's drawn before the results, and a bracketed index
            # such as torch's `[0/8]` in a recompilation warning)
            if found.re is not BAR_COUNTER and not (not pairs and self.header(line, found)):
                later = self.cols.step_text(found.group(1))
                if self.block is not None and later is not None and later > self.block:
                    self.block = None
            return False
        if found.re is BAR_COUNTER and self._postfix_redraw(int(found.group(1))):
            return True  # the logs of the next step, drawn at this count: read at the next
        if own:
            step = self._own_step(found)
        else:
            step = self.cols.step_text(found.group(1))
            self.counted = True
        if step is None:
            return False
        # a step that counts within an epoch (`Epoch:[e/E](n/N)`) or within one episode's bar:
        # after the epochs before it
        outer = {COUNTERS[0]: EPOCH, BAR_COUNTER: EPISODE}.get(found.re)
        e = outer.search(line, 0, found.start()) if outer is not None else None
        if e is not None:
            step += after_epochs(e, found.group(0).split("/")[1].strip(" )["))
        code = self.cols.code
        self.cols.add_row(step, array("i", [code(k) for k, _ in pairs]), [v for _, v in pairs])
        self.last, self.trail = step, 0
        return True

    def _own_step(self, found: re.Match[str]) -> int | None:
        """The step of a line counted by the loop's own counter (OWN_COUNTER): its count, after
        the counts before it when it goes back (`Batch 3/500` of a second epoch is step 503;
        without a total, it follows the last count)."""
        n = self.cols.step_text(found.group(2))
        if n is None:
            return None
        if self.own_last is not None and n < self.own_last:
            total = found.group(3)
            self.own_base += int(total) if total and len(total) < 12 else self.own_last
        self.own_last = n
        return self.own_base + n

    def _postfix_redraw(self, count: int) -> bool:
        """Whether a bar's redraw repeats its count with the next step's logs. A trainer
        that calls `set_postfix(logs)` and then `update()` (OpenRLHF) draws step n's logs at
        count n - 1 and again at n: its first logs are drawn at count 0, and a redraw at an
        unchanged count holds the next step's. One that calls `update()` first draws them at
        n last (the last write of a step wins, as for any line)."""
        before, self.bar = self.bar, count
        if count == 0 or before is None or count < before:  # a new bar
            self.bar_leads = count == 0
        return self.bar_leads and (count == 0 or count == before)

    def finish(self) -> None:
        rest = self.nb.end()
        if rest:
            self.feed(rest)


def _word_items(rest: str) -> list[tuple[str, str, str]]:
    """`): Train loss 0.687, Val loss 0.688` after a counter: (key, number, %) of each item,
    when every item is one (at least two), else nothing. A first word naming the split is
    taken out of the key: `loss`, `eval/loss`."""
    rest = rest.lstrip(" \t)]:")
    if len(rest) > 2000 or not rest.strip():
        return []
    out = []
    for part in ITEM_SEP.split(rest):
        if not part.strip() or BARE_TIME.fullmatch(part):
            continue
        m = WORDS_ITEM.fullmatch(part)
        if m is None:
            return []
        words = m.group(1).lower().replace("-", "_").replace(".", " ").split()
        prefix = ""
        if len(words) > 1 and words[0] in SPLIT_WORDS:  # `Train loss`, `Val loss`
            prefix = "eval/" if SPLIT_WORDS[words.pop(0)] else ""
        out.append((prefix + "_".join(words), m.group(2), m.group(3)))
    return out if len(out) >= 2 else []


def _json_items(line: str, start: int) -> list[tuple[str, str, str]]:
    """`Step 12: {"loss": 0.31, "reward": 0.2}`: the numbers of a JSON object printed after
    the counter (a nested object's keys joined by `/`)."""
    i, j = line.find('{"', start), line.rfind("}")
    if i < 0 or j < i or j - i > 100_000:
        return []
    try:
        obj = json.loads(line[i : j + 1])
    except (ValueError, RecursionError):
        return []
    out: list[tuple[str, str, str]] = []

    def walk(d: dict[str, Any], prefix: str) -> None:
        for k, v in d.items():
            if isinstance(v, dict) and not prefix:
                walk(v, f"{k}/")
            elif isinstance(v, int | float) and not isinstance(v, bool):
                out.append((prefix + k, repr(float(v)), ""))

    if isinstance(obj, dict):
        walk(obj, "")
    return out


# the split an item's first word names: its key is the rest (`eval/` for held-out data)
SPLIT_WORDS = {"train": False, "training": False, "val": True, "valid": True}
SPLIT_WORDS |= {"validation": True, "eval": True, "evaluation": True, "test": True}


# a notebook saved as one line of JSON: where one output line's string ends and the next
# begins (`...\n","{'loss': ...`), or an output's text opens (`"text":["`)
NB_JOIN = re.compile(r'(\\n",|"text": ?\[)[ \t]{0,8}(?=")')


KAGGLE_HEAD = '[{"stream_name":"'
# a Kaggle kernel's log (its "Logs" download): a JSON array of an object a line, each holding a
# chunk of the notebook's output, `,{"stream_name":"stdout","time":326.38,"data":"...\\r\\n"}`
KAGGLE_LINE = re.compile(
    r'^[\[,]?\{"stream_name":"\w{1,16}","time":[-+\d.eE]{1,32},"data":("(?:[^"\\\n]|\\.)*")\}'
    r"\]?[ \t\r]*$",
    re.M,
)


def nb_split(text: str) -> str:
    """A notebook saved as one line of JSON (Kaggle, Colab) with its output lines each put on
    a line of their own, as an indented notebook holds them (`"{'loss': 0.3}\\n",`), for
    the line readers; a Kaggle kernel's log (its head) as the output it holds; any other text
    as it is."""
    if text.startswith(KAGGLE_HEAD):
        return kaggle_output(text)
    if '\\n","' not in text and '\\n", "' not in text:
        return text
    return NB_JOIN.sub(lambda m: m.group(1) + "\n", text)


def kaggle_output(text: str) -> str:
    """The output a Kaggle kernel's log holds, its chunks one after another (a printed line may
    span two); lines that are not a chunk are left out."""
    out = []
    for m in KAGGLE_LINE.finditer(text):
        try:
            out.append(json.loads(m.group(1)))
        except ValueError:
            continue
    return "".join(x for x in out if isinstance(x, str))


# a Jupyter notebook's JSON (nbformat 4 and 3) opens on one of these keys, as Jupyter, Colab
# and Kaggle save it
NB_HEAD = re.compile(
    r'\A\ufeff?\s{0,64}\{\s{0,64}"(?:cells|metadata|nbformat|nbformat_minor|worksheets)"\s{0,8}:'
)
# the JSON tokens a notebook's reader follows: a string, a bracket, a comma (numbers, true,
# false and null are values it never keeps)
NB_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[{}\[\],]')
NB_DEPTH = 64  # deeper than any notebook nests


class NotebookText:
    """What a Jupyter notebook's cells printed, from its JSON a block at a time: each code
    cell's outputs (streams, and the plain text of results and displays) one after another, as
    Jupyter shows them, and nothing else -- not the cells' code, whose `print(f"step={i}")` and
    `lr = 5e-6` lines are no log. A string cut by a block's end waits for the next block.
    `cells`: only these cells' outputs (by position, from 0); `by_cell`: each cell's printed
    text kept apart as well."""

    def __init__(self, cells: frozenset[int] | None = None, by_cell: bool = False) -> None:
        self.cells = cells
        self.cell = -1  # the position of the cell being read
        self.by_cell: dict[int, list[str]] | None = {} if by_cell else None
        self.carry = ""
        # one entry per open object or array: an object's current key (None before its first,
        # and for an array), and whether an object's next string is a key
        self.kind: list[str] = []
        self.keys: list[str | None] = []
        self.want_key: list[bool] = []
        self.ended = True  # the text given so far ends a line
        self.deep = 0  # levels open past NB_DEPTH (a hostile file's nesting is not followed)

    def feed(self, text: str) -> str:
        data = self.carry + text
        out: list[str] = []
        kind, keys, want_key = self.kind, self.keys, self.want_key
        pos = 0
        for m in NB_TOKEN.finditer(data):
            if '"' in data[pos : m.start()]:
                break  # a string not closed in this block: it waits for the next
            pos = m.end()
            tok = m.group()
            c = tok[0]
            if c == '"':
                if self.deep:
                    continue
                if kind and want_key[-1]:
                    keys[-1] = tok[1:-1]
                    want_key[-1] = False
                elif self._printed() and (self.cells is None or self.cell in self.cells):
                    try:
                        s = json.loads(tok)
                    except ValueError:  # a bad escape or a lone surrogate: not read
                        continue
                    if s:
                        out.append(s)
                        self.ended = s.endswith(("\n", "\r"))
                        if self.by_cell is not None:
                            self.by_cell.setdefault(self.cell, []).append(s)
            elif self.deep:  # inside what is nested past NB_DEPTH: only its depth is kept
                self.deep += 1 if c in "{[" else -1 if c in "}]" else 0
            elif c == "{" or c == "[":
                if len(kind) >= NB_DEPTH:
                    self.deep = 1
                    continue
                if c == "{" and len(kind) >= 2 and kind[-1] == "a":
                    if keys[-2] == "cells":
                        self.cell += 1
                    elif keys[-2] == "outputs" and not self.ended:
                        out.append("\n")  # a new output starts on a line of its own
                        self.ended = True
                kind.append("o" if c == "{" else "a")
                keys.append(None)
                want_key.append(c == "{")
            elif c == ",":
                if kind and kind[-1] == "o":
                    want_key[-1] = True
            elif kind:  # } or ]
                kind.pop()
                keys.pop()
                want_key.pop()
        rest = data[pos:]
        q = rest.find('"')
        self.carry = rest[q:] if q >= 0 else ""
        return "".join(out)

    def _printed(self) -> bool:
        """Whether a string value here is printed text: `outputs[i].text` (a string, or a list
        of lines) or `outputs[i].data["text/plain"]`."""
        kind, keys = self.kind, self.keys
        n = len(kind) - (1 if kind and kind[-1] == "a" else 0)  # under a list of lines
        if n < 3 or kind[n - 1] != "o":
            return False
        if keys[n - 1] == "text":
            return kind[n - 2] == "a" and keys[n - 3] == "outputs"
        return (
            keys[n - 1] == "text/plain"
            and n >= 4
            and keys[n - 2] == "data"
            and kind[n - 3] == "a"
            and keys[n - 4] == "outputs"
        )


def notebook_trainings(text: str, parser_for: Any) -> dict[str, frozenset[int]]:
    """The trainings a notebook's cells printed (`parser_for(cols)` reads a cell's text), when
    it holds two or more, each named by its first cell (`cell-9`, from 1) with the cells it
    takes: a cell logging 3 or more steps starts a training, unless its steps go on from the
    one before (a training resumed in the next cell); the cells between are the training's
    before them (an evaluation after it), and those before the first training the first's."""
    nb = NotebookText(by_cell=True)
    nb.feed(text)
    assert nb.by_cell is not None
    starts: dict[int, bool] = {}  # cell -> whether it starts a training (else goes on)
    last: int | None = None
    for cell, parts in nb.by_cell.items():
        cols = Cols()
        parser = parser_for(cols)
        parser.feed("".join(parts))
        parser.finish()
        if not len(cols):
            continue
        cols._seal()
        steps = np.concatenate([c[1] for c in cols.chunks])
        if len(np.unique(steps)) < 3:
            continue
        starts[cell] = last is None or int(steps[0]) <= last
        last = int(steps.max())
    firsts = [c for c, new in starts.items() if new]
    if len(firsts) < 2:
        return {}
    bounds = [0, *firsts[1:], nb.cell + 1]
    return {
        f"cell-{first + 1}": frozenset(range(a, b))
        for first, a, b in zip(firsts, bounds, bounds[1:], strict=False)
    }


class Output:
    """The text the line readers read, block by block: a notebook's printed text
    (NotebookText); of a Kaggle kernel's log, its output, the output after its last newline
    held for the next block, as a printed line's chunks may straddle two blocks (`end` gives
    what is held at the end of the file); any other text as `nb_split` gives it."""

    HOLD = 1 << 20  # past this, a line of redraws is given up to its last carriage return

    def __init__(self, cells: frozenset[int] | None = None) -> None:
        self.carry = ""
        self.kaggle: bool | None = None  # decided by the file's first bytes
        self.notebook: NotebookText | None = None
        self.cells = cells  # of a notebook, only these cells' outputs (a run of several)

    def split(self, text: str) -> str:
        if self.kaggle is None and text:
            self.kaggle = text.startswith(KAGGLE_HEAD)
            if NB_HEAD.match(text):
                self.notebook = NotebookText(self.cells)
        if self.notebook is not None:
            return self.notebook.feed(text)
        if not self.kaggle:
            return nb_split(text)
        out = self.carry + kaggle_output(text)
        cut = out.rfind("\n") + 1
        if len(out) - cut > self.HOLD:
            cut = max(cut, out.rfind("\r") + 1)
        self.carry = out[cut:]
        return out[:cut]

    def end(self) -> str:
        rest, self.carry = self.carry, ""
        return rest


def unwrap(line: str) -> str:
    """A notebook's output line as its JSON text holds it (`    "step 5 | loss 0.31\\n",`):
    the line printed; any other line as it is."""
    if line.endswith(('",', '"')):
        m = NB_LINE.match(line)
        if m is not None:
            return m.group(1)
    return line


def _redraws(text: str) -> Iterator[str]:
    """The lines of a block, each carriage-return redraw of a tqdm bar a line of its own (a
    block may end on a redraw: a bar being drawn has no newline until it closes)."""
    parts = text.split("\n")
    rest = parts.pop()  # after the last newline: redraws each ended by a carriage return
    for line in parts:
        if "\r" in line:
            yield from (seg for seg in line.split("\r") if seg)
        else:
            yield line
    if rest:
        yield from (seg for seg in rest.split("\r")[:-1] if seg)


def sniff_kv(lines_: list[str]) -> bool:
    """Lines with a step counter and pairs, or blocks: two headers each followed by at least
    two `Name: number` lines, or (no counter at all) three ruled blocks (`ruled_line`)."""
    probe = KeyValues(Cols())
    hits = blocks = in_block = ruled = 0
    for ln in lines_[:2000]:
        ln = plain_scalars(unwrap(ANSI.sub("", ln)))
        if probe.line(ln):
            hits += 1
            if not probe.on_bar:  # as the reader: a bar's redraw leaves a block open
                probe.block = None
            continue
        if probe.block is not None and probe.block_lines == 0 and in_block:
            in_block = 0  # a new header: the one before had too few
        if probe.block is not None:
            before, in_block = in_block, in_block + probe.block_line(ln)
            if before < 2 <= in_block:
                blocks += 1
        elif probe.block is None and not probe.counted and probe.own_last is None:
            # an output saved as one string (Kaggle, Colab): its lines, as the reader reads them
            for piece in ln.split("\\n") if "\\n" in ln else [ln]:
                ruled = probe.ruled_line(piece)
    return (
        hits >= 2
        or (hits == 1 and len(lines_) <= 2)
        or (hits == 0 and blocks >= 2)
        or (hits == 0 and ruled >= 3)
    )


# -- --log-format 'regex:...' --------------------------------------------------------------
def user_regex(spec: str) -> re.Pattern[str]:
    """A user's pattern: a `step` group and one named group per metric (`__` in a group name
    stands for `/`: (?P<actor__entropy>...) is actor/entropy)."""
    try:
        pat = re.compile(spec)
    except re.error as exc:
        raise UsageError(f"--log-format regex: {exc} (a Python regex with named groups)") from None
    names = set(pat.groupindex)
    if "step" not in names or len(names) < 2:
        raise UsageError(
            "--log-format regex: needs a (?P<step>...) group and at least one named metric "
            "group, e.g. 'regex:step (?P<step>\\d+) loss (?P<loss>\\S+)'"
        )
    return pat


class UserRegex:
    fmt = "regex"

    def __init__(self, cols: Cols, pattern: re.Pattern[str]):
        self.cols, self.pattern = cols, pattern
        self.keys = {g: g.replace("__", "/") for g in pattern.groupindex if g != "step"}
        self.matched = 0

    def feed(self, text: str, lineno: int = 0) -> None:
        cols = self.cols
        for line in lines(text):
            m = self.pattern.search(line)
            if not m:
                continue
            raw = m.group("step")
            try:
                x = float(raw) if raw is not None else math.nan
            except ValueError:
                cols.skip("matches whose step is not a number")
                continue
            step = cols.step(int(x) if x.is_integer() and abs(x) < 2**63 else x)
            if step is None:
                continue
            self.matched += 1
            for g, key in self.keys.items():
                v = m.group(g)
                if v is None:
                    continue
                x = cols.value(key, v.strip())
                if x is not None:
                    cols.add(step, key, x)

    def finish(self) -> None:
        pass


# -- CSV: a header of metric names, a row per log ------------------------------------------
# the step column, by name (W&B exports "Step"; custom loops "iteration"); else the row number
CSV_STEPS = (
    "step",
    "global_step",
    "_step",
    "train/global_step",
    "trainer/global_step",
    "iteration",
    "iter",
    "update",
    "steps",
    "current_steps",
)
CSV_EXTREMES = re.compile(r"__(?:MIN|MAX|min|max)$")  # W&B export's band columns
CSV_PREFIX = re.compile(r"^(.+?) - (.+)$")  # W&B export: "<run name> - <metric>"


def delimiter(line: str) -> str:
    """A tab for a header of tab-separated names (a .tsv, Spinning Up's progress.txt), else a
    comma."""
    return "\t" if "\t" in line and "," not in line else ","


def _csv_header(line: str) -> list[str] | None:
    import csv

    try:
        (cells,) = list(csv.reader([line], delimiter=delimiter(line)))
    except (csv.Error, ValueError):
        return None
    return _header_cells(cells)


def _header_cells(cells: list[str]) -> list[str] | None:
    """The cells as a header (names, at least two, the first not empty unless it heads the
    index pandas' `to_csv` writes: `,epoch,reward`), or None."""
    cells = [c.strip() for c in cells]
    if len(cells) < 2 or (not cells[0] and not (len(cells) > 2 and all(cells[1:]))):
        return None
    if any(_number(c) for c in cells):  # a header names; a row of numbers is no header
        return None
    return cells


def _number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def sniff_csv(lines_: list[str]) -> bool:
    """A header of names, then rows of as many cells, mostly numbers."""
    if len(lines_) < 2:
        return False
    header = _csv_header(lines_[0])
    if header is None:
        return False
    import csv

    rows = []
    for line in lines_[1:6]:
        try:
            rows += list(csv.reader([line], delimiter=delimiter(lines_[0])))
        except csv.Error:  # a cell past csv's field limit, a stray quote: not a row
            continue
    cells = [c.strip() for r in rows if len(r) == len(header) for c in r]
    return bool(cells) and sum(map(_number, cells)) >= 0.5 * len(cells) >= 1


# TensorBoard's "download CSV" of one scalar: `run-<run>-tag-<tag>.csv` (a `/` of either written
# `_`), header `Wall time,Step,Value`
TB_EXPORT = re.compile(r"^run-(.+)-tag-(.+)\.csv$", re.I)
TB_HEADER = ["wall time", "step", "value"]


# a word boundary inside a camel-case name: `TrainRewardsMargins`, `ObjectiveKL`, `EvalAcc`
CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def tb_export(name: str, header: list[str], folder: str = "") -> tuple[str, str] | None:
    """(run, tag) of a TensorBoard scalar export named `name` with this header, or None. An
    export renamed after its tag (`kl.csv`, `TrainRewardsMargins.csv`: `Wall time,Step,Value`
    under another name) holds that tag, a camel-case name's words joined as TensorBoard's name
    joins a tag's parts (`train_rewards_margins`), and belongs to the run of its folder's
    exports (`folder`)."""
    if [h.strip().lower() for h in header] != TB_HEADER:
        return None
    m = TB_EXPORT.match(name)
    if m is not None:
        return m.group(1), m.group(2)
    stem = name.rsplit(".", 1)[0]
    return folder, stem if "_" in stem or "/" in stem else CAMEL.sub("_", stem).lower()


# a column naming the run of each row, in a CSV of several runs' rows one after another
RUN_COLUMNS = {"experiment", "exp", "exp_name", "experiment_name", "run", "run_name", "variant"}
RUN_COLUMNS |= {"method", "config", "condition", "setting", "algorithm", "algo"}


def run_column(header: list[str]) -> int | None:
    """Where the header names a column of run names (RUN_COLUMNS), or None."""
    lower = [h.strip().lower() for h in header]
    return next((i for i, h in enumerate(lower) if h in RUN_COLUMNS), None)


def export_runs(header: list[str]) -> list[str]:
    """The runs a W&B chart export's header names, in order: every column but the step is
    `<run> - <key>`, with W&B's `__MIN`/`__MAX` band columns among them. Any other CSV (a
    custom `train - loss` column) names none."""
    cols = [h for h in header if h.strip().lower() not in CSV_STEPS]
    matches = [CSV_PREFIX.match(h) for h in cols]
    if not cols or not all(matches) or not any(CSV_EXTREMES.search(h) for h in cols):
        return []
    return list(dict.fromkeys(m.group(1) for m in matches if m))


# a "long" (tidy) CSV: a row per value, `step,tag,value` (tbparse's frame written out) or
# `run_name,metric,step,value` (a W&B history melted for plotting); the metric column names it
LONG_NAMES = ("metric", "tag", "key", "metric_name")


def long_columns(header: list[str]) -> tuple[int, int] | None:
    """(metric column, value column) of a long CSV's header (a step column, a `value` column
    and a column naming the metric: LONG_NAMES), or None."""
    lower = [h.strip().lower() for h in header]
    if "value" not in lower or not any(n in lower for n in CSV_STEPS):
        return None
    at = next((lower.index(n) for n in LONG_NAMES if n in lower), None)
    return None if at is None else (at, lower.index("value"))


class Csv:
    """A metrics CSV (a W&B export, a custom loop's metrics.csv): the header names the
    columns; the step is the column named like a step (CSV_STEPS), else the row number; a W&B
    export's "<run> - " prefix is dropped and its __MIN/__MAX band columns left out."""

    fmt = "csv"

    def __init__(self, cols: Cols, run: str | None = None, name: str = ""):
        self.cols = cols
        self.run = run  # of an export of several runs, this run's columns only
        self.header: list[str] | None = None
        self.keys: list[str | None] = []
        self.step_at: int | None = None
        self.run_at: int | None = None  # of a CSV of several runs' rows: the run column
        self.rows = 0
        self.delimiter: str | None = None  # decided by the header line
        self.name = name  # the file's name (a TensorBoard export names its tag there)
        self.long: tuple[int, int] | None = None  # a long CSV's metric and value columns

    def _start(self, header: list[str]) -> None:
        self.header = header
        lower = [h.lower() for h in header]
        self.step_at = next((lower.index(n) for n in CSV_STEPS if n in lower), None)
        if self.step_at is None:
            self.cols.facts["steps"] = "row numbers (no step column)"
        matches = [CSV_PREFIX.match(h) for h in header]
        names: list[str | None] = [
            m.group(2) if m else h for m, h in zip(matches, header, strict=True)
        ]
        if self.run is not None and not export_runs(header):  # rows naming their run
            self.run_at = run_column(header)
        if self.run is not None and self.run_at is None:  # one run of a W&B export: its columns
            names = [m.group(2) if m and m.group(1) == self.run else None for m in matches]
        elif len({m.group(1) for m in matches if m}) != 1:  # one run's "<run> - " dropped
            names = list(header)
        self.keys = [
            None if i in (self.step_at, self.run_at) or CSV_EXTREMES.search(h) or not h else n
            for i, (h, n) in enumerate(zip(header, names, strict=True))
        ]
        tb = tb_export(self.name, header)
        if tb is not None:  # `Wall time,Step,Value`: the value is the tag the name gives
            self.keys = [None, None, tb[1]]
        self.long = long_columns(header)
        if self.long is not None:  # each row's metric is named in its row
            self.keys = [None] * len(header)

    def feed(self, text: str, lineno: int = 0) -> None:
        import csv

        cols = self.cols
        ok = []
        for line in lines(text):
            # a quote left open (a line cut inside a quoted cell) would swallow the next line
            # into one cell, or a cut number ("0.) read as a number: not a row
            if line.count('"') % 2:
                cols.skip("lines that are not CSV rows")
            else:
                ok.append(line)
        if self.delimiter is None and any(x.strip() for x in ok):
            self.delimiter = delimiter(next(x for x in ok if x.strip()))
        reader = csv.reader(ok, delimiter=self.delimiter or ",")
        while True:
            try:
                row = next(reader)
            except StopIteration:
                break
            except csv.Error:  # a stray quote or CR, a field past csv's limit: not a row
                cols.skip("lines that are not CSV rows")
                continue
            if self.header is None:
                header = _header_cells(row)
                if header is not None:
                    self._start(header)
                continue
            if len(row) != len(self.header):
                if row:
                    cols.skip("CSV rows with another number of cells than the header")
                continue
            if self.run_at is not None and row[self.run_at].strip() != self.run:
                continue  # another run's row
            self.rows += 1
            if self.step_at is None:
                step = cols.step(self.rows)
            else:
                try:
                    step = cols.step(float(row[self.step_at]))
                except ValueError:
                    cols.skip("CSV rows without a step")
                    continue
            if step is None:
                continue
            if self.long is not None:
                key, cell = row[self.long[0]].strip(), row[self.long[1]].strip()
                if not key or not cell:
                    continue
                try:
                    cols.add(step, key, float(cell))
                except ValueError:
                    cols.skip("non-numeric values", key=key)
                continue
            for key, cell in zip(self.keys, row, strict=True):
                cell = cell.strip()
                if key is None or not cell:
                    continue
                try:
                    cols.add(step, key, float(cell))
                except ValueError:
                    cols.skip("non-numeric values", key=key)
                    if cols.samples is None and self.step_at is not None:
                        cols.samples = sample_text({key: cell})

    def finish(self) -> None:
        pass
