"""Decoding API JSON (as an API server returns it) into the slim structs the log stores."""

from __future__ import annotations

import re
from typing import Any

import msgspec
import pytest

from events import objects
from events.objects import (
    MAX_ANNOTATION_CHARS,
    Job,
    JobSet,
    KObject,
    Node,
    NodeSelectorRequirement,
    ObjectError,
    OwnerRef,
    PersistentVolumeClaim,
    Pod,
    PodGroup,
    PriorityClass,
    Taint,
    Toleration,
    Workload,
    decode_object,
    decode_object_dict,
    decode_watch_line,
    object_key,
    read_annotations,
    rfc3339,
    timestamp_ms,
)
from tests.events.builders import BLOCK, GPU, RACK, node_json, pod_json

GI = 2**30
CREATED_MS = 1_735_787_045_000  # 2025-01-02T03:04:05Z
JOB_UID = "0b0a3c1e-2f7f-4d61-8d2e-5c0a8f1e7b22"


def edit(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """Set a dotted path (list indexes as numbers) in a JSON document; returns the document."""
    *parents, last = path.split(".")
    node: Any = doc
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return doc


def decode_pod(doc: dict[str, Any]) -> Pod:
    pod = decode_object("Pod", msgspec.json.encode(doc))
    assert isinstance(pod, Pod)
    return pod


def decode_node(doc: dict[str, Any]) -> Node:
    node = decode_object("Node", msgspec.json.encode(doc))
    assert isinstance(node, Node)
    return node


# ---------------------------------------------------------------------------------------------
# Pods


def test_realistic_pod_decodes_every_field() -> None:
    assert decode_pod(pod_json()) == Pod(
        name="train-0-abcde",
        namespace="team-a",
        uid="6f1c1c5e-8d6b-4a53-9b0e-0f3f1d2f9a11",
        rv="48211",
        generation=0,
        created=CREATED_MS,
        deletion_ts=None,
        labels={
            "batch.kubernetes.io/job-name": "train",
            "batch.kubernetes.io/controller-uid": JOB_UID,
        },
        annotations={"batch.kubernetes.io/job-completion-index": "0"},
        owners=(OwnerRef("Job", "train", JOB_UID, True),),
        finalizers=("batch.kubernetes.io/job-tracking",),
        node_name="gpu-node-7",
        scheduler_name="default-scheduler",
        pod_group="",
        priority=0,
        requests={"cpu": 2000, "memory": 4 * GI, GPU: 1},
        scheduling_gates=(),
        phase="Running",
        conditions={
            "PodReadyToStartContainers": "True",
            "Initialized": "True",
            "Ready": "True",
            "ContainersReady": "True",
            "PodScheduled": "True",
        },
        restart_count=0,
        exit_codes={},
        grace_seconds=30,
        ready_changed=CREATED_MS + 15_000,
        tolerations=(Toleration("node.kubernetes.io/not-ready", "Exists", "", "NoExecute"),),
    )


def test_minimal_pod_gets_api_defaults() -> None:
    pod = decode_object("Pod", b'{"metadata": {"name": "p", "namespace": "ns"}}')
    assert pod == Pod(name="p", namespace="ns")
    assert isinstance(pod, Pod)
    assert (pod.phase, pod.ready, pod.terminal, pod.grace_seconds) == ("Pending", False, False, 30)


def test_pod_keeps_its_node_selector_and_when_ready_changed() -> None:
    raw = {
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"nodeSelector": {"rack": "r1"}},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "False", "lastTransitionTime": "2025-01-02T03:04:05Z"}
            ]
        },
    }
    pod = decode_object("Pod", msgspec.json.encode(raw))
    assert isinstance(pod, Pod)
    assert (pod.node_selector, pod.ready_changed) == ({"rack": "r1"}, CREATED_MS)


def _c(name: str, *, requests: Any = None, limits: Any = None, always: bool = False) -> Any:
    container: dict[str, Any] = {"name": name, "image": "busybox"}
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    if resources:
        container["resources"] = resources
    if always:
        container["restartPolicy"] = "Always"
    return container


