"""Writes the run in this folder with a pre-0.7 swanlab client in local mode (see README.md)."""

import sys

import swanlab

swanlab.init(
    project="rlwatch-legacy",
    experiment_name="grpo-legacy",
    mode="local",
    logdir=sys.argv[1],
    config={"lr": 1e-6, "algo": "grpo"},
)
for step in range(1, 31):
    swanlab.log(
        {
            "actor/entropy": 0.6 if step <= 15 else 0.004,
            "actor/grad_norm": 0.5 + step / 100,
            "critic/score/mean": 0.2 + step / 100,
            "response_length/mean": 300.0 + step,
            "actor/pg_clipfrac": float("nan") if step == 20 else 0.01,
            "actor/ppo_kl": float("inf") if step == 21 else 0.001,
        },
        step=step,
    )
swanlab.finish()
