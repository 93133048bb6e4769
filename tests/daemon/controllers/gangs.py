"""Builders for the gang reconciler tests: nodes from the simulated cluster's topology
generator, PodGroups and Workloads in the API's JSON shape (decoded by the real decoder), slim
member pods, and `World` — a State fed through the fold, whose decisions are applied by hand
the way the cluster would carry them out (no event loop, no I/O)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import msgspec

from daemon.controllers.base import Decision
from daemon.controllers.gang.reconciler import GangReconciler
from daemon.controllers.runner import Pass, released
from daemon.sim import topology as sim_topology
from daemon.sim.patch import merge_patch, strategic_merge_patch
from events.fold import fold
from events.intents import Bind, Delete, Patch
from events.objects import Node, Pod, PodGroup, SlimObject, Workload, decode_object_dict
from events.quantity import resource_map
from events.schema import Change, Decided, Observed, Outcome, Tick
from events.state import State
from events.topology import DEFAULT_LEVELS

CLUSTER: Final = "c1"
NS: Final = "ns"
T0: Final = 1_767_225_600_000  # 2026-01-01T00:00:00Z
SECOND: Final = 1000
GPU: Final = "nvidia.com/gpu"
BLOCK, RACK, HOST = DEFAULT_LEVELS
SCHEDULER: Final = "kbatchd"

REC: Final = GangReconciler(
    ready_timeout_ms=60 * SECOND, backoff_base_ms=10 * SECOND, backoff_max_ms=80 * SECOND
)


def nodes(spec: str = "blocks=1,racks=2,hosts=2,gpus=8") -> list[Node]:
    """Nodes as `kbatchd sim --topology SPEC` registers them (``b0-r1-h0`` in rack ``b0-r1``)."""
    found = []
    for raw in sim_topology.generate(spec):
        node = decode_object_dict("Node", raw)
        assert isinstance(node, Node)
        found.append(node)
    return found


def podgroup(
    name: str,
    min_count: int | None = 1,
    *,
    topology_key: str | None = None,
    workload: str | None = None,
    template: str | None = None,
    conditions: list[dict[str, Any]] | None = None,
    annotations: dict[str, str] | None = None,
) -> PodGroup:
    spec: dict[str, Any] = {
        "schedulingPolicy": {"gang": {"minCount": min_count}} if min_count else {"basic": {}}
    }
    if topology_key is not None:
        spec["schedulingConstraints"] = {"topology": [{"key": topology_key}]}
    if workload is not None:
        spec["podGroupTemplateRef"] = {
            "workload": {"workloadName": workload, "podGroupTemplateName": template or name}
        }
    raw = {
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": f"uid-{name}",
            "resourceVersion": "1",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "annotations": annotations or {},
        },
        "spec": spec,
        "status": {"conditions": conditions} if conditions else {},
    }
    group = decode_object_dict("PodGroup", raw)
    assert isinstance(group, PodGroup)
    return group


def workload(
    name: str, templates: Sequence[str], annotations: dict[str, str] | None = None
) -> Workload:
    raw = {
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": f"uid-{name}",
            "resourceVersion": "1",
            "annotations": annotations or {},
        },
        "spec": {
            "podGroupTemplates": [
                {"name": t, "schedulingPolicy": {"gang": {"minCount": 1}}} for t in templates
            ]
        },
    }
    found = decode_object_dict("Workload", raw)
    assert isinstance(found, Workload)
    return found


def member(
    name: str,
    group: str,
    *,
    gpus: int = 1,
    node: str = "",
    phase: str = "Pending",
    ready: bool = False,
    scheduler: str = SCHEDULER,
    annotations: dict[str, str] | None = None,
    gates: tuple[str, ...] = (),
    cpu: str = "1",
) -> Pod:
    requests = resource_map({"cpu": cpu, GPU: gpus} if gpus else {"cpu": cpu})
    return Pod(
        name=name,
        namespace=NS,
        uid=f"uid-{name}",
        rv="1",
        created=T0,
        annotations=dict(annotations or {}),
        node_name=node,
        scheduler_name=scheduler,
        pod_group=group,
        requests=requests,
        scheduling_gates=gates,
        phase=phase,
        conditions={"Ready": "True" if ready else "False"},
    )


def members(group: str, count: int, prefix: str | None = None, **kwargs: Any) -> list[Pod]:
    return [member(f"{prefix or group}-{i:02d}", group, **kwargs) for i in range(count)]


def blocker(name: str, node: str, gpus: int) -> Pod:
    """A pod of the default scheduler already running on `node` (not kbatchd's)."""
    return Pod(
        name=name,
        namespace="other",
        uid=f"uid-{name}",
        rv="1",
        created=T0,
        node_name=node,
        requests=resource_map({GPU: gpus}),
        phase="Running",
        conditions={"Ready": "True"},
    )


def key(name: str, kind: str = "PodGroup") -> str:
    return f"{kind}/{CLUSTER}/{NS}/{name}"


class World:
    """A State fed through the fold, and the cluster's side played by hand."""

    def __init__(self, objects: Sequence[SlimObject] = (), rec: GangReconciler = REC) -> None:
        self.state = State()
        self.state.now = T0
        self.rec = rec
        self.dirty: set[str] = set()
        # What the runtime keeps between scheduling cycles, and the cycle of the state as it
        # stands: decisions from one state share it, as the runner's pass does.
        self.memos: dict[str, Any] = {}
        self._cycle: tuple[tuple[int, int], Pass] | None = None
        for obj in objects:
            self.observe(obj, "ADDED")

    @property
    def now(self) -> int:
        return self.state.now

    def observe(self, obj: SlimObject, change: Change = "MODIFIED") -> set[str]:
        dirty: set[str] = set()
        event = Observed(at=self.now, cluster=CLUSTER, change=change, obj=obj)
        fold(self.state, self.state.seq + 1, event, dirty)
        self.dirty |= dirty
        # What the runner would decide: a cluster's gang queue stands for the waiting groups
        # it releases.
        return set(released(self.state, [self.rec], dirty, self.cycle()).keys)

    def cycle(self) -> Pass:
        """The runner's pass over the state as it stands (a new one once it changed)."""
        at = (self.state.seq, self.state.now)
        if self._cycle is None or self._cycle[0] != at:
            self._cycle = (at, Pass(self.state, self.memos))
        return self._cycle[1]

    def add(self, *objects: SlimObject) -> None:
        for obj in objects:
            self.observe(obj, "ADDED")

    def remove(self, obj: SlimObject) -> set[str]:
        return self.observe(obj, "DELETED")

    def tick(self, ms: int) -> None:
        fold(self.state, self.state.seq + 1, Tick(at=self.now + ms))

    def decide(self, ref: str) -> Decision | None:
        decision, error = self.cycle().attempt(self.rec, ref)
        assert error is None, error
        return decision

    def log(self, ref: str, decision: Decision) -> int:
        """Fold the decision as the daemon logs it (in flight until outcomes and the watch
        show its effects); returns its seq."""
        seq = self.state.seq + 1
        fold(
            self.state,
            seq,
            Decided(
                at=self.now,
                reconciler=self.rec.name,
                key=ref,
                reason=decision.reason,
                intents=decision.intents,
            ),
        )
        return seq

    def run(self, ref: str) -> Decision | None:
        """Decide and carry the intents out; the result is what was decided."""
        decision = self.decide(ref)
        if decision is not None:
            self.apply(decision)
        return decision

    def apply(self, decision: Decision, seq: int | None = None) -> None:
        for index, intent in enumerate(decision.intents):
            if isinstance(intent, Bind):
                pod = self.pod(intent.name)
                assert not pod.node_name, f"{intent.name} bound twice"
                self.observe(msgspec.structs.replace(pod, node_name=intent.node, rv=_next(pod.rv)))
            elif isinstance(intent, Delete):
                self.remove(self.pod(intent.name))
            elif isinstance(intent, Patch) and intent.kind == "PodGroup":
                group = self.group(intent.name)
                assert isinstance(intent.patch, dict)
                if intent.subresource == "status":
                    assert intent.patch_type == "strategic"
                    status = strategic_merge_patch({"status": group.status}, intent.patch)["status"]
                    updated = msgspec.structs.replace(group, status=status, rv=_next(group.rv))
                else:
                    meta = merge_patch({"annotations": group.annotations}, intent.patch["metadata"])
                    updated = msgspec.structs.replace(
                        group, annotations=meta["annotations"], rv=_next(group.rv)
                    )
                self.observe(updated)
            else:  # pragma: no cover
                raise AssertionError(f"unexpected intent {intent!r}")
            if seq is not None:
                fold(
                    self.state,
                    self.state.seq + 1,
                    Outcome(at=self.now, decision=seq, index=index, ok=True),
                )

    # -- views ----------------------------------------------------------------------------

    def pod(self, name: str) -> Pod:
        for namespace in (NS, "other"):
            found = self.state.pods.get(f"{CLUSTER}/{namespace}/{name}")
            if found is not None:
                return found
        raise KeyError(name)

    def group(self, name: str) -> PodGroup:
        return self.state.podgroups[f"{CLUSTER}/{NS}/{name}"]

    def condition(self, group: str, type_: str = "PodGroupScheduled") -> dict[str, Any]:
        for item in self.group(group).status.get("conditions") or ():
            if item["type"] == type_:
                return dict(item)
        return {}

    def placed(self, group: str) -> dict[str, str]:
        """Member pod name -> node, for the bound members of `group`."""
        return {
            p.name: p.node_name
            for p in self.state.pods.values()
            if p.pod_group == group and p.node_name
        }

    def rack_of(self, node: str) -> str:
        return self.state.nodes[f"{CLUSTER}//{node}"].labels[RACK]

    def set_pod(self, name: str, **changes: Any) -> None:
        pod = self.pod(name)
        self.observe(msgspec.structs.replace(pod, rv=_next(pod.rv), **changes))


def _next(rv: str) -> str:
    return str(int(rv) + 1)


def binds(decision: Decision | None) -> dict[str, str]:
    assert decision is not None
    return {i.name: i.node for i in decision.intents if isinstance(i, Bind)}


def deletes(decision: Decision | None) -> list[str]:
    assert decision is not None
    return sorted(i.name for i in decision.intents if isinstance(i, Delete))


def status_conditions(decision: Decision | None, group: str) -> dict[str, dict[str, Any]]:
    """The conditions a decision writes to `group`, by type."""
    assert decision is not None
    found: dict[str, dict[str, Any]] = {}
    for intent in decision.intents:
        if (
            isinstance(intent, Patch)
            and intent.subresource == "status"
            and intent.name == group
            and isinstance(intent.patch, dict)
        ):
            for item in intent.patch["status"]["conditions"]:
                found[item["type"]] = item
    return found
