"""Small builders for the slim objects and events the pure-core tests feed to the code.

Slim structs are built directly (the fold never sees JSON); `pod_json` and `node_json` build
API-server shaped JSON for the decoder tests.
"""

from __future__ import annotations

import copy
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

from events.chain import GENESIS, link
from events.objects import Job, Node, OwnerRef, Pod, PodGroup
from events.schema import Change, Observed
from events.topology import DEFAULT_LEVELS

BLOCK, RACK, HOST = DEFAULT_LEVELS
GPU = "nvidia.com/gpu"
NODE_ALLOC: dict[str, int] = {"cpu": 4000, "memory": 16 << 30, GPU: 4, "pods": 10}


def node_labels(block: str | None, rack: str | None, host: str | None) -> dict[str, str]:
    """Topology labels for the default levels; None leaves a level's label out."""
    labels = {"node.kubernetes.io/instance-type": "gpu-4x"}
    for key, value in ((BLOCK, block), (RACK, rack), (HOST, host)):
        if value is not None:
            labels[key] = value
    return labels


def make_node(
    name: str,
    *,
    block: str | None = "b1",
    rack: str | None = "r1",
    host: str | None = "",
    labels: dict[str, str] | None = None,
    allocatable: dict[str, int] | None = None,
    ready: bool = True,
    unschedulable: bool = False,
    deletion_ts: int | None = None,
    rv: str = "1",
) -> Node:
    """A node labelled at every default level (hostname = name) unless told otherwise."""
    return Node(
        name=name,
        uid=f"uid-{name}",
        rv=rv,
        deletion_ts=deletion_ts,
        labels=node_labels(block, rack, name if host == "" else host) if labels is None else labels,
        allocatable=dict(NODE_ALLOC if allocatable is None else allocatable),
        ready=ready,
        unschedulable=unschedulable,
    )


def make_pod(
    name: str,
    *,
    namespace: str = "ns",
    node: str = "",
    phase: str = "Pending",
    requests: dict[str, int] | None = None,
    owner: OwnerRef | None = None,
    pod_group: str = "",
    deletion_ts: int | None = None,
    rv: str = "1",
) -> Pod:
    return Pod(
        name=name,
        namespace=namespace,
        uid=f"uid-{namespace}-{name}",
        rv=rv,
        deletion_ts=deletion_ts,
        owners=() if owner is None else (owner,),
        node_name=node,
        pod_group=pod_group,
        requests=dict({"cpu": 1000, "memory": 1 << 30} if requests is None else requests),
        phase=phase,
    )


def make_job(name: str, *, namespace: str = "ns", rv: str = "1") -> Job:
    return Job(
        name=name,
        namespace=namespace,
        uid=f"uid-job-{name}",
        rv=rv,
        spec={"parallelism": 2, "completions": 2, "suspend": True},
        status={"active": 0},
    )


def make_podgroup(name: str, *, namespace: str = "ns", rv: str = "1") -> PodGroup:
    return PodGroup(
        name=name,
        namespace=namespace,
        uid=f"uid-pg-{name}",
        rv=rv,
        spec={"minMember": 2},
    )


def job_owner(name: str, *, controller: bool = True) -> OwnerRef:
    return OwnerRef("Job", name, f"uid-job-{name}", controller)


def observed(obj: Any, *, cluster: str = "c1", change: Change = "ADDED", at: int = 0) -> Observed:
    return Observed(at=at, cluster=cluster, change=change, obj=obj)


def vandalize(path: Path, sql: str, *params: object, rechain: bool = False) -> None:
    """Run `sql` on the log at `path` past the triggers that keep its events unchanged: only
    vandalism (a test of damaged logs) gets past them. With `rechain`, the digest chain is
    then made again over the rows as they are, as if a kbatchd had written them so: the
    damage is then one the chain vouches for (a test of what reading finds)."""
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("DROP TRIGGER IF EXISTS events_no_update")
        db.execute("DROP TRIGGER IF EXISTS events_no_delete")
        db.execute("DROP TRIGGER IF EXISTS events_digest_once")
        db.execute(sql, params)
        if rechain:
            digest = GENESIS
            rows = db.execute("SELECT seq, at, ref, body FROM events ORDER BY seq").fetchall()
            for seq, at, ref, body in rows:
                digest = link(digest, seq, at, ref, body)
                db.execute("UPDATE events SET digest = ? WHERE seq = ?", (digest, seq))
            db.execute(
                "UPDATE snapshots SET digest = (SELECT digest FROM events AS e"
                " WHERE e.seq = snapshots.seq)"
            )


# ---------------------------------------------------------------------------------------------
# API JSON, shaped as a real API server returns it