@pytest.mark.parametrize(
    ("containers", "init_containers", "overhead", "expected"),
    [
        pytest.param([_c("a")], None, None, {}, id="no-resources"),
        pytest.param(
            [_c("a", requests={"cpu": "500m", "memory": "1Gi"})],
            None,
            None,
            {"cpu": 500, "memory": GI},
            id="one-container",
        ),
        pytest.param(
            [_c("a", requests={"cpu": "1", GPU: "2"}), _c("b", requests={"cpu": "250m"})],
            None,
            None,
            {"cpu": 1250, GPU: 2},
            id="containers-summed",
        ),
        pytest.param(
            [_c("a", requests={"cpu": 2, "memory": 1024})],
            None,
            None,
            {"cpu": 2000, "memory": 1024},
            id="json-numbers",
        ),
        pytest.param(
            [_c("a", limits={"cpu": "2", GPU: "1"})],
            None,
            None,
            {"cpu": 2000, GPU: 1},
            id="limits-default-requests",
        ),
        pytest.param(
            [_c("a", requests={"cpu": "1"}, limits={"cpu": "4", "memory": "2Gi"})],
            None,
            None,
            {"cpu": 1000, "memory": 2 * GI},
            id="requests-win-over-limits-per-resource",
        ),
        pytest.param(
            [_c("a", requests={"cpu": "1"})],
            [_c("init", requests={"cpu": "3", "memory": "1Gi"})],
            None,
            {"cpu": 3000, "memory": GI},
            id="init-peak-above-sum",
        ),
        pytest.param(
            [_c("a", requests={"cpu": "2"}), _c("b", requests={"cpu": "2"})],
            [_c("init-1", requests={"cpu": "3"}), _c("init-2", requests={"cpu": "1"})],
            None,
            {"cpu": 4000},
            id="init-max-not-sum",
        ),
        pytest.param(
            [_c("a", requests={"cpu": "1"})],
            [_c("sidecar", requests={"cpu": "500m", "memory": "64Mi"}, always=True)],
            None,
            {"cpu": 1500, "memory": 64 * 2**20},
            id="sidecar-added-to-sum",
        ),
        pytest.param(
            [_c("a", requests={"cpu": "1"})],
            [
                _c("sidecar", requests={"cpu": "1"}, always=True),
                _c("init", requests={"cpu": "3"}),
            ],
            None,
            {"cpu": 4000},
            id="init-after-sidecar-runs-beside-it",
        ),
        pytest.param(
            [_c("a", requests={"cpu": "1"})],
            [
                _c("init", requests={"cpu": "3"}),
                _c("sidecar", requests={"cpu": "1"}, always=True),
            ],
            None,
            {"cpu": 3000},
            id="init-before-sidecar-runs-alone",
        ),
        pytest.param(
            [_c("a", requests={"cpu": "1"})],
            [_c("init", limits={"cpu": "5"})],
            None,
            {"cpu": 5000},
            id="init-limits-default-requests",
        ),
        pytest.param(
            [_c("a", requests={"cpu": "1"})],
            None,
            {"cpu": "250m", "memory": "120Mi"},
            {"cpu": 1250, "memory": 120 * 2**20},
            id="overhead-added",
        ),
        pytest.param(
            [_c("a", requests={"cpu": "1"})],
            [_c("init", requests={"cpu": "4"})],
            {"cpu": "100m"},
            {"cpu": 4100},
            id="overhead-on-top-of-init-peak",
        ),
        pytest.param(
            [_c("a", requests={"cpu": "1"})],
            [_c("init", requests={"ephemeral-storage": "1Gi"})],
            None,
            {"cpu": 1000, "ephemeral-storage": GI},
            id="init-only-resource",
        ),
        pytest.param(
            [_c("a", requests={"cpu": "0"})],
            [_c("init", requests={"cpu": "0", "memory": "0"})],
            None,
            {},
            id="zero-requests-not-stored",
        ),
        pytest.param(
            [_c("a", requests={"cpu": "2", "nvidia.com/gpu": "0"}, limits={"memory": "1Gi"})],
            None,
            None,
            {"cpu": 2000, "memory": GI},
            id="one-container-zero-dropped-limit-defaults",
        ),
        pytest.param([_c("a")], None, None, {}, id="one-container-no-resources"),
    ],
)
def test_pod_effective_requests(
    containers: list[Any],
    init_containers: list[Any] | None,
    overhead: dict[str, Any] | None,
    expected: dict[str, int],
) -> None:
    doc = pod_json()
    doc["spec"]["containers"] = containers
    if init_containers is not None:
        doc["spec"]["initContainers"] = init_containers
    if overhead is not None:
        doc["spec"]["overhead"] = overhead
    assert decode_pod(doc).requests == expected


