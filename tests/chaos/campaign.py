"""One chaos run, and the faults the campaign runs.

A run: a simulated cluster in this process, its faults seeded (`simulated`), or a real control
plane of the run's own (`plane`); the daemon as a process of its own with a real log file; the
mixed load of `load` submitted at once, and the fault's disturbance played against them until
the load has finished. Then every fault is lifted, the log is let catch up with the cluster,
and the invariants are checked against the cluster's own record of its changes. Everything
random comes from the run's seed: the load's sizes, the failing pods, the cluster's injected
errors, and when the disturbance strikes."""

from __future__ import annotations

import random
import shutil
import signal
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

import anyio
from anyio.abc import TaskGroup, TaskStatus

from daemon.service import wiring
from daemon.service.config import Settings
from daemon.sim.cluster import SimCluster
from daemon.sim.faults import Faults
from daemon.sim.resources import Resource
from daemon.tools.verify import verify
from events.store import EventLog
from tests.chaos import damage, invariants
from tests.chaos.load import (
    CLUSTER,
    MANAGER,
    SHORT,
    TOPOLOGY,
    WORKER_TOPOLOGY,
    WORKERS,
    Load,
    Size,
    build,
    dispatched,
    unfinished,
)
from tests.chaos.plane import PlaneCluster, plane_cluster
from tests.chaos.simulated import TIME_SCALE, SimClusters, simulated_clusters
from tests.disk import copy_of_log, fill
from tests.processes import (
    Child,
    daemon_config,
    eventually,
    logged_events,
    private_mounts,
    spawn,
)
from tests.realcluster.controlplane import ControlPlane

# The daemon's watch inactivity deadline on the simulated clusters (`simulated`).
INACTIVITY_SECONDS: Final = 2.0
# How long the load may take under a fault, and the log to catch up once it is lifted.
FINISH_WITHIN: Final = 180.0
CATCH_UP_WITHIN: Final = 60.0


class Daemon:
    """The daemon under test: started, SIGKILLed and started again on one log. Each
    incarnation lives in a task of `group`, so that any task may kill it or start the next.
    With `mount` (a ``mount`` made in the daemon's own mount namespace, `private_mounts`),
    its log lives there, at `log`, and is read from copies (`readable`)."""

    def __init__(
        self, config: Path, log: Path, group: TaskGroup, mount: tuple[str, ...] = ()
    ) -> None:
        self.config = config
        self.log = log
        self.mount = mount
        self._group = group
        self._child: Child | None = None
        self._exited = anyio.Event()
        self._copies = 0

    async def start(self) -> None:
        await self._group.start(self._incarnation)

    async def _incarnation(self, *, task_status: TaskStatus[None]) -> None:
        self._exited = anyio.Event()
        log = ("--log", str(self.log)) if self.mount else ()
        try:
            async with spawn(
                "daemon", "run", "--config", str(self.config), *log, mount=self.mount
            ) as child:
                await child.wait_for(lambda line: '"synced"' in line)
                self._child = child
                task_status.started()
                await child.process.wait()
        finally:
            self._child = None
            self._exited.set()

    @property
    def disk(self) -> Path | None:
        """The directory of the log as this process reaches it, while the daemon runs."""
        if self._child is None:
            return None
        if not self.mount:
            return self.log.parent
        return Path(f"/proc/{self._child.process.pid}/root{self.log.parent}")

    async def readable(self) -> Path:
        """A path to read the log at: itself, or (on the daemon's own disk) a fresh copy."""
        disk = self.disk
        if not self.mount or disk is None:
            return self.log
        self._copies += 1
        into = self.config.parent / f"{self.log.stem}-copy-{self._copies}"
        return await anyio.to_thread.run_sync(copy_of_log, disk, into, self.log.name)

    def said(self, text: str) -> int:
        """How many lines of the running daemon's output hold `text`."""
        return sum(text in line for line in self._child.stdout) if self._child else 0

    async def _end(self, signum: signal.Signals, within: float) -> int | None:
        child = self._child
        assert child is not None, "no daemon running"
        child.send_signal(signum)
        with anyio.fail_after(within):
            await self._exited.wait()
        return child.process.returncode

    async def kill(self) -> None:
        await self._end(signal.SIGKILL, 10)

    @property
    def leading(self) -> bool:
        """Whether it runs and has said it took the Lease (under leader election)."""
        child = self._child
        return child is not None and any('"leading"' in line for line in child.stdout)

    async def stop(self) -> int | None:
        """SIGTERM; the exit code. On the daemon's own disk, the log is copied out first
        (`log` then names the copy): the disk goes with the process."""
        if self.mount:
            self.log = await self.readable()
        return await self._end(signal.SIGTERM, 30)


