"""Canonical names: aliases across frameworks and writers, framework and era detection."""

from __future__ import annotations

import pytest

from rlwatch import names


@pytest.mark.parametrize(
    ("tags", "framework", "version"),
    [
        (
            [
                "timing/gen",
                "critic/kl",
                "actor/entropy_loss",
                "actor/lr(1e-4)",
                "actor/pg_clipfrac",
            ],
            "verl",
            "v0.1",
        ),
        (
            [
                "timing_s/gen",
                "mfu/actor",
                "actor/entropy_loss",
                "actor/kl_loss",
                "actor/pg_clipfrac",
                "response_length/clip_ratio",
                "Tokens/Sec/GPU",
            ],
            "verl",
            "v0.2 (2025-03)",
        ),
        (
            [
                "actor/entropy",
                "training/rollout_probs_diff_mean",
                "perf/mfu/actor",
                "actor/grad_norm",
            ],
            "verl",
            "v0.4.1",
        ),
        (
            ["rollout_corr/kl", "actor/entropy", "actor/ppo_kl", "critic/score/mean"],
            "verl",
            "v0.6+",
        ),
        (
            [
                "train/reward",
                "train/reward_std",
                "train/frac_reward_zero_std",
                "train/kl",
                "train/completions/mean_length",
            ],
            "trl",
            None,
        ),
        (["rewards/accuracies", "rewards/margins", "logps/chosen", "loss"], "trl", None),
        (
            ["train/policy_loss", "train/actor_lr", "train/ppo_clip_ratio", "train/kl"],
            "openrlhf",
            None,
        ),
        (
            [
                "train/gen_kl_error",
                "train/token_mult_prob_error",
                "train/reward",
                "performance/train_fp_utilization",
            ],
            "nemo_rl",
            None,
        ),
        (["optim/grad_norm", "mismatch_kl/mean", "entropy/mean", "seq_len/mean"], "prime_rl", None),
        (
            ["train/train_rollout_logprob_abs_diff", "rollout/raw_reward", "train/pg_clipfrac"],
            "slime",
            None,
        ),
        (["token/response_length/mean", "actor/approxkl", "time/step_total"], "roll", None),
        (["ppo_actor/task_reward/avg", "ppo_actor/update/entropy/avg"], "areal", None),
        (["env/all/reward/total", "optim/kl_sample_train_v1", "optim/entropy"], "tinker", None),
        (["something", "else"], None, None),
    ],
)
def test_framework_detection(tags: list[str], framework: str | None, version: str | None) -> None:
    assert names.detect(tags) == (framework, version)


def test_trl_keys_with_the_writer_prefix_map_to_canonical_names() -> None:
    r = names.resolve(
        [
            "train/reward",
            "train/kl",
            "train/entropy",
            "train/grad_norm",
            "train/completions/clipped_ratio",
            "eval/reward",
            "train/epoch",
        ]
    )
    assert r.canonical == {
        "reward_mean": "train/reward",
        "kl_ref": "train/kl",
        "entropy": "train/entropy",
        "grad_norm": "train/grad_norm",
        "truncation_rate": "train/completions/clipped_ratio",
        "val_score": "eval/reward",
    }
    assert r.unmapped == ["train/epoch"]


def test_mlflow_and_tensorboardx_sanitised_keys_map_back() -> None:
    mlflow = names.resolve(
        [
            "val-core/openai/gsm8k/acc/mean_at_1",
            "actor/entropy",
            "actor/lr_1e-4_",
            "actor/pg_clipfrac",
        ]
    )
    assert mlflow.canonical["val_score"] == "val-core/openai/gsm8k/acc/mean_at_1"
    assert mlflow.canonical["lr"] == "actor/lr_1e-4_"
    tbx = names.resolve(["val-core/openai/gsm8k/acc/mean_1", "actor/entropy"])
    assert tbx.canonical["val_score"] == "val-core/openai/gsm8k/acc/mean_1"


def test_the_detected_frameworks_meaning_of_a_key_wins() -> None:
    # verl <= 0.4.0 logged the entropy as actor/entropy_loss; newer verl logs actor/entropy
    old = names.resolve(["actor/entropy_loss", "actor/pg_clipfrac", "critic/score/mean"])
    assert old.canonical["entropy"] == "actor/entropy_loss"
    new = names.resolve(["actor/entropy", "actor/entropy_loss", "actor/pg_clipfrac"])
    assert new.canonical["entropy"] == "actor/entropy"
    assert "actor/entropy_loss" in new.unmapped


