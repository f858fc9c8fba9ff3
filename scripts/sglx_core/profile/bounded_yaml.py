"""A YAML loader for untrusted profiles: bounded nesting and bounded alias expansion.

PyYAML's composer shares one node for every use of an anchor, so the document it returns is a
graph, not a tree. Everything that walks it as a tree (key lines, merging, validation, dumping)
sees each alias expanded: nine levels of ten aliases each ("billion laughs") become 10**9
nodes, and an anchor used inside itself becomes an endless loop. The composer is also
recursive, so thousands of nested brackets end in a RecursionError. `BoundedSafeLoader` counts
while composing and stops with the line of the offending alias or bracket, before anything
expands.
"""

from __future__ import annotations

from typing import Any

import yaml

MAX_DEPTH = 64
"""Deepest nesting of mappings and sequences, aliases expanded (the shipped profiles use 5)."""
MAX_ALIAS_NODES = 10_000
"""Most nodes a document may reach through aliases, counted as if every alias were copied."""


class YamlBoundError(yaml.YAMLError):
    """A document past one of the bounds; `line` is where it went past (1-based)."""

    def __init__(self, message: str, line: int, hint: str) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.hint = hint


class BoundedSafeLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` that refuses deep nesting, recursive aliases and alias explosions.

    Every composed node's expanded size and depth are recorded once, bottom-up, so an alias
    costs a lookup: the check is linear in the text, whatever the aliases would expand to.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._expanded: dict[int, tuple[int, int]] = {}  # id(node) -> (nodes, depth)
        self._open_anchors: dict[str, int] = {}  # anchors still being composed -> their line
        self._depth = 0
        self._through_aliases = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        event: yaml.NodeEvent = self.peek_event()  # type: ignore[no-untyped-call]  # stub lacks it
        line = _line_of(event)
        if isinstance(event, yaml.AliasEvent) and event.anchor is not None:
            return self._compose_alias(event.anchor, line, parent, index)
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise YamlBoundError(
                f"nested more than {MAX_DEPTH} levels deep",
                line,
                hint="a profile is a few levels of mappings and lists; flatten this value",
            )
        anchor: str | None = event.anchor
        if anchor is not None:
            self._open_anchors[anchor] = line
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
            if anchor is not None:
                self._open_anchors.pop(anchor, None)
        if node is not None:
            self._expanded[id(node)] = self._measure(node)
        return node

    def _compose_alias(
        self, anchor: str, line: int, parent: yaml.Node | None, index: Any
    ) -> yaml.Node | None:
        if anchor in self._open_anchors:
            raise YamlBoundError(
                f"alias '*{anchor}' is used inside its own anchor '&{anchor}' "
                f"(line {self._open_anchors[anchor]}): a recursive structure never ends",
                line,
                hint=f"refer to '&{anchor}' only after the value it anchors is complete",
            )
        node = super().compose_node(parent, index)  # raises on an undefined alias
        if node is None:
            return None
        nodes, depth = self._expanded[id(node)]
        self._through_aliases += nodes
        if self._through_aliases > MAX_ALIAS_NODES:
            raise YamlBoundError(
                f"aliases expand to more than {MAX_ALIAS_NODES} nodes (at '*{anchor}'): "
                "nested aliases that multiply (a 'billion laughs' document)",
                line,
                hint="write the repeated values out, or use shared fragments (extends:) "
                "instead of nested aliases",
            )
        if self._depth + depth > MAX_DEPTH:
            raise YamlBoundError(
                f"alias '*{anchor}' nests the document more than {MAX_DEPTH} levels deep",
                line,
                hint="a profile is a few levels of mappings and lists; flatten this value",
            )
        return node

    def _measure(self, node: yaml.Node) -> tuple[int, int]:
        """(nodes, depth) of `node` expanded, from its children's records; a scalar is (1, 1)."""
        if isinstance(node, yaml.MappingNode):
            children = [child for pair in node.value for child in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        else:
            children = []
        records = [self._expanded.get(id(child), (1, 1)) for child in children]
        return 1 + sum(n for n, _ in records), 1 + max((d for _, d in records), default=0)


def _line_of(event: yaml.Event) -> int:
    return 1 if event.start_mark is None else event.start_mark.line + 1