class Clusters(Protocol):
    """The run's clusters, simulated (`SimClusters`) or real (`PlaneCluster`), as a run uses
    them."""

    @property
    def kubeconfigs(self) -> dict[str, Path]:
        """Each cluster's kubeconfig for the daemon, by its name in the settings; the home
        cluster, the load's, first."""

    @property
    def failed(self) -> dict[str, list[int]]:
        """The pods made to fail: job -> indexes, or creation places of a plain Job."""

    async def submit(self) -> None: ...

    async def get(self, resource: Resource, name: str) -> dict[str, Any] | None:
        """An object of the home cluster's namespace (None when absent)."""

    async def held(self, name: str) -> dict[tuple[str, str], str]:
        """resourceVersions of the objects cluster `name` holds now, by kind and uid."""

    async def journals(self) -> dict[str, list[invariants.Change]]:
        """Each cluster's own record of its changes, by cluster name."""

    async def lift(self) -> Counter[str]:
        """Every injected fault off; the faults that struck, by name."""


@dataclass
class World:
    """What a disturbance acts on."""

    sims: dict[str, SimCluster]
    daemons: list[Daemon]
    rng: random.Random
    home: str
    # The home cluster's injected faults: the simulated cluster's own, or those of the proxy
    # in front of the real control plane (none without one).
    faults: Faults | None
    plane: ControlPlane | None = None  # a run on the real control plane: the cluster
    # What the disturbance did, by name (the cluster counts its own faults).
    hits: Counter[str] = field(default_factory=Counter)
    # What it saw go wrong, as it went (a second writer let in, a damaged log taken).
    violations: list[str] = field(default_factory=list)

    @property
    def daemon(self) -> Daemon:
        return self.daemons[0]

    @property
    def sim(self) -> SimCluster:
        """The cluster the load is submitted to."""
        return self.sims[self.home]

    @property
    def injected(self) -> Faults:
        """The faults a disturbance sets: the home cluster's (a fault with no cluster-side
        faults has none to set)."""
        assert self.faults is not None, "no simulated cluster or fault proxy to strike with"
        return self.faults


Disturb = Callable[[World], Coroutine[Any, Any, None]]


async def _nothing(world: World) -> None:
    return None


async def _pause(world: World, low: float, high: float) -> None:
    # The fault's own timing, drawn from the run's seed: not a wait for a condition.
    await anyio.sleep(world.rng.uniform(low, high))


async def _kill_repeatedly(world: World, kills: int | None = None) -> None:
    """SIGKILL the daemon at random points and start it again (`kills` times, or until the
    run ends)."""
    while kills is None or world.hits["sigkill"] < kills:
        await _pause(world, 0.3, 1.5)
        # Whole: a run's end must find a daemon running, never one half restarted.
        with anyio.CancelScope(shield=True):
            await world.daemon.kill()
            world.hits["sigkill"] += 1
            await world.daemon.start()


async def _kill_the_leader(world: World) -> None:
    """SIGKILL whichever daemon holds the Lease, at random points, and start it again (it
    comes back standing by)."""
    while True:
        await _pause(world, 1.0, 3.0)
        leaders = [d for d in world.daemons if d.leading]
        if len(leaders) > 1:
            world.violations.append(f"{len(leaders)} daemons said they lead at once")
        if not leaders:
            continue  # between holders: the Lease has not expired yet
        with anyio.CancelScope(shield=True):
            await leaders[0].kill()
            world.hits["sigkill-leader"] += 1
            await leaders[0].start()


async def _second_writers(world: World) -> None:
    """Start another daemon on the same log at random points: each must be refused at once
    (exit 2, one line) while the first goes on."""
    daemon = world.daemon
    while True:
        await _pause(world, 0.3, 1.5)
        with anyio.CancelScope(shield=True):
            async with spawn("intruder", "run", "--config", str(daemon.config)) as intruder:
                code = await intruder.wait(within=30)
            world.hits["second-writer"] += 1
        said = intruder.stderr
        if code != 2 or len(said) != 1 or "in use by another writer" not in said[0]:
            world.violations.append(f"a second writer: exit {code}, said {said!r}")