def test_wildcards_apply_only_to_the_detected_framework() -> None:
    # slime's `eval/*` must not claim TRL's eval loss as a validation score
    r = names.resolve(["train/reward", "train/reward_std", "train/kl", "eval/loss"])
    assert "val_score" not in r.canonical


def test_each_raw_key_feeds_at_most_one_canonical_metric() -> None:
    r = names.resolve(
        [
            "train/reward",
            "train/kl",
            "acc",
            "acc_mean",
            "chosen_reward",
            "reject_reward",
            "policy_loss",
        ]
    )
    assert len(set(r.canonical.values())) == len(r.canonical)


def test_every_alias_names_a_known_framework_and_the_table_loads() -> None:
    cat = names.catalogue()
    assert len(cat.metrics) >= 40
    required = {
        "reward_mean",
        "reward_std",
        "reward_zero_std_frac",
        "val_score",
        "kl_ref",
        "kl_ppo",
        "rollout_probs_diff",
        "rollout_kl",
        "entropy",
        "grad_norm",
        "critic_grad_norm",
        "clip_frac",
        "clip_frac_lower",
        "ratio_mean",
        "response_length_mean",
        "response_length_max",
        "truncation_rate",
        "prompt_length_mean",
        "aborted_ratio",
        "turns_max",
        "step_time",
        "gen_time",
        "throughput",
        "mfu",
        "seqlen_min",
        "seqlen_max",
        "seqlen_minmax_diff",
        "seqlen_mean",
        "value_loss",
        "explained_var",
        "lr",
        "loss",
        "dpo_chosen_reward",
        "dpo_rejected_reward",
        "dpo_margin",
        "dpo_accuracy",
        "rm_accuracy",
        "rm_margin",
    }
    assert required <= set(cat.metrics)
    assert {a.framework for m in cat.metrics.values() for a in m.aliases} == set(cat.frameworks)


def test_nemo_rl_keys_as_its_loggers_write_them() -> None:
    """NeMo RL logs through its TensorBoard/SwanLab/W&B loggers as `<prefix>/<key>`: GRPO's
    loss-function and rollout metrics under `train/` (nemo_rl/algorithms/grpo.py,
    loss/loss_functions.py, experience/rollouts.py), step timing under `timing/train/`,
    validation under `validation/`, and PPO's value model under `train/critic/`
    (ppo.py `_compute_critic_metrics`)."""
    grpo = {
        "train/loss": "loss",
        "train/reward": "reward_mean",
        "train/grad_norm": "grad_norm",
        "train/gen_kl_error": "rollout_kl",
        "train/token_mult_prob_error": "rollout_prob_error",
        "train/sampling_importance_ratio": "rollout_is_ratio",
        "train/approx_entropy": "entropy",
        "train/kl_penalty": "kl_ref",
        "train/probs_ratio": "ratio_mean",
        "train/mean_gen_tokens_per_sample": "response_length_mean",
        "train/truncation_rate": "truncation_rate",
        "train/lr": "lr",
        "timing/train/total_step_time": "step_time",
        "validation/accuracy": "val_score",
    }
    ppo = {
        **{k: v for k, v in grpo.items() if k != "train/kl_penalty"},
        "train/critic/loss": "value_loss",
        "train/critic/grad_norm": "critic_grad_norm",
        "train/critic/explained_var": "explained_var",
    }
    for keys in (grpo, ppo):
        r = names.resolve(list(keys))
        assert r.framework == "nemo_rl"
        assert {raw: canon for canon, raw in r.canonical.items()} == keys


def test_tinker_loops_own_keys() -> None:
    """A Tinker training loop of one's own logs `policy/entropy` (the sampled tokens' mean
    negative log-prob) beside the cookbook's progress/optim/reward keys: it is the entropy."""
    r = names.resolve(
        ["progress/done_frac", "optim/lr", "reward/mean", "policy/entropy", "time/total"]
    )
    assert r.framework == "tinker"
    assert r.canonical["entropy"] == "policy/entropy"
    assert r.canonical["reward_mean"] == "reward/mean"


