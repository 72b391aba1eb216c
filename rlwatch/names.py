"""Canonical metric names, alias resolution and framework detection (data: rules/metrics.yaml)."""

from __future__ import annotations

import bisect
import fnmatch
import re
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path

WRITER_PREFIXES = ("train/",)  # added by TRL's and OpenRLHF's TensorBoard / W&B writers
_MLFLOW_BAD = re.compile(r"[^/\w.\- :]")
_TBX_BAD = re.compile(r"[^-/\w.]")  # tensorboardX's _clean_tag


def mlflow_sanitise(key: str) -> str:
    """The form MLflow writers (verl's tracking) give a key: '@' -> '_at_', others -> '_'."""
    return _MLFLOW_BAD.sub("_", key.replace("@", "_at_").replace("//", "/"))


@dataclass(frozen=True)
class Alias:
    key: str
    framework: str
    scale: float = 1.0
    # `own: true`: a key too common to mean this metric in anyone else's run (torchtune's
    # `rewards`), tried only when its framework is the one detected
    own: bool = False
    # `unless: [margin]`: not taken in a run that logs any of these keys (TRL's reward model
    # logs `mean_reward`, its score of the batch, beside `margin`)
    unless: tuple[str, ...] = ()

    @property
    def pattern(self) -> bool:
        return "*" in self.key


@dataclass(frozen=True)
class Metric:
    name: str
    description: str
    aliases: tuple[Alias, ...]
    # a held-out evaluation (`evaluation: true`): one value every eval interval, a point
    # estimate, not the mean of a logging interval's steps
    evaluation: bool = False
    # a metric a trainer logs as NaN where it does not compute it (`nan_when_off: true`): NaN
    # at every log is "not computed", not a failure (TRL/Unsloth's `kl` at beta 0)
    nan_when_off: bool = False


@dataclass(frozen=True)
class Framework:
    name: str
    markers: tuple[str, ...]
    versions: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True, eq=False)  # hashed by identity: resolutions are cached per catalogue
class Catalogue:
    metrics: dict[str, Metric]
    frameworks: dict[str, Framework]
    path: str


@dataclass
class Resolution:
    framework: str | None
    version: str | None
    canonical: dict[str, str] = field(default_factory=dict)  # canonical -> raw tag
    metric_of: dict[str, str] = field(default_factory=dict)  # raw tag -> canonical
    scales: dict[str, float] = field(default_factory=dict)  # canonical -> factor to apply
    unmapped: list[str] = field(default_factory=list)


def metrics_file() -> Path:
    return Path(str(resources.files("rlwatch.rules").joinpath("metrics.yaml")))


@cache
def catalogue(path: str | None = None) -> Catalogue:
    """Load and check the metrics table (the shipped one by default)."""
    from rlwatch.engine.cache import yaml_data
    from rlwatch.errors import RuleFileError

    p = path or str(metrics_file())
    try:
        doc = yaml_data(p)  # libyaml when available; plain data cached by content hash
    except Exception as exc:  # OSError, yaml.YAMLError, UnicodeDecodeError
        raise RuleFileError(f"cannot read metrics table: {exc}", p) from exc
    if not isinstance(doc, dict) or doc.get("version") != 1:
        raise RuleFileError("expected a mapping with 'version: 1'", p)
    frameworks = {}
    for name, spec in (doc.get("frameworks") or {}).items():
        versions = tuple((v["version"], tuple(v["any"])) for v in spec.get("versions", []))
        frameworks[name] = Framework(name, tuple(spec["markers"]), versions)
    metrics = {}
    for name, spec in (doc.get("metrics") or {}).items():
        aliases = []
        for fw, keys in spec["keys"].items():
            if fw not in frameworks:
                raise RuleFileError(
                    f"metric {name!r}: unknown framework {fw!r} (known: {', '.join(frameworks)})", p
                )
            for k in keys:
                if isinstance(k, dict):
                    own = k.get("own", False)
                    if not isinstance(own, bool):
                        raise RuleFileError(f"metric {name!r}: 'own' is true or false", p)
                    unless = k.get("unless", [])
                    if not isinstance(unless, list):
                        raise RuleFileError(f"metric {name!r}: 'unless' is a list of keys", p)
                    aliases.append(
                        Alias(
                            str(k["key"]),
                            fw,
                            float(k.get("scale", 1.0)),
                            own,
                            tuple(str(u) for u in unless),
                        )
                    )
                else:
                    aliases.append(Alias(str(k), fw))
        flags = {}
        for flag in ("evaluation", "nan_when_off"):
            flags[flag] = spec.get(flag, False)
            if not isinstance(flags[flag], bool):
                raise RuleFileError(f"metric {name!r}: {flag!r} is true or false", p)
        metrics[name] = Metric(name, spec.get("description", ""), tuple(aliases), **flags)
    return Catalogue(metrics, frameworks, p)