async def _damaged_on_start(world: World) -> None:
    """Twice: stop the daemon, damage its log (`damage`), start a daemon on it, which must
    refuse with one line naming the log and leave the file as it was; then put the log back
    as it was and start the daemon again."""
    daemon, log = world.daemon, world.daemon.log
    for _ in range(2):
        await _pause(world, 0.5, 2.0)
        with anyio.CancelScope(shield=True):
            if await daemon.stop() != 0:
                world.violations.append("the daemon did not stop cleanly on SIGTERM")
            intact = log.read_bytes()
            kind, what = await anyio.to_thread.run_sync(damage.damage, log, world.rng)
            damaged = log.read_bytes()
            async with spawn("damaged", "run", "--config", str(daemon.config)) as refused:
                code = await refused.wait(within=30)
            world.hits[f"log {kind}"] += 1
            said = refused.stderr
            if code != 2 or len(said) != 1 or str(log) not in said[0]:
                world.violations.append(f"a log {what}: exit {code}, said {said!r}")
            if log.read_bytes() != damaged:
                world.violations.append(f"a log {what}: written to by the refused start")
            for leftover in log.parent.glob(f"{log.name}-*"):
                leftover.unlink()
            log.write_bytes(intact)
            await daemon.start()


async def _server_down(world: World, sim: SimCluster, low: float, high: float) -> None:
    """Stop `sim`'s API server for a while (drawn between `low` and `high` seconds), then
    serve again on the same port."""
    port = int(sim.server.address.rsplit(":", 1)[1])
    await sim.server.close()
    try:
        await _pause(world, low, high)
    finally:
        with anyio.CancelScope(shield=True):
            await sim.server.start(sim.host, port)


async def _disk_full(world: World) -> None:
    """Fill the disk the log is on, at random points, and make room again after a while."""
    daemon = world.daemon
    while True:
        await _pause(world, 0.5, 2.0)
        disk = daemon.disk
        if disk is None:
            continue
        filler = disk / "filler"
        await anyio.to_thread.run_sync(fill, filler)
        world.hits["disk-full"] += 1
        try:
            await _pause(world, 0.5, 2.0)
        finally:
            filler.unlink(missing_ok=True)
            world.hits["append refused (logged)"] = daemon.said("database or disk is full")


async def _restart_api_server(world: World) -> None:
    for _ in range(3):
        await _pause(world, 0.5, 2.0)
        world.hits["api-server-restart"] += 1
        await _server_down(world, world.sim, 0.2, 1.5)


async def _workers_unreachable(world: World) -> None:
    """A worker, drawn each time, stops answering for 1-4 s, over and over."""
    while True:
        await _pause(world, 0.5, 2.0)
        worker = world.rng.choice(WORKERS)
        world.hits[f"{worker} unreachable"] += 1
        await _server_down(world, world.sims[worker], 1.0, 4.0)


async def _latency_spikes(world: World) -> None:
    faults = world.injected
    while True:
        await _pause(world, 0.5, 1.5)
        faults.set(latency=world.rng.uniform(0.1, 0.5))
        world.hits["latency-spell"] += 1
        await _pause(world, 0.3, 1.0)
        faults.set(latency=0.0)


async def _error_storms(world: World) -> None:
    """Bursts of 409s, 429s and 500s: most requests fail for a while, then few do."""
    faults = world.injected
    while True:
        rate = world.rng.uniform(0.3, 0.6)
        faults.set(error_409=rate / 2, error_429=rate / 2, error_500=rate / 2)
        world.hits["error-storm"] += 1
        await _pause(world, 0.3, 1.0)
        faults.set(error_409=0.02, error_429=0.02, error_500=0.02)
        await _pause(world, 0.5, 1.5)


async def _restart_plane_thrice(
    world: World, hit: str, restart: Callable[[ControlPlane], Coroutine[Any, Any, None]]
) -> None:
    plane = world.plane
    assert plane is not None
    for _ in range(3):
        await _pause(world, 0.5, 2.0)
        # Whole: a run's end must find the plane serving.
        with anyio.CancelScope(shield=True):
            await restart(plane)
            world.hits[hit] += 1


async def _restart_etcd(world: World) -> None:
    """SIGKILL the real plane's etcd three times, each for 1-4 s: kube-apiserver stays up,
    and what it is asked fails or waits until etcd is back."""

    async def restart(plane: ControlPlane) -> None:
        await anyio.to_thread.run_sync(plane.stop_etcd)
        await _pause(world, 1.0, 4.0)
        await anyio.to_thread.run_sync(plane.start_etcd)

    await _restart_plane_thrice(world, "etcd-restart", restart)


