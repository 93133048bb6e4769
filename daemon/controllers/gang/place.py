"""Where a gang's pods go: the placement library run on the folded topology, and its
per-domain counts expanded onto concrete nodes.

Free capacity is each node's allocatable less `Topology.node_used` (every bound, non-terminal
pod, kbatchd's or not) less the bindings decided that the watch has not shown yet: each
bind's expectation (`events.expectations`) names its node and lasts until the pod is seen
bound, failed or gone, and charges its requests there meanwhile (`State.assumed`, like
kube-scheduler's assumed pods), so there is no moment when a decided binding takes no room.

Decisions of one reconcile pass are all made from the same state, before any of them is
folded. A `Pass` remembers what the pass already admitted, so that two gangs decided in one
pass never both take the same room; a replay that folds each decision before deciding the
next sees those bindings as in-flight intents instead, and decides the same. It also builds
each cluster's node list and placement tree once per pass instead of once per gang (the
tree takes ~20 ms at 10k nodes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from daemon.controllers.gang.projection import group_priority
from daemon.controllers.gang.spec import TopologyRequest
from daemon.placement import (
    HOSTNAME_LABEL,
    NodeInfo,
    PodSetRequest,
    TopologyAssignment,
    build_topology,
    place_on,
)
from daemon.placement import Topology as Tree
from daemon.placement.counts import SCHEDULING_EFFECTS, excluded_by
from daemon.placement.validation import first_problem
from events.objects import Node, Pod
from events.quantity import add_into
from events.state import State

Amounts = dict[str, int]
# Label values a placement is confined to (an anchor), as sorted (label, value) pairs.
Restrict = tuple[tuple[str, str], ...]
# Pod -> node name.
Slots = list[tuple[Pod, str]]


def demand(pods: Sequence[Pod]) -> Amounts:
    """What `pods` request together, ``pods`` included."""
    total: Amounts = {}
    for pod in pods:
        _add(total, pod.requests)
    return total


def _lacks(name: str, amount: int, free: Mapping[str, int]) -> bool:
    """Whether `free` has less of resource `name` than `amount`. A node list without a ``pods``
    allocatable sets no pod limit, so ``pods`` counts only when some node states it."""
    return amount > 0 and free.get(name, 0) < amount and (name != "pods" or name in free)


def short_of(need: Mapping[str, int], free: Mapping[str, int]) -> list[str]:
    """The resources `free` has less of than `need` (sorted): what a reason names."""
    return sorted(name for name, amount in need.items() if _lacks(name, amount, free))


def fits(need: Mapping[str, int], free: Mapping[str, int]) -> bool:
    """Whether `free` holds all of `need`: `short_of` is empty, without listing (the queue
    asks this of every waiting group and domain it looks at)."""
    for name, amount in need.items():  # noqa: SIM110 - a generator for all() costs more here
        if _lacks(name, amount, free):
            return False
    return True


def _add(into: Amounts, requests: Mapping[str, int], pods: int = 1) -> None:
    for name, amount in requests.items():
        into[name] = into.get(name, 0) + amount * pods
    into["pods"] = into.get("pods", 0) + pods


def add_free(into: Amounts, node: NodeInfo) -> None:
    """Add a node's free room into `into`: allocatable less used, each resource counted down
    to zero and never below. An overcommitted node (its allocatable shrank under running
    pods) has no room, and takes none from its neighbours in a sum."""
    used = node.used
    for name, amount in node.allocatable.items():
        into[name] = into.get(name, 0) + max(0, amount - used.get(name, 0))


def eligible(node: NodeInfo, levels: Sequence[str]) -> bool:
    """Nodes the placement tree takes in: Ready, schedulable and labelled at every level.
    Which of them a given member may go to is `admits`."""
    return node.ready and not node.unschedulable and all(level in node.labels for level in levels)


def admits(node: NodeInfo, pod: Pod) -> bool:
    """Whether `pod`'s nodeSelector and required node affinity match `node` and its
    tolerations cover every taint of the node that keeps pods away (NoSchedule, NoExecute):
    the test placement makes of each leaf (`excluded_by`), made of one node."""
    return excluded_by(node, pod.tolerations, pod.node_selector, pod.node_affinity) is None


class PlacedTree:
    """A placement tree plus the node lists its domains expand to."""

    def __init__(self, levels: tuple[str, ...], infos: list[NodeInfo]) -> None:
        self.levels = levels
        self.infos = infos
        self.tree: Tree = build_topology(levels, infos)
        self.tainted = any(t.effect in SCHEDULING_EFFECTS for info in infos for t in info.taints)
        self._by_values: dict[tuple[str, ...], dict[tuple[str, ...], list[NodeInfo]]] = {}

    def take(self, node: str, requests: Mapping[str, int]) -> None:
        """Charge a pod bound to `node` to its leaf's free room, as a rebuilt tree would show
        it (rebuilding costs a full pass over the nodes; this is a few dict updates)."""
        leaf = self.tree.leaf_of.get(node)
        if leaf is not None:
            self.tree.charge(leaf, requests)

    def nodes_in(self, assignment_levels: tuple[str, ...]) -> dict[tuple[str, ...], list[NodeInfo]]:
        index = self._by_values.get(assignment_levels)
        if index is None:
            index = {}
            for info in self.infos:  # sorted by name, so expansion is deterministic
                if eligible(info, self.levels):
                    values = tuple(info.labels[level] for level in assignment_levels)
                    index.setdefault(values, []).append(info)
            self._by_values[assignment_levels] = index
        return index


class _Nodes:
    """A cluster's nodes, sorted by name, and the room each has taken."""

    __slots__ = ("by_name", "nodes", "used")

    def __init__(self, nodes: list[Node], used: dict[str, Amounts]) -> None:
        self.nodes = nodes
        self.by_name = {n.name: n for n in nodes}
        self.used = used