@pytest.mark.parametrize(
    ("path", "value", "field", "expected"),
    [
        pytest.param(
            "spec.schedulingGates",
            [{"name": "kbatchd.dev/admission"}, {"name": "example.com/quota"}],
            "scheduling_gates",
            ("kbatchd.dev/admission", "example.com/quota"),
            id="scheduling-gates",
        ),
        pytest.param(
            "spec.schedulingGroup", {"podGroupName": "pg-7"}, "pod_group", "pg-7", id="pod-group"
        ),
        pytest.param("spec.schedulerName", "kbatchd", "scheduler_name", "kbatchd", id="scheduler"),
        pytest.param("spec.priority", 1000, "priority", 1000, id="priority"),
        pytest.param("spec.priority", None, "priority", 0, id="priority-null"),
        pytest.param("spec.nodeName", "", "node_name", "", id="unbound"),
        pytest.param(
            "spec.terminationGracePeriodSeconds", 0, "grace_seconds", 0, id="grace-zero-kept"
        ),
        pytest.param(
            "spec.terminationGracePeriodSeconds", 120, "grace_seconds", 120, id="grace-set"
        ),
        pytest.param("status.phase", "Succeeded", "phase", "Succeeded", id="phase"),
        pytest.param(
            "metadata.deletionTimestamp",
            "2025-01-02T03:05:00Z",
            "deletion_ts",
            1_735_787_100_000,
            id="deletion-timestamp-ms",
        ),
        pytest.param("metadata.generation", 3, "generation", 3, id="generation"),
        pytest.param("metadata.labels", None, "labels", {}, id="labels-null"),
    ],
)
def test_pod_fields(path: str, value: Any, field: str, expected: Any) -> None:
    assert getattr(decode_pod(edit(pod_json(), path, value)), field) == expected


@pytest.mark.parametrize(
    ("phase", "terminal"),
    [
        ("Pending", False),
        ("Running", False),
        ("Unknown", False),
        ("Succeeded", True),
        ("Failed", True),
    ],
)
def test_pod_terminal_phases(phase: str, terminal: bool) -> None:
    assert decode_pod(edit(pod_json(), "status.phase", phase)).terminal is terminal


@pytest.mark.parametrize(
    ("conditions", "ready"),
    [
        pytest.param([{"type": "Ready", "status": "True"}], True, id="ready"),
        pytest.param([{"type": "Ready", "status": "False"}], False, id="not-ready"),
        pytest.param([{"type": "PodScheduled", "status": "True"}], False, id="no-ready-condition"),
        pytest.param(None, False, id="no-conditions"),
    ],
)
def test_pod_ready(conditions: list[dict[str, str]] | None, ready: bool) -> None:
    assert decode_pod(edit(pod_json(), "status.conditions", conditions)).ready is ready


def _status(name: str, restarts: int, state: Any, last: Any = None) -> dict[str, Any]:
    status: dict[str, Any] = {"name": name, "restartCount": restarts, "state": state}
    if last is not None:
        status["lastState"] = last
    return status


RUNNING = {"running": {"startedAt": "2025-01-02T03:04:19Z"}}


def _terminated(code: int) -> dict[str, Any]:
    return {"terminated": {"exitCode": code, "reason": "Error", "containerID": "containerd://x"}}


