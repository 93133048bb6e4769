"""Phase 1: how many pods, slices and leaders fit in every domain (TAS spec 2.2-2.4, 9).

The per-domain numbers are five flat integer lists indexed by domain: Kueue's `podCount`,
`podCountWithLeader`, `sliceCount`, `sliceCountWithLeader` and `leaderCount`. Phase 2
overwrites them in place with what it assigns, exactly as Kueue reuses its domain state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from daemon.placement.affinity import Terms, admitted
from daemon.placement.model import NodeInfo, Toleration
from daemon.placement.reasons import Exclusions
from daemon.placement.tree import NO_PARENT, Topology

# Kueue counts pods in an int32.
MAX_PODS: Final = 2**31 - 1
SCHEDULING_EFFECTS: Final = frozenset({"NoSchedule", "NoExecute"})

Requests = Sequence[tuple[str, int]]


class Counts:
    """The per-domain numbers of one placement run."""

    __slots__ = ("leader", "pod", "pod_wl", "slice", "slice_wl")

    def __init__(self, size: int) -> None:
        self.pod = [0] * size
        self.pod_wl = [0] * size
        self.slice = [0] * size
        self.slice_wl = [0] * size
        self.leader = [0] * size

    def copy(self) -> Counts:
        clone = Counts(0)
        clone.pod = self.pod.copy()
        clone.pod_wl = self.pod_wl.copy()
        clone.slice = self.slice.copy()
        clone.slice_wl = self.slice_wl.copy()
        clone.leader = self.leader.copy()
        return clone

    def arrays(self) -> tuple[list[int], list[int], list[int], list[int], list[int]]:
        """pod, pod_wl, slice, slice_wl and leader, for the loops that bind them to locals."""
        return self.pod, self.pod_wl, self.slice, self.slice_wl, self.leader

    def saved(self, domains: Sequence[int]) -> list[tuple[int, int, int, int, int, int]]:
        """The numbers of `domains`, to put back with `restore`."""
        pod, pod_wl, sl, sl_wl, leader = self.arrays()
        return [(d, pod[d], pod_wl[d], sl[d], sl_wl[d], leader[d]) for d in domains]

    def restore(self, saved: Sequence[tuple[int, int, int, int, int, int]]) -> None:
        pod, pod_wl, sl, sl_wl, leader = self.arrays()
        for d, p, pw, s, sw, lc in saved:
            pod[d], pod_wl[d], sl[d], sl_wl[d], leader[d] = p, pw, s, sw, lc


def pod_requests(requests: Mapping[str, int]) -> list[tuple[str, int]]:
    """The per-pod request vector plus ``pods: 1``, zero requests dropped (they impose no
    limit), sorted by name so that ties on the limiting resource go to the smaller name."""
    vector = dict(requests)
    vector["pods"] = vector.get("pods", 0) + 1
    return sorted((name, amount) for name, amount in vector.items() if amount > 0)


def pods_that_fit(requests: Requests, free: Mapping[str, int]) -> tuple[int, str]:
    """How many pods fit in `free` and the limiting resource (`CountInWithLimitingResource`):
    a resource that is absent or not positive fits none; the smallest quotient wins."""
    best = -1
    limiting = ""
    for name, amount in requests:
        have = free.get(name, 0)
        fit = have // amount if have > 0 else 0
        if best < 0 or fit < best:
            best = fit
            limiting = name
    return min(max(best, 0), MAX_PODS), limiting


def untolerated_taint(node: NodeInfo, tolerations: Sequence[Toleration]) -> str | None:
    """The first NoSchedule/NoExecute taint no toleration matches, as Kueue prints it."""
    for taint in node.taints:
        if taint.effect not in SCHEDULING_EFFECTS:
            continue
        if any(
            _tolerates(toleration, taint.key, taint.value, taint.effect)
            for toleration in tolerations
        ):
            continue
        return (
            f"{taint.key}={taint.value}:{taint.effect}"
            if taint.value
            else f"{taint.key}:{taint.effect}"
        )
    return None


# What `excluded_by` says of a node that a nodeSelector or required node affinity rules out
# (a taint is always printed with its ``:Effect``, so the two never meet).
SELECTOR: Final = "nodeSelector"


def excluded_by(
    node: NodeInfo,
    tolerations: Sequence[Toleration],
    selector: Mapping[str, str],
    affinity: Terms,
) -> str | None:
    """Why `node` takes no pod with these tolerations, nodeSelector and required node
    affinity: the first taint none tolerates (`untolerated_taint`), or `SELECTOR` when the
    labels do not match (Kueue matches nodeSelector and required node affinity as one, and
    reports both as nodeSelector exclusions); None when it may take them."""
    if node.taints:
        taint = untolerated_taint(node, tolerations)
        if taint is not None:
            return taint
    labels = node.labels
    if any(labels.get(key) != value for key, value in selector.items()):
        return SELECTOR
    if affinity and not admitted(affinity, labels, node.name):
        return SELECTOR
    return None


def _tolerates(toleration: Toleration, key: str, value: str, effect: str) -> bool:
    if toleration.effect and toleration.effect != effect:
        return False
    if toleration.key and toleration.key != key:
        return False
    return toleration.operator == "Exists" or toleration.value == value


class CountRequest:
    """What phase 1 needs to know about the pod set (and its leader, if any)."""

    __slots__ = (
        "assumed",
        "inner",
        "leader",
        "node_affinity",
        "node_selector",
        "requests",
        "slice_level",
        "slice_size",
        "tolerations",
    )

    def __init__(
        self,
        requests: Requests,
        leader: Requests | None,
        slice_size: int,
        slice_level: int,
        inner: Mapping[int, int],
        tolerations: Sequence[Toleration],
        node_selector: Mapping[str, str],
        assumed: Mapping[int, Mapping[str, int]],
        node_affinity: Terms = (),
    ) -> None:
        self.requests = requests
        self.leader = leader
        self.slice_size = slice_size
        self.slice_level = slice_level
        self.inner = inner
        self.tolerations = tolerations
        self.node_selector = node_selector
        self.node_affinity = node_affinity
        self.assumed = assumed


def fill_counts(topo: Topology, request: CountRequest) -> tuple[Counts, Exclusions]:
    """Phase 1: leaf counts, then the aggregation up the tree (`fillInCounts`).

    A gang-scheduling pass places many small gangs of a few shapes on one tree. The counts of
    a shape without a leader or pods assumed earlier in the same request are kept on the tree
    (`Topology.fills`) and brought up to date from the leaves charged since: a few leaves and
    their ancestors instead of every leaf of the cluster. Callers get copies (phase 2 writes
    into them)."""
    if request.leader is not None or request.assumed:
        return _fresh(topo, request)
    key = (
        tuple(request.requests),
        request.slice_size,
        request.slice_level,
        tuple(sorted(request.inner.items())),
        tuple(request.tolerations),
        tuple(sorted(request.node_selector.items())),
        request.node_affinity,
    )
    fill: _Fill | None = topo.fills.get(key)
    if fill is None:
        fill = topo.fills[key] = _Fill(topo, request)
    elif fill.dirty:
        fill.refresh(topo)
    return fill.counts.copy(), fill.exclusions.copy()


def _fresh(
    topo: Topology, request: CountRequest, limited: dict[int, str] | None = None
) -> tuple[Counts, Exclusions]:
    counts = Counts(len(topo.values))
    exclusions = Exclusions(len(topo.leaves))
    _fill_leaves(topo, request, counts, exclusions, limited)
    _aggregate(
        topo,
        counts,
        request.slice_size,
        request.slice_level,
        request.inner,
        request.leader is not None,
    )
    return counts, exclusions


class _Fill:
    """One shape's phase-1 numbers on a tree, and the leaves charged since they were right."""

    __slots__ = ("counts", "dirty", "exclusions", "limited", "request")

    def __init__(self, topo: Topology, request: CountRequest) -> None:
        self.request = request
        # Leaves that took no pod for want of a resource, and which one: a charge can move a
        # leaf into or out of that count. Leaves excluded by taint or selector never change.
        self.limited: dict[int, str] = {}
        self.counts, self.exclusions = _fresh(topo, request, self.limited)
        self.dirty: set[int] = set()

    def refresh(self, topo: Topology) -> None:
        request, counts, exclusions, limited = (
            self.request,
            self.counts,
            self.exclusions,
            self.limited,
        )
        pod, pod_wl, sl, sl_wl = counts.pod, counts.pod_wl, counts.slice, counts.slice_wl
        slice_size, slice_level = request.slice_size, request.slice_level
        lowest = topo.depth - 1
        parent, free_of = topo.parent, topo.free
        above: set[int] = set()
        for leaf in self.dirty:
            if pod[leaf] == 0 and leaf not in limited:
                continue  # excluded by a taint or the selector: no charge changes that
            fit, limiting = pods_that_fit(request.requests, free_of[leaf])
            was = limited.pop(leaf, None)
            if was is not None:
                exclusions.remove_resource(was)
            if fit == 0:
                limited[leaf] = limiting
                exclusions.add_resource(limiting)
            pod[leaf] = pod_wl[leaf] = fit
            if slice_level == lowest:
                sl[leaf] = sl_wl[leaf] = fit // slice_size
            domain = parent[leaf]
            while domain != NO_PARENT and domain not in above:
                above.add(domain)
                domain = parent[domain]
        self.dirty.clear()
        values, children, inner = topo.values, topo.children, request.inner
        for domain in sorted(above, key=lambda d: -len(values[d])):
            level = len(values[domain]) - 1
            unit = inner.get(level + 1, 1)
            _roll_up(
                counts, domain, children[domain], unit, level == slice_level, slice_size, False
            )


