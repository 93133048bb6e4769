"""The informer against a real (simulated) API server: list deltas, watch, 410, paging."""

from __future__ import annotations

import random
from typing import Any

import anyio
import msgspec
import pytest
import structlog.testing

from daemon.kube.api import Response, WatchHttpError
from daemon.kube.ingest import EVENTS_PER_SEND, Backoff, Expired, Informer, Reachability
from daemon.kube.resources import RESOURCES
from daemon.sim.cluster import SimCluster
from daemon.sim.registry import DeleteOptions
from daemon.sim.resources import JOBS, NAMESPACES, PODS
from events.objects import MAX_ANNOTATION_CHARS, Pod, SlimObject
from events.schema import Event, Observed, Resynced, encode_event
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


class ScriptedApi:
    """A watch whose reads are given: each a list of lines, as `KubeApi.stream_lines` yields."""

    cluster = "c"

    def __init__(self, reads: list[list[bytes]]) -> None:
        self.reads = reads

    async def stream_lines(self, path: str, query: Any, **_: Any) -> Any:
        for read in self.reads:
            yield read


def _line(type_: str, name: str, rv: str) -> bytes:
    obj = {"kind": "Pod", "metadata": {"name": name, "namespace": "default", "resourceVersion": rv}}
    return msgspec.json.encode({"type": type_, "object": obj})


EXPIRED = msgspec.json.encode(
    {"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}}
)


@pytest.mark.parametrize(
    ("kind", "collection", "body"),
    [
        ("Pod", PODS, _pod("big")),
        (
            "Job",
            JOBS,
            {
                "metadata": {"name": "big"},
                "spec": {
                    "suspend": True,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [{"name": "c", "image": "x"}],
                        }
                    },
                },
            },
        ),
    ],
)
async def test_a_huge_kept_annotation_costs_the_log_a_bounded_size_and_one_warning(
    sim: SimCluster, api: Any, kind: str, collection: Any, body: dict[str, Any]
) -> None:
    """A 200 KB `kbatchd.dev/` annotation would be logged again with every event of its
    object: it is dropped, with one warning, and the object's short ones are kept."""
    huge = {"kbatchd.dev/blob": "x" * 200_000, "kbatchd.dev/small": "kept"}
    sim.registry.create(
        collection, "default", {**body, "metadata": {"name": "big", "annotations": huge}}
    )
    sink = Sink()
    informer = Informer(api, RESOURCES[kind], sink.send, {}, read_timeout=5)
    changes = 10
    with structlog.testing.capture_logs() as logs:
        await informer.relist()
        async with anyio.create_task_group() as tg:
            tg.start_soon(informer.watch)
            for n in range(changes):
                patch = {"metadata": {"labels": {"n": str(n)}}}
                sim.registry.patch(
                    collection, "default", "big", "application/merge-patch+json", patch
                )
            await sink.wait_for(1 + changes)
            tg.cancel_scope.cancel()
    observed = [e for e in sink.events if isinstance(e, Observed)]
    assert len(observed) == 1 + changes
    assert all(e.obj.annotations == {"kbatchd.dev/small": "kept"} for e in observed)
    assert sum(len(encode_event(e)) for e in observed) < 20_000
    warnings = [line for line in logs if line["log_level"] == "warning"]
    assert warnings == [
        {
            "event": "annotation too long, not kept",
            "annotation": "kbatchd.dev/blob",
            "limit_chars": MAX_ANNOTATION_CHARS,
            "object": "default/big",
            "cluster": "c1",
            "kind": kind,
            "log_level": "warning",
        }
    ]


@pytest.mark.parametrize(
    ("events", "sends"),
    [
        pytest.param(3, [3], id="one-item"),
        pytest.param(EVENTS_PER_SEND, [EVENTS_PER_SEND], id="a-full-item"),
        pytest.param(
            2 * EVENTS_PER_SEND + 5, [EVENTS_PER_SEND, EVENTS_PER_SEND, 5], id="bounded-items"
        ),
    ],
)
async def test_the_events_of_a_read_are_handed_on_in_bounded_items(
    events: int, sends: list[int]
) -> None:
    sink = Sink()
    sizes: list[int] = []

    async def counting(batch: list[Event]) -> None:
        sizes.append(len(batch))
        await sink.send(batch)

    reads = [[_line("ADDED", f"p{i}", str(i + 2)) for i in range(events)]]
    informer = Informer(ScriptedApi(reads), RESOURCES["Pod"], counting, {}, read_timeout=5)  # type: ignore[arg-type]
    await informer.watch()
    assert sizes == sends
    assert sink.changes() == [("ADDED", f"p{i}") for i in range(events)]
    assert informer.resource_version == str(events + 1)