def test_keys_flattened_with_underscores_map_as_their_slashed_forms() -> None:
    """A metrics table whose columns cannot hold '/' (a CSV written from a flattened dict):
    verl's `critic/score/mean` is `critic_score_mean`; the framework is still told apart (it
    was taken for OpenRLHF by `actor_grad_norm` and `actor_lr`, the keys left as they were)."""
    r = names.resolve(
        ["actor_entropy", "actor_grad_norm", "actor_lr", "actor_pg_clipfrac", "actor_ppo_kl",
         "critic_score_mean", "response_length_mean", "response_length_clip_ratio",
         "timing_s_gen", "timing_s_step", "perf_mfu_actor"]
    )  # fmt: skip
    assert r.framework == "verl"
    assert r.canonical["reward_mean"] == "critic_score_mean"
    assert r.canonical["entropy"] == "actor_entropy"
    assert r.canonical["truncation_rate"] == "response_length_clip_ratio"
    assert r.canonical["grad_norm"] == "actor_grad_norm"
    # transformers' end-of-run mean loss is no flattened `train/loss` (NeMo RL's loss), alone or
    # with the writer's prefix (a TRL run's TensorBoard file, read as its last rows arrive)
    for summary in (["train_loss", "train_runtime"], ["train/train_loss", "train/epoch"]):
        assert "loss" not in names.resolve(summary).canonical, summary


def test_torchtune_recipes_keys() -> None:
    """torchtune's PPO and GRPO recipes log bare names (`scores`, `rewards`, `ratios`,
    `num_stop_tokens`); its DPO recipes `log_probs/chosen` where TRL writes `logps/chosen`."""
    ppo = names.resolve(
        ["scores", "num_stop_tokens", "rlhf_reward", "kl", "kl_reward", "loss", "policy_loss",
         "value_loss", "clipfrac", "ratios", "approx_policy_kl", "response_lengths"]
    )  # fmt: skip
    assert ppo.framework == "torchtune"
    expected = {
        "reward_mean": "scores",
        "kl_ppo": "approx_policy_kl",
        "ratio_mean": "ratios",
        "eos_count": "num_stop_tokens",
        "clip_frac": "clipfrac",
        "response_length_mean": "response_lengths",
        "value_loss": "value_loss",
    }
    assert {k: ppo.canonical.get(k) for k in expected} == expected
    grpo = names.resolve(
        ["rewards", "successes", "num_stop_tokens", "loss", "policy_loss", "kl_loss", "clipfrac",
         "ratios", "approx_policy_kl", "response_lengths"]
    )  # fmt: skip
    assert grpo.framework == "torchtune"
    assert grpo.canonical["reward_mean"] == "rewards"
    assert grpo.canonical["kl_ref"] == "kl_loss"
    dpo = names.resolve(["loss", "rewards/chosen", "log_probs/chosen", "log_probs/rejected"])
    assert dpo.canonical["dpo_logps_chosen"] == "log_probs/chosen"
    tunix = names.resolve(["rewards/margin", "rewards/accuracy", "log_probs/chosen", "odds_ratio"])
    assert tunix.framework == "tunix"
    assert tunix.canonical["dpo_margin"] == "rewards/margin"
    assert tunix.canonical["dpo_accuracy"] == "rewards/accuracy"


def test_an_own_alias_means_its_metric_only_in_its_frameworks_runs() -> None:
    """torchtune's bare `rewards`/`scores`/`ratios`/`kl_loss` are its reward, ratio and KL,
    NeMo RL's console `generation` time its generation time; in a run of no framework, or of
    another, those words mean nothing to rlwatch."""
    for tags in (["rewards", "scores", "ratios", "loss"],
                 ["rewards", "scores", "ratios", "actor/pg_clipfrac", "critic/score/mean"]):  # fmt: skip
        r = names.resolve(tags)
        assert r.framework != "torchtune"
        assert r.canonical.get("reward_mean") not in ("rewards", "scores"), tags
        assert "ratio_mean" not in r.canonical, tags
    cat = names.catalogue()
    own = {a.key for m in cat.metrics.values() for a in m.aliases if a.own}
    assert own == {"rewards", "scores", "ratios", "kl_loss", "generation", "truncation",
                   "seq_length"}  # fmt: skip
    # prime-rl's console: `Seq. Length` and `Truncation` are its lengths and truncation, in its
    # runs (`Async Level` beside them) only
    r = names.resolve(["reward", "seq_length", "truncation"])
    assert "response_length_mean" not in r.canonical and "truncation_rate" not in r.canonical
    r = names.resolve(["reward", "seq_length", "truncation", "async_level", "max_off_policy_level"])
    assert r.framework == "prime_rl"
    assert r.canonical["response_length_mean"] == "seq_length"
    assert r.canonical["truncation_rate"] == "truncation"
    r = names.resolve(["loss", "generation", "reward"])
    assert "gen_time" not in r.canonical
    r = names.resolve(["loss", "generation", "generation_kl_error", "total_step_time"])
    assert r.framework == "nemo_rl" and r.canonical["gen_time"] == "generation"


