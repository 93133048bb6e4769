"""The topology tree (block → rack → host by default) with capacity and usage per domain.

Kept incrementally: a node joining, leaving or changing moves only its own contribution up
its path, and a pod binding or finishing moves only its requests. A leaf domain's usage is
the usage of its nodes (`node_used`, usually one node per leaf) and is not stored a second
time: every bind and finish would otherwise pay for two copies of the same amounts. Domain
ids are the label values from the widest level down, joined by ``,`` as Kueue does,
prefixed with the cluster: ``cluster/b1,r1,h1``. Nodes take part only when Ready,
schedulable and labelled at every level (Kueue's rule); pods on other nodes are still
charged to those nodes, so a node that becomes Ready later brings its true usage with it.
"""

from __future__ import annotations

from typing import Final

import msgspec

from events.index import reindex
from events.objects import TERMINAL_PHASES, Node, Pod

DEFAULT_LEVELS: Final = (
    "cloud.provider.com/topology-block",
    "cloud.provider.com/topology-rack",
    "kubernetes.io/hostname",
)

Amounts = dict[str, int]


def _add(table: dict[str, Amounts], domain: str, amounts: Amounts, sign: int) -> None:
    """Add `amounts` (times `sign`) into ``table[domain]``; zero entries and empty maps vanish
    so that equal usage always has one representation."""
    current = table.get(domain)
    if current is None:
        current = table[domain] = {}
    for name, value in amounts.items():
        updated = current.get(name, 0) + sign * value
        if updated:
            current[name] = updated
        else:
            current.pop(name, None)
    if not current:
        del table[domain]


def add_pod(table: dict[str, Amounts], domain: str, requests: Amounts, sign: int) -> None:
    """`_add` of one pod's requests plus its ``pods: 1``, in one pass (the hot path)."""
    current = table.get(domain)
    if current is None:
        current = table[domain] = {}
    for name, value in requests.items():
        updated = current.get(name, 0) + sign * value
        if updated:
            current[name] = updated
        else:  # pop: a zero request (``nvidia.com/gpu: 0``) may never have been stored
            current.pop(name, None)
    pods = current.get("pods", 0) + sign
    if pods:
        current["pods"] = pods
    else:
        del current["pods"]
        if not current:
            del table[domain]


def charge_of(cluster: str, pod: Pod | None) -> tuple[str, Amounts] | None:
    """What a pod takes from its node, as (node key, requests; plus one `pods`): bound and not
    terminal pods take their requests, other pods nothing (None)."""
    if pod is None or not pod.node_name or pod.phase in TERMINAL_PHASES:
        return None
    return f"{cluster}//{pod.node_name}", pod.requests