async def test_events_read_with_an_expiry_reach_the_log_before_it_is_raised() -> None:
    sink = Sink()
    reads = [[_line("ADDED", "a", "2"), _line("MODIFIED", "a", "3"), EXPIRED]]
    informer = Informer(ScriptedApi(reads), RESOURCES["Pod"], sink.send, {}, read_timeout=5)  # type: ignore[arg-type]
    with pytest.raises(Expired):
        await informer.watch()
    # Cached and logged alike: the relist that follows computes its deltas from the cache.
    assert sink.changes() == [("ADDED", "a"), ("MODIFIED", "a")]
    assert informer.known["default/a"].rv == "3"


class _Fixed(random.Random):
    """Randomness pinned at one point of each range: 0 is its low end, 1 its high end."""

    def __init__(self, at: float) -> None:
        super().__init__(0)
        self.at = at

    def uniform(self, a: float, b: float) -> float:
        return a + (b - a) * self.at


@pytest.mark.parametrize(
    ("at", "failures", "expected"),
    [
        (1.0, 8, [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0]),
        (0.0, 8, [0.4, 0.8, 1.6, 3.2, 6.4, 12.8, 15.0, 15.0]),
        (0.5, 3, [0.6, 1.2, 2.4]),
        # A storm's thousandth failure in a row waits the cap, like the seventh.
        (1.0, 2000, [30.0] * 10),
    ],
    ids=["highest", "lowest", "middle", "a-long-storm"],
)
def test_the_back_off_doubles_to_its_cap_and_stays_within_it(
    at: float, failures: int, expected: list[float]
) -> None:
    backoff = Backoff(rng=_Fixed(at))
    delays = [backoff.next_delay() for _ in range(failures)]
    assert delays[-len(expected) :] == pytest.approx(expected)
    assert max(delays) <= backoff.cap
    backoff.reset()
    assert backoff.next_delay() == pytest.approx(delays[0])


class _FlakyApi:
    """Lists answer with `statuses` in turn (then 200); every watch is refused with a 500."""

    cluster = "c"

    def __init__(self, statuses: list[int]) -> None:
        self.statuses = statuses

    async def request(self, method: str, path: str, **_: Any) -> Response:
        status = self.statuses.pop(0) if self.statuses else 200
        return Response(status, b'{"metadata": {"resourceVersion": "5"}, "items": []}')

    async def stream_lines(self, path: str, query: Any, **_: Any) -> Any:
        raise WatchHttpError(Response(500, b"{}"))
        yield []  # pragma: no cover (an async generator that raises at once)


async def test_a_successful_list_resets_the_back_off() -> None:
    """Lists fail three times, then one succeeds and its watch fails, then lists fail again:
    the delay after the list that succeeded starts from the first again."""
    api = _FlakyApi([500, 500, 500, 200, 500, 500])
    backoff = Backoff(first=0.01, cap=0.08, rng=_Fixed(1.0))
    informer = Informer(api, RESOURCES["Pod"], Sink().send, {}, backoff=backoff)  # type: ignore[arg-type]
    with structlog.testing.capture_logs() as logs:
        async with anyio.create_task_group() as tg:
            tg.start_soon(informer.run)

            async def six_failures() -> bool:
                return len([line for line in logs if line["event"] == "watch failed"]) >= 6

            await eventually(six_failures, within=10, what="six failures")
            tg.cancel_scope.cancel()
    delays = [line["retry_in"] for line in logs if line["event"] == "watch failed"][:6]
    assert delays == [0.01, 0.02, 0.04, 0.01, 0.02, 0.04]