def _nodes_of(state: State, cluster: str) -> _Nodes:
    prefix = f"{cluster}//"
    nodes = sorted(
        (node for key, node in state.nodes.items() if key.startswith(prefix)),
        key=lambda n: n.name,
    )
    node_used = state.topology.node_used
    assumed = state.assumed
    nominated, pods = state.nominated, state.pods
    # Binds decided but not yet seen by the watch take room on the node they name
    # (`State.assumed`, kept with their expectations), so no decided bind is ever free room;
    # so does a preemptor's pending pod nominated to a node (`State.nominated`), so that no
    # other gang takes the room its preemption freed.
    used: dict[str, Amounts] = {}
    for node in nodes:
        key = prefix + node.name
        taken = dict(node_used.get(key, {}))
        charged = assumed.get(key)
        if charged:
            add_into(taken, charged)
        for pod_key in nominated.get(key, ()):
            pod = pods.get(pod_key)
            if pod is not None:
                _add(taken, pod.requests)
        used[node.name] = taken
    # So does the room a cross-cluster preemption holds for a workload not yet here.
    for claim in state.claims.values():
        if claim.cluster == cluster:
            _charge(used, claim.room)
    return _Nodes(nodes, used)


def _charge(used: dict[str, Amounts], room: Mapping[str, Amounts], sign: int = 1) -> None:
    for node, amounts in room.items():
        taken = used.get(node)
        if taken is not None:
            add_into(taken, dict(amounts), sign)