@pytest.mark.parametrize(
    ("statuses", "restarts", "exit_codes"),
    [
        pytest.param(None, 0, {}, id="no-statuses"),
        pytest.param([_status("a", 0, RUNNING, {})], 0, {}, id="running"),
        pytest.param([_status("a", 0, _terminated(0))], 0, {"a": 0}, id="completed"),
        pytest.param(
            [_status("a", 2, RUNNING, _terminated(137)), _status("b", 3, RUNNING)],
            5,
            {"a": 137},
            id="restarts-summed-last-state-exit",
        ),
        pytest.param(
            [_status("a", 1, _terminated(1), _terminated(137))],
            1,
            {"a": 1},
            id="current-state-wins",
        ),
        pytest.param(
            [_status("a", 0, {"waiting": {"reason": "ContainerCreating"}})],
            0,
            {},
            id="waiting",
        ),
        pytest.param(
            [_status("a", 0, _terminated(0)), _status("b", 4, _terminated(42))],
            4,
            {"a": 0, "b": 42},
            id="per-container",
        ),
    ],
)
def test_pod_restarts_and_exit_codes(
    statuses: list[dict[str, Any]] | None, restarts: int, exit_codes: dict[str, int]
) -> None:
    pod = decode_pod(edit(pod_json(), "status.containerStatuses", statuses))
    assert (pod.restart_count, pod.exit_codes) == (restarts, exit_codes)


@pytest.mark.parametrize(
    ("owner_refs", "owners", "controller"),
    [
        pytest.param(None, (), None, id="none"),
        pytest.param(
            [{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "u1"}],
            (OwnerRef("Node", "n1", "u1", False),),
            None,
            id="owner-not-controller",
        ),
        pytest.param(
            [
                {"kind": "ConfigMap", "name": "cm", "uid": "u0", "controller": False},
                {"kind": "Job", "name": "train", "uid": "u1", "controller": True},
            ],
            (OwnerRef("ConfigMap", "cm", "u0", False), OwnerRef("Job", "train", "u1", True)),
            OwnerRef("Job", "train", "u1", True),
            id="controller-picked",
        ),
    ],
)
def test_pod_owners(
    owner_refs: list[dict[str, Any]] | None,
    owners: tuple[OwnerRef, ...],
    controller: OwnerRef | None,
) -> None:
    pod = decode_pod(edit(pod_json(), "metadata.ownerReferences", owner_refs))
    assert (pod.owners, pod.controller) == (owners, controller)


NETWORK_STATUS = '[{"name": "cbr0", "interface": "eth0", "ips": ["10.244.3.17"]}]' * 8


@pytest.mark.parametrize(
    ("annotations", "kept"),
    [
        pytest.param(None, {}, id="none"),
        pytest.param(
            {
                "batch.kubernetes.io/job-completion-index": "3",
                "jobset.sigs.k8s.io/restart-attempt": "1",
                "alpha.jobset.sigs.k8s.io/exclusive-topology": RACK,
                "kueue.x-k8s.io/podset-required-topology": RACK,
                "kbatchd.dev/pod-ordinal": "7",
            },
            {
                "batch.kubernetes.io/job-completion-index": "3",
                "jobset.sigs.k8s.io/restart-attempt": "1",
                "alpha.jobset.sigs.k8s.io/exclusive-topology": RACK,
                "kueue.x-k8s.io/podset-required-topology": RACK,
                "kbatchd.dev/pod-ordinal": "7",
            },
            id="every-prefix-read",
        ),
        pytest.param(
            {
                "k8s.v1.cni.cncf.io/network-status": NETWORK_STATUS,
                "kubectl.kubernetes.io/last-applied-configuration": "{}" * 500,
                "sidecar.istio.io/status": "{}",
                "sim.kbatchd.dev/run-seconds": "5",
                "kbatchd.dev/pod-ordinal": "2",
            },
            {"kbatchd.dev/pod-ordinal": "2"},
            id="others-dropped",
        ),
        pytest.param({"example.com/kbatchd.dev/x": "1"}, {}, id="prefix-only-at-the-start"),
    ],
)
def test_a_pod_keeps_only_the_annotations_kbatchd_reads(
    annotations: dict[str, str] | None, kept: dict[str, str]
) -> None:
    assert decode_pod(edit(pod_json(), "metadata.annotations", annotations)).annotations == kept