async def _restart_kube_apiserver(world: World) -> None:
    """SIGKILL the real plane's kube-apiserver three times and start it again at once: every
    watch and request in flight is cut, and a watch resumed is answered 410 Gone."""

    async def restart(plane: ControlPlane) -> None:
        await anyio.to_thread.run_sync(plane.restart_apiserver)

    await _restart_plane_thrice(world, "kube-apiserver-restart", restart)


async def _everything(world: World) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(_latency_spikes, world)
        tg.start_soon(_kill_repeatedly, world, 2)


@dataclass(frozen=True)
class Fault:
    name: str
    what: str
    # The simulated cluster's `--faults` (or, with `proxy`, the fault proxy's), on for the
    # whole run.
    faults: str = ""
    disturb: Disturb = _nothing
    # Runs of the full campaign; 2 on a real plane, whose runs take longest (kwok runs pods
    # at real time), to keep the campaign within its 15 minutes.
    runs: int = 3
    daemons: int = 1  # each with a log of its own
    clusters: int = 1  # or a manager and three workers (`load.dispatched`)
    disk: str = ""  # a tmpfs of this size of the daemon's own, its log on it
    plane: bool = False  # on a real control plane (`plane`), not a simulated cluster
    proxy: bool = False  # on the real plane, the daemon reaches it through the fault proxy
    config: str = ""  # TOML appended to every daemon's settings


LEADER_ELECTION: Final = """
[leader_election]
enabled = true
lease_duration_seconds = 3
renew_deadline_seconds = 2.0
retry_period_seconds = 0.5
"""


FAULTS: Final = (
    Fault("watch-dropped", "watch streams closed after 20 % of batches", "drop-watch=0.2"),
    Fault(
        "watch-stalled",
        "watch streams left open and silent after 10 % of batches (the inactivity deadline)",
        "stall-watch=0.1",
    ),
    Fault(
        "history-expired",
        "watch history compacted every simulated second: watches and lists get 410",
        "expire-history=1s",
    ),
    Fault(
        "error-storms",
        "bursts where 15-30 % of requests each get 409, 429 or 500",
        "retry-after=0",
        _error_storms,
    ),
    Fault(
        "requests-cut",
        "10 % of requests cut, half before and half after they took effect",
        "drop-request=0.1",
    ),
    Fault("latency-spikes", "every request delayed 0.1-0.5 s, in spells", "", _latency_spikes),
    Fault(
        "api-server-restarted",
        "the API server stopped for 0.2-1.5 s, three times, watches and requests cut",
        "",
        _restart_api_server,
    ),
    Fault(
        "etcd-restarted",
        "the real control plane's etcd SIGKILLed for 1-4 s, three times, kube-apiserver up",
        disturb=_restart_etcd,
        runs=2,
        plane=True,
    ),
    Fault(
        "kube-apiserver-restarted",
        "the real control plane's kube-apiserver SIGKILLed and started again, three times: "
        "watches and requests cut, resumed watches answered 410",
        disturb=_restart_kube_apiserver,
        runs=2,
        plane=True,
    ),
    Fault(
        "api-faults-real",
        "watch drops and stalls, 409/429/500 and cut requests at 5 % each, and latency "
        "spells, struck by a proxy in front of the real control plane's kube-apiserver",
        "drop-watch=0.1,stall-watch=0.05,error-409=0.05,error-429=0.05,retry-after=0,"
        "error-500=0.05,drop-request=0.05",
        _latency_spikes,
        runs=2,
        plane=True,
        proxy=True,
    ),
    Fault(
        "daemon-killed",
        "SIGKILL of the daemon at random points, 0.3-1.5 s after it has caught up, until the "
        "load has finished",
        "",
        _kill_repeatedly,
        runs=10,
    ),
    Fault(
        "second-writer",
        "another daemon started on the same log at random points",
        "",
        _second_writers,
    ),
    Fault(
        "log-damaged",
        "the log damaged while the daemon is stopped (truncated, an event garbled, changed or "
        "removed), twice a run",
        "",
        _damaged_on_start,
    ),
    Fault(
        "leader-killed",
        "two daemons under one Lease, logs of their own; the leader SIGKILLed at random points",
        "",
        _kill_the_leader,
        daemons=2,
        config=LEADER_ELECTION,
    ),
    Fault(
        "leader-killed-real",
        "leader-killed on the real control plane: the Lease is kube-apiserver's",
        disturb=_kill_the_leader,
        runs=2,
        daemons=2,
        config=LEADER_ELECTION,
        plane=True,
    ),
    Fault(
        "disk-full",
        "the log's disk (a 32 MB tmpfs) filled at random points, and room made again 0.5-2 s "
        "later, over and over",
        "",
        _disk_full,
        disk="32m",
    ),
    Fault(
        "worker-unreachable",
        "a manager and three worker clusters; dispatched Jobs fit, wait or preempt while a "
        "worker, drawn each time, stops answering for 1-4 s, over and over",
        "",
        _workers_unreachable,
        clusters=4,
    ),
    Fault(
        "everything",
        "all of the above at once (watch drops and stalls, 410s, errors, cut requests, "
        "latency) and 2 SIGKILLs",
        "drop-watch=0.1,stall-watch=0.05,expire-history=2s,error-409=0.05,error-429=0.05,"
        "retry-after=0,error-500=0.05,drop-request=0.05",
        _everything,
    ),
)


