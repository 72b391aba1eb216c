"""Thin adapters into other tools' training loops (imported only when used).

- `rlwatch.integrations.transformers.RLWatchCallback`: a `transformers.TrainerCallback` for the
  Trainer and every TRL trainer (GRPO, DPO, PPO, RLOO, KTO, reward modelling, ...).
"""
