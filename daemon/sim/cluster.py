"""`SimCluster`: one simulated cluster (store, API server, controllers, node agent, faults)
as an async context manager for tests, the demo and `kbatchd sim`.

    async with SimCluster.start(topology="blocks=1,racks=2,hosts=2", seed=1, time_scale=100) as sim:
        ...  # kubeconfig at sim.kubeconfig_path, API at sim.url
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from daemon.sim import kubeconfig
from daemon.sim import topology as topologies
from daemon.sim.agent import NodeAgent
from daemon.sim.faults import Faults
from daemon.sim.gc import GarbageCollector
from daemon.sim.inplace_agent import InPlaceRestartAgents
from daemon.sim.registry import Registry
from daemon.sim.resources import NAMESPACES, NODES, Resource, lookup
from daemon.sim.server import ApiServer
from daemon.sim.store import DEFAULT_HISTORY, Obj, Store, Stored, WatchEvent

_PRIORITY_CLASSES = lookup("scheduling.k8s.io", "v1", "priorityclasses")
_SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
_SYSTEM_PRIORITIES = (("system-cluster-critical", 2000000000), ("system-node-critical", 2000001000))


class SimCluster:
    """A simulated cluster. Build with `SimCluster.start(...)`; everything is reachable from
    the instance: `url`, `kubeconfig_path`, `store`, `registry`, `agent`, `faults`."""

    def __init__(
        self,
        *,
        topology: str | list[Obj] | None = None,
        seed: int | None = None,
        time_scale: float = 1.0,
        faults: Faults | str | None = None,
        bookmark_seconds: float = 60.0,
        history: int = DEFAULT_HISTORY,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        kubeconfig_path: str | Path | None = None,
        name: str = "sim",
        start_seconds: float = 1.0,
        not_ready_fail_seconds: float | None = None,
        watch_timeout: float = 1800.0,
    ):
        if time_scale <= 0:
            raise ValueError(f"time_scale must be positive, got {time_scale!r}")
        self.name = name
        self.seed = seed
        self.time_scale = time_scale
        self.host, self.port = host, port
        self.token = token
        self.store = Store(seed=seed, history=history)
        self.registry = Registry(self.store)
        self.gc = GarbageCollector(self.store, self.registry)
        if isinstance(faults, Faults):
            self.faults = faults
        else:
            self.faults = Faults.parse(faults, seed=seed)
        self.faults.attach(self.store)
        self.server = ApiServer(
            self.store,
            self.registry,
            self.faults,
            bookmark_seconds=bookmark_seconds,
            watch_timeout=watch_timeout,
            token=token,
        )
        self.agent = NodeAgent(
            self.store,
            self.registry,
            time_scale=time_scale,
            start_seconds=start_seconds,
            not_ready_fail_seconds=not_ready_fail_seconds,
        )
        self.in_place_agents = InPlaceRestartAgents(self.store, self.registry, self.agent)
        self._nodes: list[Obj] = (
            topologies.load(topology) if isinstance(topology, str) else list(topology or [])
        )
        self._kubeconfig_arg = Path(kubeconfig_path) if kubeconfig_path else None
        self._tmpdir: tempfile.TemporaryDirectory[str] | None = None
        self.kubeconfig_path: Path | None = None
        self.url = ""
        self._tasks: list[asyncio.Task[None]] = []

    @classmethod
    @contextlib.asynccontextmanager
    async def start(cls, **kwargs: Any) -> AsyncIterator[SimCluster]:
        """Start a cluster for the duration of an `async with` block (see `__init__`)."""
        sim = cls(**kwargs)
        await sim.open()
        try:
            yield sim
        finally:
            await sim.close()

    async def open(self, *, serve: bool = True) -> None:
        """Seed the cluster's own objects and start its agents, and with `serve` its API server
        (and a kubeconfig naming it). Without, the cluster runs inside this process only, as a
        benchmark of its own CPU wants it; `close` stops it either way."""
        self._seed_objects()
        self.agent.start()
        self.in_place_agents.start()
        if not serve:
            return
        self.url = await self.server.start(self.host, self.port)
        if self._kubeconfig_arg is None:
            self._tmpdir = tempfile.TemporaryDirectory(prefix="kbatchd-sim-")
            path = Path(self._tmpdir.name) / "kubeconfig"
        else:
            path = self._kubeconfig_arg
        self.kubeconfig_path = kubeconfig.write(path, [(self.name, self.url)], self.token)
        self._tasks.append(asyncio.create_task(self._expire_history_loop()))

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        self.agent.stop()
        self.in_place_agents.stop()
        await self.server.close()
        if self._tmpdir is not None:
            self._tmpdir.cleanup()
            self._tmpdir = None

    def _seed_objects(self) -> None:
        for ns in _SYSTEM_NAMESPACES:
            if self.store.get(NAMESPACES, "", ns) is None:
                self.registry.create(NAMESPACES, "", {"metadata": {"name": ns}})
        assert _PRIORITY_CLASSES is not None
        for name, value in _SYSTEM_PRIORITIES:
            if self.store.get(_PRIORITY_CLASSES, "", name) is None:
                self.registry.create(
                    _PRIORITY_CLASSES,
                    "",
                    {
                        "metadata": {"name": name},
                        "value": value,
                        "description": "Used for system critical pods that must not be moved.",
                        "preemptionPolicy": "PreemptLowerPriority",
                    },
                )
        for node in self._nodes:
            self.registry.create(NODES, "", node)

    async def _expire_history_loop(self) -> None:
        while True:
            period = self.faults.expire_history
            if period is None:
                await asyncio.sleep(0.5)
                continue
            await asyncio.sleep(period / self.time_scale)
            if self.faults.expire_history is not None:
                self.faults.expire_history_now()

    # -- conveniences for tests -------------------------------------------------------------

    def get(self, resource: Resource, namespace: str, name: str) -> Obj | None:
        """A copy of a stored object (None when absent)."""
        stored = self.store.get(resource, namespace if resource.namespaced else "", name)
        return stored.copy() if stored is not None else None

    def objects(self, resource: Resource, namespace: str | None = None) -> list[Obj]:
        return [s.copy() for s in self.store.iter_objects(resource, namespace)]

    async def wait_for(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        predicate: Callable[[Obj | None], bool],
    ) -> Obj | None:
        """Wait until the object (None when absent) satisfies `predicate`; bound it with
        `anyio.fail_after`. Woken by store events, never by polling."""
        changed = asyncio.Event()

        def listener(event: WatchEvent) -> None:
            changed.set()

        self.store.listeners.append(listener)
        try:
            while True:
                current = self.get(resource, namespace, name)
                if predicate(current):
                    return current
                changed.clear()
                await changed.wait()
        finally:
            self.store.listeners.remove(listener)

    def stored(self, resource: Resource, namespace: str, name: str) -> Stored | None:
        return self.store.get(resource, namespace if resource.namespaced else "", name)
