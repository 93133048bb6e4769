"""The informer against a real (simulated) API server: list deltas, watch, 410, paging."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from daemon.kube.ingest import Expired, Informer
from daemon.kube.resources import RESOURCES
from daemon.sim.cluster import SimCluster
from daemon.sim.registry import DeleteOptions
from daemon.sim.resources import NAMESPACES, PODS
from events.objects import Pod, SlimObject
from events.schema import Event, Observed, Resynced
from tests.processes import eventually

pytestmark = pytest.mark.anyio


def _pod(name: str, scheduler: str = "elsewhere") -> dict[str, Any]:
    # Another scheduler's pods stay Pending and unbound: nothing changes them but the test.
    return {
        "metadata": {"name": name},
        "spec": {"schedulerName": scheduler, "containers": [{"name": "c", "image": "x"}]},
    }


class Sink:
    def __init__(self) -> None:
        self.events: list[Event] = []
        self.changed = anyio.Event()

    async def send(self, events: list[Event]) -> None:
        self.events.extend(events)
        self.changed.set()
        self.changed = anyio.Event()

    def changes(self) -> list[tuple[str, str]]:
        return [(e.change, e.name) for e in self.events if isinstance(e, Observed)]

    async def wait_for(self, count: int) -> None:
        with anyio.fail_after(10):
            while len(self.changes()) < count:
                await self.changed.wait()


def _informer(api: Any, sink: Sink, known: dict[str, SlimObject] | None = None) -> Informer:
    return Informer(api, RESOURCES["Pod"], sink.send, known or {}, read_timeout=5)


async def test_first_list_adds_everything_then_marks_resynced(sim: SimCluster, api: Any) -> None:
    for name in ("a", "b"):
        sim.registry.create(PODS, "default", _pod(name))
    sink = Sink()
    await _informer(api, sink).relist()
    assert sorted(sink.changes()) == [("ADDED", "a"), ("ADDED", "b")]
    marker = sink.events[-1]
    assert isinstance(marker, Resynced)
    assert (marker.kind, marker.reason) == ("Pod", "listed")
    assert marker.resource_version


async def test_relist_emits_exact_deltas_against_what_was_emitted(
    sim: SimCluster, api: Any
) -> None:
    for name in ("same", "changed", "gone", "recreated"):
        sim.registry.create(PODS, "default", _pod(name))
    sink = Sink()
    informer = _informer(api, sink)
    await informer.relist()
    sink.events.clear()
    sim.registry.patch(
        PODS,
        "default",
        "changed",
        "application/merge-patch+json",
        {"metadata": {"labels": {"x": "1"}}},
    )
    sim.registry.delete(PODS, "default", "gone", DeleteOptions(grace_seconds=0))
    sim.registry.delete(PODS, "default", "recreated", DeleteOptions(grace_seconds=0))
    sim.registry.create(PODS, "default", _pod("recreated"))
    sim.registry.create(PODS, "default", _pod("new"))
    await informer.relist()
    assert sorted(sink.changes()) == [
        ("ADDED", "new"),
        ("ADDED", "recreated"),
        ("DELETED", "gone"),
        ("DELETED", "recreated"),
        ("MODIFIED", "changed"),
    ]
    assert isinstance(sink.events[-1], Resynced)
    assert sink.events[-1].reason == "relisted"


async def test_watch_streams_changes_after_the_list(sim: SimCluster, api: Any) -> None:
    sink = Sink()
    informer = _informer(api, sink)
    await informer.relist()
    async with anyio.create_task_group() as tg:
        tg.start_soon(informer.watch)
        sim.registry.create(PODS, "default", _pod("w"))
        sim.registry.delete(PODS, "default", "w", DeleteOptions(grace_seconds=0))
        await sink.wait_for(2)
        tg.cancel_scope.cancel()
    assert sink.changes() == [("ADDED", "w"), ("DELETED", "w")]
    assert "default/w" not in informer.known


async def test_bookmarks_advance_the_resource_version_without_events(
    sim: SimCluster, api: Any
) -> None:
    sink = Sink()
    informer = _informer(api, sink)
    await informer.relist()
    listed_at = informer.resource_version
    # Other kinds move the global resourceVersion; a Pod watch learns it from bookmarks.
    sim.registry.create(NAMESPACES, "", {"metadata": {"name": "elsewhere"}})
    async with anyio.create_task_group() as tg:
        tg.start_soon(informer.watch)

        async def moved() -> bool:
            return informer.resource_version != listed_at

        await eventually(moved, within=10, what="a bookmark")
        tg.cancel_scope.cancel()
    assert int(informer.resource_version) > int(listed_at)
    assert sink.changes() == []


async def test_watch_from_a_compacted_version_is_expired(sim: SimCluster, api: Any) -> None:
    sink = Sink()
    informer = _informer(api, sink)
    await informer.relist()
    sim.registry.create(PODS, "default", _pod("missed"))
    sim.faults.expire_history_now()
    with pytest.raises(Expired):
        await informer.watch()
    await informer.relist()
    assert ("ADDED", "missed") in sink.changes()


async def test_list_pages_through_large_collections(sim: SimCluster, api: Any) -> None:
    for i in range(1_203):
        sim.registry.create(PODS, "default", _pod(f"p{i:04d}"))
    sink = Sink()
    await _informer(api, sink).relist()
    names = [name for change, name in sink.changes() if change == "ADDED"]
    assert len(names) == len(set(names)) == 1_203


async def test_known_objects_from_the_log_are_not_re_added(sim: SimCluster, api: Any) -> None:
    sim.registry.create(PODS, "default", _pod("old"))
    first = Sink()
    informer = _informer(api, first)
    await informer.relist()
    known = {key: obj for key, obj in informer.known.items()}
    assert all(isinstance(obj, Pod) for obj in known.values())
    second = Sink()
    await _informer(api, second, known).relist()
    assert second.changes() == []