class ClusterView:
    """One cluster's nodes as placement sees them during one pass. They are read from the
    state on first use: most passes place nothing (their decisions are of groups already
    admitted whose pods changed), and the read walks every node (4.4 ms at 10,000 nodes)."""

    def __init__(self, state: State, cluster: str) -> None:
        self.state, self.cluster = state, cluster
        self._read: _Nodes | None = None
        self._levels = state.topology.levels
        self._lowest: tuple[int | None] | None = None
        # The group whose own nominations this view counts as free (`free_nominations`).
        self.freed_for: str | None = None
        self._reset()

    def _nodes(self) -> _Nodes:
        read = self._read
        if read is None:
            read = self._read = _nodes_of(self.state, self.cluster)
        return read

    @property
    def nodes(self) -> list[Node]:
        return self._nodes().nodes

    @property
    def used(self) -> dict[str, Amounts]:
        """Node name -> the room taken on it."""
        return self._nodes().used

    def lowest_priority(self) -> int | None:
        """The lowest priority any bound pod of the cluster has, its own or its PodGroup's
        (None without one): a gang at or below it has no one to preempt, which this answers
        once per pass instead of a scan per waiting gang."""
        if self._lowest is None:
            state, cluster = self.state, self.cluster
            pods, node_pods, groups = state.pods, state.topology.node_pods, state.podgroups
            lowest: int | None = None
            for node in self.nodes:
                for key in node_pods.get(f"{cluster}//{node.name}", ()):
                    pod = pods.get(key)
                    if pod is None:
                        continue
                    found = pod.priority
                    if pod.pod_group:
                        group = groups.get(f"{cluster}/{pod.namespace}/{pod.pod_group}")
                        if group is not None:
                            found = min(found, group_priority(group))
                    if lowest is None or found < lowest:
                        lowest = found
            self._lowest = (lowest,)
        return self._lowest[0]

    def _reset(self) -> None:
        self._infos: list[NodeInfo] | None = None
        self._rooms: dict[str | None, dict[tuple[str, ...], Amounts]] = {}
        self._trees: dict[tuple[tuple[str, ...], Restrict], PlacedTree] = {}

    def copy(self) -> ClusterView:
        """A view of its own to try what-ifs on (a preemption's victims gone): the same nodes
        and room, none of the caches."""
        other = object.__new__(ClusterView)
        other.state, other.cluster, other._levels = self.state, self.cluster, self._levels
        read = self._nodes()
        other._read = _Nodes(read.nodes, {name: dict(used) for name, used in read.used.items()})
        other._lowest = self._lowest
        other.freed_for = self.freed_for
        other._reset()
        return other

    def free_nominations(self, group: str, pods: Sequence[Pod]) -> ClusterView:
        """This view, or a copy of it, in which the room nominated to `pods` (the pending
        members of `group`) is free: a group is not kept out of the room held for it."""
        own = [(p, p.nominated) for p in pods if p.nominated]
        if not own or self.freed_for == group:
            return self
        other = self.copy()
        other.release(own)
        other.freed_for = group
        return other

    def release(self, slots: Slots) -> None:
        """Give back the room `slots` take (pods that are to go, or a group's own
        nominations): the reverse of `assume`, for a view's first use (caches are dropped)."""
        for pod, node in slots:
            used = self.used.get(node)
            if used is not None:
                _add(used, pod.requests, -1)
        self._reset()

    def hold(self, room: Mapping[str, Amounts], sign: int = 1) -> None:
        """Charge `room` (node name -> what is held there, ``pods`` included) as used: room
        promised to someone not yet placed (`sign` -1: given back to the one it is held for),
        for a view's first use (caches are dropped)."""
        _charge(self.used, room, sign)
        self._reset()

    def infos(self) -> list[NodeInfo]:
        """The nodes as placement input. Each one's `used` is the very dict in `self.used`,
        so what `assume` adds shows here without rebuilding the list."""
        if self._infos is None:
            self._infos = [
                NodeInfo(
                    name=node.name,
                    labels=node.labels,
                    allocatable=node.allocatable,
                    used=self.used[node.name],
                    ready=node.ready and node.deletion_ts is None,
                    unschedulable=node.unschedulable,
                    taints=node.taints,
                )
                for node in self.nodes
            ]
        return self._infos

    def tree(self, levels: tuple[str, ...], restrict: Restrict = ()) -> PlacedTree:
        key = (levels, restrict)
        placed = self._trees.get(key)
        if placed is None:
            infos = self.infos()
            if restrict:
                infos = [i for i in infos if all(i.labels.get(k) == v for k, v in restrict)]
            placed = self._trees[key] = PlacedTree(levels, infos)
        return placed

    def labels_of(self, node_name: str) -> dict[str, str] | None:
        node = self._nodes().by_name.get(node_name)
        return node.labels if node is not None else None

    def refusal(self, slots: Slots) -> str | None:
        """Why `slots` cannot all be bound as they stand, None when they can: a node gone, not
        Ready, cordoned, keeping a pod away, or without the room its pods there take
        together. (A gang's own binds decided earlier, checked again against the state now.)"""
        by_node: dict[str, list[Pod]] = {}
        for pod, node in slots:
            by_node.setdefault(node, []).append(pod)
        infos = {info.name: info for info in self.infos()}
        for name, pods in sorted(by_node.items()):
            info = infos.get(name)
            if info is None:
                return f"node {name} is gone"
            if not info.ready or info.unschedulable:
                return f"node {name} is not Ready or is cordoned"
            refused = next((pod for pod in pods if not admits(info, pod)), None)
            if refused is not None:
                return f"node {name} no longer admits pod {refused.name}"
            free: Amounts = {}
            add_free(free, info)
            short = short_of(demand(pods), free)
            if short:
                return f"node {name} lacks {', '.join(short)} for {len(pods)} pod(s)"
        return None

    def assume(self, slots: Slots) -> None:
        """Bindings this pass decided: later gangs of the pass see the room as taken."""
        for pod, node in slots:
            _add(self.used.setdefault(node, {}), pod.requests)
            for placed in self._trees.values():
                placed.take(node, pod.requests)
            labels = self.labels_of(node)
            if labels is None:
                continue
            for level, rooms in self._rooms.items():
                domain = domain_of(labels, self._levels, level)
                if domain is not None and domain in rooms:
                    _add(rooms[domain], pod.requests, -1)

    def room(self, level: str | None) -> dict[tuple[str, ...], Amounts]:
        """Free room per domain of `level` (None: the whole cluster, one domain ``()``),
        summed over the nodes a member may be bound to, each node counted down to zero and
        never below: an upper bound on what a gang confined to one domain can get, cheap to
        test a demand against before placing it. A domain is named by its values from the
        widest configured level down (`domain_of`)."""
        levels = self._levels
        rooms = self._rooms.get(level)
        if rooms is None:
            rooms = {}
            for info in self.infos():
                if not eligible(info, ()):
                    continue
                domain = domain_of(info.labels, levels, level)
                if domain is None:
                    continue
                add_free(rooms.setdefault(domain, {}), info)
            self._rooms[level] = rooms
        return rooms

    def free(self) -> Amounts:
        """The whole cluster's free room (see `room`)."""
        return self.room(None).get((), {})


