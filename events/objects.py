"""Slim Kubernetes objects: only the fields kbatchd folds and decides on.

Raw API JSON is decoded by msgspec straight into small *wire* structs that mirror the API's
shape (camelCase, unknown fields ignored), then flattened into the slim structs stored in the
log. Generated client model classes never appear here: they are far too slow for the watch
path. Pod effective requests are computed once at decode time, so a replay never parses a
quantity string.
"""

from __future__ import annotations

from datetime import UTC, datetime
from functools import lru_cache
from typing import Annotated, Any, Final

import msgspec

from events.quantity import MAX_UNITS, QuantityError, add_into, resource_map

Quantity = str | int | float
# The API's integer widths. Beyond them a number is none an API server sends, and one the log
# cannot store (MessagePack integers end at 2^64): decoding refuses it, naming the field.
Int32 = Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1)]
Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]

# ---------------------------------------------------------------------------------------------
# Slim objects (what the log stores)


class OwnerRef(msgspec.Struct, frozen=True, array_like=True, gc=False):
    kind: str
    name: str
    uid: str
    controller: bool = False


class Taint(msgspec.Struct, frozen=True, array_like=True, gc=False):
    key: str
    effect: str
    value: str = ""


class Toleration(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """A pod toleration: an empty key with ``Exists`` tolerates every taint, an empty effect
    every effect."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""


class NodeSelectorRequirement(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """One requirement of a node selector term: a label (or, with `field`, the node's
    ``metadata.name``) against `values` by `operator` (In, NotIn, Exists, DoesNotExist, Gt,
    Lt)."""

    key: str
    operator: str
    values: tuple[str, ...] = ()
    field: bool = False


class KObject(msgspec.Struct, frozen=True, array_like=True, gc=False, tag_field="kind"):
    """Metadata every slim object carries. Timestamps are Unix milliseconds."""

    name: str = ""
    namespace: str = ""
    uid: str = ""
    rv: str = ""
    generation: int = 0
    created: int = 0
    deletion_ts: int | None = None
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    owners: tuple[OwnerRef, ...] = ()
    finalizers: tuple[str, ...] = ()

    @property
    def controller(self) -> OwnerRef | None:
        return controller_of(self.owners)


def controller_of(owners: tuple[OwnerRef, ...]) -> OwnerRef | None:
    """The owner reference marked as the controller, if any."""
    for owner in owners:
        if owner.controller:
            return owner
    return None


class Pod(KObject, frozen=True, tag="Pod"):
    node_name: str = ""
    scheduler_name: str = "default-scheduler"
    pod_group: str = ""
    priority: int = 0
    requests: dict[str, int] = {}
    scheduling_gates: tuple[str, ...] = ()
    phase: str = "Pending"
    conditions: dict[str, str] = {}
    restart_count: int = 0
    exit_codes: dict[str, int] = {}
    grace_seconds: int = 30
    # When the pod finished (ms): the newest container finishedAt once every container has
    # terminated, else when Ready last turned False; None while it runs.
    finished: int | None = None
    # The highest restartCount of any one container (restart_count is their sum): what
    # JobSet's in-place restart limit compares with maxRestarts (spec B5.2).
    max_container_restarts: int = 0
    # When the Ready condition last changed (ms, its lastTransitionTime); None without one.
    # The Job reconciler holds back a drop of `status.ready` for a grace window from it.
    ready_changed: int | None = None
    # spec.nodeSelector: where JobSet exclusive placement sent a follower pod (spec B6), and
    # with the tolerations, which nodes the gang scheduler may bind a member to.
    node_selector: dict[str, str] = {}
    tolerations: tuple[Toleration, ...] = ()
    # spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution: its terms
    # (any one must match), each a conjunction of requirements; () when the pod has none.
    node_affinity: tuple[tuple[NodeSelectorRequirement, ...], ...] = ()
    # status.nominatedNodeName: the node a preemption freed room on for this pending pod; the
    # gang scheduler counts that room as taken by it until it is bound (kube-scheduler's
    # nominator).
    nominated: str = ""

    @property
    def ready(self) -> bool:
        return self.conditions.get("Ready") == "True"

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL_PHASES


class Node(KObject, frozen=True, tag="Node"):
    allocatable: dict[str, int] = {}
    ready: bool = False
    unschedulable: bool = False
    taints: tuple[Taint, ...] = ()


class Job(KObject, frozen=True, tag="Job"):
    spec: dict[str, Any] = {}
    status: dict[str, Any] = {}


class JobSet(KObject, frozen=True, tag="JobSet"):
    spec: dict[str, Any] = {}
    status: dict[str, Any] = {}


class Workload(KObject, frozen=True, tag="Workload"):
    spec: dict[str, Any] = {}
    status: dict[str, Any] = {}


class PodGroup(KObject, frozen=True, tag="PodGroup"):
    spec: dict[str, Any] = {}
    status: dict[str, Any] = {}


class PersistentVolumeClaim(KObject, frozen=True, tag="PersistentVolumeClaim"):
    spec: dict[str, Any] = {}
    status: dict[str, Any] = {}


class Service(KObject, frozen=True, tag="Service"):
    spec: dict[str, Any] = {}
    status: dict[str, Any] = {}


class CompositePodGroup(KObject, frozen=True, tag="CompositePodGroup"):
    """``scheduling.k8s.io/v1alpha3`` (Kubernetes 1.37, KEP-6012): a group of PodGroups."""

    spec: dict[str, Any] = {}
    status: dict[str, Any] = {}


class PriorityClass(KObject, frozen=True, tag="PriorityClass"):
    """``scheduling.k8s.io/v1``, cluster-scoped: what the Priority admission plugin gives a
    pod of that class. Read where no admission has run: a workload on the manager cluster
    that is yet to be copied to a worker."""

    value: int = 0
    global_default: bool = False
    preemption_policy: str = "PreemptLowerPriority"


SlimObject = (
    Pod
    | Node
    | Job
    | JobSet
    | Workload
    | PodGroup
    | PersistentVolumeClaim
    | Service
    | CompositePodGroup
    | PriorityClass
)

TERMINAL_PHASES: Final = frozenset({"Succeeded", "Failed"})

# kbatchd's finalizer on every pod it creates for a Job it manages: a finished pod that still
# carries it is not yet counted in the Job's status (daemon.controllers.job). The fold reads it
# too (daemon.controllers.job.projection), so it is defined here. Never the built-in controller's
# `batch.kubernetes.io/job-tracking`, which external controllers must not use (spec A0).
JOB_TRACKING_FINALIZER: Final = "kbatchd.dev/job-tracking"
# The ordinal of a pod among all the pods kbatchd created for its Job; the pod's name is derived
# from it, and the fold keeps the highest one seen so that no name is ever used twice.
POD_ORDINAL_ANNOTATION: Final = "kbatchd.dev/pod-ordinal"

KINDS: Final[dict[str, type[KObject]]] = {
    cls.__name__: cls
    for cls in (
        Pod,
        Node,
        Job,
        JobSet,
        Workload,
        PodGroup,
        PersistentVolumeClaim,
        Service,
        CompositePodGroup,
        PriorityClass,
    )
}


def object_key(cluster: str, namespace: str, name: str) -> str:
    """The key of an object within its kind: ``cluster/namespace/name`` (namespace empty for
    cluster-scoped kinds)."""
    return f"{cluster}/{namespace}/{name}"


# ---------------------------------------------------------------------------------------------
# Wire structs (the API's JSON shape, only the fields we read)


class _Owner(msgspec.Struct, rename="camel", gc=False):
    kind: str = ""
    name: str = ""
    uid: str = ""
    controller: bool | None = None


class _Meta(msgspec.Struct, rename="camel", gc=False):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""
    generation: Int64 = 0
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
    deletion_grace_period_seconds: Int64 | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    owner_references: list[_Owner] | None = None
    finalizers: list[str] | None = None


class _Resources(msgspec.Struct, gc=False):
    requests: dict[str, Quantity] | None = None
    limits: dict[str, Quantity] | None = None


class _Container(msgspec.Struct, rename="camel", gc=False):
    name: str = ""
    resources: _Resources | None = None
    restart_policy: str | None = None


class _Named(msgspec.Struct, gc=False):
    name: str = ""


class _SchedulingGroup(msgspec.Struct, rename="camel", gc=False):
    pod_group_name: str = ""


class _Toleration(msgspec.Struct, rename="camel", gc=False):
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""


class _Requirement(msgspec.Struct, rename="camel", gc=False):
    key: str = ""
    operator: str = ""
    values: list[str] | None = None


class _Term(msgspec.Struct, rename="camel", gc=False):
    match_expressions: list[_Requirement] | None = None
    match_fields: list[_Requirement] | None = None


class _NodeSelector(msgspec.Struct, rename="camel", gc=False):
    node_selector_terms: list[_Term] = []


class _NodeAffinity(msgspec.Struct, rename="camel", gc=False):
    required_during_scheduling_ignored_during_execution: _NodeSelector | None = None


class _Affinity(msgspec.Struct, rename="camel", gc=False):
    node_affinity: _NodeAffinity | None = None


def _required_node_affinity(
    affinity: _Affinity | None,
) -> tuple[tuple[NodeSelectorRequirement, ...], ...]:
    required = (
        affinity.node_affinity.required_during_scheduling_ignored_during_execution
        if affinity is not None and affinity.node_affinity is not None
        else None
    )
    if required is None:
        return ()
    return tuple(
        tuple(
            NodeSelectorRequirement(r.key, r.operator, tuple(r.values or ()), field)
            for requirements, field in (
                (term.match_expressions or [], False),
                (term.match_fields or [], True),
            )
            for r in requirements
        )
        for term in required.node_selector_terms
    )


class _PodSpec(msgspec.Struct, rename="camel", gc=False):
    node_name: str = ""
    scheduler_name: str = "default-scheduler"
    priority: Int32 | None = None
    containers: list[_Container] = []
    init_containers: list[_Container] | None = None
    overhead: dict[str, Quantity] | None = None
    scheduling_gates: list[_Named] | None = None
    scheduling_group: _SchedulingGroup | None = None
    termination_grace_period_seconds: Int64 | None = None
    node_selector: dict[str, str] | None = None
    tolerations: list[_Toleration] | None = None
    affinity: _Affinity | None = None


class _Condition(msgspec.Struct, rename="camel", gc=False):
    type: str = ""
    status: str = ""
    last_transition_time: str | None = None


class _Terminated(msgspec.Struct, rename="camel", gc=False):
    exit_code: Int32 = 0
    finished_at: str | None = None


class _ContainerState(msgspec.Struct, gc=False):
    terminated: _Terminated | None = None


class _ContainerStatus(msgspec.Struct, rename="camel", gc=False):
    name: str = ""
    restart_count: Int32 = 0
    state: _ContainerState | None = None
    last_state: _ContainerState | None = None


class _PodStatus(msgspec.Struct, rename="camel", gc=False):
    phase: str = "Pending"
    conditions: list[_Condition] | None = None
    container_statuses: list[_ContainerStatus] | None = None
    init_container_statuses: list[_ContainerStatus] | None = None
    nominated_node_name: str = ""


class _WirePod(msgspec.Struct, gc=False):
    metadata: _Meta = msgspec.field(default_factory=_Meta)
    spec: _PodSpec = msgspec.field(default_factory=_PodSpec)
    status: _PodStatus = msgspec.field(default_factory=_PodStatus)


class _Taint(msgspec.Struct, gc=False):
    key: str = ""
    effect: str = ""
    value: str | None = None


class _NodeSpec(msgspec.Struct, gc=False):
    unschedulable: bool = False
    taints: list[_Taint] | None = None


class _NodeStatus(msgspec.Struct, gc=False):
    allocatable: dict[str, Quantity] | None = None
    conditions: list[_Condition] | None = None


class _WireNode(msgspec.Struct, gc=False):
    metadata: _Meta = msgspec.field(default_factory=_Meta)
    spec: _NodeSpec = msgspec.field(default_factory=_NodeSpec)
    status: _NodeStatus = msgspec.field(default_factory=_NodeStatus)


class _WirePriorityClass(msgspec.Struct, rename="camel", gc=False):
    metadata: _Meta = msgspec.field(default_factory=_Meta)
    value: Int32 = 0
    global_default: bool = False
    preemption_policy: str | None = None


class _WireGeneric(msgspec.Struct, gc=False):
    metadata: _Meta = msgspec.field(default_factory=_Meta)
    spec: dict[str, Any] = {}
    status: dict[str, Any] = {}


class ObjectError(ValueError):
    """An API object that cannot be decoded; the message names the field and the value."""


_POD_DECODER: Final = msgspec.json.Decoder(_WirePod)
_NODE_DECODER: Final = msgspec.json.Decoder(_WireNode)
_GENERIC_DECODER: Final = msgspec.json.Decoder(_WireGeneric)
_PRIORITY_CLASS_DECODER: Final = msgspec.json.Decoder(_WirePriorityClass)


def timestamp_ms(text: str | None, field: str = "metadata timestamp") -> int | None:
    """RFC 3339 time as Unix milliseconds (``None`` stays ``None``); errors name `field`."""
    if text is None:
        return None
    ms = _epoch_ms(text)
    if ms is None:
        raise ObjectError(f"{field}: invalid RFC 3339 time {text!r}")
    return ms


def rfc3339(ms: int) -> str:
    """Event time (Unix milliseconds) as the API server stores a metav1.Time: whole seconds,
    UTC; the inverse of `timestamp_ms` to the second."""
    return _rfc3339_second(ms // 1000)


# Conditions written in one pass (and in one second) carry the same time.
@lru_cache(maxsize=256)
def _rfc3339_second(second: int) -> str:
    return datetime.fromtimestamp(second, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# Timestamps have one-second resolution: the pods created, started or finished in the same
# second carry the same strings, and a watch stream parses each many times over.
@lru_cache(maxsize=4096)
def _epoch_ms(text: str) -> int | None:
    try:
        return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return None


# The annotations kbatchd reads are under these prefixes (Job, JobSet, Kueue and its own); a
# slim object keeps only those. Others can be kilobytes and change with any status update — a
# CNI's network status, kubectl's last-applied configuration, a service mesh's sidecar status —
# and would be logged again with every event of the object.
READ_ANNOTATION_PREFIXES: Final = (
    "batch.kubernetes.io/",
    "jobset.sigs.k8s.io/",
    "alpha.jobset.sigs.k8s.io/",
    "kueue.x-k8s.io/",
    "kbatchd.dev/",
)


# A kept annotation longer than this is dropped all the same (the daemon warns, once per object
# and key): no annotation kbatchd reads comes near it, and a slim object's annotations are
# logged again with every event of the object.
MAX_ANNOTATION_CHARS: Final = 1024

# Annotation key -> whether a slim object keeps it. A cluster's objects use a few dozen keys;
# a lookup is about half the cost of matching five prefixes (every pod event decodes some).
_KEPT_KEYS: dict[str, bool] = {}
_KEPT_KEYS_MAX: Final = 4096


def read_annotations(
    annotations: dict[str, str] | None, dropped: list[str] | None = None
) -> dict[str, str]:
    """The annotations a slim object keeps: those under `READ_ANNOTATION_PREFIXES` of at most
    `MAX_ANNOTATION_CHARS`; the keys of longer ones are added to `dropped`."""
    if not annotations:
        return {}
    known = _KEPT_KEYS
    kept: dict[str, str] = {}
    for key, value in annotations.items():
        keep = known.get(key)
        if keep is None:
            if len(known) >= _KEPT_KEYS_MAX:
                known.clear()  # keys made per object (a hash in the name, say): start afresh
            keep = known[key] = key.startswith(READ_ANNOTATION_PREFIXES)
        if keep:
            if len(value) > MAX_ANNOTATION_CHARS:
                if dropped is not None:
                    dropped.append(key)
                continue
            kept[key] = value
    return kept


def _meta_fields(meta: _Meta, dropped: list[str] | None) -> dict[str, Any]:
    return {
        "name": meta.name,
        "namespace": meta.namespace,
        "uid": meta.uid,
        "rv": meta.resource_version,
        "generation": meta.generation,
        "created": timestamp_ms(meta.creation_timestamp, "metadata.creationTimestamp") or 0,
        "deletion_ts": timestamp_ms(meta.deletion_timestamp, "metadata.deletionTimestamp"),
        "labels": meta.labels or {},
        "annotations": read_annotations(meta.annotations, dropped),
        "owners": tuple(
            OwnerRef(o.kind, o.name, o.uid, bool(o.controller)) for o in meta.owner_references
        )
        if meta.owner_references
        else (),
        "finalizers": tuple(meta.finalizers) if meta.finalizers else (),
    }


def _container_requests(container: _Container, where: str) -> dict[str, int]:
    resources = container.resources
    if resources is None:
        return {}
    # The API server defaults a missing request to the limit; do the same for raw manifests.
    merged = resources.requests
    if resources.limits:
        merged = {**resources.limits, **(merged or {})}
    try:
        return resource_map(merged)
    except QuantityError as exc:
        raise ObjectError(f"{where}.resources: {exc}") from exc


def effective_requests(spec: _PodSpec) -> dict[str, int]:
    """Pod requests as the scheduler sees them: the larger of the app containers' sum (plus
    restartable init containers) and the largest plain init container, plus overhead."""
    containers = spec.containers
    if len(containers) == 1 and not spec.init_containers and not spec.overhead:
        # Most pods: the one container's requests, zero entries dropped (one representation).
        requests = _container_requests(containers[0], "spec.containers[0]")
        return {name: value for name, value in requests.items() if value}
    total: dict[str, int] = {}
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for i, container in enumerate(spec.init_containers or ()):
        requests = _container_requests(container, f"spec.initContainers[{i}]")
        if container.restart_policy == "Always":
            add_into(sidecars, requests)
        else:
            for name, value in requests.items():
                # A plain init container runs beside the sidecars started before it.
                init_peak[name] = max(init_peak.get(name, 0), value + sidecars.get(name, 0))
    for i, container in enumerate(spec.containers):
        add_into(total, _container_requests(container, f"spec.containers[{i}]"))
    add_into(total, sidecars)
    for name, value in init_peak.items():
        if value > total.get(name, 0):  # never store a zero request (one representation)
            total[name] = value
    if spec.overhead:
        try:
            add_into(total, resource_map(spec.overhead))
        except QuantityError as exc:
            raise ObjectError(f"spec.overhead: {exc}") from exc
    for name, value in total.items():
        # Each quantity is in range, their sum need not be (nor could the log store it).
        if value > MAX_UNITS:
            raise ObjectError(f"spec: the requests for {name} add up to over 2^63-1")
    return total


def pod_from_wire(wire: _WirePod, dropped: list[str] | None = None) -> Pod:
    # The watch path's hot spot (every pod event): one pass over statuses and conditions.
    spec, status, meta = wire.spec, wire.status, wire.metadata
    exit_codes: dict[str, int] = {}
    restarts = max_restarts = 0
    finished_at: list[int] = []
    app_statuses = status.container_statuses
    all_terminated = bool(app_statuses)
    # App containers first, then init containers: a podFailurePolicy rule may name either.
    for cs in app_statuses or ():
        count = cs.restart_count
        restarts += count
        if count > max_restarts:
            max_restarts = count
        terminated = cs.state.terminated if cs.state else None
        if terminated is None:
            all_terminated = False
            if cs.last_state is not None:
                terminated = cs.last_state.terminated
        elif terminated.finished_at is not None:
            finished_at.append(
                timestamp_ms(terminated.finished_at, "status.containerStatuses.finishedAt") or 0
            )
        if terminated is not None and cs.name not in exit_codes:
            exit_codes[cs.name] = terminated.exit_code
    for cs in status.init_container_statuses or ():
        count = cs.restart_count
        restarts += count
        if count > max_restarts:
            max_restarts = count
        terminated = cs.state.terminated if cs.state else None
        if terminated is None and cs.last_state is not None:
            terminated = cs.last_state.terminated
        if terminated is not None and cs.name not in exit_codes:
            exit_codes[cs.name] = terminated.exit_code
    conditions: dict[str, str] = {}
    # lastTransitionTime of the first Ready condition that has one, and of the first that
    # says False.
    ready_at = ready_false_at = None
    for c in status.conditions or ():
        conditions[c.type] = c.status
        if c.type == "Ready" and c.last_transition_time:
            if ready_at is None:
                ready_at = c.last_transition_time
            if ready_false_at is None and c.status == "False":
                ready_false_at = c.last_transition_time
    where = "status.conditions.lastTransitionTime"
    finished: int | None = None
    if status.phase in TERMINAL_PHASES:
        if all_terminated and finished_at:
            finished = max(finished_at)
        elif ready_false_at is not None:
            finished = timestamp_ms(ready_false_at, where)
    ready_changed = timestamp_ms(ready_at, where) if ready_at is not None else None
    grace = spec.termination_grace_period_seconds
    if meta.deletion_grace_period_seconds is not None:
        grace = meta.deletion_grace_period_seconds
    wire_tolerations = spec.tolerations
    return Pod(
        **_meta_fields(meta, dropped),
        node_name=spec.node_name,
        scheduler_name=spec.scheduler_name,
        pod_group=spec.scheduling_group.pod_group_name if spec.scheduling_group else "",
        priority=spec.priority or 0,
        requests=effective_requests(spec),
        scheduling_gates=tuple(g.name for g in spec.scheduling_gates)
        if spec.scheduling_gates
        else (),
        phase=status.phase,
        conditions=conditions,
        restart_count=restarts,
        max_container_restarts=max_restarts,
        exit_codes=exit_codes,
        grace_seconds=30 if grace is None else grace,
        finished=finished,
        ready_changed=ready_changed,
        node_selector=spec.node_selector or {},
        tolerations=_tolerations(wire_tolerations) if wire_tolerations else (),
        node_affinity=_required_node_affinity(spec.affinity) if spec.affinity else (),
        nominated=status.nominated_node_name,
    )


def _tolerations(wire: list[_Toleration]) -> tuple[Toleration, ...]:
    return tuple(Toleration(t.key, t.operator or "Equal", t.value, t.effect) for t in wire)


def node_from_wire(wire: _WireNode, dropped: list[str] | None = None) -> Node:
    try:
        allocatable = resource_map(wire.status.allocatable)
    except QuantityError as exc:
        raise ObjectError(f"status.allocatable: {exc}") from exc
    ready = any(c.type == "Ready" and c.status == "True" for c in wire.status.conditions or ())
    return Node(
        **_meta_fields(wire.metadata, dropped),
        allocatable=allocatable,
        ready=ready,
        unschedulable=wire.spec.unschedulable,
        taints=tuple(Taint(t.key, t.effect, t.value or "") for t in wire.spec.taints or ()),
    )


def decode_object(kind: str, raw: bytes | str, dropped: list[str] | None = None) -> SlimObject:
    """Decode one API object's JSON into its slim struct; the keys of annotations dropped for
    their length are added to `dropped` (`read_annotations`).

    Raises `ObjectError` naming the kind and the offending field for malformed input.
    """
    cls = KINDS.get(kind)
    if cls is None:
        raise ObjectError(f"kind {kind!r} is not one kbatchd folds")
    try:
        if kind == "Pod":
            return pod_from_wire(_POD_DECODER.decode(raw), dropped)
        if kind == "Node":
            return node_from_wire(_NODE_DECODER.decode(raw), dropped)
        if kind == "PriorityClass":
            found = _PRIORITY_CLASS_DECODER.decode(raw)
            return PriorityClass(
                **_meta_fields(found.metadata, dropped),
                value=found.value,
                global_default=found.global_default,
                preemption_policy=found.preemption_policy or "PreemptLowerPriority",
            )
        wire = _GENERIC_DECODER.decode(raw)
        _storable(wire.spec, "spec")
        _storable(wire.status, "status")
        fields = _meta_fields(wire.metadata, dropped)
        obj = cls(**fields, spec=wire.spec, status=wire.status)  # type: ignore[call-arg]
        return obj  # type: ignore[return-value]
    except msgspec.ValidationError as exc:
        raise ObjectError(f"{kind}: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise ObjectError(f"{kind}: malformed JSON ({exc})") from exc
    except ObjectError as exc:
        raise ObjectError(f"{kind}: {exc}") from exc
    except RecursionError:
        # msgspec decodes (and skips) nested arrays and objects recursively.
        raise ObjectError(f"{kind}: malformed JSON (nested too deeply)") from None


# What checks that a generic kind's spec and status can be logged: a MessagePack integer is
# at most 2^64-1 and at least -2^63, a JSON one unbounded.
_STORABLE: Final = msgspec.msgpack.Encoder()


def _storable(value: dict[str, Any], field: str) -> None:
    """Raise `ObjectError` naming the first integer in `value` the log cannot store."""
    try:
        _STORABLE.encode(value)
    except OverflowError:
        raise ObjectError(f"{_out_of_range(value, field) or field}: integer out of range") from None


def _out_of_range(value: Any, path: str) -> str | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return None if -(2**63) <= value < 2**64 else path
    if isinstance(value, dict):
        items: Any = ((f"{path}.{key}", item) for key, item in value.items())
    elif isinstance(value, list):
        items = ((f"{path}[{index}]", item) for index, item in enumerate(value))
    else:
        return None
    for where, item in items:
        found = _out_of_range(item, where)
        if found is not None:
            return found
    return None


class _PodWatchEvent(msgspec.Struct, gc=False):
    type: str
    object: _WirePod


_POD_WATCH_DECODER: Final = msgspec.json.Decoder(_PodWatchEvent)


def decode_watch_line(
    kind: str, line: bytes, dropped: list[str] | None = None
) -> tuple[str, SlimObject] | None:
    """A watch stream's line, ``{"type": ..., "object": ...}``, decoded in one pass: its type
    and its object as a slim struct. Only pods, the bulk of every stream, take this path; for
    other kinds, and for any line whose object does not decode as the kind (an ERROR event's
    Status, a malformed object), None: the caller decodes the envelope and then the object
    with `decode_object`, which says what is wrong."""
    if kind != "Pod":
        return None
    try:
        event = _POD_WATCH_DECODER.decode(line)
        return event.type, pod_from_wire(event.object, dropped)
    except (msgspec.DecodeError, ObjectError, RecursionError):  # ValidationError is one too
        return None


def decode_object_dict(kind: str, raw: dict[str, Any]) -> SlimObject:
    """`decode_object` for an already parsed JSON mapping."""
    return decode_object(kind, msgspec.json.encode(raw))
