"""The domain tree of one topology (TAS spec sections 1 and 2.1).

Domains are small integers, numbered in the lexicographic order of their label values: the
domain number *is* the "then values ascending" tie-break of every Kueue order, and sorting a
list of domains by number puts it in topology-path order. Per-domain data lives in flat lists
indexed by that number; nothing per domain is an object.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from daemon.placement.model import HOSTNAME_LABEL, NodeInfo

NO_PARENT: Final = -1

# Per leaf: free capacity (allocatable minus used, summed over merged nodes) and the first
# node, whose labels and taints stand for the leaf when leaves are nodes.
LeafData = tuple[dict[str, int], NodeInfo]


class Topology:
    """The static tree built from one node list; reused for every pod set placed on it.

    `free` is indexed by domain number (empty for inner domains); `leaf_node` maps each leaf
    to the node that stands for it, `leaf_of` each node taking part to its leaf. `fills` is
    where `daemon.placement.counts` keeps the leaf counts of pod shapes already placed on
    this tree; `charge` keeps them current.
    """

    __slots__ = (
        "_leaf_of",
        "_node_paths",
        "by_level",
        "children",
        "fills",
        "free",
        "hostname_lowest",
        "leaf_node",
        "leaves",
        "levels",
        "parent",
        "tainted",
        "values",
    )

    def __init__(
        self,
        levels: tuple[str, ...],
        leaves: dict[tuple[str, ...], LeafData],
        node_paths: Mapping[str, tuple[str, ...]] | None = None,
    ) -> None:
        self.levels = levels
        self.hostname_lowest = levels[-1] == HOSTNAME_LABEL
        depth = len(levels)
        self.values: list[tuple[str, ...]] = []
        self.parent: list[int] = []
        self.children: list[list[int]] = []
        self.by_level: list[list[int]] = [[] for _ in range(depth)]
        self.free: list[dict[str, int]] = []
        self.leaf_node: dict[int, NodeInfo] = {}
        self.fills: dict[Any, Any] = {}
        self._node_paths = node_paths or {}
        self._leaf_of: dict[str, int] | None = None
        # Walking the sorted leaf paths creates every domain in pre-order, which for sorted
        # tuples is the lexicographic order of all their prefixes.
        chain = [NO_PARENT] * depth
        previous: tuple[str, ...] = ()
        for path in sorted(leaves):
            shared = 0
            while shared < len(previous) and path[shared] == previous[shared]:
                shared += 1
            for level in range(shared, depth):
                domain = len(self.values)
                parent = chain[level - 1] if level else NO_PARENT
                self.values.append(path if level == depth - 1 else path[: level + 1])
                self.parent.append(parent)
                self.children.append([])
                self.by_level[level].append(domain)
                if parent != NO_PARENT:
                    self.children[parent].append(domain)
                chain[level] = domain
                if level == depth - 1:
                    free, node = leaves[path]
                    self.free.append(free)
                    self.leaf_node[domain] = node
                else:
                    self.free.append({})
            previous = path
        self.leaves: list[int] = self.by_level[-1]
        self.tainted = any(node.taints for node in self.leaf_node.values())

    @property
    def leaf_of(self) -> dict[str, int]:
        """Each node taking part -> its leaf; made on first use (a one-off placement never
        asks)."""
        if self._leaf_of is None:
            at = {self.values[leaf]: leaf for leaf in self.leaves}
            self._leaf_of = {name: at[path] for name, path in self._node_paths.items()}
        return self._leaf_of

    def charge(self, leaf: int, requests: Mapping[str, int]) -> None:
        """Take one pod's `requests` off `leaf`'s free room (a pod bound after the tree was
        built); the cached counts of every shape see the leaf as changed."""
        free = self.free[leaf]
        for name, amount in requests.items():
            free[name] = free.get(name, 0) - amount
        free["pods"] = free.get("pods", 0) - 1
        for fill in self.fills.values():
            fill.dirty.add(leaf)

    @property
    def depth(self) -> int:
        return len(self.levels)

    def domain_id(self, domain: int) -> str:
        """Kueue's domain id: the hostname alone for a hostname leaf, else the values joined
        by ","."""
        path = self.values[domain]
        if self.hostname_lowest and len(path) == len(self.levels):
            return path[-1]
        return ",".join(path)

    def subtree(self, roots: Iterable[int]) -> list[int]:
        """Every domain under `roots`, the roots included."""
        found: list[int] = []
        stack = list(roots)
        children = self.children
        while stack:
            domain = stack.pop()
            found.append(domain)
            stack.extend(children[domain])
        return found


def build_topology(levels: Sequence[str], nodes: Iterable[NodeInfo]) -> Topology:
    """The tree of the nodes that take part: Ready, schedulable and labelled at every level
    (Kueue's filter). With a hostname lowest level each hostname is a leaf (nodes sharing a
    hostname label merge into the first one's path); otherwise nodes with the same label tuple
    merge into one leaf whose capacity is their sum."""
    levels = tuple(levels)
    hostname_lowest = levels[-1] == HOSTNAME_LABEL
    leaf_path: dict[str, tuple[str, ...]] = {}
    node_paths: dict[str, tuple[str, ...]] = {}
    leaves: dict[tuple[str, ...], LeafData] = {}
    for node in nodes:
        if not node.ready or node.unschedulable:
            continue
        labels = node.labels
        try:
            path = tuple([labels[level] for level in levels])
        except KeyError:
            continue
        if hostname_lowest:
            path = leaf_path.setdefault(path[-1], path)
        node_paths[node.name] = path
        entry = leaves.get(path)
        if entry is None:
            free = dict(node.allocatable)
            leaves[path] = (free, node)
        else:
            free = entry[0]
            for name, amount in node.allocatable.items():
                free[name] = free.get(name, 0) + amount
        for name, amount in node.used.items():
            free[name] = free.get(name, 0) - amount
    return Topology(levels, leaves, node_paths)