def test_a_capitalised_custom_name_maps_once_every_key_as_written_had_its_turn() -> None:
    """A custom loop prints `Reward: 0.1` or `Mean Reward: 0.06` (read as `Reward`): an alias
    in another case maps it; a key written in the alias's own case wins over it, and a name
    two keys share in different cases maps neither."""
    r = names.resolve(["Reward", "KL_ref", "Multiplier"])
    assert r.canonical["reward_mean"] == "Reward"
    assert "Multiplier" in r.unmapped
    r = names.resolve(["Reward", "reward", "loss"])
    assert r.canonical["reward_mean"] == "reward"
    r = names.resolve(["Entropy", "ENTROPY", "loss"])
    assert "entropy" not in r.canonical
    # an own alias stays its framework's, whatever the case
    r = names.resolve(["Rewards", "Loss"])
    assert "reward_mean" not in r.canonical and r.canonical["loss"] == "Loss"


def test_a_hand_written_loops_common_names() -> None:
    """A loop of one's own (course code, a paper's script) names its metrics as Stable-Baselines
    and CleanRL do: they map with no framework detected. TRL's reward model logs `mean_reward`
    (its score of the batch, not a policy's reward) beside `margin`: there the alias of a
    loop's own `mean_reward` is not taken."""
    keys = ["reward", "std_reward", "loss", "grad_norm", "token_entropy", "clip_fraction"]
    r = names.resolve(
        [*keys, "approx_kl", "reference_kl", "avg_response_token_length", "mean_reward"]
    )
    assert r.framework is None
    assert r.canonical == {
        "reward_mean": "reward",
        "reward_std": "std_reward",
        "loss": "loss",
        "grad_norm": "grad_norm",
        "entropy": "token_entropy",
        "clip_frac": "clip_fraction",
        "kl_ppo": "approx_kl",
        "kl_ref": "reference_kl",
        "response_length_mean": "avg_response_token_length",
    }
    rm = names.resolve(["train/accuracy", "train/margin", "train/mean_reward", "train/loss"])
    assert "reward_mean" not in rm.canonical and rm.canonical["rm_accuracy"] == "train/accuracy"
    rm = names.resolve(["accuracy", "margin", "mean_reward", "min_reward", "loss"])
    assert "reward_mean" not in rm.canonical
    loop = names.resolve(["mean_reward", "entropy", "grad_norm", "response_len"])
    assert loop.canonical["reward_mean"] == "mean_reward"
    assert loop.canonical["response_length_mean"] == "response_len"


def test_a_pattern_takes_no_key_another_metric_names_exactly() -> None:
    """With no framework detected every alias is tried, slime's `eval/*` (its evaluation
    scores) too; `eval/loss` is TRL's eval loss, named exactly: the pattern leaves it (it took
    it for the validation score, a loss read as a score that should rise)."""
    r = names.resolve(["loss", "eval/loss", "eval/pass_rate"])
    assert r.framework is None
    assert r.canonical["eval_loss"] == "eval/loss" and r.canonical["val_score"] == "eval/pass_rate"


def test_acc_beside_a_policys_preference_logs_is_the_preference_accuracy() -> None:
    """OpenRLHF's reward model logs `acc`; a write-up's table of an ORPO run abbreviates its
    `rewards/accuracies` and `rewards/margins` to `acc` and `margins`: beside ORPO's log-odds
    (or DPO's margins) `acc` is the policy's preference accuracy, not a reward model's."""
    rm = names.resolve(["loss", "acc", "chosen_reward", "reject_reward"])
    assert rm.canonical["rm_accuracy"] == "acc"
    orpo = names.resolve(["loss", "acc", "margins", "log_odds_chosen"])
    assert "rm_accuracy" not in orpo.canonical
    assert orpo.canonical["dpo_accuracy"] == "acc" and orpo.canonical["dpo_margin"] == "margins"


