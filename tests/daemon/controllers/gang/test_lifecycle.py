"""After admission: the ready timeout, eviction as a whole, back-off, the requeue limit."""

from __future__ import annotations

from daemon.controllers.gang.reconciler import GangReconciler, backoff_ms
from daemon.controllers.gang.spec import EVICTIONS
from daemon.controllers.runner import decide
from events.intents import Patch
from events.reasons import categorize
from tests.daemon.controllers.gang_builders import (
    SECOND,
    T0,
    binds,
    deletes,
    key,
    members,
    nodes,
    podgroup,
    status_conditions,
)
from tests.daemon.controllers.world import GangWorld


def admitted(rec: GangReconciler | None = None) -> GangWorld:
    world = GangWorld(nodes(), **({"rec": rec} if rec else {}))
    world.add(podgroup("g", 4), *members("g", 4))
    decision = world.run(key("g"))
    assert decision is not None
    assert decision.reason.startswith("Admitted")
    return world


def recreate(world: GangWorld, generation: int) -> None:
    """What the owning controller does after an eviction: new pods, new names."""
    world.add(*members("g", 4, prefix=f"g{generation}"))


def test_a_group_not_ready_in_time_is_evicted_as_a_whole_and_requeued_with_back_off() -> None:
    world = admitted()
    world.advance(30 * SECOND)
    waiting = world.decide(key("g"))
    assert waiting is not None
    assert waiting.intents == ()
    assert waiting.requeue_at == T0 + 60 * SECOND, "woken at the deadline"
    world.set_pod("g-00", phase="Running", conditions={"Ready": "True"})
    world.advance(30 * SECOND)  # the deadline: 1 of minCount 4 ready
    evicted = world.run(key("g"))
    assert evicted is not None
    assert deletes(evicted) == ["g-00", "g-01", "g-02", "g-03"]
    written = status_conditions(evicted, "g")["PodGroupScheduled"]
    assert (written["status"], written["reason"]) == ("False", "PodsReadyTimeout")
    assert written["message"] == (
        "1 of minCount 4 pod(s) ready 60s after admission; evicted (eviction 1)"
    )
    assert world.group("g").annotations[EVICTIONS] == "1"
    assert evicted.requeue_at == world.now + 10 * SECOND
    assert [type(i).__name__ for i in evicted.intents] == ["Delete"] * 4 + ["Patch", "Patch"]

    recreate(world, 1)
    backing_off = world.run(key("g"))
    assert backing_off is not None
    assert binds(backing_off) == {}
    assert backing_off.reason.startswith("BackingOff: evicted 1 time(s)")
    assert backing_off.requeue_at == world.now + 10 * SECOND
    world.advance(10 * SECOND)
    again = world.run(key("g"))
    assert again is not None
    assert len(binds(again)) == 4
    assert world.condition("g")["status"] == "True"

    world.advance(60 * SECOND)
    second = world.run(key("g"))
    assert second is not None
    assert len(deletes(second)) == 4
    assert world.group("g").annotations[EVICTIONS] == "2"
    assert second.requeue_at == world.now + 20 * SECOND, "the back-off doubles"


def test_reaching_ready_once_ends_the_timer() -> None:
    world = admitted()
    for i in range(4):
        world.set_pod(f"g-0{i}", phase="Running", conditions={"Ready": "True"})
    decision = world.run(key("g"))
    assert decision is not None
    ready = world.condition("g", "PodsReady")
    assert (ready["status"], ready["reason"]) == ("True", "Started")
    world.set_pod("g-00", conditions={"Ready": "False"})
    world.advance(120 * SECOND)
    later = world.decide(key("g"))
    assert later is not None
    assert later.intents == ()
    assert later.requeue_at is None


def test_an_admission_logs_two_decisions_and_the_passes_between_them_none() -> None:
    world = GangWorld(nodes())
    world.add(podgroup("g", 4), *members("g", 4))
    logged: list[str] = []

    def run_as_the_daemon() -> None:
        event, decision = decide(world.state, world.rec, key("g"))
        if event is not None:
            assert decision is not None
            world.carry_out(decision, world.log(key("g"), decision))
            logged.append(event.reason)

    for _ in range(3):
        run_as_the_daemon()
    for i in range(4):
        world.set_pod(f"g-0{i}", phase="Running", conditions={"Ready": "True"})
    for _ in range(3):
        run_as_the_daemon()
    assert len(logged) == 2, logged
    assert logged[0].startswith("Admitted: ns/g: 4 pod(s) bound to")
    assert logged[1] == "PodsReady: 4 pod(s) ready"
    assert [categorize(reason) for reason in logged] == ["admitted", "started"]


def test_succeeded_members_count_as_ready() -> None:
    world = admitted()
    for i in range(4):
        world.set_pod(f"g-0{i}", phase="Succeeded")
    world.advance(120 * SECOND)
    decision = world.run(key("g"))
    assert decision is not None
    assert deletes(decision) == []
    assert world.condition("g", "PodsReady")["status"] == "True"


def test_without_a_timeout_nothing_is_evicted() -> None:
    world = admitted(GangReconciler(ready_timeout_ms=None))
    assert world.condition("g", "PodsReady") == {}
    world.advance(3600 * SECOND)
    decision = world.decide(key("g"))
    assert decision is not None
    assert decision.intents == ()


def test_the_eviction_limit_stops_requeueing() -> None:
    rec = GangReconciler(ready_timeout_ms=10 * SECOND, backoff_base_ms=SECOND, max_evictions=1)
    world = admitted(rec)
    world.advance(10 * SECOND)
    assert deletes(world.run(key("g"))) == ["g-00", "g-01", "g-02", "g-03"]
    recreate(world, 1)
    world.advance(5 * SECOND)
    limited = world.run(key("g"))
    assert limited is not None
    assert binds(limited) == {}
    condition = world.condition("g")
    assert condition["reason"] == "RequeuingLimitExceeded"
    world.advance(3600 * SECOND)
    final = world.decide(key("g"))
    assert final is not None
    assert final.intents == ()
    assert final.requeue_at is None


def test_the_admission_time_lives_in_the_cluster_object() -> None:
    # A restarted daemon (a fresh reconciler, state rebuilt from the log) reads the
    # deadline back from the condition's lastTransitionTime.
    world = admitted()
    assert world.condition("g")["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    world.advance(61 * SECOND)
    decision = GangReconciler(ready_timeout_ms=60 * SECOND).decide(world.state, key("g"), world.now)
    assert decision is not None
    assert len(deletes(decision)) == 4


def test_backoff_is_kueues_doubling_capped() -> None:
    assert [backoff_ms(n, 60_000, 3_600_000) for n in range(0, 8)] == [
        0,
        60_000,
        120_000,
        240_000,
        480_000,
        960_000,
        1_920_000,
        3_600_000,
    ]
    assert backoff_ms(10**6, 1, 5) == 5


def test_eviction_patches_the_counter_outside_the_status() -> None:
    world = admitted()
    world.advance(60 * SECOND)
    decision = world.decide(key("g"))
    assert decision is not None
    meta = [i for i in decision.intents if isinstance(i, Patch) and not i.subresource]
    assert len(meta) == 1
    assert meta[0].patch == {"metadata": {"annotations": {EVICTIONS: "1"}}}
