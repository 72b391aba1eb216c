"""The condition-kind registry: each kind of condition is declared once, here and only here.

A kind is a frozen dataclass (its typed node) decorated with `@kind(...)`. Its fields are its
parameters, each declared with `param(type, default, bounds, doc)`; its class docstring carries
the examples; its `signal(ctx)` method is the function. Everything else reads that one
declaration: the rule-file validator (`parse`, with file:line:col errors), the evaluator
(`conditions.evaluate`), `rlwatch rules explain` (`describe`), the docstring test, and the compiled
rule-pack cache (`to_spec` / `from_spec`, plain data).

How to add a kind::

    @kind("plateau", observed=("value", "spread"), one_of=("below",))
    @dataclass(frozen=True)
    class Plateau(Leaf):
        '''The spread of the last `window` values is below `below`.

        Unhealthy: `reward: 0.5x30` with `below: 0.01`. Healthy: `reward: 0.1+0.01x30`.
        '''

        metric: str = param("metric")
        below: float | None = param("num")
        window: int = param("int", 20, low=2, high=MAX_WINDOW, doc="logged steps")

        def signal(self, ctx): ...

`observed` names what a summary template may quote; `one_of` lists parameters of which at least
one is required; a parameter without a default (`param("metric")` with `required=True`, the
default for type "metric") must be given. `check()` returns a message for cross-parameter
constraints. Metrics a kind reads are its parameters of type "metric" (plus `default_metric`).
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

# Upper bounds for every size a rule file can set (a window of 10**12 must not allocate memory).
MAX_WINDOW = 100_000  # logged steps in any window / count / for / keep_firing_for
TYPES = ("metric", "int", "num", "pos", "range", "cond", "conds", "bool")
_MISSING: Any = dataclasses.MISSING


def param(
    type: str,
    default: Any = None,
    *,
    required: bool | None = None,
    low: float | None = None,
    high: float | None = None,
    doc: str = "",
    per_log: int | None = None,
) -> Any:
    """Declare a parameter: its type (one of TYPES), default, bounds and meaning.

    `low`/`high` are inclusive bounds (for "int": default low 1, high MAX_WINDOW). `per_log`
    marks a count of logs written for a run that logs every step (a window, a warm-up, an early
    level): for a run that logs every r steps it counts r x fewer logs, never fewer than
    `per_log` (see `at_resolution`).
    A parameter is required when `required` is true, or (by default) when its type is "metric",
    "cond" or "conds" and it has no default.
    """
    assert type in TYPES, type
    if required is None:
        required = type in ("metric", "cond", "conds") and default is None
    if type == "int":
        low = 1 if low is None else low
        high = MAX_WINDOW if high is None else high
    meta = {
        "type": type,
        "required": required,
        "low": low,
        "high": high,
        "doc": doc,
        "per_log": per_log,
    }
    if required:
        return dataclasses.field(metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


@dataclass(frozen=True)
class Param:
    name: str
    type: str
    default: Any
    required: bool
    low: float | None
    high: float | None
    doc: str
    per_log: int | None = None


class Node:
    """A parsed condition: a frozen dataclass per kind (see `kind`)."""

    KIND: ClassVar[str] = ""
    OBSERVED: ClassVar[tuple[str, ...]] = ()
    ONE_OF: ClassVar[tuple[str, ...]] = ()
    PARAMS: ClassVar[tuple[Param, ...]] = ()

    def signal(self, ctx: Any) -> Any:  # pragma: no cover - every kind defines it
        raise NotImplementedError

    def check(self) -> tuple[str, str] | None:
        """A cross-parameter problem as (parameter, message), or None."""
        return None

    def lookback(self) -> int | None:
        """Logged values before the current step the condition reads (None: the whole history).

        Composite kinds combine their children's; a leaf kind overrides this when it looks back.
        """
        inner = [c.lookback() for c in self.children()]
        if any(n is None for n in inner):
            return None
        return max(inner, default=0)

    def head(self) -> int:
        """Logged values from the run's start the condition reads (its early level), or 0."""
        return max((c.head() for c in self.children()), default=0)

    def children(self) -> Iterator[Node]:
        for p in self.PARAMS:
            v = getattr(self, p.name)
            if p.type == "cond" and v is not None:  # an optional sub-condition may be absent
                yield v
            elif p.type == "conds":
                yield from v

    def metrics(self) -> list[str]:
        """Every canonical metric this condition reads, in declaration order."""
        out: list[str] = []
        for p in self.PARAMS:
            v = getattr(self, p.name)
            if p.type == "metric" and v is not None:
                out.append(v)
            elif p.type in ("cond", "conds") and v is not None:
                for c in [v] if p.type == "cond" else v:
                    out += c.metrics()
        return out

    def template_names(self) -> set[str]:
        """The names a summary template may use for this condition."""
        names = set(self.OBSERVED)
        for c in self.children():
            names |= c.template_names()
            if self.KIND in ("all", "any"):
                names |= set(c.metrics())
        return names

    def to_spec(self, *, defaults: bool = False) -> dict[str, Any]:
        """Plain data `{kind: {param: value}}` (given parameters, or all with `defaults`)."""
        out: dict[str, Any] = {}
        for p in self.PARAMS:
            v = getattr(self, p.name)
            if p.type == "cond":
                if v is not None:
                    out[p.name] = v.to_spec(defaults=defaults)
            elif p.type == "conds":
                return {self.KIND: [c.to_spec(defaults=defaults) for c in v]}
            elif p.type == "range" and v is not None:
                out[p.name] = list(v)
            elif v is not None and (defaults or p.required or v != p.default):
                out[p.name] = v
        return {self.KIND: out}


