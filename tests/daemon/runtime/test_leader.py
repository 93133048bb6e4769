"""Leader election: the Lease protocol step by step on a fake clock, a daemon that stops acting
the moment it loses the Lease, and two real daemons of which exactly one acts and the other
takes over within the lease duration when the first is killed."""

from __future__ import annotations

import json
import re
import signal
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest
from kubernetes_asyncio import client

from daemon.kube.api import KubeApi, Response
from daemon.runtime.leader import Elector, micro_time
from daemon.sim.cluster import SimCluster
from daemon.sim.resources import JOBS, lookup
from events.schema import Decided, Observed, Outcome
from tests.backends import on_cluster
from tests.daemon.embedded import embedded, job, settings_for, short_leases
from tests.processes import (
    eventually,
    kube_client,
    logged_events,
    spawn,
)

pytestmark = pytest.mark.anyio

LEASES = lookup("coordination.k8s.io", "v1", "leases")
NAMESPACE, NAME = "kube-system", "kbatchd"
MICRO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


class Clock:
    """A clock a test moves by hand."""

    def __init__(self, start: float = 1_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def sim(anyio_backend: str) -> AsyncIterator[SimCluster]:
    async with SimCluster.start(seed=3) as cluster:
        yield cluster


@pytest.fixture
async def api(sim: SimCluster) -> AsyncIterator[KubeApi]:
    assert sim.kubeconfig_path is not None
    async with KubeApi.connect("sim-0", str(sim.kubeconfig_path), None) as kube:
        yield kube


def _elector(api: KubeApi, identity: str, clock: Clock, **kw: Any) -> Elector:
    return Elector(
        api,
        namespace=NAMESPACE,
        name=NAME,
        identity=identity,
        monotonic=clock,
        wall=lambda: 1_700_000_000.0 + clock.now,
        **kw,
    )


def _lease(sim: SimCluster) -> dict[str, Any]:
    assert LEASES is not None
    found = sim.get(LEASES, NAMESPACE, NAME)
    assert found is not None
    spec: dict[str, Any] = found["spec"]
    return spec


async def test_the_first_candidate_creates_the_lease(sim: SimCluster, api: KubeApi) -> None:
    assert await _elector(api, "a", Clock()).try_acquire_or_renew()
    spec = _lease(sim)
    assert spec["holderIdentity"] == "a"
    assert spec["leaseDurationSeconds"] == 15
    assert spec["leaseTransitions"] == 0
    assert MICRO_TIME.fullmatch(spec["acquireTime"])
    assert spec["renewTime"] == spec["acquireTime"]


async def test_a_candidate_waits_a_full_lease_from_the_last_renewal_it_saw(
    sim: SimCluster, api: KubeApi
) -> None:
    clock_a, clock_b = Clock(), Clock()
    a, b = _elector(api, "a", clock_a), _elector(api, "b", clock_b)
    assert await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()
    clock_b.now += 10
    clock_a.now += 10
    assert await a.try_acquire_or_renew()  # a renews: b sees the record change
    assert not await b.try_acquire_or_renew()
    clock_b.now += 14.9
    assert not await b.try_acquire_or_renew()
    acquired = _lease(sim)["acquireTime"]
    clock_b.now += 0.2  # 15.1 s since b last saw a renew: expired
    assert await b.try_acquire_or_renew()
    spec = _lease(sim)
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("b", 1)
    assert spec["acquireTime"] != acquired
    # The old holder's next renewal sees the new one: not leader any more.
    a.leading = True
    assert not await a.try_acquire_or_renew()


async def test_of_two_racing_candidates_exactly_one_wins(sim: SimCluster, api: KubeApi) -> None:
    clock = Clock()
    assert await _elector(api, "old", clock).try_acquire_or_renew()
    read_both = anyio.Event()
    reads = 0

    class Racing:
        """Once racing, each candidate's read waits for the other's: both then write with the
        same resourceVersion."""

        cluster = "sim-0"
        racing = False

        async def request(self, method: str, path: str, **kw: Any) -> Response:
            nonlocal reads
            response = await api.request(method, path, **kw)
            if method == "GET" and self.racing:
                reads += 1
                if reads == 2:
                    read_both.set()
                await read_both.wait()
            return response

    transport = Racing()
    racers = [_elector(transport, name, Clock(clock.now)) for name in ("x", "y")]  # type: ignore[arg-type]
    for racer in racers:  # both have seen the old holder ...
        assert not await racer.try_acquire_or_renew()
        racer._monotonic = Clock(clock.now + 16)  # ... and its lease expire
    transport.racing = True
    results: dict[str, bool] = {}

    async def attempt(racer: Elector) -> None:
        results[racer.identity] = await racer.try_acquire_or_renew()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            for racer in racers:
                tg.start_soon(attempt, racer)
    assert sorted(results.values()) == [False, True]
    winner = next(name for name, won in results.items() if won)
    assert _lease(sim)["holderIdentity"] == winner


async def test_release_lets_a_standby_take_over_without_waiting(
    sim: SimCluster, api: KubeApi
) -> None:
    clock = Clock()
    a, b = _elector(api, "a", clock), _elector(api, "b", Clock())
    assert await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()
    await a.release()
    spec = _lease(sim)
    assert spec["holderIdentity"] in ("", None)
    assert await b.try_acquire_or_renew()  # no clock moved: the empty holder is free to take
    assert _lease(sim)["leaseTransitions"] == 1


async def test_run_announces_leading_and_releases_when_cancelled(
    sim: SimCluster, api: KubeApi
) -> None:
    changes: list[bool] = []
    led = anyio.Event()
    elector = Elector(
        api, namespace=NAMESPACE, name=NAME, identity="r", lease_duration=3,
        renew_deadline=2, retry_period=0.2,
    )  # fmt: skip

    async def on_change(leading: bool) -> None:
        changes.append(leading)
        led.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(elector.run, on_change)
        with anyio.fail_after(10):
            await led.wait()
        assert _lease(sim)["holderIdentity"] == "r"
        tg.cancel_scope.cancel()
    assert changes == [True]
    assert _lease(sim)["holderIdentity"] in ("", None)


def _steal(sim: SimCluster, holder: str, duration: int) -> None:
    """Another holder writes the Lease (as if it had won it), straight into the store."""
    assert LEASES is not None
    lease = sim.get(LEASES, NAMESPACE, NAME)
    assert lease is not None
    now = micro_time(time.time())
    lease["spec"].update(holderIdentity=holder, leaseDurationSeconds=duration, renewTime=now)
    sim.registry.update(LEASES, NAMESPACE, NAME, lease)


async def _wait(condition: Callable[[], bool], what: str, within: float = 20) -> None:
    async def check() -> bool:
        return condition()

    await eventually(check, within=within, what=what)


def _job_complete(sim: SimCluster, name: str) -> bool:
    found = sim.get(JOBS, "default", name)
    conditions = (found or {}).get("status", {}).get("conditions") or []
    return any(c["type"] == "Complete" and c["status"] == "True" for c in conditions)


async def test_losing_the_lease_stops_acting_at_once(tmp_path: Path) -> None:
    async with SimCluster.start(topology="blocks=1,racks=1,hosts=2,gpus=8", time_scale=20) as sim:
        log = tmp_path / "a.db"
        settings = settings_for(sim, log, leader_election=short_leases())
        async with embedded(settings, identity="a") as daemon:
            await _wait(lambda: daemon.leading, "leading")
            assert daemon.actuator is not None
            actuator = daemon.actuator
            # Every API call now takes 4 s: the Job's pod creates are still in flight when
            # the renewals (2 s deadline) fail, and another holder takes the Lease.
            sim.faults.set(latency=4.0)
            sim.registry.create(JOBS, "default", job("first", parallelism=3))
            await _wait(lambda: actuator.in_flight > 0, "creates in flight")
            _steal(sim, "thief", 3600)
            await _wait(lambda: not daemon.leading, "the lease lost", within=10)
            # Cancelled at once, long before the 4 s calls could have answered.
            await _wait(lambda: actuator.in_flight == 0, "in-flight calls cancelled", within=1)
            sim.faults.set(latency=0.0)

            async def unconfirmed() -> int:
                events = await logged_events(log)
                return next(
                    (
                        seq
                        for seq, e in events
                        if isinstance(e, Outcome) and "lease was lost" in e.message
                    ),
                    0,
                )

            lost_at = await eventually(unconfirmed, what="intents marked unconfirmed")
            # A standby still watches and logs: a new Job shows up in its log, undecided.
            sim.registry.create(JOBS, "default", job("second"))

            async def seen_and_ticked() -> list[Any]:
                events = await logged_events(log)
                seen = [seq for seq, e in events if isinstance(e, Observed) and e.name == "second"]
                return events if seen and events[-1][0] > seen[0] + 20 else []

            events = await eventually(seen_and_ticked, what="the standby logging the new Job")
            assert not [e for seq, e in events if seq > lost_at and isinstance(e, Decided)]
            assert daemon.role == "standby"
            # The thief lets go: the daemon leads again and finishes both Jobs.
            _steal(sim, "", 1)
            await _wait(lambda: daemon.leading, "leading again")
            await _wait(lambda: _job_complete(sim, "first"), "Job first Complete", within=30)
            await _wait(lambda: _job_complete(sim, "second"), "Job second Complete", within=30)


async def _lease_of(api: client.ApiClient) -> Any:
    return (await client.CoordinationV1Api(api).read_namespaced_lease(NAME, NAMESPACE)).spec


def _decided_about(events: list[tuple[int, Any]], job_name: str) -> list[Decided]:
    return [e for _, e in events if isinstance(e, Decided) and e.key.endswith(f"/{job_name}")]


async def test_two_daemons_one_acts_and_the_other_takes_over(tmp_path: Path, backend: str) -> None:
    lease, retry = 3, 0.5
    extra = (
        "[leader_election]\nenabled = true\n"
        f"lease_duration_seconds = {lease}\nrenew_deadline_seconds = 2.0\n"
        f"retry_period_seconds = {retry}\n"
    )
    async with on_cluster(backend, tmp_path) as cluster:
        ns = cluster.namespace
        configs = {
            name: cluster.daemon_config(tmp_path, name=name, extra=extra)
            for name in ("first", "second")
        }
        async with (
            spawn("first", "run", "--config", str(configs["first"])) as first,
            kube_client(cluster.admin) as api,
            aiohttp.ClientSession() as session,
        ):
            leading = json.loads(await first.wait_for(lambda line: '"leading"' in line))
            async with spawn("second", "run", "--config", str(configs["second"])) as second:
                await second.wait_for(lambda line: '"standing by"' in line)
                await second.wait_for(lambda line: '"ready"' in line)
                url = json.loads(await second.wait_for(lambda line: '"health serving"' in line))
                async with session.get(f"{url['url']}/readyz") as response:
                    assert response.status == 200
                    assert (await response.json())["role"] == "standby"
                batch = client.BatchV1Api(api)
                await batch.create_namespaced_job(ns, job("before", parallelism=2))

                async def complete(name: str) -> bool:
                    found = await batch.read_namespaced_job(name, ns)
                    conditions = found.status.conditions or []
                    return any(c.type == "Complete" and c.status == "True" for c in conditions)

                await eventually(lambda: complete("before"), what="Job before Complete")

                # Both logs hold the Job's whole life; only the leader's holds decisions.
                async def both_saw_it_complete() -> bool:
                    for name in ("first", "second"):
                        events = await logged_events(tmp_path / f"{name}.db")
                        if not any(
                            isinstance(e, Observed)
                            and e.name == "before"
                            and e.kind == "Job"
                            and "Complete" in str(e.obj)
                            for _, e in events
                        ):
                            return False
                    return True

                await eventually(both_saw_it_complete, what="both logs with the Job complete")
                assert _decided_about(await logged_events(tmp_path / "first.db"), "before")
                assert not [
                    e
                    for _, e in await logged_events(tmp_path / "second.db")
                    if isinstance(e, Decided)
                ]
                held = await _lease_of(api)
                assert held.holder_identity == leading["identity"]

                first.send_signal(signal.SIGKILL)
                await first.wait()
                last_renewal = (await _lease_of(api)).renew_time
                took = json.loads(await second.wait_for(lambda line: '"leading"' in line))
                taken = await _lease_of(api)
                assert taken.holder_identity == took["identity"] != leading["identity"]
                assert taken.lease_transitions == held.lease_transitions + 1
                # A lease duration after the last renewal, plus at most a try (jittered x1.2)
                # to see that renewal and another to find the lease expired.
                gap = (taken.acquire_time - last_renewal).total_seconds()
                assert lease - retry <= gap <= lease + 3 * retry, gap

                await batch.create_namespaced_job(ns, job("after"))
                await eventually(lambda: complete("after"), within=30, what="Job after Complete")
                assert _decided_about(await logged_events(tmp_path / "second.db"), "after")
                second.send_signal(signal.SIGTERM)
                assert await second.wait(within=15) == 0
            # A clean stop gives the Lease up for the next daemon.
            assert (await _lease_of(api)).holder_identity in ("", None)
