"""The actuator against a real (simulated) API server: each intent's meaning of done,
idempotent repeats, retries through 429/500, and one outcome event per intent."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from anyio.abc import TaskGroup

from daemon.kube.actuator import Actuator, Slots
from daemon.kube.api import KubeApi
from daemon.sim.cluster import SimCluster
from daemon.sim.registry import DeleteOptions
from daemon.sim.resources import PODS
from events.intents import Bind, Create, Delete, Intent, Patch
from events.schema import Decided, Event, Outcome

pytestmark = pytest.mark.anyio


def _pod(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"schedulerName": "kbatchd", "containers": [{"name": "c", "image": "x"}]},
    }


def _uid(sim: SimCluster, name: str) -> str:
    obj = sim.get(PODS, "default", name)
    assert obj is not None
    return str(obj["metadata"]["uid"])


class Outcomes:
    def __init__(self) -> None:
        self.events: list[Outcome] = []

    async def send(self, events: list[Event]) -> None:
        self.events.extend(e for e in events if isinstance(e, Outcome))


def _actuator(api: KubeApi, sink: Outcomes) -> Actuator:
    # Retries 1 to 10 ms apart: what is retried matters here, not how long it waits.
    return Actuator({"c1": api}, sink.send, max_attempts=30, retry_backoff=(0.001, 0.01))


def _create(name: str) -> Create:
    return Create("c1", "Pod", "default", name, body=_pod(name))


@pytest.mark.parametrize(
    ("setup", "intent", "ok", "code"),
    [
        pytest.param(None, _create("fresh"), True, 201, id="create"),
        pytest.param("exists", _create("exists"), True, 409, id="create-already-exists-is-done"),
        pytest.param(
            None, Delete("c1", "Pod", "default", "absent"), True, 404, id="delete-absent-is-done"
        ),
        pytest.param(
            "exists",
            Delete("c1", "Pod", "default", "exists", precondition_uid="not-its-uid"),
            True,
            409,
            id="delete-another-uid-is-done",
        ),
        pytest.param(
            "exists",
            Patch("c1", "Pod", "default", "exists", patch={"metadata": {"labels": {"a": "b"}}}),
            True,
            200,
            id="merge-patch",
        ),
        pytest.param(
            "exists",
            Patch(
                "c1",
                "Pod",
                "default",
                "exists",
                patch={"metadata": {"labels": {"a": "b"}}},
                precondition_rv="1",
            ),
            False,
            409,
            id="patch-with-stale-rv-fails",
        ),
        pytest.param(
            None,
            Patch("c1", "Pod", "default", "absent", patch={"metadata": {"labels": {"a": "b"}}}),
            False,
            404,
            id="patch-absent-fails",
        ),
        pytest.param(
            "exists", Bind("c1", "Pod", "default", "exists", node="b0-r0-h0"), True, 201, id="bind"
        ),
        pytest.param(
            "bound",
            Bind("c1", "Pod", "default", "bound", node="b0-r0-h1"),
            False,
            409,
            id="bind-bound-pod-fails",
        ),
        pytest.param(
            "bound",
            Bind("c1", "Pod", "default", "bound", node="b0-r0-h0"),
            True,
            409,
            id="bind-to-the-node-it-is-on-is-done",
        ),
    ],
)
async def test_what_each_answer_means(
    sim: SimCluster, api: KubeApi, setup: str | None, intent: Intent, ok: bool, code: int
) -> None:
    if setup is not None:
        sim.registry.create(PODS, "default", _pod(setup))
        if setup == "bound":
            bind = Bind("c1", "Pod", "default", setup, node="b0-r0-h0")
            assert (await _actuator(api, Outcomes()).perform(bind)).ok
    result = await _actuator(api, Outcomes()).perform(intent)
    assert (result.ok, result.code) == (ok, code), result.message


async def test_a_created_object_reports_its_uid_and_resource_version(
    sim: SimCluster, api: KubeApi
) -> None:
    result = await _actuator(api, Outcomes()).perform(_create("p"))
    assert result.uid == _uid(sim, "p")
    assert result.resource_version


async def test_delete_with_the_right_uid_deletes(sim: SimCluster, api: KubeApi) -> None:
    sim.registry.create(PODS, "default", _pod("doomed"))
    intent = Delete("c1", "Pod", "default", "doomed", precondition_uid=_uid(sim, "doomed"))
    result = await _actuator(api, Outcomes()).perform(intent)
    assert result.ok
    # Unbound, so the API server removes it at once.
    assert sim.get(PODS, "default", "doomed") is None


async def test_every_intent_gets_one_outcome_in_order_of_index(
    sim: SimCluster, api: KubeApi
) -> None:
    sink = Outcomes()
    intents = (
        *(_create(f"p{i}") for i in range(5)),
        Delete("c1", "Pod", "default", "p0"),
        Patch("c1", "Pod", "default", "p1", patch={"metadata": {"labels": {"x": "y"}}}),
    )
    decision = Decided(at=0, reconciler="test", key="Job/c1/default/j", reason="r", intents=intents)
    await _actuator(api, sink).execute(42, decision)
    assert sorted(o.index for o in sink.events) == list(range(len(intents)))
    assert all(o.decision == 42 and o.ok for o in sink.events)
    assert sim.get(PODS, "default", "p0") is None
    patched = sim.get(PODS, "default", "p1")
    assert patched is not None
    assert patched["metadata"]["labels"] == {"x": "y"}


async def test_transient_errors_are_retried_until_done(sim: SimCluster, api: KubeApi) -> None:
    sim.faults.set(error_429=0.4, error_500=0.3)
    # Its 429s say to retry at once (not after the second they say by default): the actuator's
    # own back-off paces the retries.
    sim.faults.retry_after = 0
    sink = Outcomes()
    actuator = _actuator(api, sink)
    decision = Decided(
        at=0,
        reconciler="test",
        key="Job/c1/default/j",
        reason="r",
        intents=tuple(_create(f"r{i}") for i in range(20)),
    )
    await actuator.execute(1, decision)
    sim.faults.clear()
    assert all(o.ok for o in sink.events), [o.message for o in sink.events if not o.ok]
    assert len(sink.events) == 20
    assert actuator.calls > 20
    names = {p["metadata"]["name"] for p in sim.objects(PODS, "default")}
    assert {f"r{i}" for i in range(20)} <= names


async def test_an_unknown_cluster_is_a_failed_outcome(api: KubeApi) -> None:
    result = await _actuator(api, Outcomes()).perform(
        Create("elsewhere", "Pod", "default", "p", body=_pod("p"))
    )
    assert not result.ok
    assert "elsewhere" in result.message


async def test_deleting_a_bound_pod_leaves_it_terminating(sim: SimCluster, api: KubeApi) -> None:
    sim.registry.create(PODS, "default", _pod("t"))
    actuator = _actuator(api, Outcomes())
    assert (await actuator.perform(Bind("c1", "Pod", "default", "t", node="b0-r0-h0"))).ok
    result = await actuator.perform(Delete("c1", "Pod", "default", "t", grace_seconds=30))
    assert result.ok
    obj = sim.get(PODS, "default", "t")
    assert obj is not None
    assert obj["metadata"]["deletionTimestamp"]
    sim.registry.delete(PODS, "default", "t", DeleteOptions(grace_seconds=0))


async def test_a_conflicting_write_is_not_mistaken_for_done(sim: SimCluster, api: KubeApi) -> None:
    # An injected 409 Conflict (another writer won) is not "already exists": nothing happened.
    sim.faults.set(error_409=1.0)
    result = await _actuator(api, Outcomes()).perform(_create("contested"))
    sim.faults.clear()
    assert (result.ok, result.code) == (False, 409)
    assert sim.get(PODS, "default", "contested") is None


# -- Slots: the bound on API calls in flight ------------------------------------------------------


async def _hold(slots: Slots, name: str, entered: list[str], release: anyio.Event) -> None:
    async with slots:
        entered.append(name)
        await release.wait()


@pytest.mark.parametrize("size", [1, 2, 5])
async def test_slots_admit_at_most_their_size_and_then_the_oldest_waiter(size: int) -> None:
    slots = Slots(size)
    entered: list[str] = []
    releases = [anyio.Event() for _ in range(size + 3)]
    async with anyio.create_task_group() as tg:
        for i, release in enumerate(releases):
            tg.start_soon(_hold, slots, f"t{i}", entered, release)
            await anyio.wait_all_tasks_blocked()
        assert entered == [f"t{i}" for i in range(size)]
        releases[0].set()
        await anyio.wait_all_tasks_blocked()
        assert entered == [f"t{i}" for i in range(size + 1)]
        for release in releases:
            release.set()
    assert len(entered) == size + 3


async def test_a_cancelled_waiter_leaves_no_slot_taken() -> None:
    slots = Slots(1)
    entered: list[str] = []
    first, never = anyio.Event(), anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(_hold, slots, "first", entered, first)
        await anyio.wait_all_tasks_blocked()
        with anyio.CancelScope() as waiting:
            waiting.cancel()
            await _hold(slots, "cancelled", entered, never)
        first.set()
    async with slots:  # the one slot is free again
        entered.append("after")
    assert entered == ["first", "after"]


async def _two_waiters(
    tg: TaskGroup, slots: Slots, entered: list[str], done: anyio.Event
) -> anyio.CancelScope:
    """With the one slot taken: a first waiter inside the returned cancel scope, then a second,
    both queued."""
    cancelled = anyio.CancelScope()

    async def first_waiter() -> None:
        with cancelled:
            await _hold(slots, "first waiter", entered, done)

    tg.start_soon(first_waiter)
    await anyio.wait_all_tasks_blocked()
    tg.start_soon(_hold, slots, "second waiter", entered, done)
    await anyio.wait_all_tasks_blocked()
    return cancelled


@pytest.mark.parametrize(
    "released_first",
    [
        # No await between the two: the first waiter is handed the slot and cancelled before
        # it runs again. Whether the cancellation lands before it enters or inside its block
        # depends on the backend (so it may have entered); either way the slot reaches the
        # second waiter.
        pytest.param(True, id="handed-then-cancelled"),
        # The other order: cancelled first, and the slot freed before the cancelled waiter
        # runs again. It must skip that waiter, not hand it the slot.
        pytest.param(False, id="cancelled-then-released"),
    ],
)
async def test_a_waiter_cancelled_around_a_release_passes_the_slot_on(
    released_first: bool,
) -> None:
    slots = Slots(1)
    entered: list[str] = []
    done = anyio.Event()
    await slots.__aenter__()
    async with anyio.create_task_group() as tg:
        cancelled = await _two_waiters(tg, slots, entered, done)
        if released_first:
            await slots.__aexit__(None, None, None)
            cancelled.cancel()
        else:
            cancelled.cancel()
            await slots.__aexit__(None, None, None)
        await anyio.wait_all_tasks_blocked()
        assert (entered[-1:] if released_first else entered) == ["second waiter"]
        done.set()
    async with slots:
        entered.append("after")
    assert (entered[-2:] if released_first else entered) == ["second waiter", "after"]
