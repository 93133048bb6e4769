"""`kbatchd run` as a real process against the simulated cluster on loopback (served from the
test's process, as `kbatchd sim` would serve it): ingest into the log,
clean shutdown, restart without duplicates, bounded snapshots, and the faults a real API
server deals out."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, closing
from pathlib import Path
from typing import Any

import aiohttp
import anyio.lowlevel
import pytest
from kubernetes_asyncio import client

from daemon.service import provenance
from daemon.service.config import load
from daemon.sim.cluster import SimCluster
from daemon.sim.registry import DeleteOptions
from daemon.sim.resources import JOBS, PODS
from events.intents import Create
from events.schema import Decided, Observed, Outcome, Resynced, Started, Tick
from tests.backends import SIM, on_cluster, real_params
from tests.daemon.embedded import job
from tests.disk import copy_of_log, fill
from tests.processes import (
    assert_reproduced,
    daemon_config,
    eventually,
    kube_client,
    logged_events,
    private_mounts,
    running_daemon,
    simulated_cluster_here,
    snapshot_seqs,
    spawn,
)

pytestmark = pytest.mark.anyio

TOPOLOGY = "blocks=1,racks=2,hosts=4,gpus=8"


def _pod(name: str) -> dict[str, object]:
    return {
        "metadata": {"name": name, "annotations": {"sim.kbatchd.dev/run-seconds": "1"}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]},
    }


def _unbound_pod(name: str) -> dict[str, object]:
    """A pod left to another scheduler: one ADDED event, then nothing until it is deleted."""
    pod = _pod(name)
    pod["spec"]["schedulerName"] = "elsewhere"  # type: ignore[index]
    return pod


def _create_then_delete(sim: SimCluster, names: list[str]) -> None:
    """Unbound pods created, then deleted: two events each, and a state back where it was."""
    for name in names:
        sim.registry.create(PODS, "default", _unbound_pod(name))
    for name in names:
        sim.registry.delete(PODS, "default", name, DeleteOptions(grace_seconds=0))


@asynccontextmanager
async def _cluster_and_config(
    tmp_path: Path, *, time_scale: float = 1.0, **daemon: Any
) -> AsyncIterator[tuple[SimCluster, Path]]:
    """An in-process simulated cluster (seed 5) and a daemon config for it (`daemon_config`)."""
    async with SimCluster.start(topology=TOPOLOGY, seed=5, time_scale=time_scale) as sim:
        assert sim.kubeconfig_path is not None
        yield sim, daemon_config(tmp_path, sim.kubeconfig_path, **daemon)


def _observed(events: list[tuple[int, object]], kind: str, name: str) -> list[Observed]:
    return [e for _, e in events if isinstance(e, Observed) and e.kind == kind and e.name == name]


async def _resync_reasons_once_caught_up(log: Path) -> list[str]:
    """The reasons of the log's Resynced markers once it holds the deletion of pod `goes` and
    the pod `arrived` (what changed while the daemon could not see); [] until then."""
    events = await logged_events(log)
    deleted = [e for e in _observed(events, "Pod", "goes") if e.change == "DELETED"]
    if deleted and _observed(events, "Pod", "arrived"):
        return [e.reason for _, e in events if isinstance(e, Resynced)]
    return []


async def _phases_of(log: Path, name: str) -> list[str]:
    return [getattr(e.obj, "phase", "") for e in _observed(await logged_events(log), "Pod", name)]


async def test_daemon_logs_what_the_cluster_does_and_stops_on_sigterm(tmp_path: Path) -> None:
    async with simulated_cluster_here(tmp_path, "--time-scale", "10") as (_, kubeconfig):
        config = daemon_config(tmp_path, kubeconfig)
        log = tmp_path / "kbatchd.db"
        async with running_daemon(config) as daemon, kube_client(kubeconfig) as api:
            await client.CoreV1Api(api).create_namespaced_pod("default", _pod("hello"))

            async def finished() -> bool:
                return "Succeeded" in await _phases_of(log, "hello")

            await eventually(finished, what="pod hello Succeeded in the log")
            daemon.send_signal(signal.SIGTERM)
            assert await daemon.wait(within=10) == 0
            assert daemon.lines("stopped")
        events = await logged_events(log)
        phases = [getattr(e.obj, "phase", "") for e in _observed(events, "Pod", "hello")]
        assert phases[0] == "Pending"
        assert phases[-1] == "Succeeded"
        assert "Running" in phases
        listed = {(e.cluster, e.kind) for _, e in events if isinstance(e, Resynced)}
        assert ("sim-0", "Pod") in listed
        assert ("sim-0", "Node") in listed
        assert [seq for seq, _ in events] == list(range(1, len(events) + 1))


async def test_restart_appends_only_what_changed_while_down(tmp_path: Path) -> None:
    async with simulated_cluster_here(tmp_path) as (_, kubeconfig):
        config = daemon_config(tmp_path, kubeconfig)
        log = tmp_path / "kbatchd.db"
        async with kube_client(kubeconfig) as api:
            core = client.CoreV1Api(api)
            # Left to another scheduler, "kept" never changes: a relist must not re-log it.
            await core.create_namespaced_pod("default", _unbound_pod("kept"))
            await core.create_namespaced_pod("default", _pod("removed"))
            async with running_daemon(config) as daemon:
                daemon.send_signal(signal.SIGINT)
                assert await daemon.wait(within=10) == 0
            first = await logged_events(log)
            await core.delete_namespaced_pod("removed", "default", grace_period_seconds=0)
            await core.create_namespaced_pod("default", _pod("added"))
            async with running_daemon(config) as daemon:
                daemon.send_signal(signal.SIGTERM)
                assert await daemon.wait(within=10) == 0
        events = await logged_events(log)
        tail = [e for seq, e in events if seq > len(first)]
        # Each start is recorded first, with what its decisions follow from.
        starts = [(seq, e) for seq, e in events if isinstance(e, Started)]
        assert [seq for seq, _ in starts] == [1, len(first) + 1]
        recorded = provenance.decision_settings(load(config))
        assert all(e.rules == provenance.rules_digest() for _, e in starts)
        assert all(e.settings == recorded for _, e in starts)
        relisted = Counter(
            (e.kind, e.name, e.change) for e in tail if isinstance(e, Observed) and e.kind == "Pod"
        )
        assert relisted[("Pod", "added", "ADDED")] == 1
        assert relisted[("Pod", "removed", "DELETED")] == 1
        assert not any(name == "kept" for _, name, _ in relisted), relisted
        nodes_again = [e for e in tail if isinstance(e, Observed) and e.kind == "Node"]
        assert nodes_again == []
        assert any(isinstance(e, Resynced) and e.reason == "listed" for e in tail)


async def test_snapshots_are_bounded_and_a_restart_folds_only_what_follows_the_newest(
    tmp_path: Path,
) -> None:
    async with _cluster_and_config(tmp_path, snapshot_every=1000, keep_snapshots=2) as (
        sim,
        config,
    ):
        log = tmp_path / "kbatchd.db"
        async with running_daemon(config) as daemon:
            # 1,200 pods left to another scheduler: as many events as `snapshot_every`, but a
            # state of over 1,200 objects waits for two events per object.
            for i in range(1200):
                sim.registry.create(PODS, "default", _unbound_pod(f"held-{i}"))

            async def ticked_after_the_pods() -> bool:
                events = await logged_events(log)
                held = [
                    seq for seq, e in events if isinstance(e, Observed) and e.name == "held-1199"
                ]
                return bool(held) and any(
                    isinstance(e, Tick) and seq > held[0] for seq, e in events
                )

            # A Tick after the pods: the pump has finished with their batches, snapshot or not.
            await eventually(ticked_after_the_pods, what="a Tick logged after the pods")
            assert snapshot_seqs(log) == []
            for i in range(1200):
                sim.registry.delete(PODS, "default", f"held-{i}", DeleteOptions(grace_seconds=0))
            # Then waves of 600 pods created and deleted: 1,200 events a wave and a state back
            # to its nodes, one snapshot a wave.
            for wave in range(1, 5):
                _create_then_delete(sim, [f"w{wave}-{i}" for i in range(600)])

                async def saved_wave(count: int = wave) -> bool:
                    return len(daemon.lines("snapshot saved")) >= count

                await eventually(saved_wave, what=f"snapshot {wave} saved")
            daemon.send_signal(signal.SIGTERM)
            assert await daemon.wait(within=10) == 0
        lines = daemon.lines("snapshot saved")
        assert [line["removed"] for line in lines] == [0, 0] + [1] * (len(lines) - 2)
        kept = snapshot_seqs(log)
        assert kept == [line["seq"] for line in lines[-2:]]
        last = len(await logged_events(log))
        async with running_daemon(config) as daemon:
            (replayed,) = daemon.lines("log replayed")
            daemon.send_signal(signal.SIGTERM)
            assert await daemon.wait(within=10) == 0
        assert (replayed["seq"], replayed["folded"]) == (last, last - kept[-1])
        # A damaged newest snapshot: the next start says so and folds from the one before.
        with closing(sqlite3.connect(log)) as db, db:
            db.execute("UPDATE snapshots SET body = x'c1c1c1' WHERE seq = ?", (kept[-1],))
        last = len(await logged_events(log))
        async with running_daemon(config) as daemon:
            daemon.send_signal(signal.SIGTERM)
            assert await daemon.wait(within=10) == 0
        unusable = daemon.lines("snapshot unusable")
        assert [(line["seq"], line["level"]) for line in unusable] == [(kept[-1], "warning")]
        (replayed,) = daemon.lines("log replayed")
        assert (replayed["seq"], replayed["folded"]) == (last, last - kept[0])


async def test_events_folded_at_start_count_towards_the_next_snapshot(tmp_path: Path) -> None:
    async with _cluster_and_config(tmp_path, snapshot_every=1000) as (sim, config):
        log = tmp_path / "kbatchd.db"

        async def churn(prefix: str, count: int) -> None:
            """`count` pods left to another scheduler created and deleted: 2 × `count` events,
            and a state back to its nodes."""
            names = [f"{prefix}-{i}" for i in range(count)]
            _create_then_delete(sim, names)

            async def all_logged() -> bool:
                events = await logged_events(log)
                return any(
                    isinstance(e, Observed) and e.name == names[-1] and e.change == "DELETED"
                    for _, e in events
                )

            await eventually(all_logged, what=f"the {prefix} pods logged")

        # Two runs of about 700 and 400 events: neither reaches 1,000 alone.
        async with running_daemon(config) as daemon:
            await churn("first", 350)
            daemon.send_signal(signal.SIGTERM)
            assert await daemon.wait(within=10) == 0
        assert snapshot_seqs(log) == []
        async with running_daemon(config) as daemon:
            (replayed,) = daemon.lines("log replayed")
            assert int(replayed["folded"]) >= 700
            await churn("second", 200)

            async def saved() -> bool:
                return bool(daemon.lines("snapshot saved"))

            await eventually(saved, what="a snapshot saved in the second run")
            daemon.send_signal(signal.SIGTERM)
            assert await daemon.wait(within=10) == 0
        assert len(snapshot_seqs(log)) == 1


async def _pods_of(core: client.CoreV1Api, job: str, namespace: str) -> list[Any]:
    return list((await core.list_namespaced_pod(namespace, label_selector=f"job-name={job}")).items)


RETRYING = "cannot append to the log; not acting until it takes the events"


async def test_a_full_disk_stops_the_acting_until_there_is_room_and_loses_nothing(
    tmp_path: Path,
) -> None:
    if reason := private_mounts():
        pytest.skip(f"needs a tmpfs of its own (unshare -rm): {reason}")
    async with on_cluster(SIM, tmp_path) as cluster:
        disk = tmp_path / "disk"
        disk.mkdir()
        config = cluster.daemon_config(tmp_path)
        tmpfs = ("-t", "tmpfs", "-o", "size=64m", "tmpfs", str(disk))
        async with (
            spawn(
                "daemon", "run", "--config", str(config), "--log", f"{disk}/kbatchd.db", mount=tmpfs
            ) as daemon,
            kube_client(cluster.admin) as api,
            aiohttp.ClientSession() as session,
        ):
            await daemon.wait_for(lambda line: '"synced"' in line)
            url = json.loads(await daemon.wait_for(lambda line: '"health serving"' in line))["url"]
            # The log on the daemon's own tmpfs, as the test sees it.
            seen = Path(f"/proc/{daemon.process.pid}/root{disk}")
            core, batch = client.CoreV1Api(api), client.BatchV1Api(api)

            async def readiness(status: int) -> dict[str, Any] | None:
                async with session.get(f"{url}/readyz") as response:
                    body: dict[str, Any] = await response.json()
                    return body if response.status == status else None

            await eventually(lambda: readiness(200), what="/readyz 200")
            await anyio.to_thread.run_sync(fill, seen / "filler")
            body = await eventually(lambda: readiness(503), what="/readyz 503 on a full disk")
            assert body["log_writable"] is False
            assert re.fullmatch(
                rf"{re.escape(f'{disk}/kbatchd.db')}: appending seq \d+\.\.\d+ failed: "
                "database or disk is full",
                body["log_error"],
            ), body
            await batch.create_namespaced_job(cluster.namespace, job("waits", parallelism=2))
            # The daemon sees the Job and cannot log it: a few more attempts, and no pod.
            failures = len(daemon.lines(RETRYING))

            async def tried_again() -> bool:
                return len(daemon.lines(RETRYING)) >= failures + 2

            await eventually(tried_again, what="two more attempts at the append")
            assert await _pods_of(core, "waits", cluster.namespace) == []
            # Waiting on purpose is no stuck loop: alive, so neither probe nor watchdog kills it.
            async with session.get(f"{url}/healthz") as response:
                assert response.status == 200
            (seen / "filler").unlink()

            async def complete() -> bool:
                found = await batch.read_namespaced_job("waits", cluster.namespace)
                conditions = found.status.conditions or []
                return any(c.type == "Complete" and c.status == "True" for c in conditions)

            await eventually(complete, within=60, what="the Job Complete once there is room")
            body = await eventually(lambda: readiness(200), what="/readyz 200 again")
            assert body["log_error"] is None
            assert len(daemon.lines("log writable again; acting")) == 1
            # Read from a copy: SQLite resolves /proc/PID/root, a symlink, to our own root.
            copy = await anyio.to_thread.run_sync(copy_of_log, seen, tmp_path / "copy")
            events = await logged_events(copy)
            pods = {p.metadata.name for p in await _pods_of(core, "waits", cluster.namespace)}
            daemon.send_signal(signal.SIGTERM)
            assert await daemon.wait(within=20) == 0
    assert [seq for seq, _ in events] == list(range(1, len(events) + 1))
    assert sum(isinstance(e, Started) for _, e in events) == 1  # one process throughout
    # Every pod the daemon made came of a decision committed before it was carried out, after
    # the Job itself was logged.
    (job_added,) = [
        seq
        for seq, e in events
        if isinstance(e, Observed) and e.kind == "Job" and e.change == "ADDED"
    ]
    decided = {seq: e for seq, e in events if isinstance(e, Decided)}
    created: dict[str, int] = {}
    for seq, event in events:
        if isinstance(event, Outcome) and event.ok and event.code == 201:
            intent = decided[event.decision].intents[event.index]
            if isinstance(intent, Create) and intent.kind == "Pod":
                assert job_added < event.decision < seq
                created[intent.name] = event.decision
    assert len(pods) == 2
    assert set(created) == pods
    assert await assert_reproduced(copy) > 0


async def test_a_start_on_a_full_disk_exits_1_for_systemd_to_restart_with_one_line(
    tmp_path: Path,
) -> None:
    if reason := private_mounts():
        pytest.skip(f"needs a tmpfs of its own (unshare -rm): {reason}")
    disk = tmp_path / "disk"
    disk.mkdir()
    # The daemon reads its log before it reaches any cluster (this one has none to reach).
    config = tmp_path / "kbatchd.toml"
    config.write_text(
        '[[clusters]]\nname = "c"\nkubeconfig = "/no/such/kubeconfig"\n[health]\naddress = ""\n'
    )
    log = f"{disk}/kbatchd.db"
    # Too small for the new log's first pages.
    tmpfs = ("-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk))
    async with spawn("daemon", "run", "--config", str(config), "--log", log, mount=tmpfs) as daemon:
        assert await daemon.wait(within=30) == 1  # not 2: RestartPreventExitStatus=2
    assert daemon.stderr == [
        f"kbatchd: {log}: migration 0001_init.sql failed: database or disk is full"
    ], daemon.output()


async def test_a_second_daemon_on_the_log_by_any_name_is_refused_and_the_first_goes_on(
    tmp_path: Path,
) -> None:
    async with _cluster_and_config(tmp_path) as (sim, config):
        log = tmp_path / "kbatchd.db"
        async with running_daemon(config) as first:
            named = f" (pid {first.process.pid})"
            os.link(log, tmp_path / "link.db")
            (tmp_path / "elsewhere").mkdir()
            (tmp_path / "elsewhere" / "kbatchd.db").symlink_to(log)
            (tmp_path / "bound").mkdir()
            # Each way to the file, the refusal expected, and the mount the second runs in.
            ways: list[tuple[Path, str, tuple[str, ...]]] = [
                (log, named, ()),
                (tmp_path / "link.db", "", ()),
                (tmp_path / "elsewhere" / "kbatchd.db", named, ()),
            ]
            if not private_mounts():
                bound = ("--bind", str(tmp_path), str(tmp_path / "bound"))
                # The note comes with the directory: this refusal names the holder too.
                ways.append((tmp_path / "bound" / "kbatchd.db", named, bound))

            async def refused(path: Path, pid: str, mount: tuple[str, ...]) -> None:
                async with spawn(
                    "daemon", "run", "--config", str(config), "--log", str(path), mount=mount
                ) as second:
                    assert await second.wait(within=30) == 2
                assert second.stderr == [f"kbatchd: {path}: in use by another writer{pid}"], (
                    second.output()
                )

            # Each is refused on its own: they start side by side.
            async with anyio.create_task_group() as tg:
                for way in ways:
                    tg.start_soon(refused, *way)
            (tmp_path / "kbatchd.db-writer").unlink()  # the note only names the holder
            async with spawn("daemon", "run", "--config", str(config)) as second:
                assert await second.wait(within=30) == 2
            assert second.stderr == [f"kbatchd: {log}: in use by another writer"]
            async with spawn("replay", "replay", str(log)) as replay:  # readers take no lock
                assert await replay.wait(within=60) == 0, replay.output()
            # The first still logs what it sees and decides.
            sim.registry.create(PODS, "default", _pod("after"))
            sim.registry.create(JOBS, "default", job("after"))

            async def logged_and_decided() -> bool:
                events = await logged_events(log)
                return bool(_observed(events, "Pod", "after")) and any(
                    isinstance(e, Decided) and e.key == "Job/sim-0/default/after" for _, e in events
                )

            await eventually(logged_and_decided, what="the first daemon still logging, deciding")
            first.send_signal(signal.SIGTERM)
            assert await first.wait(within=10) == 0
        events = await logged_events(log)
        assert [seq for seq, _ in events] == list(range(1, len(events) + 1))
        # One writer throughout: one start recorded.
        assert sum(isinstance(e, Started) for _, e in events) == 1


async def test_a_partition_past_the_watch_history_relists_the_difference(tmp_path: Path) -> None:
    async with _cluster_and_config(tmp_path, time_scale=5) as (sim, config):
        log = tmp_path / "kbatchd.db"
        async with running_daemon(config) as daemon, kube_client(sim.kubeconfig_path) as api:
            core = client.CoreV1Api(api)
            for name in ("stays", "goes"):
                await core.create_namespaced_pod("default", _pod(name))

            async def both_logged() -> bool:
                events = await logged_events(log)
                return bool(_observed(events, "Pod", "stays") and _observed(events, "Pod", "goes"))

            await eventually(both_logged, what="both pods in the log")
            # Cut the daemon off: every request fails and open watches close. While it cannot
            # see, the cluster changes and its watch history is compacted past the daemon's
            # resourceVersion, so reconnecting gets 410 Gone and only a relist can catch up.
            sim.faults.set(error_500=1.0)
            sim.faults.drop_watches()
            sim.registry.delete(PODS, "default", "goes", DeleteOptions(grace_seconds=0))
            sim.registry.create(PODS, "default", _pod("arrived"))
            sim.faults.expire_history_now()
            sim.faults.set(error_500=0.0)

            reasons = await eventually(
                lambda: _resync_reasons_once_caught_up(log), within=60, what="the relist's deltas"
            )
            assert "relisted" in reasons
            daemon.send_signal(signal.SIGTERM)
            assert await daemon.wait(within=10) == 0


@pytest.mark.parametrize("backend", real_params())
async def test_a_watch_resumed_past_a_restarted_api_servers_cache_relists(
    tmp_path: Path, backend: str
) -> None:
    """The real server's 410: while the daemon is frozen, kube-apiserver restarts (breaking
    every watch), a pod goes and another arrives, and etcd's history is compacted past them;
    the daemon's watches resume from before the change, are refused as too old, and the
    relist's deltas bring the log up to date."""
    log = tmp_path / "kbatchd.db"
    async with (
        on_cluster(backend, tmp_path, fresh=True) as cluster,
        running_daemon(cluster.daemon_config(tmp_path)) as daemon,
        kube_client(cluster.admin) as api,
    ):
        assert cluster.plane is not None
        ns = cluster.namespace
        core = client.CoreV1Api(api)
        for name in ("stays", "goes"):
            await core.create_namespaced_pod(ns, _unbound_pod(name))

        async def both_logged() -> bool:
            events = await logged_events(log)
            return bool(_observed(events, "Pod", "stays") and _observed(events, "Pod", "goes"))

        await eventually(both_logged, what="both pods in the log")
        daemon.send_signal(signal.SIGSTOP)
        try:
            # Restarted first, so that no change reaches the frozen daemon's sockets.
            await anyio.to_thread.run_sync(cluster.plane.restart_apiserver)
            await core.delete_namespaced_pod("goes", ns, grace_period_seconds=0)
            await core.create_namespaced_pod(ns, _unbound_pod("arrived"))
            await anyio.to_thread.run_sync(cluster.plane.compact_history)
        finally:
            daemon.send_signal(signal.SIGCONT)

        reasons = await eventually(
            lambda: _resync_reasons_once_caught_up(log), within=90, what="the relist's deltas"
        )
        assert "relisted" in reasons
        assert daemon.lines("watch expired, relisting"), "no 410 was met"