class Topology(msgspec.Struct):
    levels: tuple[str, ...] = DEFAULT_LEVELS
    # Participating nodes: node key -> the domain ids on its path, widest first, leaf last.
    paths: dict[str, tuple[str, ...]] = {}
    # The allocatable each participating node contributed when it joined.
    node_capacity: dict[str, Amounts] = {}
    # Usage per node key, for every node a bound pod names (participating or not).
    node_used: dict[str, Amounts] = {}
    capacity: dict[str, Amounts] = {}
    # Usage of the domains above the leaves; a leaf's is its nodes' `node_used` (`used_of`).
    used: dict[str, Amounts] = {}
    members: dict[str, int] = {}
    # Leaf domain -> the participating nodes under it (one, unless levels stop above hosts).
    leaf_nodes: dict[str, set[str]] = {}
    # node key -> keys of the pods charged to it. (What each pod takes is not kept a second
    # time: the caller's previous version of the pod says it, see `charge_pod`.)
    node_pods: dict[str, set[str]] = {}

    # -- queries ----------------------------------------------------------------------------

    def used_of(self, domain: str) -> Amounts:
        """Usage of any domain, leaves included (a new dict)."""
        nodes = self.leaf_nodes.get(domain)
        if nodes is None:
            return dict(self.used.get(domain, {}))
        used: Amounts = {}
        node_used = self.node_used
        for node in nodes:
            for name, value in node_used.get(node, {}).items():
                used[name] = used.get(name, 0) + value
        return used

    def domain_usage(self) -> dict[str, Amounts]:
        """Usage of every domain that has any, leaves included: what `used` would hold if it
        kept the leaves too."""
        usage = {domain: dict(amounts) for domain, amounts in self.used.items()}
        for leaf in self.leaf_nodes:
            used = self.used_of(leaf)
            if used:
                usage[leaf] = used
        return usage

    def free(self, domain: str) -> Amounts:
        """Capacity minus usage of a domain (negative where it is overcommitted)."""
        free = dict(self.capacity.get(domain, {}))
        for name, value in self.used_of(domain).items():
            free[name] = free.get(name, 0) - value
        return free

    def pods_on(self, node_key: str) -> list[str]:
        """Keys of the bound, non-terminal pods on a node, sorted."""
        return sorted(self.node_pods.get(node_key, ()))

    def leaf_of(self, node_key: str) -> str | None:
        path = self.paths.get(node_key)
        return path[-1] if path else None

    def domains_at(self, level: int) -> list[str]:
        """Domain ids at depth `level` (0 = widest), sorted."""
        return sorted({path[level] for path in self.paths.values()})

    # -- changes ----------------------------------------------------------------------------

    def path_for(self, cluster: str, node: Node) -> tuple[str, ...] | None:
        """The node's domain path, or None when it does not take part in the tree."""
        if not node.ready or node.unschedulable or node.deletion_ts is not None:
            return None
        values: list[str] = []
        for level in self.levels:
            value = node.labels.get(level)
            if value is None:
                return None
            values.append(value)
        return tuple(f"{cluster}/{','.join(values[: i + 1])}" for i in range(len(values)))

    def set_node(self, cluster: str, node_key: str, node: Node | None) -> bool:
        """Account for a node being added, changed or (``node=None``) removed. Returns whether
        any capacity moved."""
        new_path = self.path_for(cluster, node) if node is not None else None
        new_capacity = node.allocatable if node is not None and new_path is not None else None
        old_path = self.paths.get(node_key)
        if old_path == new_path and self.node_capacity.get(node_key) == new_capacity:
            return False
        used = self.node_used.get(node_key, {})
        if old_path is not None:
            old_capacity = self.node_capacity.pop(node_key)
            del self.paths[node_key]
            for domain in old_path:
                _add(self.capacity, domain, old_capacity, -1)
                remaining = self.members[domain] - 1
                if remaining:
                    self.members[domain] = remaining
                else:
                    del self.members[domain]
            if used:
                for domain in old_path[:-1]:
                    _add(self.used, domain, used, -1)
        if new_path is not None and new_capacity is not None:
            self.paths[node_key] = new_path
            self.node_capacity[node_key] = new_capacity
            for domain in new_path:
                _add(self.capacity, domain, new_capacity, 1)
                self.members[domain] = self.members.get(domain, 0) + 1
            if used:
                for domain in new_path[:-1]:
                    _add(self.used, domain, used, 1)
        reindex(
            self.leaf_nodes,
            node_key,
            old_path[-1] if old_path else None,
            new_path[-1] if new_path else None,
        )
        return True

    def upgrade(self) -> None:
        """Bring a topology decoded from an older snapshot, which kept each leaf's usage in
        `used` and had no `leaf_nodes`, to the current representation."""
        if self.leaf_nodes or not self.paths:
            return
        for node_key, path in self.paths.items():
            self.leaf_nodes.setdefault(path[-1], set()).add(node_key)
        for leaf in self.leaf_nodes:
            self.used.pop(leaf, None)

    def charge_pod(self, cluster: str, pod_key: str, old: Pod | None, pod: Pod | None) -> bool:
        """Account for a pod changing from `old` to `pod` (either None: not there): bound and
        not terminal pods take their requests from their node (node keys are
        ``cluster//name``). `old` must be the version last passed as `pod` for this key, which
        the fold has at hand anyway; keeping a copy of every charge here cost a lookup at
        every pod event and more memory. Returns whether any usage moved."""
        before = old is not None and old.node_name != "" and old.phase not in TERMINAL_PHASES
        after = pod is not None and pod.node_name != "" and pod.phase not in TERMINAL_PHASES
        if before and after:
            # Most pod events (Running, readiness, a new resourceVersion) move nothing.
            if old.node_name == pod.node_name and old.requests == pod.requests:  # type: ignore[union-attr]
                return False
        elif not before and not after:
            return False
        old_node = new_node = None
        if before:
            old_node = f"{cluster}//{old.node_name}"  # type: ignore[union-attr]
            self._move(old_node, old.requests, -1)  # type: ignore[union-attr]
        if after:
            new_node = f"{cluster}//{pod.node_name}"  # type: ignore[union-attr]
            self._move(new_node, pod.requests, 1)  # type: ignore[union-attr]
        reindex(self.node_pods, pod_key, old_node, new_node)
        return True

    def _move(self, node: str, requests: Amounts, sign: int) -> None:
        add_pod(self.node_used, node, requests, sign)
        path = self.paths.get(node)
        if path is not None:
            used = self.used
            for domain in path[:-1]:  # the leaf's usage is node_used's
                add_pod(used, domain, requests, sign)
