"""Safe YAML with line numbers: parse a manifest into plain data plus the line of every key.

Composing with PyYAML's C parser and building the data ourselves gives three things `yaml.safe_load`
does not: the line of each key and list item (for `file:line` errors), refusal of duplicate keys
(which safe_load silently overwrites), and bounds on nesting and alias expansion (YAML bombs).
Only the standard scalar tags are accepted; nothing is ever executed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import yaml

try:  # the C parser is 5-10x faster; fall back to the pure-Python one where libyaml is missing
    from yaml import CSafeLoader as _Loader
except ImportError:  # pragma: no cover - depends on how PyYAML was built
    from yaml import SafeLoader as _Loader  # type: ignore[assignment]

Loc = tuple[str | int, ...]

# Values built per document: each pinned file is 4 (its mapping, path, size, sha256), so a 100,000-file
# manifest is ~400,000. Values reached again through an alias are bounded on their own: no manifest needs
# many, and aliases are how a small text (a bomb) multiplies into billions.
MAX_NODES = 1_000_000
MAX_ALIAS_VALUES = 100_000
MAX_DEPTH = 64
MAX_BYTES = 64 * 1024 * 1024  # a 100,000-file manifest is ~14 MiB of text

_TAG = "tag:yaml.org,2002:"
_constructor = yaml.constructor.SafeConstructor()
_SCALARS: dict[str, Any] = {
    _TAG + "str": lambda node: node.value,
    _TAG + "int": _constructor.construct_yaml_int,
    _TAG + "float": _constructor.construct_yaml_float,
    _TAG + "bool": _constructor.construct_yaml_bool,
    _TAG + "null": lambda node: None,
    # Dates stay text: no manifest field is a date, and a str is what a human meant.
    _TAG + "timestamp": lambda node: node.value,
}


class YamlProblem(ValueError):
    """The text is not a manifest-shaped YAML document; `line` is 1-based (0 when unknown)."""

    def __init__(self, message: str, line: int, loc: Loc = ()) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.loc = loc


@dataclass(frozen=True)
class LineMap:
    """The 1-based line of each key / list item, addressed by its location (`("files", 3, "sha256")`)."""

    lines: dict[Loc, int] = field(default_factory=dict)

    def line_of(self, loc: Loc) -> int:
        """The line of `loc`, or of its nearest ancestor that has one (a missing key -> its parent)."""
        for end in range(len(loc), -1, -1):
            line = self.lines.get(tuple(loc[:end]))
            if line is not None:
                return line
        return 1

    def __iter__(self) -> Iterator[Loc]:
        return iter(self.lines)


@dataclass(frozen=True)
class Located:
    data: Any
    lines: LineMap


def parse(text: str) -> Located:
    """Parse one YAML document; raise `YamlProblem` with a line number for anything unacceptable."""
    if len(text) > MAX_BYTES:
        raise YamlProblem(f"file is larger than {MAX_BYTES // (1024 * 1024)} MiB; a manifest never is", 1)
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 0
        problem = exc.problem or exc.context or "invalid YAML"
        raise YamlProblem(f"invalid YAML: {problem}", line) from None
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow (NUL, other control codes)
        line = text.count("\n", 0, exc.position) + 1
        raise YamlProblem(f"invalid YAML: character {exc.character!r} is not allowed in YAML", line) from None
    except yaml.YAMLError as exc:
        raise YamlProblem(f"invalid YAML: {str(exc).splitlines()[0]}", 0) from None
    finally:
        loader.dispose()
    lines: dict[Loc, int] = {(): 1}
    if node is None:
        return Located(None, LineMap(lines))
    lines[()] = node.start_mark.line + 1
    budget = [MAX_NODES, MAX_ALIAS_VALUES]
    return Located(_build(node, (), lines, budget, set()), LineMap(lines))


def _build(
    node: yaml.Node, loc: Loc, lines: dict[Loc, int], budget: list[int], seen: set[int], aliased: bool = False
) -> Any:
    aliased = aliased or id(node) in seen  # the composer hands back the anchored node itself for each alias
    seen.add(id(node))
    budget[0] -= 1
    budget[1] -= aliased
    line = node.start_mark.line + 1
    if budget[0] < 0:
        raise YamlProblem(
            f"more than {MAX_NODES:,} values, the limit (a manifest pinning 100,000 files has about 400,000)", line, loc
        )
    if budget[1] < 0:
        raise YamlProblem(
            f"more than {MAX_ALIAS_VALUES:,} values reached through aliases, the limit (an alias bomb?); "
            "write the values out",
            line,
            loc,
        )
    if len(loc) > MAX_DEPTH:
        raise YamlProblem(f"nested deeper than {MAX_DEPTH} levels", line, loc)
    if isinstance(node, yaml.ScalarNode):
        construct = _SCALARS.get(node.tag)
        if construct is None:
            raise YamlProblem(f"unsupported YAML tag {node.tag!r}; only plain values are allowed", line, loc)
        try:
            return construct(node)
        except (ValueError, OverflowError):  # e.g. an integer of more digits than Python converts
            raise YamlProblem(f"value {node.value[:20]!r}... is too large to read", line, loc) from None
    if isinstance(node, yaml.SequenceNode):
        if node.tag != _TAG + "seq":
            raise YamlProblem(f"unsupported YAML tag {node.tag!r}; only plain lists are allowed", line, loc)
        items = []
        for index, item in enumerate(node.value):
            lines[(*loc, index)] = item.start_mark.line + 1
            items.append(_build(item, (*loc, index), lines, budget, seen, aliased))
        return items
    if isinstance(node, yaml.MappingNode):
        if node.tag != _TAG + "map":
            raise YamlProblem(f"unsupported YAML tag {node.tag!r}; only plain mappings are allowed", line, loc)
        mapping: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key_line = key_node.start_mark.line + 1
            if key_node.tag == _TAG + "merge":
                raise YamlProblem("merge keys (<<) are not supported; write the keys out", key_line, loc)
            if not isinstance(key_node, yaml.ScalarNode):
                raise YamlProblem("keys must be plain strings", key_line, loc)
            key = key_node.value
            if key in mapping:
                raise YamlProblem(f"duplicate key {key!r} (first at line {lines[(*loc, key)]})", key_line, (*loc, key))
            lines[(*loc, key)] = key_line
            mapping[key] = _build(value_node, (*loc, key), lines, budget, seen, aliased)
        return mapping
    raise YamlProblem(f"unsupported YAML node {type(node).__name__}", line, loc)  # pragma: no cover


def format_loc(loc: Iterable[str | int]) -> str:
    """('files', 3, 'sha256') -> 'files[3].sha256'."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out
