"""The shapes a draft tree may take, as users and configs write them: static trees (children per
depth, or per node as fitted to measured acceptance), dynamic (EAGLE-2) trees, their text forms
and their checks. Standard library only: the CLI's parser, configs and protocol checks use it
without importing torch (the trees' tensors are ``engine/tree.py``'s)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from voicespec.checks import is_int


MAX_TREE_NODES = 64


StaticTree = tuple[int, ...] | tuple[tuple[int, ...], ...]


def check_branching(branching: Any) -> StaticTree:
    """The one rule for a static tree's shape, in either of two forms:
    - children per depth, every node of a depth alike: integers >= 1, e.g. ``(2, 2, 1)``;
    - children per node, depth by depth (a tree fitted to measured acceptance, whose likelier
      nodes get more children): at each depth one count >= 0 for each node of the depth above,
      in slot order, and at least one node per depth, e.g. ``((3,), (2, 1, 0), (1, 1, 1))``.
    At most ``MAX_TREE_NODES`` draft nodes in all. A per-node shape whose every depth gives all
    its nodes one count is returned per depth, so that one tree has one key (standard library
    only: configs check it too)."""
    try:
        b = tuple(tuple(x) if isinstance(x, (list, tuple)) else x for x in branching)
    except TypeError:
        b = ()
    if b and all(isinstance(g, tuple) for g in b):
        _check_per_node(b)
        shape = tuple(g[0] for g in b) if all(len(set(g)) == 1 for g in b) else b
    elif b and all(is_int(x) and x >= 1 for x in b):
        shape = b
    else:
        raise ValueError(f"a tree is children per depth (integers >= 1, e.g. (2, 2, 1)) or children per node, depth by "
                         f"depth (e.g. ((3,), (2, 1, 0), (1, 1, 1))), got {branching!r}")
    total = tree_nodes(shape)
    if total > MAX_TREE_NODES:
        raise ValueError(f"a tree of {total} draft nodes is more than {MAX_TREE_NODES}")
    return shape


def _check_per_node(groups: tuple[tuple[Any, ...], ...]) -> None:
    """Children per node: one count per node of the depth above (the root alone first), each an
    integer >= 0, every depth with a node."""
    width = 1
    for depth, g in enumerate(groups, start=1):
        if len(g) != width or not all(is_int(x) and x >= 0 for x in g):
            raise ValueError(f"depth {depth} of a per-node tree needs {width} counts >= 0 (one per node above), got {g!r}")
        width = sum(g)
        if width == 0:
            raise ValueError(f"depth {depth} of a per-node tree has no node")
        if width > MAX_TREE_NODES:
            raise ValueError(f"a tree of more than {MAX_TREE_NODES} draft nodes, got {width} at depth {depth}")


def per_node(branching: StaticTree) -> bool:
    """Whether a checked static tree is in the per-node form (else per depth)."""
    return bool(branching) and isinstance(branching[0], tuple)


def tree_counts(branching: StaticTree) -> tuple[tuple[int, ...], ...]:
    """Children per node, depth by depth, of a checked static tree in either form."""
    if per_node(branching):
        return branching  # type: ignore[return-value]
    groups, width = [], 1
    for x in branching:
        groups.append((x,) * width)
        width *= x
    return tuple(groups)


def tree_nodes(branching: StaticTree) -> int:
    """Draft nodes of a static tree (the root excluded); per depth by arithmetic, not by listing
    the nodes (it sizes unchecked input: ``[10**9, 10**9]`` must cost nothing to refuse)."""
    if per_node(branching):
        return sum(sum(g) for g in branching)  # type: ignore[misc]
    total, width = 0, 1
    for x in branching:
        width *= x  # type: ignore[operator]
        total += width
        if total > MAX_TREE_NODES:
            break  # too many already: the check refuses it
    return total


def tree_text(branching: StaticTree) -> str:
    """Text form (CLI, protocol, bench): ``"2,2,1"`` per depth, ``"3/2,1,0/1,1,1"`` per node."""
    if per_node(branching):
        return "/".join(",".join(map(str, g)) for g in branching)
    return ",".join(map(str, branching))


def parse_static_tree(text: str) -> StaticTree:
    """:func:`tree_text`'s inverse: ``"2,2,1"`` (or ``"2x2x1"``) or ``"3/2,1,0/1,1,1"``."""
    try:
        groups = [tuple(int(x) for x in g.replace("x", ",").split(",")) for g in text.strip().split("/")]
    except ValueError:
        raise ValueError(f"a tree is children per depth, e.g. 2,2,1, or per node depth by depth, e.g. 3/2,1,0/1,1,1, "
                         f"got {text!r}") from None
    return check_branching(groups[0] if len(groups) == 1 else groups)