@cache
def evaluation_metrics() -> frozenset[str]:
    """Canonical metrics of held-out evaluations (the shipped table's `evaluation: true`)."""
    return frozenset(m.name for m in catalogue().metrics.values() if m.evaluation)


@cache
def nan_when_off_metrics() -> frozenset[str]:
    """Canonical metrics a trainer logs as NaN where it does not compute them (the shipped
    table's `nan_when_off: true`)."""
    return frozenset(m.name for m in catalogue().metrics.values() if m.nan_when_off)


# transformers' end-of-training summary (`train_loss` is the mean loss of the whole run): a
# flattened alias equal to one of them (NeMo RL's `train/loss`) would be read as that
SUMMARY_KEYS = frozenset(
    {"train_loss", "train_runtime", "train_samples_per_second", "train_steps_per_second"}
)


def flattened(key: str) -> str | None:
    """The form a key takes in a table whose columns cannot hold '/' (a CSV written from a
    flattened dict, pandas' `json_normalize(sep="_")`): `critic/score/mean` ->
    `critic_score_mean`; None when that is a key of transformers' summary. No alias's
    flattened form is another metric's key."""
    flat = _TBX_BAD.sub("_", key).replace("/", "_")
    return None if flat in SUMMARY_KEYS else flat


def _forms(key: str) -> list[str]:
    out = [key] + [p + key for p in WRITER_PREFIXES]
    for sane in (mlflow_sanitise(key), _TBX_BAD.sub("_", key)):
        if sane != key and sane not in out:
            out += [sane] + [p + sane for p in WRITER_PREFIXES]
    # a table's column (a CSV written from a flattened dict, TensorBoard's export of a tag
    # `train/kl` named `..-tag-train_kl.csv`): never with a writer's prefix on top
    for flat in [flattened(key)] + [flattened(p + key) for p in WRITER_PREFIXES]:
        if flat is not None and flat not in out:
            out.append(flat)
    return out


@cache
def _regex(form: str) -> re.Pattern[str]:
    return re.compile(fnmatch.translate(form))


class _Matcher:
    def __init__(self, tags: list[str]):
        self.tags = sorted(tags)
        self.present = set(tags)

    def find(self, key: str) -> list[str]:
        if "*" not in key:
            return [f for f in _forms(key) if f in self.present]
        hits: list[str] = []
        tags = self.tags
        for form in _forms(key):
            # the tags with the pattern's literal head, a range of the sorted tags; only those
            # are tried (every pattern tried on every tag cost a cold process ~50 ms)
            head = form[: min(form.find(c) % (len(form) + 1) for c in "*?[")]
            lo = hi = bisect.bisect_left(tags, head)
            while hi < len(tags) and tags[hi].startswith(head):
                hi += 1
            if form == head + "*":  # `timing_s/*`: all of them
                hits += tags[lo:hi]
            else:
                rx = _regex(form)
                hits += [t for t in tags[lo:hi] if rx.match(t)]
        return hits


def detect(tags: list[str], cat: Catalogue | None = None) -> tuple[str | None, str | None]:
    """(framework, version) from the keys present; (None, None) when nothing matches."""
    cat = cat or catalogue()
    m = _Matcher(tags)
    best, best_score = None, 0
    for fw in cat.frameworks.values():
        score = sum(1 for k in fw.markers if m.find(k))
        if score > best_score:
            best, best_score = fw, score
    if best is None:
        return None, None
    for version, keys in best.versions:
        if any(m.find(k) for k in keys):
            return best.name, version
    return best.name, None


