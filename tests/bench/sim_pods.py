"""CPU the simulated cluster spends per pod, in process and without HTTP: create, bind (as an
outside scheduler does), the node agent starting and finishing it, and deletion, with one pod
watch open so every write also builds its watch line. The gang benchmark's sim side is this
path plus the HTTP layer; `python -m tests.bench.sim_pods 20000` runs it alone (for profiling:
`python -m cProfile -s tottime -m tests.bench.sim_pods`)."""

from __future__ import annotations

import time
from typing import Any

from daemon.runtime import eventloop
from daemon.runtime.heap import relax_collector
from daemon.sim.cluster import SimCluster
from daemon.sim.registry import DeleteOptions
from daemon.sim.resources import NODES, PODS
from tests.bench.phases import Reached
from tests.bench.table import Table

TOPOLOGY = "blocks=1,racks=10,hosts=64,gpus=8,cpu=96,memory=256Gi"
PODS_DEFAULT = 14_000


def _pod(i: int) -> dict[str, Any]:
    # The shape of the gang benchmark's pods: another scheduler's, bound from outside.
    return {
        "metadata": {
            "name": f"p{i:06d}",
            "annotations": {"sim.kbatchd.dev/run-seconds": "0.5"},
            "labels": {"app": "bench"},
        },
        "spec": {
            "schedulerName": "kbatchd",
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "x", "resources": {"requests": {"cpu": "1"}}}],
        },
    }


async def run(table: Table, pods: int = PODS_DEFAULT) -> None:
    print(f"sim: per-pod CPU of the simulated cluster, {pods:,} pods in process", flush=True)
    relax_collector()  # this process hosts the simulated cluster, as `kbatchd sim` does
    # Time scale 1,000: timers fire at once and the run measures CPU, not waiting.
    sim = SimCluster(topology=TOPOLOGY, seed=1, time_scale=1_000.0)
    await sim.open(serve=False)
    watcher = sim.store.watch(PODS, None, None, sim.store.rv)
    nodes = [s.obj["metadata"]["name"] for s in sim.store.iter_objects(NODES)]
    try:
        finished = Reached(sim.store, pods, "Succeeded")
        start = time.process_time()
        for i in range(pods):
            sim.registry.create(PODS, "default", _pod(i))
        created = time.process_time()
        for i in range(pods):
            target = {"target": {"kind": "Node", "name": nodes[i % len(nodes)]}}
            sim.registry.bind("default", f"p{i:06d}", target)
        bound = time.process_time()
        await finished.wait()
        ran = time.process_time()
        for i in range(pods):
            sim.registry.delete(PODS, "default", f"p{i:06d}", DeleteOptions())
        deleted = time.process_time()
        # Nothing drains the watch: keep its queue from growing into the measurement.
        watcher.pending.clear()
    finally:
        sim.store.unwatch(watcher)
        await sim.close()
    steps = (
        ("create", created - start),
        ("bind", bound - created),
        ("start and finish (node agent)", ran - bound),
        ("delete", deleted - ran),
        ("all", deleted - start),
    )
    for step, seconds in steps:
        table.add(f"sim: {step}, CPU per pod", f"{seconds / pods * 1e6:.0f} µs")


if __name__ == "__main__":
    import sys

    eventloop.run(run, Table(), int(sys.argv[1]) if len(sys.argv) > 1 else PODS_DEFAULT)