def scaled_count(n: int, r: int, floor: int) -> int:
    """A count of logs written for a run that logs every step, for one that logs every `r`
    steps: the logs spanning the same training steps, never fewer than `floor` (nor than `n`
    when `n` is already below it)."""
    return n if r <= 1 else max(min(n, floor), -(-n // r))


def at_resolution(node: Node, r: int) -> Node:
    """The condition for a run that logs every `r` training steps (TRL's default is 10).

    Rules are written in logs of a run that logs every step, as the glossary's heuristics are
    ("entropy below 10% of the median of its first 10 logs"). A TRL log averages the metrics
    over its `r` steps, so a window of 20 logs is 20/r of them and the early level of the first
    10 logs is the first 10/r: every parameter declared `per_log` is scaled (`scaled_count`);
    thresholds, `within`'s training steps and a rule's `for` (`rules.at_resolution`) are not;
    nor are the counts of a condition on a held-out evaluation (`names.evaluation_metrics`):
    it is logged at its own cadence, one point estimate per evaluation, so "the last 2
    evaluations" stay 2 whatever the training logs' interval. The same node is returned when
    nothing changes (r <= 1: every log a step)."""
    if r <= 1:
        return node
    from rlwatch.names import evaluation_metrics

    own_cadence = getattr(node, "metric", None) in evaluation_metrics()
    changes: dict[str, Any] = {}
    for p in node.PARAMS:
        v = getattr(node, p.name)
        if v is None:
            continue
        if p.per_log is not None:
            if own_cadence:
                continue
            nv = scaled_count(int(v), r, p.per_log)
            if nv != v:
                changes[p.name] = nv
        elif p.type == "cond":
            nc = at_resolution(v, r)
            if nc is not v:
                changes[p.name] = nc
        elif p.type == "conds":
            kids = [at_resolution(c, r) for c in v]
            if any(a is not b for a, b in zip(kids, v, strict=True)):
                changes[p.name] = type(v)(kids)
    return dataclasses.replace(node, **changes) if changes else node


REGISTRY: dict[str, type[Node]] = {}


def kind(
    name: str, *, observed: tuple[str, ...] = (), one_of: tuple[str, ...] = ()
) -> Callable[[type[Node]], type[Node]]:
    """Register a condition kind (decorate the frozen dataclass that is its node)."""

    def register(cls: type[Node]) -> type[Node]:
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen, cls  # type: ignore[attr-defined]
        cls.KIND, cls.OBSERVED, cls.ONE_OF = name, tuple(observed), tuple(one_of)
        params = []
        for f in dataclasses.fields(cls):
            m = f.metadata
            params.append(
                Param(
                    f.name,
                    m["type"],
                    None if f.default is _MISSING else f.default,
                    m["required"],
                    m["low"],
                    m["high"],
                    m["doc"],
                    m.get("per_log"),
                )
            )
        cls.PARAMS = tuple(params)
        REGISTRY[name] = cls
        return cls

    return register


def kinds() -> list[str]:
    _load()
    return list(REGISTRY)


def _load() -> None:
    if not REGISTRY:
        import rlwatch.engine.conditions  # noqa: F401  (registers the shipped kinds)


# -- parsing ------------------------------------------------------------------------------
Fail = Callable[[tuple[object, ...], str], Exception]


def _num(v: Any, at: tuple[object, ...], fail: Fail) -> float:
    if isinstance(v, bool):
        raise fail(at, f"expected a number, got {v!r}")
    try:
        return float(v)
    except (TypeError, ValueError, OverflowError):
        raise fail(at, f"expected a number, got {v!r}") from None


def _bounded(p: Param, v: float, at: tuple[object, ...], fail: Fail) -> None:
    if (p.low is not None and v < p.low) or (p.high is not None and v > p.high):
        lo = "" if p.low is None else f"{p.low:g} <= "
        hi = "" if p.high is None else f" <= {p.high:g}"
        raise fail(at, f"{p.name} must be {lo}{p.name}{hi}, got {v!r}")


def parse(
    spec: Any,
    at: tuple[object, ...] = (),
    fail: Fail | None = None,
    metric: Callable[[Any, tuple[object, ...]], None] | None = None,
) -> Node:
    """Validate a `when` mapping and build its typed node.

    `fail(at, message)` makes the exception to raise (the rule loader's gives file:line:col);
    `metric(value, at)` validates a metric name (the loader checks the canonical catalogue).
    """
    _load()
    if fail is None:
        fail = _plain_fail
    valid = ", ".join(REGISTRY)
    if not isinstance(spec, dict) or len(spec) != 1:
        raise fail(at, f"a condition is a mapping with exactly one kind (valid: {valid})")
    ((name, body),) = spec.items()
    kat = (*at, name)
    if not isinstance(name, str) or name not in REGISTRY:
        near = difflib.get_close_matches(str(name), list(REGISTRY), n=1)
        raise fail(
            kat,
            f"unknown condition kind {name!r} (valid: {valid})"
            + (f"; did you mean {near[0]!r}?" if near else ""),
        )
    cls = REGISTRY[name]
    conds = [p for p in cls.PARAMS if p.type == "conds"]
    if conds:  # all / any: a list of conditions
        if not isinstance(body, list):
            raise fail(kat, f"expected a list, got {type(body).__name__}")
        if not body:
            raise fail(kat, f"'{name}' needs at least one condition")
        items = tuple(parse(c, (*kat, i), fail, metric) for i, c in enumerate(body))
        return cls(items)  # type: ignore[call-arg]
    if not isinstance(body, dict):
        raise fail(kat, f"'{name}' takes a mapping of parameters")
    names = [p.name for p in cls.PARAMS]
    for k in body:
        if k not in names:
            near = difflib.get_close_matches(str(k), sorted(names), n=1)
            raise fail(
                (*kat, k),
                f"unknown key {k!r} (valid: {', '.join(sorted(names))})"
                + (f"; did you mean {near[0]!r}?" if near else ""),
            )
    for p in sorted(cls.PARAMS, key=lambda p: p.name):
        if p.required and p.name not in body:
            raise fail(kat, f"missing required key {p.name!r}")
    if cls.ONE_OF and not any(k in body for k in cls.ONE_OF):
        raise fail(kat, f"'{name}' needs one of: {', '.join(cls.ONE_OF)}")
    values: dict[str, Any] = {}
    for p in cls.PARAMS:
        if p.name not in body:
            continue
        pat, v = (*kat, p.name), body[p.name]
        if p.type == "metric":
            if not isinstance(v, str):
                raise fail(pat, f"{p.name} is a metric name, got {type(v).__name__} {v!r}")
            if metric is not None:
                metric(v, pat)
        elif p.type == "int":
            if isinstance(v, bool) or not isinstance(v, int):
                raise fail(pat, f"expected an integer >= {p.low:g}, got {v!r}")
            if v < (p.low or 0):
                raise fail(pat, f"expected an integer >= {p.low:g}, got {v!r}")
            _bounded(p, v, pat, fail)
        elif p.type in ("num", "pos"):
            v = _num(v, pat, fail)
            if p.type == "pos" and not v > 0:
                raise fail(pat, f"{p.name} must be > 0, got {body[p.name]!r}")
            _bounded(p, v, pat, fail)
        elif p.type == "bool":
            if not isinstance(v, bool):
                raise fail(pat, f"{p.name} is true or false, got {v!r}")
        elif p.type == "range":
            if not (isinstance(v, list) and len(v) == 2):
                raise fail(pat, f"{p.name} is [low, high], got {v!r}")
            lo, hi = (_num(x, (*pat, i), fail) for i, x in enumerate(v))
            if lo > hi:
                raise fail(pat, f"{p.name}: low {lo} > high {hi}")
            v = (lo, hi)
        elif p.type == "cond":
            v = parse(v, pat, fail, metric)
        values[p.name] = v
    node = cls(**values)
    problem = node.check()
    if problem is not None:
        where, message = problem
        raise fail(kat if not where else (*kat, where), message)
    return node


def from_spec(spec: dict[str, Any]) -> Node:
    """A node from plain data already validated (the compiled rule-pack cache)."""
    return parse(spec)


class ConditionError(ValueError):
    pass


def _plain_fail(at: tuple[object, ...], message: str) -> Exception:
    where = ".".join(str(a) for a in at)
    return ConditionError(f"{where}: {message}" if where else message)


# -- reading the declarations ------------------------------------------------------------
def describe(name: str) -> dict[str, Any]:
    """A kind's declaration as plain data (for `rlwatch rules explain` and the docs)."""
    _load()
    cls = REGISTRY[name]
    return {
        "kind": name,
        "doc": (cls.__doc__ or "").strip(),
        "observed": list(cls.OBSERVED),
        "one_of": list(cls.ONE_OF),
        "params": [dataclasses.asdict(p) for p in cls.PARAMS],
    }


def walk(node: Node) -> Iterator[Node]:
    """The node and every condition inside it, depth first."""
    yield node
    for c in node.children():
        yield from walk(c)