def restrict_to(configured: tuple[str, ...], level: str, domain: tuple[str, ...]) -> Restrict:
    """The labels a placement is confined to for one domain of `level` (`domain_of`'s
    values, from the widest configured level down)."""
    keys = configured[: configured.index(level) + 1] if level in configured else (level,)
    return tuple(sorted(zip(keys, domain, strict=True)))


def domain_of(
    labels: Mapping[str, str], levels: tuple[str, ...], level: str | None
) -> tuple[str, ...] | None:
    """The domain of `level` a node with `labels` is in: its values from the widest configured
    level down to `level` (just its own value for a label that is not a level); None when it
    lacks one of them."""
    if level is None:
        return ()
    keys = levels[: levels.index(level) + 1] if level in levels else (level,)
    values = []
    for key in keys:
        value = labels.get(key)
        if value is None:
            return None
        values.append(value)
    return tuple(values)


def domain_with_room(
    need: Mapping[str, int], rooms: Mapping[tuple[str, ...], Amounts]
) -> tuple[str, ...] | None:
    """The first domain of `rooms` (see `ClusterView.room`) with room for `need`, if any."""
    return next((domain for domain, free in rooms.items() if fits(need, free)), None)


class Pass:
    """What every gang decision made from one state shares: each cluster's view, built on
    first use and charged by the admissions decided from it (`ClusterView.assume`)."""

    def __init__(self, state: State) -> None:
        self.state = state
        self._clusters: dict[str, ClusterView] = {}

    def cluster(self, name: str) -> ClusterView:
        view = self._clusters.get(name)
        if view is None:
            view = self._clusters[name] = ClusterView(self.state, name)
        return view


# -- placing one group --------------------------------------------------------------------------


def levels_for(configured: tuple[str, ...], request: TopologyRequest) -> tuple[str, ...]:
    """The topology to place on: the configured levels, or — when a PodGroup's scheduling
    constraint names a node label that is not one of them (upstream allows any label) — that
    label above the hostname."""
    key = request.required
    if key is None or key in configured:
        return configured
    return (key,) if key == HOSTNAME_LABEL else (key, HOSTNAME_LABEL)


