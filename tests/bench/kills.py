"""The kill campaign of gang admission: a 32-pod gang at a time, the daemon SIGKILLed after a
random number of its binds (1 to all 32, the status not written), the members bound before
the kill left to finish while it is down, then a restart. Counted: gangs still not whole
(every member bound, PodGroupScheduled=True) 30 s after the restart, and the time from the
restart (its `Started` event) to its first decision about the gang.
`python -m tests.bench.kills N` runs N kills (`make bench`: 12)."""

from __future__ import annotations

import random
import signal
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from daemon.runtime import eventloop
from daemon.sim.cluster import SimCluster
from daemon.sim.resources import PODS, by_kind
from events.schema import Decided, Started
from tests.bench.table import Table
from tests.processes import daemon_config, eventually, logged_events, running_daemon, spawn

TOPOLOGY = "blocks=1,racks=2,hosts=2,gpus=8"
SIZE = 32
KILLS = 12
NS = "default"


def _gang(name: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    group = {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"schedulingPolicy": {"gang": {"minCount": SIZE}}},
    }
    members = [
        {
            "metadata": {
                "name": f"{name}-{i:02d}",
                "annotations": {"sim.kbatchd.dev/run-seconds": "1"},
            },
            "spec": {
                "schedulerName": "kbatchd",
                "schedulingGroup": {"podGroupName": name},
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "main",
                        "image": "busybox",
                        "resources": {
                            "requests": {"nvidia.com/gpu": "1"},
                            "limits": {"nvidia.com/gpu": "1"},
                        },
                    }
                ],
            },
        }
        for i in range(SIZE)
    ]
    return group, members


def _whole(sim: SimCluster, name: str) -> bool:
    groups = by_kind("scheduling.k8s.io/v1alpha2", "PodGroup")
    assert groups is not None
    group = sim.get(groups, NS, name) or {}
    conditions = (group.get("status") or {}).get("conditions") or ()
    admitted = any(
        c.get("type") == "PodGroupScheduled" and c.get("status") == "True" for c in conditions
    )
    pods = [sim.get(PODS, NS, f"{name}-{i:02d}") or {} for i in range(SIZE)]
    return admitted and all((p.get("spec") or {}).get("nodeName") for p in pods)


def _phases(sim: SimCluster, name: str) -> list[str]:
    return [
        str(((sim.get(PODS, NS, f"{name}-{i:02d}") or {}).get("status") or {}).get("phase"))
        for i in range(SIZE)
    ]


async def campaign(kills: int, tmp: Path) -> tuple[int, list[float]]:
    """Gangs not whole after their restart, and the restart-to-decision times (s)."""
    rng = random.Random(29)
    groups = by_kind("scheduling.k8s.io/v1alpha2", "PodGroup")
    assert groups is not None
    partly = 0
    delays: list[float] = []
    async with SimCluster.start(topology=TOPOLOGY, seed=29) as sim:
        assert sim.kubeconfig_path is not None
        config = daemon_config(tmp, sim.kubeconfig_path)
        for round_ in range(kills):
            name = f"gang-{round_:02d}"
            after = rng.randint(1, SIZE)
            group, members = _gang(name)
            sim.registry.create(groups, NS, group)
            for body in members:
                sim.registry.create(PODS, NS, body)
            async with spawn(
                "daemon", "run", "--config", str(config), killed_after_binds=after
            ) as dying:
                assert await dying.wait(within=60) == -signal.SIGKILL, dying.output()

            async def finished(name: str = name) -> bool:
                return all(p in ("Pending", "Succeeded") for p in _phases(sim, name))

            await eventually(finished, within=30, what="the members bound before the kill ended")
            async with running_daemon(config):
                try:

                    async def whole(name: str = name) -> bool:
                        return _whole(sim, name)

                    await eventually(whole, within=30, what=f"{name} whole")
                except AssertionError:
                    partly += 1
            events = await logged_events(tmp / "kbatchd.db")
            start = max(seq for seq, e in events if isinstance(e, Started))
            began = next(e.at for seq, e in events if seq == start)
            key = f"PodGroup/sim-0/{NS}/{name}"
            first = next(
                (
                    e.at
                    for seq, e in events
                    if seq > start and isinstance(e, Decided) and e.key == key
                ),
                None,
            )
            if first is not None:
                delays.append((first - began) / 1000)
    return partly, delays


async def run(table: Table, kills: int = KILLS) -> None:
    with tempfile.TemporaryDirectory(prefix="kbatchd-kills-") as tmp:
        partly, delays = await campaign(kills, Path(tmp))
    table.add(
        f"gang kill campaign: {SIZE}-pod gangs left not whole, of {kills} kills",
        f"{partly}",
        "0",
        partly == 0,
    )
    if delays:
        table.add(
            "gang kill campaign: restart to its first decision about the gang",
            f"median {statistics.median(delays):.2f} s, max {max(delays):.2f} s",
            "max <= 5 s",
            max(delays) <= 5,
        )


if __name__ == "__main__":
    eventloop.run(run, Table(), int(sys.argv[1]) if len(sys.argv) > 1 else KILLS)
