"""Writing Kubernetes Events beside acting: which results announce what, what is sent, and
what a cluster that refuses Events costs (one warning)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import msgspec
import pytest
import structlog

from daemon.kube.actuator import Result
from daemon.kube.api import KubeApi, Response
from daemon.kube.notes import Involved, Note
from daemon.kube.recorder import REFUSED_PAUSE, Recorder
from daemon.sim.cluster import SimCluster
from daemon.sim.resources import by_kind
from events.intents import Create, Patch
from tests.processes import eventually

pytestmark = pytest.mark.anyio

JOB = Involved("c1", "Job", "ns", "train", "uid-job")
CREATE = Create("c1", "Pod", "ns", "train-a")
CREATED = Note(0, JOB, "Normal", "SuccessfulCreate", "Created pod: train-a")
FAILED = Note(0, JOB, "Warning", "FailedCreate", "Error creating: ", on_failure=True)
DONE = Result(True, 201)


class FakeApi:
    """Answers each call with the next of `answers` (then 201), and keeps the calls."""

    def __init__(self, *answers: int | Exception) -> None:
        self.cluster = "c1"
        self.answers = list(answers)
        self.calls: list[tuple[str, str, Any]] = []

    async def request(self, method: str, path: str, *, body: Any = None, **_: Any) -> Response:
        self.calls.append((method, path, body))
        answer = self.answers.pop(0) if self.answers else 201
        if isinstance(answer, Exception):
            raise answer
        status = msgspec.json.encode({"kind": "Status", "message": f"answer {answer}"})
        return Response(answer, b"{}" if answer < 300 else status)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@asynccontextmanager
async def recording(
    api: Any, clock: Callable[[], float] | None = None, **options: Any
) -> AsyncIterator[Recorder]:
    recorder = Recorder({"c1": api}, {}, clock=clock or Clock(), **options)
    async with anyio.create_task_group() as tg:
        tg.start_soon(recorder.run)
        yield recorder
        tg.cancel_scope.cancel()


def announce(recorder: Recorder, seq: int, result: Result, *notes: Note) -> None:
    recorder.expect(seq, list(notes))
    recorder.result(seq, 0, CREATE, result)


async def calls(api: FakeApi, count: int) -> list[tuple[str, str, Any]]:
    async def made() -> bool:
        return len(api.calls) >= count

    await eventually(made, within=5, what=f"{count} call(s)")
    return api.calls


async def test_a_carried_out_intent_creates_its_event_and_a_repeat_patches_the_count() -> None:
    api = FakeApi()
    async with recording(api, instance="host_1") as recorder:
        announce(recorder, 1, DONE, CREATED, FAILED)
        announce(recorder, 2, DONE, CREATED, FAILED)
        (create, first), (patch, second) = [(c[0], c) for c in await calls(api, 2)]
    assert (create, patch) == ("POST", "PATCH")
    body = first[2]
    name = body["metadata"]["name"]
    assert first[1] == "/api/v1/namespaces/ns/events"
    assert {k: v for k, v in body.items() if k not in ("metadata",)} == {
        "apiVersion": "v1",
        "kind": "Event",
        "involvedObject": {
            "kind": "Job",
            "namespace": "ns",
            "name": "train",
            "uid": "uid-job",
            "apiVersion": "batch/v1",
        },
        "reason": "SuccessfulCreate",
        "message": "Created pod: train-a",
        "type": "Normal",
        "source": {"component": "kbatchd"},
        "firstTimestamp": "1970-01-01T00:16:40Z",
        "lastTimestamp": "1970-01-01T00:16:40Z",
        "count": 1,
        "reportingComponent": "kbatchd",
        "reportingInstance": "host_1",
    }
    assert name.startswith("train.")
    assert second[1] == f"/api/v1/namespaces/ns/events/{name}"
    assert second[2] == {
        "count": 2,
        "lastTimestamp": "1970-01-01T00:16:40Z",
        "message": "Created pod: train-a",
    }
    assert recorder.written == 2


@pytest.mark.parametrize(
    ("result", "sent"),
    [
        pytest.param(Result(True, 409, "already exists"), [], id="done-by-an-earlier-call"),
        pytest.param(
            Result(False, 403, "pods is forbidden"),
            [("Warning", "FailedCreate", "Error creating: pods is forbidden")],
            id="failed",
        ),
    ],
)
async def test_which_result_announces_what(
    result: Result, sent: list[tuple[str, str, str]]
) -> None:
    api = FakeApi()
    async with recording(api) as recorder:
        announce(recorder, 1, result, CREATED, FAILED)
        announce(recorder, 2, DONE, Note(0, JOB, "Normal", "Completed", "Job completed"))
        made = await calls(api, len(sent) + 1)
    assert [(b["type"], b["reason"], b["message"]) for _, _, b in made[:-1]] == sent


async def test_milestones_are_logged_even_with_events_off() -> None:
    api = FakeApi()
    note = Note(0, JOB, "Normal", "Completed", "Job completed", False, "Job completed", "Why")
    recorder = Recorder({"c1": api}, {}, write=False, clock=Clock())
    with structlog.testing.capture_logs() as logs:
        announce(recorder, 1, DONE, note)
        announce(recorder, 2, Result(False, 409, "conflict"), note)
    assert not any(recorder._queues.values()), "nothing to write"
    assert [(e["event"], e["key"], e["reason"]) for e in logs] == [
        ("Job completed", "Job/c1/ns/train", "Why")
    ]


async def test_a_cluster_that_refuses_events_costs_one_warning_and_is_tried_again_later() -> None:
    clock = Clock()
    api = FakeApi(403, 403)
    with structlog.testing.capture_logs() as logs:
        async with recording(api, clock) as recorder:
            announce(recorder, 1, DONE, CREATED)
            await calls(api, 1)
            for seq in range(2, 12):
                announce(recorder, seq, DONE, CREATED)

            async def dropped() -> bool:
                return recorder.dropped == 11

            await eventually(dropped, within=5, what="every Event dropped")
            assert len(api.calls) == 1, "nothing sent while refused"
            clock.now += REFUSED_PAUSE
            announce(recorder, 20, DONE, CREATED)
            await calls(api, 2)  # tried again, refused again
            clock.now += REFUSED_PAUSE
            announce(recorder, 21, DONE, CREATED)
            await calls(api, 3)  # taken

            async def written() -> bool:
                return recorder.written == 1

            await eventually(written, within=5, what="the Event written")
    warnings = [e for e in logs if e["log_level"] == "warning"]
    assert len(warnings) == 1
    assert "rbac.yaml" in warnings[0]["event"]
    assert [e["event"] for e in logs if e["log_level"] == "info"] == [
        "the cluster takes Kubernetes Events again"
    ]


async def test_an_invalid_event_is_dropped_with_one_warning_per_cluster() -> None:
    api = FakeApi(422, 422)
    with structlog.testing.capture_logs() as logs:
        async with recording(api) as recorder:
            announce(recorder, 1, DONE, CREATED)
            announce(recorder, 2, DONE, Note(0, JOB, "Normal", "Completed", "Job completed"))
            announce(recorder, 3, DONE, Note(0, JOB, "Normal", "Resumed", "Job resumed"))
            await calls(api, 3)

            async def one_written() -> bool:
                return recorder.written == 1

            await eventually(one_written, within=5, what="the valid Event written")
    assert len([e for e in logs if e["log_level"] == "warning"]) == 1


async def test_an_expired_event_is_created_anew_and_a_cut_connection_tried_again() -> None:
    api = FakeApi(201, 404, OSError("connection reset"), 201)
    async with recording(api) as recorder:
        announce(recorder, 1, DONE, CREATED)
        announce(recorder, 2, DONE, CREATED)
        made = await calls(api, 4)
    assert [m for m, _, _ in made] == ["POST", "PATCH", "POST", "POST"]
    assert made[3][2]["metadata"]["name"] == made[0][2]["metadata"]["name"]
    assert made[3][2]["count"] == 2


async def test_a_full_queue_drops_the_newest_without_waiting() -> None:
    api = FakeApi()
    recorder = Recorder({"c1": api}, {}, queue=3, clock=Clock())  # no writer running
    for seq in range(5):
        announce(recorder, seq, DONE, CREATED)
    assert recorder.dropped == 2


async def test_the_simulated_cluster_takes_the_event_and_its_count(sim: SimCluster) -> None:
    assert sim.kubeconfig_path is not None
    events = by_kind("v1", "Event")
    assert events is not None
    async with (
        KubeApi.connect("c1", str(sim.kubeconfig_path), None) as api,
        recording(api) as recorder,
    ):
        pod = Involved("c1", "Pod", "default", "p", "uid-p")
        note = Note(0, pod, "Normal", "Scheduled", "Successfully assigned default/p to n1")
        bind = Patch("c1", "Pod", "default", "p")
        for seq in (1, 2):
            recorder.expect(seq, [note])
            recorder.result(seq, 0, bind, Result(True, 201))

        async def counted() -> list[Any]:
            found = sim.objects(events, "default")
            return found if found and found[0].get("count") == 2 else []

        (stored,) = await eventually(counted, within=5, what="the Event with count 2")
    assert stored["involvedObject"]["uid"] == "uid-p"
    assert stored["reason"] == "Scheduled"


class SlowApi(FakeApi):
    """A FakeApi whose every answer takes until `release` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.release = anyio.Event()

    async def request(self, method: str, path: str, *, body: Any = None, **_: Any) -> Response:
        await self.release.wait()
        return await super().request(method, path, body=body)


async def test_a_drain_can_wait_for_every_event_taken_to_be_written() -> None:
    api = SlowApi()
    async with recording(api) as recorder:
        for seq in range(3):
            note = msgspec.structs.replace(CREATED, message=f"Created pod: train-{seq}")
            announce(recorder, seq, DONE, note)
        with anyio.move_on_after(0.2) as early:
            await recorder.written_all()
        assert early.cancelled_caught, "three Events still to write"
        api.release.set()
        with anyio.fail_after(5):
            await recorder.written_all()
        assert [body["message"] for _, _, body in api.calls] == [
            f"Created pod: train-{seq}" for seq in range(3)
        ]
        assert recorder.written == 3
