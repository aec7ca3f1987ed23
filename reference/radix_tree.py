"""The paged radix tree (spec TREE-1..TREE-6).

Each namespace has its own root (NS-1), so two adapters never share a node. A node's key is a run
of whole pages of tokens; children are keyed by their first page. A node may hold pages on the
device tier, the host tier, or both; presence on a tier is closed under ancestors (HOST-1).

Keys are kept as ``array("Q")``: eight bytes a token, where a tuple would keep a pointer and an
int object for each (the spec's bound on tokens, below 2**63, fits the word).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field

from kvconf.reference.tiers import DEVICE, Tier

TOKEN = "Q"  # the array type code of a token in a key and in a checked query


def first_page(tokens: array, start: int, page_size: int) -> bytes:
    """The page of ``tokens`` (a ``TOKEN`` array) at ``start`` as its parent's children are
    keyed by it: the page's words as bytes, hashed and compared at C speed, with no int object
    made per token (equal pages, equal bytes)."""
    return tokens[start : start + page_size].tobytes()


@dataclass(slots=True, eq=False)
class Node:
    id: int
    namespace: int
    parent: Node | None = field(repr=False)
    key: array  # the tokens of its pages, ``TOKEN`` words
    device: tuple[int, ...] | None  # page ids, one per page of the key; None: not on the tier
    host: tuple[int, ...] | None
    hashes: tuple[int, ...]  # block hash of each page of the key (EVENT-4)
    seq: int
    device_access: int = 0
    host_access: int = 0
    device_ref: int = 0
    host_ref: int = 0
    pending: int | None = None
    keys: Sequence[bytes] = ()  # L3 rolling key of each page (L3-1)
    # Keyed by the first page of the child's key (``first_page``).
    children: dict[bytes, Node] = field(default_factory=dict, repr=False)

    @property
    def is_root(self) -> bool:
        return self.parent is None

    def pages(self, tier: Tier) -> tuple[int, ...] | None:
        return self.device if tier is DEVICE else self.host

    def ref(self, tier: Tier) -> int:
        return self.device_ref if tier is DEVICE else self.host_ref

    def access(self, tier: Tier) -> int:
        return self.device_access if tier is DEVICE else self.host_access

    def last_hash(self) -> int | None:
        """Hash of this node's last block: the parent hash of its children's first block."""
        node: Node | None = self
        while node is not None and not node.hashes:
            node = node.parent
        return node.hashes[-1] if node is not None else None

    def path(self) -> list[Node]:
        """Ancestors from the root down to this node, both included."""
        out: list[Node] = []
        node: Node | None = self
        while node is not None:
            out.append(node)
            node = node.parent
        out.reverse()
        return out


def common_pages(key: array, tokens: array, start: int, page_size: int) -> int:
    """Number of whole pages of ``key`` equal to ``tokens[start:]`` (both ``TOKEN`` arrays)."""
    limit = min(len(key), len(tokens) - start) // page_size
    span = limit * page_size
    if key[:span] == tokens[start : start + span]:  # the usual case: all of them
        return limit
    n = 0
    while n < limit:
        a = n * page_size
        if key[a : a + page_size] != tokens[start + a : start + a + page_size]:
            break
        n += 1
    return n


@dataclass(slots=True)
class Step:
    """One node on a walk, and how many of its pages the query covers."""

    node: Node
    pages: int
    start: int  # token offset of the node's key in the query


def walk(root: Node, tokens: array, page_size: int) -> list[Step]:
    """Nodes the query (a ``TOKEN`` array) runs through below ``root``, without changing
    anything (TREE-2)."""
    steps: list[Step] = []
    node, pos = root, 0
    while pos + page_size <= len(tokens):
        child = node.children.get(first_page(tokens, pos, page_size))
        if child is None:
            break
        if tokens[pos : pos + len(child.key)] == child.key:  # the usual case: all of it
            k = len(child.key) // page_size
        else:
            k = common_pages(child.key, tokens, pos, page_size)
        steps.append(Step(child, k, pos))
        if k * page_size < len(child.key):
            break
        node, pos = child, pos + len(child.key)
    return steps
