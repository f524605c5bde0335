"""YAML a user is handed, loaded within bounds: a config, a nested ``--model.config FILE``, a suite.

PyYAML's safe loader runs no code, but an alias bomb (nine anchors, each a list of ten aliases of the
one before: a few hundred bytes) stands for a billion nodes, and whatever walks the loaded value
(jsonargparse copies and validates it, a dump writes it out) then hangs or runs out of memory. So a
document is composed first — composing shares aliased nodes, so it costs what the text costs — and its
size *with every alias expanded* is counted before anything is built from it. A config of this project
has a few hundred nodes; the bounds leave room for suites three orders of magnitude larger.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import yaml

from andrea_lab.errors import UsageError
from andrea_lab.files import read_text_file

#: Nodes a document may stand for once every alias is expanded.
MAX_NODES = 100_000
#: How deeply collections may nest.
MAX_DEPTH = 64
#: Bytes a YAML file may have.
MAX_BYTES = 4 << 20


class YamlBoundsError(yaml.YAMLError):
    """A YAML document past the bounds (a ``YAMLError``, so every caller that reports malformed YAML
    reports this too, with the file's name)."""


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def expanded_size(root: yaml.Node) -> int:
    """Nodes ``root`` stands for with every alias expanded (an aliased node counts each time it is used),
    computed once per distinct node. Raises :class:`YamlBoundsError` past :data:`MAX_NODES` or
    :data:`MAX_DEPTH`, or for a recursive document (an alias inside its own anchor)."""
    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    open_nodes: set[int] = set()
    while stack:
        node, children_done = stack.pop()
        if children_done:
            open_nodes.discard(id(node))
            sizes[id(node)] = 1 + sum(sizes[id(child)] for child in _children(node))
            if sizes[id(node)] > MAX_NODES:
                raise YamlBoundsError(
                    f"it stands for more than {MAX_NODES:,} values once its aliases (*name) "
                    "are expanded; a config is never that large (an alias bomb?)"
                )
            continue
        if id(node) in sizes:
            continue
        if id(node) in open_nodes:
            raise YamlBoundsError("an alias (*name) refers to a collection that contains it (a recursive document)")
        if len(open_nodes) >= MAX_DEPTH:
            raise YamlBoundsError(f"its collections nest more than {MAX_DEPTH} deep")
        open_nodes.add(id(node))
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in sizes)
    return sizes[id(root)]


class _DepthLimitedComposer(yaml.SafeLoader):
    """PyYAML's composer, which recurses once per nesting level, stopped at :data:`MAX_DEPTH` (a nesting bomb
    would otherwise run into Python's recursion limit, slowly)."""

    _depth = 0

    def compose_node(self, parent, index):
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise YamlBoundsError(f"its collections nest more than {MAX_DEPTH} deep")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def check_bounds(text: str, loader: type = _DepthLimitedComposer) -> None:
    """Compose ``text`` (building nothing) and check it against the bounds; raises ``YAMLError``."""
    if len(text) > MAX_BYTES:
        raise YamlBoundsError(f"it is {len(text):,} characters; YAML read here may have at most {MAX_BYTES:,}")
    composer = loader(text)
    try:
        while composer.check_node():
            expanded_size(composer.get_node())
    except RecursionError:  # PyYAML composes nested collections recursively
        raise YamlBoundsError(f"its collections nest more than {MAX_DEPTH} deep") from None
    finally:
        composer.dispose()


def bounded(load: Callable[[str], Any]) -> Callable[[str], Any]:
    """``load`` (text -> value) that first checks the text against the bounds."""

    def load_within_bounds(text: str) -> Any:
        if isinstance(text, str):
            check_bounds(text)
        return load(text)

    load_within_bounds.__doc__ = f"{load.__doc__ or load.__name__}, after :func:`check_bounds`."
    return load_within_bounds


def read_yaml(path: str | Path, what: str) -> Any:
    """The document in a YAML file a user named, as ``yaml.safe_load`` gives it; one :class:`UsageError`
    naming ``what`` and the file when it is not a regular file, not UTF-8, not YAML or past the bounds."""
    text = read_text_file(path, what, MAX_BYTES)
    try:
        check_bounds(text)
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise UsageError(f"{what} {path} is not valid YAML: {_one_line(exc)}") from None


def _one_line(exc: BaseException) -> str:
    """PyYAML's message (several lines, with a drawing of the place) as one line: what, and where."""
    problem, mark = getattr(exc, "problem", None), getattr(exc, "problem_mark", None)
    if problem and mark is not None:
        return f"{problem} at line {mark.line + 1}, column {mark.column + 1}"
    return " ".join(str(exc).split())
