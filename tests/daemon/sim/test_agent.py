"""The node agent: scheduling stand-in, pod phases driven by annotations, termination,
NotReady and removed nodes, and in-place container restarts."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from daemon.sim.cluster import SimCluster
from daemon.sim.registry import DeleteOptions
from daemon.sim.resources import NODES, PODS
from daemon.sim.store import Obj, decode
from tests.daemon.sim.helpers import pod_body

pytestmark = pytest.mark.anyio


def phase(name: str) -> Any:
    return lambda obj: obj is not None and obj.get("status", {}).get("phase") == name


def condition(obj: Obj | None, type_: str) -> str | None:
    for c in (obj or {}).get("status", {}).get("conditions") or ():
        if c["type"] == type_:
            return str(c["status"])
    return None


def create(sim: SimCluster, body: dict[str, Any], namespace: str = "default") -> Obj:
    return sim.registry.create(PODS, namespace, body).copy()


async def test_pods_run_and_end_as_annotated(sim: SimCluster) -> None:
    ok = pod_body("ok", **{"sim.kbatchd.dev/run-seconds": "2"})
    bad = pod_body("bad", **{"sim.kbatchd.dev/run-seconds": "2", "sim.kbatchd.dev/exit-code": "3"})
    for body in (ok, bad):
        body["spec"]["restartPolicy"] = "Never"
        create(sim, body)
    with anyio.fail_after(5):
        running = await sim.wait_for(PODS, "default", "ok", phase("Running"))
        assert running is not None
        assert running["status"]["startTime"]
        assert running["status"]["podIP"]
        assert condition(running, "Ready") == "True"
        assert running["status"]["containerStatuses"][0]["state"]["running"]
        done = await sim.wait_for(PODS, "default", "ok", phase("Succeeded"))
        failed = await sim.wait_for(PODS, "default", "bad", phase("Failed"))
    assert done is not None
    assert failed is not None
    assert done["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    assert failed["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3
    assert condition(failed, "Ready") == "False"


async def test_ready_delay(sim: SimCluster) -> None:
    create(sim, pod_body("p", **{"sim.kbatchd.dev/ready-seconds": "3"}))
    with anyio.fail_after(5):
        running = await sim.wait_for(PODS, "default", "p", phase("Running"))
        assert condition(running, "Ready") == "False"
        await sim.wait_for(PODS, "default", "p", lambda o: condition(o, "Ready") == "True")


async def test_restart_policy_on_failure_restarts_in_place(sim: SimCluster) -> None:
    body = pod_body("p", **{"sim.kbatchd.dev/run-seconds": "1", "sim.kbatchd.dev/exit-code": "1"})
    body["spec"]["restartPolicy"] = "OnFailure"
    uid = create(sim, body)["metadata"]["uid"]
    with anyio.fail_after(5):
        restarted = await sim.wait_for(
            PODS,
            "default",
            "p",
            lambda o: (
                o is not None
                and o["status"].get("containerStatuses", [{}])[0].get("restartCount", 0) >= 1
            ),
        )
    assert restarted is not None
    assert restarted["metadata"]["uid"] == uid
    status = restarted["status"]["containerStatuses"][0]
    assert status["lastState"]["terminated"]["exitCode"] == 1
    assert restarted["status"]["phase"] == "Running"


async def test_restart_all_containers_in_place(sim: SimCluster) -> None:
    body = pod_body("p", **{"sim.kbatchd.dev/run-seconds": "1", "sim.kbatchd.dev/exit-code": "42"})
    body["spec"]["restartPolicy"] = "Never"
    body["spec"]["containers"] = [
        {
            "name": "agent",
            "image": "agent:1",
            "restartPolicy": "Never",
            "restartPolicyRules": [
                {"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [42]}}
            ],
        },
        {"name": "worker", "image": "worker:1"},
    ]
    created = create(sim, body)
    seen_restarting: list[bool] = []
    sim.store.listeners.append(
        lambda e: (
            seen_restarting.append(True)
            if e.resource is PODS and condition(e.obj, "AllContainersRestarting") == "True"
            else None
        )
    )
    with anyio.fail_after(5):
        first = await sim.wait_for(PODS, "default", "p", phase("Running"))
        assert first is not None
        node = first["spec"]["nodeName"]
        after = await sim.wait_for(
            PODS,
            "default",
            "p",
            lambda o: (
                o is not None
                and all(c.get("restartCount", 0) >= 1 for c in o["status"]["containerStatuses"])
            ),
        )
    assert after is not None
    assert seen_restarting
    assert after["metadata"]["uid"] == created["metadata"]["uid"]
    assert after["spec"]["nodeName"] == node
    assert after["status"]["phase"] == "Running"
    assert condition(after, "AllContainersRestarting") == "False"


async def test_restart_rule_not_matching_ends_the_pod(sim: SimCluster) -> None:
    body = pod_body("p", **{"sim.kbatchd.dev/run-seconds": "1", "sim.kbatchd.dev/exit-code": "7"})
    body["spec"]["restartPolicy"] = "Never"
    body["spec"]["containers"][0]["restartPolicy"] = "Never"
    body["spec"]["containers"][0]["restartPolicyRules"] = [
        {"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}}
    ]
    create(sim, body)
    with anyio.fail_after(5):
        failed = await sim.wait_for(PODS, "default", "p", phase("Failed"))
    assert failed is not None
    assert failed["status"]["containerStatuses"][0]["restartCount"] == 0


async def test_default_scheduler_first_fit_with_selector_and_capacity(sim: SimCluster) -> None:
    def gpu_pod(name: str, **selector: str) -> dict[str, Any]:
        body = pod_body(name)
        body["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "8"}}
        if selector:
            body["spec"]["nodeSelector"] = selector
        return body

    create(sim, gpu_pod("rack1", **{"cloud.provider.com/topology-rack": "b0-r1"}))
    for i in range(3):
        create(sim, gpu_pod(f"g{i}"))
    create(sim, gpu_pod("waits"))
    with anyio.fail_after(5):
        bound = await sim.wait_for(
            PODS, "default", "rack1", lambda o: bool(o and o["spec"].get("nodeName"))
        )
        assert bound is not None
        assert bound["spec"]["nodeName"] == "b0-r1-h0"
        nodes = set()
        for i in range(3):
            got = await sim.wait_for(
                PODS, "default", f"g{i}", lambda o: bool(o and o["spec"].get("nodeName"))
            )
            assert got is not None
            nodes.add(got["spec"]["nodeName"])
        assert nodes == {"b0-r0-h0", "b0-r0-h1", "b0-r1-h1"}
        waiting = sim.get(PODS, "default", "waits")
        assert waiting is not None
        assert not waiting["spec"].get("nodeName")
        # Freeing a node lets the waiting pod in.
        sim.registry.delete(PODS, "default", "g0", DeleteOptions(grace_seconds=0))
        placed = await sim.wait_for(
            PODS, "default", "waits", lambda o: bool(o and o["spec"].get("nodeName"))
        )
    assert placed is not None


async def test_other_schedulers_and_gates_wait_for_binding(sim: SimCluster) -> None:
    custom = pod_body("custom")
    custom["spec"]["schedulerName"] = "kbatchd"
    gated = pod_body("gated")
    gated["spec"]["schedulingGates"] = [{"name": "kbatchd.dev/admission"}]
    create(sim, custom)
    create(sim, gated)
    with anyio.fail_after(5):
        # The gated pod is bound as soon as its gate goes; the custom one never is.
        obj = sim.get(PODS, "default", "gated")
        assert obj is not None
        obj["spec"]["schedulingGates"] = []
        sim.registry.update(PODS, "default", "gated", obj)
        await sim.wait_for(PODS, "default", "gated", phase("Running"))
    custom_now = sim.get(PODS, "default", "custom")
    assert custom_now is not None
    assert not custom_now["spec"].get("nodeName")
    assert custom_now["status"]["phase"] == "Pending"


async def test_not_ready_node_freezes_pods_and_holds_terminating_ones(sim: SimCluster) -> None:
    body = pod_body("p", **{"sim.kbatchd.dev/terminating-seconds": "1"})
    body["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "b0-r0-h0"}
    create(sim, body)
    with anyio.fail_after(5):
        await sim.wait_for(PODS, "default", "p", phase("Running"))
        sim.agent.set_node_ready("b0-r0-h0", False)
        node = sim.get(NODES, "", "b0-r0-h0")
        assert condition(node, "Ready") == "Unknown"
        assert any(t["key"] == "node.kubernetes.io/unreachable" for t in node["spec"]["taints"])  # type: ignore[index]
        sim.registry.delete(PODS, "default", "p", DeleteOptions())
        # Nothing finishes the pod while the node is away; a new pod is not placed there.
        create(sim, {**pod_body("q"), "spec": {**body["spec"]}})
        assert sim.agent.nodes["b0-r0-h0"].ready is False
        sim.agent.set_node_ready("b0-r0-h0", True)
        await sim.wait_for(PODS, "default", "p", lambda o: o is None)
        await sim.wait_for(PODS, "default", "q", phase("Running"))


async def test_not_ready_node_can_fail_its_pods() -> None:
    async with SimCluster.start(
        topology="blocks=1,racks=1,hosts=1", seed=1, time_scale=50.0, not_ready_fail_seconds=5
    ) as sim:
        create(sim, pod_body("p"))
        with anyio.fail_after(5):
            await sim.wait_for(PODS, "default", "p", phase("Running"))
            sim.agent.set_node_ready("b0-r0-h0", False)
            failed = await sim.wait_for(PODS, "default", "p", phase("Failed"))
    assert failed is not None
    assert failed["status"]["reason"] == "NodeLost"


async def test_removed_node_fails_its_pods(sim: SimCluster) -> None:
    body = pod_body("p")
    body["metadata"]["finalizers"] = ["kbatchd.dev/track"]
    body["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "b0-r1-h1"}
    create(sim, body)
    with anyio.fail_after(5):
        await sim.wait_for(PODS, "default", "p", phase("Running"))
        sim.agent.remove_node("b0-r1-h1")
        failed = await sim.wait_for(PODS, "default", "p", phase("Failed"))
        assert failed is not None
        assert condition(failed, "DisruptionTarget") == "True"
        await sim.wait_for(
            PODS, "default", "p", lambda o: bool(o and o["metadata"].get("deletionTimestamp"))
        )
    assert sim.get(NODES, "", "b0-r1-h1") is None


async def test_kubelet_rejects_pods_bound_beyond_capacity(sim: SimCluster) -> None:
    for name in ("first", "second"):
        body = pod_body(name)
        body["spec"]["schedulerName"] = "kbatchd"
        body["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "8"}}
        create(sim, body)
    sim.registry.bind("default", "first", {"target": {"name": "b0-r0-h0"}})
    with anyio.fail_after(5):
        await sim.wait_for(PODS, "default", "first", phase("Running"))
        sim.registry.bind("default", "second", {"target": {"name": "b0-r0-h0"}})
        rejected = await sim.wait_for(PODS, "default", "second", phase("Failed"))
    assert rejected is not None
    assert rejected["status"]["reason"] == "OutOfnvidia.com/gpu"
    assert "requested: 8, used: 8, capacity: 8" in rejected["status"]["message"]


async def test_kubelet_admission_frees_what_finished_pods_held(sim: SimCluster) -> None:
    names = ("first", "second", "third")
    for name in names:
        body = pod_body(name, **{"sim.kbatchd.dev/run-seconds": "1"})
        body["spec"]["schedulerName"] = "kbatchd"
        body["spec"]["restartPolicy"] = "Never"
        body["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "4"}}
        create(sim, body)
    with anyio.fail_after(5):
        # Two bound at once both fit; a third bound after they finish fits as well.
        sim.registry.bind("default", "first", {"target": {"name": "b0-r0-h0"}})
        sim.registry.bind("default", "second", {"target": {"name": "b0-r0-h0"}})
        for name in names[:2]:
            await sim.wait_for(PODS, "default", name, phase("Succeeded"))
        sim.registry.bind("default", "third", {"target": {"name": "b0-r0-h0"}})
        await sim.wait_for(PODS, "default", "third", phase("Succeeded"))
    assert sim.agent.nodes["b0-r0-h0"].running == set()
    assert not any(sim.agent.nodes["b0-r0-h0"].running_used.values())


async def test_a_watch_sees_every_status_the_agent_writes(sim: SimCluster) -> None:
    watcher = sim.store.watch(PODS, "default", None, sim.store.rv)
    try:
        body = pod_body("w", **{"sim.kbatchd.dev/run-seconds": "1"})
        body["spec"]["restartPolicy"] = "Never"
        create(sim, body)
        with anyio.fail_after(5):
            await sim.wait_for(PODS, "default", "w", phase("Succeeded"))
        events = [decode(line) for line in watcher.pending]
    finally:
        sim.store.unwatch(watcher)
    objects = [e["object"] for e in events]
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED", "MODIFIED", "MODIFIED"]
    assert [o.get("status", {}).get("phase", "Pending") for o in objects] == [
        "Pending",
        "Pending",
        "Running",
        "Succeeded",
    ]
    versions = [int(o["metadata"]["resourceVersion"]) for o in objects]
    assert versions == sorted(set(versions))
    assert objects[-1] == sim.get(PODS, "default", "w")
    assert {c["type"]: c["status"] for c in objects[2]["status"]["conditions"]}["Ready"] == "True"


async def test_timers_due_together_share_a_tick_and_cancel_alone(
    sim: SimCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = sim.agent
    assert agent._loop is not None
    fired: list[str] = []
    both = anyio.Event()

    def fire(key: str) -> None:
        fired.append(key)
        if len(fired) == 2:
            both.set()

    ticks = len(agent._ticks)
    # Planned in one instant: a busy machine must not move the clock a tick between them.
    now = agent._loop.time()
    monkeypatch.setattr(agent._loop, "time", lambda: now)
    for key in ("x/a", "x/b", "x/c"):
        agent._later(key, "finish", 0.0, fire)
    agent._later("x/c", "finish", 0.5, fire)  # planned anew: only the later one runs
    agent._cancel("x/b", "finish")
    monkeypatch.undo()
    assert len(agent._ticks) <= ticks + 2
    assert agent._has("x/a", "finish")
    assert not agent._has("x/b", "finish")
    with anyio.fail_after(5):
        await both.wait()
        await anyio.sleep(0.05)  # nothing else comes
    assert fired == ["x/a", "x/c"]
    assert not agent._has("x/c", "finish")


async def test_a_cluster_opened_without_serving_runs_its_agent_in_process() -> None:
    sim = SimCluster(topology="blocks=1,racks=1,hosts=2,gpus=8", time_scale=20)
    await sim.open(serve=False)
    try:
        assert sim.url == ""
        assert sim.kubeconfig_path is None
        assert sim.get(NODES, "", "b0-r0-h0") is not None
        body = pod_body("solo", **{"sim.kbatchd.dev/run-seconds": "1"})
        body["spec"]["restartPolicy"] = "Never"
        body["spec"]["nodeName"] = "b0-r0-h0"
        create(sim, body)
        with anyio.fail_after(10):
            assert await sim.wait_for(PODS, "default", "solo", phase("Succeeded"))
    finally:
        await sim.close()