async def test_a_stalled_watch_is_watched_again_at_once_and_is_no_outage(
    sim: SimCluster, api: Any
) -> None:
    """A watch the server answered, then left silent past the inactivity deadline (a wedged
    stream: a half-open connection, a stuck proxy), is watched again at once from the version
    it reached: no relist, no back-off round, no "cannot reach the cluster"."""
    sim.registry.create(PODS, "default", _pod("a"))
    sink = Sink()
    # A round of the cluster's back-off would outlast the test.
    reach = Reachability("c1", first=60.0, cap=60.0)
    informer = Informer(api, RESOURCES["Pod"], sink.send, {}, read_timeout=1.0, reachability=reach)
    with structlog.testing.capture_logs() as logs:
        async with anyio.create_task_group() as tg:
            tg.start_soon(informer.run)
            await sink.wait_for(1)
            sim.faults.set(stall_watch=1.0)  # after the next batch: a bookmark within 0.2 s

            async def stalled() -> bool:
                return sim.faults.hits["stall-watch"] > 0

            await eventually(stalled, within=10, what="a stalled watch")
            sim.faults.set(stall_watch=0.0)
            sim.registry.create(PODS, "default", _pod("b"))
            await sink.wait_for(2)
            tg.cancel_scope.cancel()
    assert sink.changes() == [("ADDED", "a"), ("ADDED", "b")]
    assert informer.relists == 1
    above_debug = [(e["log_level"], e["event"]) for e in logs if e["log_level"] != "debug"]
    assert above_debug == [("warning", "watch stalled; watching again")]
    assert reach.rounds == 0


async def test_a_watch_resumed_after_an_outage_ends_it(sim: SimCluster, api: Any) -> None:
    """The API server goes away: the watch's tries get no answer (an outage round opens) and,
    once it serves again, the watch resumes from the version it reached. Its first answer
    ends the outage, so that the next one starts the back-off afresh, not doubled."""
    sink = Sink()
    reach = Reachability("c1", first=0.2, cap=60.0)
    informer = Informer(api, RESOURCES["Pod"], sink.send, {}, read_timeout=5, reachability=reach)
    with structlog.testing.capture_logs() as logs:
        async with anyio.create_task_group() as tg:
            tg.start_soon(informer.run)
            sim.registry.create(PODS, "default", _pod("a"))
            await sink.wait_for(1)
            port = int(sim.server.address.rsplit(":", 1)[1])
            await sim.server.close()

            async def outage() -> bool:
                return reach.rounds > 0

            await eventually(outage, within=10, what="an outage round")
            await sim.server.start(sim.host, port)
            sim.registry.create(PODS, "default", _pod("b"))
            await sink.wait_for(2)
            tg.cancel_scope.cancel()
    assert informer.relists == 1, "resumed, not listed again"
    assert reach.rounds == 0
    assert ("info", "the cluster answers again") in [(e["log_level"], e["event"]) for e in logs]


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_an_unreachable_cluster_is_one_warning_a_round_for_every_caller() -> None:
    clock = _Clock()
    reach = Reachability("c1", first=1.0, cap=30.0, clock=clock, rng=random.Random(3))
    callers = ["discovery", "managedBy", "Pod", "Node", "Job", "JobSet", "Workload", "PodGroup"]
    with structlog.testing.capture_logs() as logs:
        first = [reach.failed(caller, "connection refused") for caller in callers]
        clock.now += first[0]  # the round ends; every caller tries again and fails
        second = [reach.failed(caller, "connection refused") for caller in callers]
        reach.answered()
        clock.now += 0.5
        after = reach.failed("Pod", "connection refused")
    assert first == [first[0]] * len(callers), "every caller waits for the round's end"
    assert second == [second[0]] * len(callers)
    assert second[0] >= 1.0 > first[0] / 2, "the second round waits longer"
    assert after <= 1.0, "an answer starts the back-off afresh"
    above_debug = [(e["log_level"], e["event"], e.get("round")) for e in logs]
    above_debug = [entry for entry in above_debug if entry[0] != "debug"]
    assert above_debug == [
        ("warning", "cannot reach the cluster; trying again", 1),
        ("warning", "cannot reach the cluster; trying again", 2),
        ("info", "the cluster answers again", None),
        ("warning", "cannot reach the cluster; trying again", 1),
    ]