@pytest.mark.parametrize(
    ("annotations", "kept", "dropped"),
    [
        (
            {"kbatchd.dev/a": "x" * MAX_ANNOTATION_CHARS},
            {"kbatchd.dev/a": "x" * MAX_ANNOTATION_CHARS},
            [],
        ),
        ({"kbatchd.dev/a": "x" * (MAX_ANNOTATION_CHARS + 1)}, {}, ["kbatchd.dev/a"]),
        (
            {"kueue.x-k8s.io/b": "y" * 200_000, "kbatchd.dev/c": "short"},
            {"kbatchd.dev/c": "short"},
            ["kueue.x-k8s.io/b"],
        ),
        ({"example.com/not-read": "z" * 200_000}, {}, []),
    ],
    ids=["at-the-limit", "one-past-it", "huge-beside-short", "not-read-at-all"],
)
def test_a_kept_annotation_longer_than_the_limit_is_dropped_and_named(
    annotations: dict[str, str], kept: dict[str, str], dropped: list[str]
) -> None:
    named: list[str] = []
    assert read_annotations(annotations, named) == kept
    assert named == dropped
    assert decode_pod(edit(pod_json(), "metadata.annotations", annotations)).annotations == kept


def test_the_kept_keys_memo_stays_bounded_and_answers_alike() -> None:
    keys = [f"example.com/per-pod-{i}" for i in range(objects._KEPT_KEYS_MAX + 10)]
    for key in keys:
        assert read_annotations({key: "x", "kbatchd.dev/pod-ordinal": "1"}) == {
            "kbatchd.dev/pod-ordinal": "1"
        }
        assert len(objects._KEPT_KEYS) <= objects._KEPT_KEYS_MAX


# ---------------------------------------------------------------------------------------------
# Nodes


def test_realistic_node_decodes_every_field() -> None:
    assert decode_node(node_json()) == Node(
        name="gpu-node-7",
        uid="2d0b9c61-7a8f-4c57-a1e1-3b7f0f1c9e44",
        rv="99120",
        created=1_733_011_200_000,
        labels={
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/hostname": "gpu-node-7",
            "kubernetes.io/os": "linux",
            BLOCK: "b2",
            RACK: "r5",
        },
        annotations={},  # node.alpha.kubernetes.io/ttl is none of kbatchd's
        allocatable={
            "cpu": 95_500,
            "memory": 2**40,
            GPU: 8,
            "pods": 110,
            "ephemeral-storage": 3_455_027_484_342,
            "hugepages-1Gi": 0,
        },
        ready=True,
        unschedulable=False,
        taints=(),
    )


@pytest.mark.parametrize(
    ("conditions", "ready"),
    [
        pytest.param([{"type": "Ready", "status": "True"}], True, id="ready"),
        pytest.param([{"type": "Ready", "status": "False"}], False, id="not-ready"),
        pytest.param([{"type": "Ready", "status": "Unknown"}], False, id="unknown"),
        pytest.param([{"type": "DiskPressure", "status": "True"}], False, id="no-ready"),
        pytest.param(None, False, id="no-conditions"),
    ],
)
def test_node_ready(conditions: list[dict[str, str]] | None, ready: bool) -> None:
    assert decode_node(edit(node_json(), "status.conditions", conditions)).ready is ready


def test_node_cordoned_with_taints() -> None:
    doc = node_json()
    doc["spec"]["unschedulable"] = True
    doc["spec"]["taints"] = [
        {
            "key": "node.kubernetes.io/unschedulable",
            "effect": "NoSchedule",
            "timeAdded": "2025-01-02T00:00:00Z",
        },
        {"key": GPU, "value": "present", "effect": "NoSchedule"},
        {"key": "maintenance", "value": "", "effect": "NoExecute"},
    ]
    node = decode_node(doc)
    assert node.unschedulable is True
    assert node.taints == (
        Taint("node.kubernetes.io/unschedulable", "NoSchedule", ""),
        Taint(GPU, "NoSchedule", "present"),
        Taint("maintenance", "NoExecute", ""),
    )


def test_node_without_allocatable() -> None:
    doc = node_json()
    del doc["status"]["allocatable"]
    assert decode_node(doc).allocatable == {}


# ---------------------------------------------------------------------------------------------
# Generic kinds keep spec and status as dicts


_JOB_SPEC = {
    "parallelism": 4,
    "completions": 4,
    "completionMode": "Indexed",
    "backoffLimit": 6,
    "suspend": True,
    "template": {
        "metadata": {"annotations": {"kueue.x-k8s.io/podset-required-topology": RACK}},
        "spec": {"containers": [{"name": "w", "resources": {"requests": {GPU: "8"}}}]},
    },
}
_JOB_STATUS = {"active": 0, "ready": 0, "conditions": [{"type": "Suspended", "status": "True"}]}


