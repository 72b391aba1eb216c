"""Right verdicts on real runs: the MIT-licensed verl runs shipped in fixtures/ (replayed into
TensorBoard by a real writer) and the fixtures that reproduce the shapes of the other real runs
of ../shared/realruns. Pathological runs get an error of the right family; healthy runs none."""

from __future__ import annotations

import pytest
from conftest import FIXTURES

from rlwatch.engine.evaluate import evaluate_frame
from rlwatch.engine.rules import load_rules
from rlwatch.sources import tensorboard

RULES = load_rules()


def _fired(run: str) -> dict[str, str]:
    frame = tensorboard.load(FIXTURES / run)
    return {v.code: v.severity for v in evaluate_frame(frame, RULES) if v.fired}


@pytest.mark.parametrize(
    ("run", "families"),
    [
        # entropy collapse, then lengths jump to the limit (~45% truncated) with a 6 h stall
        ("verl-gpg-math-qwen2-7b-fsdp", {"EX03", "LN02"}),
        # entropy collapse, KL blow-up, repeated grad-norm spikes, NaN gradients and loss
        ("grpo-broken", {"ST02", "ST03", "ST05"}),
        # shapes of the unlicensed real runs (shared/realruns), rewritten with our own values:
        ("trl-grpo-kl-drift", {"KL02"}),  # KL 0.002 -> 2-5 with a flat reward, grad spike 1927
        ("trl-grpo-truncation", {"LN02"}),  # completions/clipped_ratio -> 1.0
        ("trl-grpo-zero-signal", {"RW03"}),  # frac_reward_zero_std -> 1.0
    ],
)
def test_pathological_runs_get_errors_of_the_right_family(run: str, families: set[str]) -> None:
    fired = _fired(run)
    errors = {c for c, s in fired.items() if s == "error"}
    assert families <= errors, fired


def test_the_fsdp_run_also_shows_its_stall_and_length_jump() -> None:
    fired = _fired("verl-gpg-math-qwen2-7b-fsdp")
    assert {"TM01", "LN03"} <= set(fired)


@pytest.mark.parametrize(
    "run",
    ["verl-gpg-math-qwen2-7b-megatron", "grpo-healthy", "nemo-tensor-scalars", "grpo-restart"],
)
def test_healthy_runs_end_with_no_error(run: str) -> None:
    fired = _fired(run)
    assert not {c for c, s in fired.items() if s == "error"}, fired
