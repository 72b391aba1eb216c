"""--select / --ignore: by code (ST01), code prefix (ST) or dotted name / family (stability)."""

from __future__ import annotations

from rlwatch.engine.rules import Rule, RuleSet
from rlwatch.errors import UsageError


def _matches(rule: Rule, sel: str) -> bool:
    return (
        rule.code == sel
        or rule.code.startswith(sel)
        or rule.name == sel
        or rule.name.split(".")[0] == sel
        or rule.group == sel
    )


def select(rules: RuleSet, select: list[str] | None, ignore: list[str] | None) -> RuleSet:
    for sel in [*(select or []), *(ignore or [])]:
        if not any(_matches(r, sel) for r in rules.rules):
            raise UsageError(
                f"--select/--ignore {sel!r} matches no rule (use a code like ST01, "
                "a prefix like ST, or a name; see `rlwatch rules list`)"
            )
    chosen = [
        r
        for r in rules.rules
        if (not select or any(_matches(r, s) for s in select))
        and not any(_matches(r, s) for s in ignore or [])
    ]
    return RuleSet(chosen)