@dataclass
class Result:
    fault: str
    seed: int
    seconds: float = 0.0
    # Faults that struck, by name: the cluster's injections and the disturbance's acts.
    injected: Counter[str] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)
    skipped: str = ""  # why the run could not be made here
    # The cluster's changes the log was checked against, by type (ADDED, MODIFIED, DELETED).
    changes: Counter[str] = field(default_factory=Counter)


async def _not_reproduced(log: Path) -> list[str]:
    """What `kbatchd replay --verify` finds wrong with a log (as `assert_reproduced` checks
    it, each finding in words)."""
    async with EventLog.open(log, readonly=True) as opened:
        found = await verify(opened, wiring.reconcilers(Settings()), build=wiring.reconcilers)
    wrong = [f"diverges: {found.divergence}"] if found.divergence is not None else []
    if not found.runs:
        wrong.append("no daemon start recorded")
    for run in found.runs:
        if not run.same_rules:
            wrong.append("a run's decision rules differ from this code's (it changed since)")
        elif run.decided_with != "recorded":
            wrong.append(f"a run decided with {run.decided_with} settings, not those recorded")
    return wrong


def _settings(fault: Fault, kubeconfigs: dict[str, Path]) -> str:
    """The TOML for a run's daemons beyond `daemon_config`'s: the workers and the dispatcher
    when the fault has several clusters, and the fault's own."""
    lines: list[str] = []
    if len(kubeconfigs) > 1:
        for name in WORKERS:
            lines += ["[[clusters]]", f'name = "{name}"', f'kubeconfig = "{kubeconfigs[name]}"']
        lines += [
            "[reconcilers.multicluster]",
            "enabled = true",
            f'manager = "{MANAGER}"',
            "retry_seconds = 0.5",
            "preemption_deadline_seconds = 20.0",
        ]
    return "\n".join([*lines, fault.config])


def _clusters(
    fault: Fault, seed: int, tmp: Path, load: Load
) -> AbstractAsyncContextManager[Clusters]:
    if fault.plane:
        faults = Faults.parse(fault.faults, seed=seed) if fault.proxy else None
        return plane_cluster(tmp, load, TIME_SCALE, faults)
    if fault.clusters > 1:
        names: tuple[str, ...] = (MANAGER, *WORKERS)
        return simulated_clusters(names, WORKER_TOPOLOGY, fault.faults, seed, tmp, load)
    return simulated_clusters((CLUSTER,), TOPOLOGY, fault.faults, seed, tmp, load)


def _cannot_run(fault: Fault) -> str:
    """Why the fault cannot be run on this machine (empty: it can)."""
    if fault.disk and (why := private_mounts()):
        return f"needs a tmpfs of its own (unshare -rm): {why}"
    if fault.plane and shutil.which("go") is None:
        return "needs the real control plane, built with Go 1.26: no go on PATH"
    return ""