def test_a_course_loops_history_names_its_entropy_and_scores() -> None:
    """A CS336-style loop's history (`mean_token_entropy`, `mean_reward`) and a homework's
    curves (`gradient_norm`, `val_accuracy`, from `gradient_norms` and `val_accuracies`)."""
    loop = names.resolve(["loss", "grad_norm", "mean_token_entropy", "mean_reward"])
    assert loop.canonical["entropy"] == "mean_token_entropy"
    assert loop.canonical["reward_mean"] == "mean_reward"
    rm = names.resolve(["train_loss", "gradient_norm", "val_accuracy", "val_loss"])
    assert rm.canonical["grad_norm"] == "gradient_norm"
    assert rm.canonical["val_score"] == "val_accuracy" and rm.canonical["eval_loss"] == "val_loss"


def test_a_wildcard_alias_finds_exactly_the_tags_its_pattern_matches() -> None:
    """Tried on the sorted tags with its literal head only (a bisect range): the same tags as
    the pattern tried on every tag, in sorted order, for a trailing `*` and a `*` inside."""
    import fnmatch

    tags = ["val-core/a/acc/mean", "val-core/b/reward/mean", "val-core", "timing_s/gen",
            "timing_s", "train/timing_s/x", "rewards/f/mean", "x"]  # fmt: skip
    m = names._Matcher(tags)
    for pattern in ("val-core/*/acc/mean", "timing_s/*", "rewards/*/mean", "*", "val-core/*"):
        want = []
        for form in names._forms(pattern):
            want += sorted(t for t in tags if fnmatch.fnmatchcase(t, form))
        assert m.find(pattern) == want, pattern


def test_a_loop_naming_a_metric_as_rlwatch_does_and_its_other_common_names() -> None:
    """A loop that writes rlwatch's own names (`clip_frac`, `kl_ref`) means those metrics;
    the names loops give an episode's reward (`final_reward`, `episode_reward`), a KL
    (`kl_div`, `mean_kl`), a completion's length and a loss map too. A framework's own key
    still comes first."""
    r = names.resolve(["reward_mean", "clip_frac", "kl_ref", "grad_norm", "approx_kl_old"])
    assert r.framework is None
    assert r.canonical == {
        "reward_mean": "reward_mean",
        "clip_frac": "clip_frac",
        "kl_ref": "kl_ref",
        "grad_norm": "grad_norm",
        "kl_ppo": "approx_kl_old",
    }
    loop = names.resolve(["final_reward", "kl_div", "completion_len", "grpo_loss"])
    assert loop.canonical == {
        "reward_mean": "final_reward",
        "kl_ref": "kl_div",
        "response_length_mean": "completion_len",
        "loss": "grpo_loss",
    }
    assert names.resolve(["episode_reward", "mean_kl"]).canonical == {
        "reward_mean": "episode_reward",
        "kl_ref": "mean_kl",
    }
    # verl's score is its reward, whatever else the run logs under a loop's name
    verl = names.resolve(["critic/score/mean", "actor/entropy", "total_reward", "clip_frac"])
    assert verl.framework == "verl" and verl.canonical["reward_mean"] == "critic/score/mean"


def test_a_dpo_loops_accuracy_and_margin_beside_its_dpo_loss_are_the_policys() -> None:
    """The Tinker cookbook's DPO logs `dpo_loss`, `accuracy`, `margin`, `chosen_reward` and
    `rejected_reward`: the accuracy and margin of the policy's implicit rewards, not a reward
    model's (TRL's RewardTrainer logs `accuracy` and `margin` without a DPO loss)."""
    dpo = names.resolve(
        ["dpo_loss", "accuracy", "margin", "chosen_reward", "rejected_reward", "learning_rate"]
    )
    assert dpo.canonical["dpo_accuracy"] == "accuracy"
    assert dpo.canonical["dpo_margin"] == "margin"
    assert dpo.canonical["loss"] == "dpo_loss"
    assert "rm_accuracy" not in dpo.canonical and "rm_margin" not in dpo.canonical
    rm = names.resolve(["loss", "accuracy", "margin", "learning_rate", "grad_norm"])
    assert rm.canonical["rm_accuracy"] == "accuracy" and rm.canonical["rm_margin"] == "margin"
    assert "dpo_accuracy" not in rm.canonical and "dpo_margin" not in rm.canonical