def _fill_leaves(
    topo: Topology,
    request: CountRequest,
    counts: Counts,
    exclusions: Exclusions,
    limited: dict[int, str] | None = None,
) -> None:
    """`limited`, when given, gets each leaf that takes no pod for want of a resource."""
    pod, pod_wl, leader = counts.pod, counts.pod_wl, counts.leader
    requests, leader_requests, assumed = request.requests, request.leader, request.assumed
    selector, affinity = request.node_selector, request.node_affinity
    # Kueue filters nodes per pod set only when leaves are nodes.
    check_nodes = topo.hostname_lowest and (bool(selector) or bool(affinity) or topo.tainted)
    leaf_node, free_of = topo.leaf_node, topo.free
    for leaf in topo.leaves:
        if check_nodes:
            why = excluded_by(leaf_node[leaf], request.tolerations, selector, affinity)
            if why == SELECTOR:
                exclusions.node_selector += 1
                continue
            if why is not None:
                exclusions.add_taint(why)
                continue
        free = free_of[leaf]
        used = assumed.get(leaf) if assumed else None
        if used:
            free = dict(free)
            for name, amount in used.items():
                free[name] = free.get(name, 0) - amount
        fit, limiting = pods_that_fit(requests, free)
        pod[leaf] = fit
        pod_wl[leaf] = fit
        if fit == 0:
            exclusions.add_resource(limiting)
            if limited is not None:
                limited[leaf] = limiting
        if leader_requests is None:
            continue
        if pods_that_fit(leader_requests, free)[0] > 0:
            leader[leaf] = 1
            rest = dict(free)
            for name, amount in leader_requests:
                rest[name] = rest.get(name, 0) - amount
            pod_wl[leaf] = pods_that_fit(requests, rest)[0]


