"""The shipped rule packs and metrics table (YAML data, installed as rlwatch.rules)."""