@pytest.mark.parametrize(
    ("kind", "cls", "spec", "status"),
    [
        pytest.param("Job", Job, _JOB_SPEC, _JOB_STATUS, id="Job"),
        pytest.param(
            "JobSet",
            JobSet,
            {"replicatedJobs": [{"name": "workers", "replicas": 2}], "suspend": False},
            {"restarts": 1, "replicatedJobsStatus": [{"name": "workers", "active": 2}]},
            id="JobSet",
        ),
        pytest.param(
            "Workload",
            Workload,
            {"queueName": "team-a", "podSets": [{"name": "main", "count": 4}]},
            {"admission": {"clusterQueue": "cq"}},
            id="Workload",
        ),
        pytest.param(
            "PodGroup",
            PodGroup,
            {"minMember": 8, "scheduleTimeoutSeconds": 60},
            {"phase": "Pending"},
            id="PodGroup",
        ),
        pytest.param(
            "PersistentVolumeClaim",
            PersistentVolumeClaim,
            {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}},
            {"phase": "Bound", "capacity": {"storage": "10Gi"}},
            id="PVC",
        ),
        pytest.param("Job", Job, {"suspend": False}, None, id="no-status"),
    ],
)
def test_generic_kinds_keep_spec_and_status(
    kind: str,
    cls: type[KObject],
    spec: dict[str, Any],
    status: dict[str, Any] | None,
) -> None:
    doc: dict[str, Any] = {
        "apiVersion": "example/v1",
        "kind": kind,
        "metadata": {
            "name": "obj",
            "namespace": "team-a",
            "uid": "u-1",
            "resourceVersion": "77",
            "generation": 2,
            "creationTimestamp": "2025-01-02T03:04:05Z",
            "labels": {"app": "x"},
            "managedFields": [{"manager": "kubectl", "operation": "Apply"}],
        },
        "spec": spec,
    }
    if status is not None:
        doc["status"] = status
    obj = decode_object(kind, msgspec.json.encode(doc))
    assert type(obj) is cls
    assert obj == cls(  # type: ignore[call-arg]
        name="obj",
        namespace="team-a",
        uid="u-1",
        rv="77",
        generation=2,
        created=CREATED_MS,
        labels={"app": "x"},
        spec=spec,
        status=status or {},
    )


@pytest.mark.parametrize(
    ("fields", "value", "default", "policy"),
    [
        ({"value": 1000}, 1000, False, "PreemptLowerPriority"),
        ({"value": -5, "globalDefault": True, "preemptionPolicy": "Never"}, -5, True, "Never"),
        ({}, 0, False, "PreemptLowerPriority"),
    ],
    ids=["value", "every-field", "api-defaults"],
)
def test_a_priority_class_keeps_its_value_default_and_policy(
    fields: dict[str, Any], value: int, default: bool, policy: str
) -> None:
    doc = {"metadata": {"name": "high", "uid": "u-1", "resourceVersion": "3"}, **fields}
    obj = decode_object("PriorityClass", msgspec.json.encode(doc))
    assert obj == PriorityClass(
        name="high",
        uid="u-1",
        rv="3",
        value=value,
        global_default=default,
        preemption_policy=policy,
    )


def test_a_priority_class_whose_value_is_not_a_number_is_named() -> None:
    with pytest.raises(
        ObjectError, match=re.escape("PriorityClass: Expected `int`, got `str` - at `$.value`")
    ):
        decode_object("PriorityClass", b'{"metadata": {"name": "x"}, "value": "high"}')


@pytest.mark.parametrize("kind", ["Pod", "Node", "Job"])
def test_decode_object_dict_matches_bytes(kind: str) -> None:
    doc = node_json() if kind == "Node" else pod_json()
    assert decode_object_dict(kind, doc) == decode_object(kind, msgspec.json.encode(doc))


STATUS_410 = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": "too old resource version: 1 (2)",
    "reason": "Expired",
    "code": 410,
}


