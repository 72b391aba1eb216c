"""Safe YAML loading that remembers where every value came from (for file:line:col errors).

Bounded: a file larger than MAX_BYTES, nesting deeper than MAX_DEPTH, aliases that expand to more
than MAX_NODES values (a "billion laughs") or refer to themselves, keys that are not plain
scalars, tags and non-UTF-8 bytes are all a one-line RuleFileError, never a traceback or gigabytes
of memory. The composer is libyaml's (yaml.CSafeLoader) when PyYAML has it, else pure Python;
both keep the positions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

Path_ = tuple[object, ...]
_PLAIN = {f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "map", "seq")}
MAX_BYTES = 4 * 1024 * 1024  # a rule or test file larger than this is refused
MAX_DEPTH = 64  # nesting of mappings and lists
MAX_NODES = 200_000  # values after alias expansion


class Located:
    """A loaded YAML document plus the (line, col) of every mapping key and sequence item."""

    def __init__(self, path: str, data: Any, marks: dict[Path_, tuple[int, int]]):
        self.path, self.data, self.marks = path, data, marks

    def where(self, at: Path_) -> tuple[int | None, int | None]:
        while at and at not in self.marks:
            at = at[:-1]
        return self.marks.get(at, (None, None))


def loader() -> type:
    """libyaml's safe loader when available (fast), else PyYAML's pure-Python one."""
    import yaml

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read(path: str | Path) -> str:
    """A YAML file's text: bounded in size, UTF-8 (errors name the byte's line:col)."""
    from rlwatch.errors import RuleFileError

    p = str(path)
    try:
        with open(p, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise RuleFileError(f"cannot read: {exc.strerror}", p) from None
    if len(raw) > MAX_BYTES:
        raise RuleFileError(f"file too large (more than {MAX_BYTES // 1024 // 1024} MB)", p)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        col = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise RuleFileError(
            f"not UTF-8 text (byte 0x{raw[exc.start]:02x}); save the file as UTF-8", p, line, col
        ) from None


def _check_depth(source: str, path: str) -> None:
    """Nesting deeper than MAX_DEPTH is refused from the event stream (the parser is not
    recursive; the composer is, in C, and overflows the stack on hostile input)."""
    import yaml

    from rlwatch.errors import RuleFileError

    depth = 0
    for event in yaml.parse(source, Loader=loader()):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                mark = event.start_mark
                raise RuleFileError(
                    f"invalid YAML: nested too deeply (limit {MAX_DEPTH} levels)",
                    path,
                    mark.line + 1 if mark else None,
                    mark.column + 1 if mark else None,
                )
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def load(path: str | Path, text: str | None = None) -> Located:
    """Parse with PyYAML's safe composer (no tags, nothing executed) keeping positions."""
    import yaml

    from rlwatch.errors import RuleFileError

    p = str(path)
    source = read(p) if text is None else text
    try:
        _check_depth(source, p)  # before composing: libyaml's composer segfaults at ~100k levels
        node = yaml.compose(source, Loader=loader())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        if "nesting depth" in problem:  # PyYAML >= 6.0.3 has a limit of its own
            problem = f"nested too deeply (limit {MAX_DEPTH} levels)"
        raise RuleFileError(
            f"invalid YAML: {problem}",
            p,
            mark.line + 1 if mark else None,
            mark.column + 1 if mark else None,
        ) from None
    except RecursionError:
        raise RuleFileError(
            f"invalid YAML: nested too deeply (limit {MAX_DEPTH} levels)", p
        ) from None
    marks: dict[Path_, tuple[int, int]] = {}
    data = _Converter(p, marks).convert(node, ()) if node is not None else None
    return Located(p, data, marks)


class _Converter:
    def __init__(self, path: str, marks: dict[Path_, tuple[int, int]]):
        import yaml

        self.yaml = yaml
        self.path, self.marks = path, marks
        self.nodes = 0
        self.open: set[int] = set()  # ids of the collections being converted (alias cycles)
        self.constructor = yaml.constructor.SafeConstructor()

    def fail(self, node: Any, message: str) -> Exception:
        from rlwatch.errors import RuleFileError

        return RuleFileError(
            message, self.path, node.start_mark.line + 1, node.start_mark.column + 1
        )

    def convert(self, node: Any, at: Path_) -> Any:
        yaml = self.yaml
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise self.fail(node, f"too many values (more than {MAX_NODES:,}; aliases expanded)")
        if len(at) > MAX_DEPTH:
            raise self.fail(node, f"nested too deeply (limit {MAX_DEPTH} levels)")
        self.marks.setdefault(at, (node.start_mark.line + 1, node.start_mark.column + 1))
        if node.tag not in _PLAIN:
            raise self.fail(node, f"tag {node.tag!r} is not allowed (rule files are plain data)")
        if isinstance(node, yaml.ScalarNode):  # the safe constructor types it
            return self.constructor.construct_object(node, deep=True)
        if id(node) in self.open:
            raise self.fail(node, "recursive alias (an anchor used inside itself)")
        self.open.add(id(node))
        try:
            if isinstance(node, yaml.MappingNode):
                out: dict[str, Any] = {}
                for key_node, value_node in node.value:
                    if not isinstance(key_node, yaml.ScalarNode):
                        raise self.fail(
                            key_node, "a key must be a plain word, not a list or mapping"
                        )
                    key = key_node.value
                    if key in out:
                        raise self.fail(key_node, f"duplicate key {key!r}")
                    self.marks[(*at, key)] = (
                        key_node.start_mark.line + 1,
                        key_node.start_mark.column + 1,
                    )
                    out[key] = self.convert(value_node, (*at, key))
                return out
            return [self.convert(v, (*at, i)) for i, v in enumerate(node.value)]
        finally:
            self.open.discard(id(node))
