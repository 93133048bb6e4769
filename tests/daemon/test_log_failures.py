"""The daemon while its log takes no append (a full disk): what it decided is not carried out
until the decision is in the log, it is not ready meanwhile, and it goes on by itself. (The
same against a real full filesystem, in a daemon process: tests/daemon/test_daemon.py.)"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from daemon.service.health import HealthServer
from daemon.service.metrics import Metrics
from daemon.sim.cluster import SimCluster
from daemon.sim.resources import JOBS, PODS
from events.schema import Decided, Event, Outcome
from events.store import EventLog, LogStorageError
from tests.daemon.embedded import embedded, job, settings_for
from tests.processes import eventually, logged_events

pytestmark = pytest.mark.anyio

KEY = "Job/sim-0/default/held"


async def test_a_decision_the_log_did_not_take_is_not_carried_out_until_it_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    refused: list[int] = []
    full = True
    append = EventLog.append

    async def append_unless_full(self: EventLog, events: Sequence[Event]) -> list[int]:
        # What a full disk answers, for the appends that hold the Job's first decisions.
        if full and any(isinstance(e, Decided) and e.key == KEY for e in events):
            refused.append(len(events))
            raise LogStorageError(
                f"{self.path}: appending seq {self.last_seq + 1}..{self.last_seq + len(events)} "
                "failed: database or disk is full"
            )
        return await append(self, events)

    monkeypatch.setattr(EventLog, "append", append_unless_full)
    log = tmp_path / "kbatchd.db"
    topology = "blocks=1,racks=1,hosts=2,gpus=8"
    async with (
        SimCluster.start(topology=topology, time_scale=20) as sim,
        embedded(settings_for(sim, log)) as daemon,
    ):
        health = HealthServer(daemon, Metrics(), stale_after=10)
        sim.registry.create(JOBS, "default", job("held", parallelism=2))

        async def refused_twice() -> bool:
            return len(refused) >= 2

        await eventually(refused_twice, what="the decision's append refused twice")
        assert daemon.log_error.endswith("failed: database or disk is full")
        readiness = health.readiness()
        assert (readiness["ready"], readiness["log_error"]) == (False, daemon.log_error)
        assert sim.objects(PODS, "default") == []
        full = False

        async def complete() -> bool:
            found = sim.get(JOBS, "default", "held") or {}
            conditions = found.get("status", {}).get("conditions") or []
            return any(c["type"] == "Complete" and c["status"] == "True" for c in conditions)

        await eventually(complete, what="Job held Complete once the log takes its decision")
        assert daemon.log_error == ""
        assert health.readiness()["ready"] is True
    events = await logged_events(log)
    decided = {seq for seq, e in events if isinstance(e, Decided)}
    for seq, event in events:
        if isinstance(event, Outcome):
            assert event.decision in decided
            assert event.decision < seq
    assert any(isinstance(e, Decided) and e.key == KEY and e.intents for _, e in events)
    # The refused append was made again, the same events, until the log took it.
    assert len(set(refused)) == 1