def pod_set(
    name: str, count: int, requests: Amounts, request: TopologyRequest, model: Pod | None = None
) -> PodSetRequest:
    unconstrained = request.unconstrained or (
        request.required is None and request.preferred is None and request.slice_level is None
    )
    return PodSetRequest(
        name=name,
        count=count,
        requests=requests,
        required=request.required,
        preferred=request.preferred,
        unconstrained=unconstrained and request.required is None and request.preferred is None,
        slice_layers=((request.slice_level, request.slice_size),) if request.slice_level else (),
        tolerations=model.tolerations if model is not None else (),
        node_selector=dict(model.node_selector) if model is not None else {},
        node_affinity=model.node_affinity if model is not None else (),
    )


def describe(request: PodSetRequest) -> str:
    if request.required is not None:
        mode = f"required {request.required}"
    elif request.preferred is not None:
        mode = f"preferred {request.preferred}"
    else:
        mode = "unconstrained"
    if request.slice_layers:
        level, size = request.slice_layers[0]
        mode += f", slices of {size} in {level}"
    return mode


def expand(
    placed: PlacedTree,
    assignment: TopologyAssignment,
    requests: Mapping[str, int],
    taken: dict[str, Amounts],
    model: Pod | None = None,
) -> list[str] | str:
    """Concrete nodes for an assignment's per-domain counts: within each domain, nodes in
    name order that admit the members (`model`'s nodeSelector and tolerations), first fit
    against what is free on each (less `taken`, which grows). A domain merged from several
    nodes (a lowest level that is not the hostname) may have the room in sum but not on any
    one node that admits them; that is a failure, never an overcommitted node."""
    index = placed.nodes_in(assignment.levels)
    # Only the nodes of the assigned domains are checked, and only as they are reached: a
    # gang of a few pods on a large cluster looks at a handful of nodes, not at all of them.
    screen = (
        model
        if model is not None
        and (model.node_selector or model.node_affinity or model.tolerations or placed.tainted)
        else None
    )
    vector = [(name, amount) for name, amount in requests.items() if amount > 0]
    vector.append(("pods", 1))
    nodes: list[str] = []
    for domain in assignment.domains:
        need = domain.count
        for info in index.get(domain.values, ()):
            if screen is not None and not admits(info, screen):
                continue
            took = taken.setdefault(info.name, {})
            while need and all(
                info.allocatable.get(name, 0) - info.used.get(name, 0) - took.get(name, 0) >= amount
                for name, amount in vector
            ):
                for name, amount in vector:
                    took[name] = took.get(name, 0) + amount
                nodes.append(info.name)
                need -= 1
            if not need:
                break
        if need:
            return (
                f"NodeAssignmentFailed: {need} of {domain.count} pod(s) for domain "
                f"{','.join(domain.values)} fit on no single node"
            )
    return nodes


def fit(
    view: ClusterView,
    levels: tuple[str, ...],
    request: PodSetRequest,
    pods: Sequence[Pod],
    restrict: Restrict = (),
) -> Slots | str:
    """Nodes for `pods` (which `request` describes), or the machine-readable reason there are
    none: ``InvalidRequest: ...``, ``TopologyPlacementFailed: ...`` or
    ``NodeAssignmentFailed: ...``."""
    problem = first_problem(levels, [request])
    if problem is not None:
        return f"InvalidRequest: {problem.field}: {problem.message}"
    placed = view.tree(levels, restrict)
    result = place_on(placed.tree, [request])
    if not result.admitted or result.assignments is None:
        return f"TopologyPlacementFailed: {describe(request)}: {result.reason}"
    nodes = expand(placed, result.assignments[request.name], request.requests, {}, pods[0])
    if isinstance(nodes, str):
        return nodes
    return list(zip(pods, nodes, strict=True))


def anchor(
    view: ClusterView, levels: tuple[str, ...], level: str, bound: Sequence[Pod]
) -> Restrict:
    """The domain at `level` (with every wider level) that already-bound members sit in, so
    that new members join them there; empty when none is bound or its node is unknown."""
    if level not in levels:
        return ()
    depth = levels.index(level) + 1
    for pod in bound:
        labels = view.labels_of(pod.node_name)
        if labels is not None and all(lv in labels for lv in levels[:depth]):
            return tuple(sorted((lv, labels[lv]) for lv in levels[:depth]))
    return ()
