"""rlwatch: run monitor and health diagnoser for RL post-training of language models."""

__version__ = "0.1.0"