def resolve(tags: list[str], cat: Catalogue | None = None) -> Resolution:
    """Map a run's raw tags to canonical metrics (cached: a followed run asks again and again)."""
    r = _resolve(tuple(sorted(tags)), cat or catalogue())
    return Resolution(
        r.framework,
        r.version,
        dict(r.canonical),
        dict(r.metric_of),
        dict(r.scales),
        list(r.unmapped),
    )


def _take(res: Resolution, taken: set[str], metric: str, alias: Alias, hit: str) -> None:
    """Raw key `hit` is canonical `metric` (through `alias`, whose scale it takes)."""
    res.canonical[metric] = hit
    res.metric_of[hit] = metric
    if alias.scale != 1.0:
        res.scales[metric] = alias.scale
    taken.add(hit)


@cache
def _resolve(tags: tuple[str, ...], cat: Catalogue) -> Resolution:
    """Map a run's raw tags to canonical metrics; the detected framework's keys come first.

    Wildcard aliases are tried only for the detected framework (or when none is detected),
    since a pattern such as slime's ``eval/*`` would swallow other frameworks' keys; an `own`
    alias only for its framework, detected.
    """
    framework, version = detect(list(tags), cat)
    res = Resolution(framework, version)
    m = _Matcher(list(tags))
    taken: set[str] = set()
    # with no framework detected, a key that a metric's alias names exactly is that metric's:
    # no other metric's pattern takes it (slime's `eval/*` is no `eval/loss`, the eval loss)
    named: dict[str, str] = {}
    if framework is None:
        for metric in cat.metrics.values():
            for alias in metric.aliases:
                if not alias.pattern and not alias.own:
                    for t in m.find(alias.key):
                        named.setdefault(t, metric.name)
    for metric in cat.metrics.values():
        ordered = sorted(metric.aliases, key=lambda a: a.framework != framework)
        for alias in ordered:
            if alias.framework != framework and (
                alias.own or (alias.pattern and framework is not None)
            ):
                continue
            if any(m.find(u) for u in alias.unless):
                continue
            hit = next(
                (
                    t
                    for t in m.find(alias.key)
                    if t not in taken
                    and (not alias.pattern or named.get(t, metric.name) == metric.name)
                ),
                None,
            )
            if hit is not None:
                _take(res, taken, metric.name, alias, hit)
                break
    # a loop that names a metric as rlwatch does (`clip_frac`, `kl_ref`): that metric, when no
    # alias gave it
    for metric in cat.metrics:
        if metric not in res.canonical:
            hit = next((t for t in m.find(metric) if t not in taken), None)
            if hit is not None:
                _take(res, taken, metric, Alias(metric, "custom"), hit)
    # a custom trainer's capitalised name (`Reward: 0.1`, `Mean Reward: 0.06`, `KL: 0.01`): an
    # alias in another case, once every key as written has had its turn (a name that two keys
    # share in different cases says nothing)
    folded: dict[str, str | None] = {}
    for t in tags:
        if t not in taken:
            folded[t.lower()] = None if t.lower() in folded else t
    if any(folded.values()):
        for metric in cat.metrics.values():
            if metric.name in res.canonical:
                continue
            ordered = sorted(metric.aliases, key=lambda a: a.framework != framework)
            for alias in ordered:
                if alias.pattern or (alias.own and alias.framework != framework):
                    continue
                if any(folded.get(u.lower()) or m.find(u) for u in alias.unless):
                    continue
                hit = next(
                    (h for f in _forms(alias.key) if (h := folded.get(f.lower())) is not None), None
                )
                if hit is not None and hit not in taken:
                    _take(res, taken, metric.name, alias, hit)
                    break
    canonical_names = set(cat.metrics)
    res.unmapped = sorted(t for t in tags if t not in taken)
    # a raw key that happens to equal a canonical name in use elsewhere keeps a marker
    for t in res.unmapped:
        if t in canonical_names and t in res.canonical:
            res.metric_of[t] = f"{t} (raw)"
    return res
