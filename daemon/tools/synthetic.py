"""A deterministic synthetic event stream of a GPU cluster: nodes in blocks and racks, and
pods of Jobs that are created, bound, run and finish. Used by `make bench` and the demo;
seeded, so two runs give the same stream."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Literal

from msgspec.structs import replace

from events.objects import Node, OwnerRef, Pod
from events.schema import Event, Observed, Tick
from events.topology import DEFAULT_LEVELS

BLOCK, RACK, HOST = DEFAULT_LEVELS
GPU = "nvidia.com/gpu"


def make_nodes(count: int, hosts_per_rack: int = 16, racks_per_block: int = 8) -> list[Node]:
    nodes = []
    for i in range(count):
        rack, host = divmod(i, hosts_per_rack)
        block = rack // racks_per_block
        name = f"b{block}-r{rack}-h{host}"
        nodes.append(
            Node(
                name=name,
                uid=f"node-{i}",
                rv=str(i + 1),
                labels={
                    BLOCK: f"b{block}",
                    RACK: f"b{block}-r{rack}",
                    HOST: name,
                    "node.kubernetes.io/instance-type": "gpu-8x",
                },
                allocatable={
                    "cpu": 96_000,
                    "memory": 1 << 40,
                    GPU: 8,
                    "pods": 110,
                    "ephemeral-storage": 500 << 30,
                },
                ready=True,
            )
        )
    return nodes


def make_pod(job: int, index: int, at: int, rv: int, gpus: int) -> Pod:
    job_name = f"train-{job}"
    return Pod(
        name=f"{job_name}-{index}-x{job % 97:02d}{index % 89:02d}",
        namespace=f"team-{job % 7}",
        uid=f"pod-{job}-{index}",
        rv=str(rv),
        created=at,
        labels={
            "batch.kubernetes.io/job-name": job_name,
            "batch.kubernetes.io/controller-uid": f"job-{job}",
            "batch.kubernetes.io/job-completion-index": str(index),
            "app.kubernetes.io/name": "trainer",
        },
        annotations={"batch.kubernetes.io/job-completion-index": str(index)},
        owners=(OwnerRef("Job", job_name, f"job-{job}", True),),
        finalizers=("kbatchd.dev/job-tracking",),
        scheduler_name="kbatchd",
        requests={"cpu": 8_000, "memory": 64 << 30, GPU: gpus},
    )


def stream(
    events: int,
    *,
    nodes: int = 1_000,
    cluster: str = "sim-0",
    seed: int = 1,
    start_ms: int = 1_767_225_600_000,
) -> Iterator[Event]:
    """Exactly `events` events: the nodes first, then pod lifecycles (ADDED, bound, Running,
    finished, DELETED) interleaved across many Jobs, node heartbeats and a Tick per second
    of simulated time."""
    rng = random.Random(seed)
    node_list = make_nodes(nodes)
    rv = len(node_list)
    at = start_ms
    emitted = 0
    for node in node_list:
        if emitted == events:
            return
        yield Observed(at=at, cluster=cluster, change="ADDED", obj=node)
        emitted += 1
    live: list[tuple[Pod, int]] = []  # (pod, next lifecycle step)
    free_gpus = {node.name: node.allocatable[GPU] for node in node_list}
    names = list(free_gpus)
    job = 0
    while emitted < events:
        at += rng.randint(0, 20)
        rv += 1
        roll = rng.random()
        if roll < 0.002:
            yield Tick(at=at)
        elif roll < 0.01:
            node = node_list[rng.randrange(len(node_list))]
            yield Observed(at=at, cluster=cluster, change="MODIFIED", obj=node)
        elif not live or (roll < 0.25 and len(live) < 20_000):
            job += 1
            gpus = rng.choice((1, 2, 4, 8))
            for index in range(rng.choice((1, 2, 4, 8))):
                live.append((make_pod(job, index, at, rv, gpus), 0))
            pod, _ = live[-1]
            live[-1] = (pod, 1)
            yield Observed(at=at, cluster=cluster, change="ADDED", obj=pod)
        else:
            slot = rng.randrange(len(live))
            pod, step = live[slot]
            change: Literal["ADDED", "MODIFIED", "DELETED"] = "MODIFIED"
            if step == 0:
                change = "ADDED"
            elif step == 1:
                # Like a scheduler under pressure: a few random nodes, the first with room.
                gpus = pod.requests[GPU]
                hosts = (names[rng.randrange(len(names))] for _ in range(8))
                host = next((h for h in hosts if free_gpus[h] >= gpus), None)
                if host is None:
                    yield Tick(at=at)  # stays pending; the clock moves on
                    emitted += 1
                    continue
                free_gpus[host] -= gpus
                pod = replace(pod, rv=str(rv), node_name=host)
            elif step == 2:
                pod = replace(pod, rv=str(rv), phase="Running", conditions={"Ready": "True"})
            elif step == 3:
                free_gpus[pod.node_name] += pod.requests[GPU]
                failed = rng.random() < 0.1
                pod = replace(
                    pod,
                    rv=str(rv),
                    phase="Failed" if failed else "Succeeded",
                    conditions={"Ready": "False"},
                    exit_codes={"main": 1 if failed else 0},
                )
            else:
                change = "DELETED"
            if change == "DELETED":
                live[slot] = live[-1]
                live.pop()
            else:
                live[slot] = (pod, step + 1)
            yield Observed(at=at, cluster=cluster, change=change, obj=pod)
        emitted += 1