@pytest.mark.parametrize(
    ("kind", "type_", "obj", "one_pass"),
    [
        ("Pod", "ADDED", pod_json(), True),
        ("Pod", "DELETED", pod_json(), True),
        ("Pod", "BOOKMARK", {"kind": "Pod", "metadata": {"resourceVersion": "77"}}, True),
        # Not a pod's shape: the general path decodes it (and says what is wrong).
        ("Pod", "ERROR", STATUS_410, False),
        (
            "Pod",
            "MODIFIED",
            edit(pod_json(), "spec.containers.0.resources.requests.cpu", "x"),
            False,
        ),
        ("Pod", "MODIFIED", {"metadata": {"name": 5}}, False),
        # Other kinds always go the general way.
        ("Node", "ADDED", node_json(), False),
    ],
)
def test_a_watch_line_decodes_in_one_pass_as_its_object_would(
    kind: str, type_: str, obj: dict[str, Any], one_pass: bool
) -> None:
    line = msgspec.json.encode({"type": type_, "object": obj})
    decoded = decode_watch_line(kind, line)
    if not one_pass:
        assert decoded is None
        return
    assert decoded == (type_, decode_object(kind, msgspec.json.encode(obj)))


@pytest.mark.parametrize("raw_type", [bytes, str])
def test_decode_accepts_bytes_and_str(raw_type: type) -> None:
    text = msgspec.json.encode(pod_json()).decode()
    raw = text.encode() if raw_type is bytes else text
    assert decode_object("Pod", raw).name == "train-0-abcde"


# ---------------------------------------------------------------------------------------------
# Errors: always ObjectError, naming the kind, the field and the value


def _pod_with(path: str, value: Any) -> bytes:
    return msgspec.json.encode(edit(pod_json(), path, value))


def _node_with(path: str, value: Any) -> bytes:
    return msgspec.json.encode(edit(node_json(), path, value))


@pytest.mark.parametrize(
    ("kind", "raw", "fragments"),
    [
        pytest.param(
            "Pod",
            _pod_with("spec.containers.0.resources.requests.cpu", "abc"),
            ["spec.containers[0].resources", "'abc'", "cpu"],
            id="bad-container-quantity",
        ),
        pytest.param(
            "Pod",
            _pod_with("spec.containers.0.resources.limits.ephemeral-storage", "8Qi"),
            ["spec.containers[0].resources", "'8Qi'", "ephemeral-storage"],
            id="bad-limit-quantity",
        ),
        pytest.param(
            "Pod",
            _pod_with(
                "spec.initContainers",
                [_c("i0"), _c("i1", requests={"cpu": "1.2.3"})],
            ),
            ["spec.initContainers[1].resources", "'1.2.3'"],
            id="bad-init-quantity",
        ),
        pytest.param(
            "Pod",
            _pod_with("spec.containers.0.resources.requests.cpu", "-1"),
            ["spec.containers[0].resources", "negative quantity '-1' for cpu"],
            id="negative-quantity",
        ),
        pytest.param(
            "Pod",
            _pod_with("spec.overhead", {"cpu": "lots"}),
            ["spec.overhead", "'lots'"],
            id="bad-overhead",
        ),
        pytest.param(
            "Pod",
            _pod_with("spec.containers.0.resources.requests.cpu", True),
            ["$.spec.containers[0].resources.requests"],
            id="bool-quantity",
        ),
        pytest.param(
            "Node",
            _node_with("status.allocatable.memory", "1Gb"),
            ["status.allocatable", "'1Gb'", "memory"],
            id="bad-allocatable",
        ),
        pytest.param("Pod", b'{"metadata": {', ["malformed JSON"], id="truncated-json"),
        pytest.param("Job", b"not json", ["malformed JSON"], id="not-json"),
        pytest.param("Pod", b"[]", ["Expected `object`, got `array`"], id="array"),
        pytest.param(
            "Pod", _pod_with("metadata.name", 5), ["$.metadata.name", "`str`"], id="name-int"
        ),
        pytest.param(
            "Node",
            _node_with("spec.unschedulable", "yes"),
            ["$.spec.unschedulable", "`bool`"],
            id="unschedulable-str",
        ),
        pytest.param(
            "Pod",
            _pod_with("spec.containers", {"name": "a"}),
            ["$.spec.containers", "`array`"],
            id="containers-object",
        ),
        pytest.param("Job", b'{"spec": "x"}', ["$.spec", "`object`"], id="job-spec-str"),
        pytest.param(
            "Pod",
            _pod_with("metadata.creationTimestamp", "yesterday"),
            ["metadata.creationTimestamp", "'yesterday'"],
            id="bad-creation-time",
        ),
        pytest.param(
            "Workload",
            b'{"metadata": {"deletionTimestamp": "2025-13-01T00:00:00Z"}}',
            ["metadata.deletionTimestamp", "'2025-13-01T00:00:00Z'"],
            id="bad-deletion-time",
        ),
    ],
)
def test_decode_errors(kind: str, raw: bytes, fragments: list[str]) -> None:
    with pytest.raises(ObjectError) as info:
        decode_object(kind, raw)
    message = str(info.value)
    assert message.startswith(f"{kind}: ")
    for fragment in fragments:
        assert fragment in message


