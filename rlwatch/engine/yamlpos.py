"""Safe YAML loading that remembers where every value came from (for file:line:col errors)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

Path_ = tuple[object, ...]
_PLAIN = {f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "map", "seq")}


class Located:
    """A loaded YAML document plus the (line, col) of every mapping key and sequence item."""

    def __init__(self, path: str, data: Any, marks: dict[Path_, tuple[int, int]]):
        self.path, self.data, self.marks = path, data, marks

    def where(self, at: Path_) -> tuple[int | None, int | None]:
        while at and at not in self.marks:
            at = at[:-1]
        return self.marks.get(at, (None, None))


def load(path: str | Path, text: str | None = None) -> Located:
    """Parse with PyYAML's safe composer (no tags, nothing executed) keeping positions."""
    import yaml

    from rlwatch.errors import RuleFileError

    p = str(path)
    try:
        source = Path(p).read_text(encoding="utf-8") if text is None else text
    except OSError as exc:
        raise RuleFileError(f"cannot read: {exc.strerror}", p) from None
    try:
        node = yaml.compose(source, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        raise RuleFileError(
            f"invalid YAML: {problem}",
            p,
            mark.line + 1 if mark else None,
            mark.column + 1 if mark else None,
        ) from None
    marks: dict[Path_, tuple[int, int]] = {}
    data = _convert(node, (), marks, p) if node is not None else None
    return Located(p, data, marks)


def _convert(node: Any, at: Path_, marks: dict[Path_, tuple[int, int]], path: str) -> Any:
    import yaml

    from rlwatch.errors import RuleFileError

    marks.setdefault(at, (node.start_mark.line + 1, node.start_mark.column + 1))
    if node.tag not in _PLAIN:
        raise RuleFileError(
            f"tag {node.tag!r} is not allowed (rule files are plain data)",
            path,
            node.start_mark.line + 1,
            node.start_mark.column + 1,
        )
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = key_node.value
            if key in out:
                raise RuleFileError(
                    f"duplicate key {key!r}",
                    path,
                    key_node.start_mark.line + 1,
                    key_node.start_mark.column + 1,
                )
            marks[(*at, key)] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            out[key] = _convert(value_node, (*at, key), marks, path)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_convert(v, (*at, i), marks, path) for i, v in enumerate(node.value)]
    # a scalar: let the safe constructor type it (int, float, bool, null, str)
    return yaml.SafeLoader(  # type: ignore[no-untyped-call]
        ""
    ).construct_object(node, deep=True)