# A drafter's candidate trees when it has none fitted (measured on the shipped voice before its
# fitted trees, greedy: three first candidates, then a chain under each, level with 2,2,1,1).
DEFAULT_TREES: tuple[StaticTree, ...] = ((3, 1, 1, 1, 1),)

MAX_TREE_TOP_K = 16


@dataclass(frozen=True)
class DynamicTree:
    """A draft tree grown anew every step from the drafter's own confidence (EAGLE-2): ``depth``
    levels, each expanding the ``top_k`` nodes of the level before with the highest path
    probability (the product of the draft's probabilities along the path) by their ``top_k``
    likeliest children; then the ``nodes`` likeliest of every node drafted are verified. The
    candidates are the draft's top tokens, not draws, so it is exact in greedy decoding only.
    Text form (CLI, protocol, bench): ``dynamic[:NODES[:DEPTH[:TOP_K]]]``."""

    nodes: int = 16
    depth: int = 6
    top_k: int = 4

    def __post_init__(self) -> None:
        for name in ("nodes", "depth", "top_k"):
            if not is_int(getattr(self, name)):
                raise ValueError(f"a dynamic tree's {name} must be an integer, got {getattr(self, name)!r}")
        if not 1 <= self.nodes <= MAX_TREE_NODES:
            raise ValueError(f"a dynamic tree verifies 1..{MAX_TREE_NODES} nodes, got {self.nodes}")
        if not 1 <= self.depth <= self.nodes:
            raise ValueError(f"a dynamic tree's depth must be in [1, nodes={self.nodes}], got {self.depth}")
        if not 1 <= self.top_k <= MAX_TREE_TOP_K:
            raise ValueError(f"a dynamic tree's top_k must be in [1, {MAX_TREE_TOP_K}], got {self.top_k}")

    @classmethod
    def parse(cls, text: str) -> DynamicTree:
        """``"dynamic"``, ``"dynamic:24"``, ``"dynamic:24:8"`` or ``"dynamic:24:8:4"``."""
        head, *numbers = text.strip().split(":")
        if head != "dynamic" or len(numbers) > 3:
            raise ValueError(f"a dynamic tree is dynamic[:NODES[:DEPTH[:TOP_K]]], got {text!r}")
        try:
            values = [int(x) for x in numbers]
        except ValueError:
            raise ValueError(f"a dynamic tree is dynamic[:NODES[:DEPTH[:TOP_K]]] with integers, got {text!r}") from None
        nodes = values[0] if values else cls.nodes
        depth = values[1] if len(values) > 1 else min(cls.depth, nodes)
        return cls(nodes, depth, *values[2:])

    def __str__(self) -> str:
        return f"dynamic:{self.nodes}:{self.depth}:{self.top_k}"


TreeSpec = StaticTree | DynamicTree


def check_tree(value: Any) -> TreeSpec:
    """The one rule for a draft tree: a static shape (:func:`check_branching`) or a
    :class:`DynamicTree`, either also as its text form."""
    if isinstance(value, DynamicTree):
        return value
    if isinstance(value, str):
        if value.strip().startswith("dynamic"):
            return DynamicTree.parse(value)
        try:
            return parse_static_tree(value)
        except ValueError as e:
            raise ValueError(f"{e}; or a dynamic tree, dynamic[:NODES[:DEPTH[:TOP_K]]] (greedy only)") from None
    return check_branching(value)