_POD_JSON: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "train-0-abcde",
        "generateName": "train-0-",
        "namespace": "team-a",
        "uid": "6f1c1c5e-8d6b-4a53-9b0e-0f3f1d2f9a11",
        "resourceVersion": "48211",
        "creationTimestamp": "2025-01-02T03:04:05Z",
        "labels": {
            "batch.kubernetes.io/job-name": "train",
            "batch.kubernetes.io/controller-uid": "0b0a3c1e-2f7f-4d61-8d2e-5c0a8f1e7b22",
        },
        "annotations": {"batch.kubernetes.io/job-completion-index": "0"},
        "ownerReferences": [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": "train",
                "uid": "0b0a3c1e-2f7f-4d61-8d2e-5c0a8f1e7b22",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
        "finalizers": ["batch.kubernetes.io/job-tracking"],
        "managedFields": [
            {
                "manager": "kube-controller-manager",
                "operation": "Update",
                "apiVersion": "v1",
                "time": "2025-01-02T03:04:05Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {".": {}}}},
            }
        ],
    },
    "spec": {
        "containers": [
            {
                "name": "trainer",
                "image": "registry.example/trainer:1.2",
                "command": ["python", "train.py"],
                "resources": {
                    "requests": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1"},
                    "limits": {"memory": "8Gi", "nvidia.com/gpu": "1"},
                },
                "volumeMounts": [
                    {
                        "name": "kube-api-access-x1",
                        "readOnly": True,
                        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                    }
                ],
                "terminationMessagePath": "/dev/termination-log",
                "imagePullPolicy": "IfNotPresent",
            }
        ],
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "nodeName": "gpu-node-7",
        "securityContext": {},
        "schedulerName": "default-scheduler",
        "tolerations": [
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            }
        ],
        "priority": 0,
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
    },
    "status": {
        "phase": "Running",
        "conditions": [
            {"type": "PodReadyToStartContainers", "status": "True"},
            {"type": "Initialized", "status": "True"},
            {"type": "Ready", "status": "True", "lastTransitionTime": "2025-01-02T03:04:20Z"},
            {"type": "ContainersReady", "status": "True"},
            {"type": "PodScheduled", "status": "True"},
        ],
        "hostIP": "10.0.0.7",
        "podIP": "10.244.3.17",
        "podIPs": [{"ip": "10.244.3.17"}],
        "startTime": "2025-01-02T03:04:05Z",
        "containerStatuses": [
            {
                "name": "trainer",
                "state": {"running": {"startedAt": "2025-01-02T03:04:19Z"}},
                "lastState": {},
                "ready": True,
                "restartCount": 0,
                "image": "registry.example/trainer:1.2",
                "imageID": "registry.example/trainer@sha256:0123",
                "containerID": "containerd://abc",
                "started": True,
            }
        ],
        "qosClass": "Burstable",
    },
}

_NODE_JSON: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {
        "name": "gpu-node-7",
        "uid": "2d0b9c61-7a8f-4c57-a1e1-3b7f0f1c9e44",
        "resourceVersion": "99120",
        "creationTimestamp": "2024-12-01T00:00:00Z",
        "labels": {
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/hostname": "gpu-node-7",
            "kubernetes.io/os": "linux",
            BLOCK: "b2",
            RACK: "r5",
        },
        "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
        "managedFields": [
            {
                "manager": "kubelet",
                "operation": "Update",
                "apiVersion": "v1",
                "time": "2025-01-02T00:00:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:status": {"f:allocatable": {}}},
                "subresource": "status",
            }
        ],
    },
    "spec": {"podCIDR": "10.244.3.0/24", "podCIDRs": ["10.244.3.0/24"]},
    "status": {
        "capacity": {
            "cpu": "96",
            "memory": "1056760412Ki",
            "nvidia.com/gpu": "8",
            "pods": "110",
            "ephemeral-storage": "3748905012Ki",
        },
        "allocatable": {
            "cpu": "95500m",
            "memory": "1048576Mi",
            "nvidia.com/gpu": "8",
            "pods": "110",
            "ephemeral-storage": "3455027484342",
            "hugepages-1Gi": "0",
        },
        "conditions": [
            {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"},
            {"type": "DiskPressure", "status": "False", "reason": "KubeletHasNoDiskPressure"},
            {"type": "PIDPressure", "status": "False", "reason": "KubeletHasSufficientPID"},
            {"type": "Ready", "status": "True", "reason": "KubeletReady"},
        ],
        "addresses": [
            {"type": "InternalIP", "address": "10.0.0.7"},
            {"type": "Hostname", "address": "gpu-node-7"},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {"kubeletVersion": "v1.31.2", "containerRuntimeVersion": "containerd://1.7"},
        "images": [{"names": ["registry.example/trainer:1.2"], "sizeBytes": 123456789}],
    },
}


def pod_json() -> dict[str, Any]:
    """A fresh copy of a realistic running Job pod, to be edited by the test."""
    return copy.deepcopy(_POD_JSON)


def node_json() -> dict[str, Any]:
    """A fresh copy of a realistic Ready GPU node."""
    return copy.deepcopy(_NODE_JSON)
