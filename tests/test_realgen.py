"""The calibration corpus of real TRL runs (fixtures/realgen): its building blocks and its labels."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REALGEN = ROOT / "fixtures" / "realgen"
sys.path.insert(0, str(REALGEN))


def test_tiny_tokenizer_and_models_are_local_and_consistent():
    pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    import tiny

    tiny.offline_env()
    tok = tiny.build_tokenizer()
    ids = tok("count : one two")["input_ids"]
    assert tok.decode(ids) == "count : one two"
    assert tok.pad_token_id is not None and tok.eos_token_id is not None
    assert tok.pad_token_id != tok.eos_token_id
    lm = tiny.build_lm(tok, seed=0)
    assert lm.config.vocab_size == len(tok)
    rm = tiny.build_reward_model(tok, seed=0)
    assert rm.config.num_labels == 1
    prompts = tiny.prompt_dataset(8, seed=1)
    assert len(prompts) == 8 and prompts[0]["prompt"].startswith("count :")
    noisy = tiny.preference_dataset(200, seed=1, flip=0.5)
    assert set(noisy.column_names) == {"prompt", "chosen", "rejected"}
    right = tiny.successor_reward(noisy["prompt"], noisy["chosen"])
    assert 0.3 < sum(r == 1.0 for r in right) / len(right) < 0.7  # half the labels flipped
    clean = tiny.preference_dataset(40, seed=1, flip=0.0)
    ok = tiny.successor_reward(clean["prompt"], clean["chosen"])
    bad = tiny.successor_reward(clean["prompt"], clean["rejected"])
    assert min(ok) == 1.0 and max(bad) < 1.0
    assert tiny.constant_reward(["p", "q"], ["a", "b"]) == [1.0, 1.0]