async def run(fault: Fault, seed: int, tmp: Path, size: Size = SHORT) -> Result:
    """One run of `fault` with `seed`, in the directory `tmp`."""
    started = time.monotonic()
    result = Result(fault.name, seed, skipped=_cannot_run(fault))
    if result.skipped:
        return result
    rng = random.Random(seed)
    several = fault.clusters > 1
    load = dispatched(rng, size.dispatched) if several else build(rng, size)
    async with AsyncExitStack() as stack:
        clusters = await stack.enter_async_context(_clusters(fault, seed, tmp, load))
        kubeconfigs = clusters.kubeconfigs
        home = next(iter(kubeconfigs))
        group = await stack.enter_async_context(anyio.create_task_group())
        logs = ["kbatchd"] if fault.daemons == 1 else [f"kbatchd-{i}" for i in range(fault.daemons)]
        disk = tmp / "disk"
        mount = (
            ("-t", "tmpfs", "-o", f"size={fault.disk}", "tmpfs", str(disk)) if fault.disk else ()
        )
        if mount:
            disk.mkdir()
        # The real API server sends a bookmark about once a minute: the default deadline,
        # unless the proxy stalls watches (an idle watch is then remade every few seconds).
        inactivity: dict[str, Any] = (
            {}
            if fault.plane and not fault.proxy
            else {"watch_inactivity_seconds": INACTIVITY_SECONDS}
        )
        daemons = [
            Daemon(
                daemon_config(
                    tmp,
                    kubeconfigs[home],
                    name=log,
                    cluster=home,
                    extra=_settings(fault, kubeconfigs),
                    **inactivity,
                ),
                (disk if mount else tmp) / f"{log}.db",
                group,
                mount,
            )
            for log in logs
        ]
        for daemon in daemons:
            await daemon.start()
        await clusters.submit()

        async def finished() -> bool:
            return not await unfinished(clusters.get, load)

        sims = clusters.sims if isinstance(clusters, SimClusters) else {}
        plane = clusters.plane if isinstance(clusters, PlaneCluster) else None
        faults = clusters.faults if isinstance(clusters, PlaneCluster) else sims[home].faults
        world = World(sims, daemons, rng, home=home, faults=faults, plane=plane)
        async with anyio.create_task_group() as tg:
            tg.start_soon(fault.disturb, world)
            try:
                await eventually(finished, within=FINISH_WITHIN, what="the load finished")
            except AssertionError:
                left = await unfinished(clusters.get, load)
                result.violations.append(f"not finished: {', '.join(left)}")
            tg.cancel_scope.cancel()
        result.injected += await clusters.lift()
        result.injected += world.hits
        result.violations += world.violations

        # Per daemon and cluster: the cluster's newest version when the log last matched it.
        # The cluster may move on while the daemons stop (a retried write, a pod ending).
        checked: dict[tuple[str, str], int] = {}
        for daemon in daemons:

            async def behind(daemon: Daemon = daemon) -> list[str]:
                logged = await logged_events(await daemon.readable())
                late: list[str] = []
                for name in kubeconfigs:
                    held = await clusters.held(name)
                    checked[(daemon.log.name, name)] = max(map(int, held.values()), default=0)
                    late += invariants.log_behind(held, logged, name)
                return late

            async def caught_up(daemon: Daemon = daemon) -> bool:
                return not await behind(daemon)

            try:
                await eventually(caught_up, within=CATCH_UP_WITHIN, what="the log caught up")
            except AssertionError:
                late = await behind()
                result.violations.append(
                    f"{daemon.log.name} did not catch up: {'; '.join(late[:5])}"
                )
        for daemon in daemons:
            if await daemon.stop() != 0:
                result.violations.append(f"{daemon.log.name}: no clean stop on SIGTERM")
        journals = await clusters.journals()
    logged_by = [await logged_events(daemon.log) for daemon in daemons]
    for name, journal in journals.items():
        result.changes += Counter(change.type for change in journal)
        result.violations += invariants.pods_per_attempt(journal, clusters.failed)
        for violation in invariants.gangs_whole(journal, load.gangs):
            result.violations.append(f"{name}: {violation}")
    result.violations += invariants.deleted_once(*logged_by)
    if several:
        workers = {n: journals[n] for n in WORKERS}
        result.violations += invariants.one_cluster_each(workers, load.jobs)
        for logged in logged_by:
            result.violations += invariants.no_eviction_after_abort(logged)
    if len(logged_by) > 1:
        result.violations += invariants.one_acts_at_a_time(logged_by)
    for daemon, logged in zip(daemons, logged_by, strict=True):
        for name, journal in journals.items():
            until = checked.get((daemon.log.name, name))
            for violation in invariants.logged_exactly_once(journal, logged, name, until):
                result.violations.append(f"{daemon.log.name}: {violation}")
        for violation in await _not_reproduced(daemon.log):
            result.violations.append(f"{daemon.log.name}: replay --verify: {violation}")
    result.seconds = time.monotonic() - started
    return result