@pytest.mark.parametrize("kind", ["Deployment", "pod", ""])
def test_unknown_kind(kind: str) -> None:
    with pytest.raises(ObjectError, match=f"kind {kind!r} is not one kbatchd folds"):
        decode_object(kind, b"{}")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, None),
        ("1970-01-01T00:00:00Z", 0),
        ("2025-01-02T03:04:05Z", CREATED_MS),
        ("2025-01-02T04:04:05+01:00", CREATED_MS),
        ("2025-01-02T03:04:05.250Z", CREATED_MS + 250),
    ],
)
def test_timestamp_ms(text: str | None, expected: int | None) -> None:
    assert timestamp_ms(text) == expected


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (0, "1970-01-01T00:00:00Z"),
        (CREATED_MS, "2025-01-02T03:04:05Z"),
        (CREATED_MS + 999, "2025-01-02T03:04:05Z"),  # metav1.Time keeps whole seconds
        (CREATED_MS + 1_000, "2025-01-02T03:04:06Z"),
    ],
)
def test_rfc3339_is_timestamp_ms_inverse_to_the_second(ms: int, text: str) -> None:
    assert rfc3339(ms) == text
    assert timestamp_ms(rfc3339(ms)) == ms - ms % 1000


@pytest.mark.parametrize(
    ("cluster", "namespace", "name", "key"),
    [("c1", "ns", "p", "c1/ns/p"), ("c1", "", "node-1", "c1//node-1")],
)
def test_object_key(cluster: str, namespace: str, name: str, key: str) -> None:
    assert object_key(cluster, namespace, name) == key


def test_required_node_affinity_decodes_into_terms() -> None:
    pod = decode_object_dict(
        "Pod",
        {
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "pool", "operator": "In", "values": ["a", "b"]}
                                    ],
                                    "matchFields": [
                                        {
                                            "key": "metadata.name",
                                            "operator": "NotIn",
                                            "values": ["n9"],
                                        }
                                    ],
                                },
                                {"matchExpressions": [{"key": "spot", "operator": "Exists"}]},
                            ]
                        },
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {"weight": 1, "preference": {"matchExpressions": []}}
                        ],
                    }
                }
            },
        },
    )
    assert isinstance(pod, Pod)
    assert pod.node_affinity == (
        (
            NodeSelectorRequirement("pool", "In", ("a", "b")),
            NodeSelectorRequirement("metadata.name", "NotIn", ("n9",), field=True),
        ),
        (NodeSelectorRequirement("spot", "Exists"),),
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, None),
        ("2026-01-01T00:00:00Z", 1_767_225_600_000),
        ("2026-01-01T01:00:00+01:00", 1_767_225_600_000),
        ("2026-01-01T00:00:00.250Z", 1_767_225_600_250),
    ],
)
def test_timestamps_are_unix_milliseconds(text: str | None, expected: int | None) -> None:
    assert timestamp_ms(text) == expected


@pytest.mark.parametrize("text", ["yesterday", "", "2026-13-01T00:00:00Z"])
def test_a_bad_timestamp_names_its_field_every_time(text: str) -> None:
    for _ in range(2):  # the second time from the parse cache
        with pytest.raises(ObjectError, match=r"status\.startTime: invalid RFC 3339 time"):
            timestamp_ms(text, "status.startTime")