def _aggregate(
    topo: Topology,
    counts: Counts,
    slice_size: int,
    slice_level: int,
    inner: Mapping[int, int],
    leader_required: bool,
) -> None:
    """`fillInCountsHelper`, bottom-up level by level instead of recursively."""
    lowest = topo.depth - 1
    if slice_level == lowest:
        sl, sl_wl, pod, pod_wl = counts.slice, counts.slice_wl, counts.pod, counts.pod_wl
        for leaf in topo.leaves:
            sl[leaf] = pod[leaf] // slice_size
            sl_wl[leaf] = pod_wl[leaf] // slice_size
    children = topo.children
    for level in range(lowest - 1, -1, -1):
        unit = inner.get(level + 1, 1)
        at_slice_level = level == slice_level
        for domain in topo.by_level[level]:
            _roll_up(
                counts, domain, children[domain], unit, at_slice_level, slice_size, leader_required
            )


def reaggregate(
    topo: Topology,
    counts: Counts,
    roots: Sequence[int],
    slice_size: int,
    slice_level: int,
    leader_required: bool,
    shallow: bool = False,
) -> None:
    """Recompute the aggregates of `roots` and everything under them from the leaves, without
    inner-layer rounding, as BalancedPlacement does after pruning; `shallow` recomputes only
    the roots, from their children as they stand."""
    by_level: dict[int, list[int]] = {}
    for domain in roots if shallow else topo.subtree(roots):
        by_level.setdefault(len(topo.values[domain]) - 1, []).append(domain)
    lowest = topo.depth - 1
    for level in sorted(by_level, reverse=True):
        at_slice_level = level == slice_level
        for domain in by_level[level]:
            if level < lowest:
                kids = topo.children[domain]
                _roll_up(counts, domain, kids, 1, at_slice_level, slice_size, leader_required)
            elif at_slice_level:
                counts.slice[domain] = counts.pod[domain] // slice_size
                counts.slice_wl[domain] = counts.pod_wl[domain] // slice_size


def _roll_up(
    counts: Counts,
    domain: int,
    kids: Sequence[int],
    unit: int,
    at_slice_level: bool,
    slice_size: int,
    leader_required: bool,
) -> None:
    """One parent's numbers from its children's. A child at an inner slice layer (`unit` > 1)
    contributes only whole inner slices. With a leader, the with-leader numbers subtract the
    smallest leader penalty among leader-capable children."""
    pod, pod_wl, sl, sl_wl, leader = counts.arrays()
    if not leader_required:
        # Without a leader every with-leader number equals its plain one.
        total = sum(pod[k] - pod[k] % unit for k in kids)
        slices = total // slice_size if at_slice_level else sum(sl[k] for k in kids)
        pod[domain] = pod_wl[domain] = total
        sl[domain] = sl_wl[domain] = slices
        return
    total = slices = 0
    min_diff = min_slice_diff = MAX_PODS
    contributes = False
    most_leaders = 0
    for kid in kids:
        kid_pod = pod[kid]
        kid_wl = pod_wl[kid]
        if unit > 1:
            kid_pod -= kid_pod % unit
            kid_wl -= kid_wl % unit
        total += kid_pod
        slices += sl[kid]
        if leader[kid] > 0:
            contributes = True
            min_diff = min(min_diff, kid_pod - kid_wl)
            min_slice_diff = min(min_slice_diff, sl[kid] - sl_wl[kid])
            most_leaders = max(most_leaders, leader[kid])
    total_wl = total - min_diff if contributes else 0
    slices_wl = slices - min_slice_diff if contributes else 0
    if at_slice_level:
        slices = total // slice_size
        slices_wl = total_wl // slice_size
    pod[domain] = total
    pod_wl[domain] = total_wl
    sl[domain] = slices
    sl_wl[domain] = slices_wl
    leader[domain] = most_leaders
