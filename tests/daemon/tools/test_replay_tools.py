"""The replay tools on a log the daemon really wrote: `kbatchd run` as a process against the
simulated cluster, two GPU Jobs (an Indexed one that completes, one whose pods fail until its
back-off limit), then `kbatchd replay` --explain, --timeline (its page in a headless browser),
the JSON lines round trip, and logs of an older and a newer schema."""

from __future__ import annotations

import hashlib
import json
import shutil
import signal
from pathlib import Path
from typing import Any

import anyio
import pytest
from kubernetes_asyncio import client

from daemon.cli import main
from events import migrate
from events.migrate import Migration
from events.objects import JOB_TRACKING_FINALIZER
from events.replay import rebuild
from events.schema import Decided
from events.store import EventLog
from tests.browser import Elements, dump_dom
from tests.processes import (
    daemon_config,
    eventually,
    kube_client,
    running_daemon,
    simulated_cluster_here,
    stderr_on_a_terminal,
)

MANAGER = "kbatchd.dev/job-controller"
TRAIN, FLAKY = "Job/sim-0/default/train", "Job/sim-0/default/flaky"
# A migration this kbatchd does not know yet: the one after its newest.
CURRENT = migrate.CODE_SCHEMA_VERSION
NEXT_MIGRATION = Migration(CURRENT + 1, "ref_index", "CREATE INDEX events_by_ref ON events (ref);")


def gpu_job(name: str, *, gpus: int, run: str, exit_code: int = 0, **spec: Any) -> dict[str, Any]:
    annotations = {"sim.kbatchd.dev/run-seconds": run, "sim.kbatchd.dev/exit-code": str(exit_code)}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "managedBy": MANAGER,
            "template": {
                "metadata": {"annotations": annotations},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "trainer",
                            "resources": {
                                "requests": {"cpu": "1", "nvidia.com/gpu": str(gpus)},
                                "limits": {"nvidia.com/gpu": str(gpus)},
                            },
                        }
                    ],
                },
            },
            **spec,
        },
    }


async def _settled(path: Path) -> bool:
    """Both Jobs finished in the log, nothing in flight, every pod counted and released."""
    async with EventLog.open(path, readonly=True) as log:
        state = (await rebuild(log)).state
    finished = 0
    for job in state.jobs.values():
        conditions = job.status.get("conditions") or []
        finished += any(
            c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
            for c in conditions
        )
    held = [p for p in state.pods.values() if JOB_TRACKING_FINALIZER in p.finalizers]
    return finished == 2 and not state.inflight and not held


async def _run(tmp: Path) -> None:
    async with (
        simulated_cluster_here(tmp) as (_, kubeconfig),
        # A 2 s back-off outlasts the batch window that holds the failure's decision, so the
        # log shows the Job backing off.
        running_daemon(daemon_config(tmp, kubeconfig, job={"backoff_base_seconds": 2.0})) as daemon,
        kube_client(kubeconfig) as api,
    ):
        batch = client.BatchV1Api(api)
        train = gpu_job(
            "train",
            gpus=4,
            run="1",
            completions=4,
            parallelism=2,
            completionMode="Indexed",
        )
        flaky = gpu_job("flaky", gpus=1, run="0.3", exit_code=1, backoffLimit=1)
        for body in (train, flaky):
            await batch.create_namespaced_job("default", body)
        await eventually(lambda: _settled(tmp / "kbatchd.db"), within=60, what="both Jobs settled")
        daemon.send_signal(signal.SIGTERM)
        assert await daemon.wait() == 0, daemon.output()


@pytest.fixture(scope="module")
def run_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("run")
    anyio.run(_run, tmp)
    return tmp / "kbatchd.db"


def _replay(capsys: pytest.CaptureFixture[str], *argv: str, code: int = 0) -> str:
    assert main(["replay", *argv]) == code
    captured = capsys.readouterr()
    return captured.out if code == 0 else captured.err


def _digest(path: Path) -> str:
    digest = hashlib.sha256(path.read_bytes())
    wal = Path(f"{path}-wal")
    if wal.exists():
        digest.update(wal.read_bytes())
    return digest.hexdigest()


async def _decisions(path: Path, ref: str) -> list[int]:
    async with EventLog.open(path, readonly=True) as log:
        return [seq for seq, e in await log.events_for(ref) if isinstance(e, Decided)]


# ---------------------------------------------------------------------------------------------
# --explain


def test_explain_a_completed_job(run_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads(_replay(capsys, str(run_log), "--explain", "Job/default/train", "--json"))
    (life,) = data["objects"]
    entries = life["entries"]
    pods = [ref for ref in life["family"] if ref.startswith("Pod/")]
    assert len(pods) >= 4  # one per completion at least
    decided = [e for e in entries if e["type"] == "decided"]
    assert [e["seq"] for e in decided] == anyio.run(_decisions, run_log, TRAIN)
    assert {"started", "finished"} <= {e["category"] for e in decided}
    # Every action the daemon took for it has its outcome, all ok, each after its decision.
    outcomes = {(e["decision"], e["index"]): e for e in entries if e["type"] == "outcome"}
    wanted = {(e["seq"], i["index"]) for e in decided for i in e["intents"]}
    assert set(outcomes) == wanted
    assert all(o["ok"] and o["seq"] > o["decision"] for o in outcomes.values())
    assert life["totals"]["failed"] == life["totals"]["pending"] == 0
    # Each pod's life: created, bound, running, succeeded.
    for pod in pods:
        seen = [e for e in entries if e["type"] == "observed" and e["ref"] == pod]
        changed = {key for e in seen for key in e["changes"]}
        assert {"phase", "node_name"} <= changed, pod
        phases = [e["changes"]["phase"][1] for e in seen if "phase" in e["changes"]]
        assert phases[-1] == "Succeeded", (pod, phases)


def test_explain_text_of_a_job_that_failed(
    run_log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = _replay(capsys, str(run_log), "--explain", "Job/default/flaky")
    assert text.startswith(f"{FLAKY} at seq ")
    assert "  controls: Pod flaky-" in text
    assert "decided by job [started]" in text
    assert "decided by job [backoff]" in text
    assert "BackoffLimitExceeded: Failed" in text
    assert "phase Running→Failed" in text
    assert "exit_codes.main=1" in text
    assert "→ create Pod flaky-" in text
    assert "ok: create Pod flaky-" in text


def test_explain_an_unknown_object(run_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = _replay(capsys, str(run_log), "--explain", "Job/default/nothing", code=2)
    assert "no Job default/nothing up to seq" in err
    assert len(err.strip().splitlines()) == 1


# ---------------------------------------------------------------------------------------------
# --timeline


def _busiest(data: dict[str, Any], ref: str) -> int:
    """The first seq at which `ref` held the most GPUs."""
    index = next(i for i, w in enumerate(data["workloads"]) if w["ref"] == ref)
    series = data["usage"][str(index)]
    peak = max(total for _, _, total in series)
    return next(seq for seq, _, total in series if total == peak)


def test_timeline_of_a_real_run(run_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads(_replay(capsys, str(run_log), "--timeline", "--json"))
    rows = {w["ref"]: (i, w) for i, w in enumerate(data["workloads"])}
    assert rows[TRAIN][1]["peak"] == 8  # two pods at a time, four GPUs each
    assert rows[FLAKY][1]["peak"] == 1
    for ref in (TRAIN, FLAKY):
        index = rows[ref][0]
        marks = [m["seq"] for m in data["marks"] if m["w"] == index]
        assert marks == anyio.run(_decisions, run_log, ref)
    flaky = {m["cat"] for m in data["marks"] if m["w"] == rows[FLAKY][0]}
    assert {"started", "backoff", "finished"} <= flaky
    assert len(data["hosts"]) == 8
    # At the end every pod is done: nothing is held.
    assert all(not pairs for *_, pairs in data["picture"])
    busiest = _busiest(data, TRAIN)
    at = json.loads(_replay(capsys, str(run_log), "--timeline", "--json", "--at", str(busiest)))
    held = [n for *_, pairs in at["picture"] for w, n in pairs if w == rows[TRAIN][0]]
    assert sum(held) == 8
    text = _replay(capsys, str(run_log), "--timeline", "--at", str(busiest))
    assert "Job default/train (sim-0): peak 8 GPU" in text
    assert f"racks at seq {busiest:,}: " in text


def test_timeline_page_of_a_real_run_in_a_browser(
    run_log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = json.loads(_replay(capsys, str(run_log), "--timeline", "--json"))
    busiest = _busiest(data, TRAIN)
    page = tmp_path / "timeline.html"
    out = _replay(capsys, str(run_log), "--timeline", "--html", str(page), "--at", str(busiest))
    assert out.startswith(f"wrote {page}: ")
    elements = Elements(dump_dom(page, tmp_path / "profile"))
    body = elements.first("body")
    assert body.get("data-ready") == "true", body.get("data-error")
    assert len(elements.with_class("host")) == 8
    assert len(elements.with_class("mark")) == len(data["marks"])
    held = [a for a in elements.with_class("slot") if a.get("data-workload") == TRAIN]
    assert len(held) == 8  # one square per GPU the Job's pods held at that seq
    assert {d["data-domain"] for d in elements.with_class("domain")} >= {"b0", "b0-r0", "b0-r1"}


def test_html_without_timeline_is_a_usage_error(
    run_log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _replay(capsys, str(run_log), "--html", str(tmp_path / "x.html"), code=2)
    assert "--html and --at go with --timeline" in err


# ---------------------------------------------------------------------------------------------
# JSON lines


def test_export_import_round_trip_of_a_real_log(
    run_log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = _digest(run_log)
    first, second, copy = tmp_path / "first.jsonl", tmp_path / "second.jsonl", tmp_path / "copy.db"
    _replay(capsys, str(run_log), "--export-jsonl", str(first))
    _replay(capsys, str(copy), "--import-jsonl", str(first))
    _replay(capsys, str(copy), "--export-jsonl", str(second))
    assert first.read_text() == second.read_text()
    assert _digest(run_log) == before

    def summary(path: Path) -> dict[str, Any]:
        data = json.loads(_replay(capsys, str(path), "--json"))
        return {k: v for k, v in data.items() if k not in ("log", "snapshot", "folded")}

    assert summary(copy) == summary(run_log)
    config = run_log.with_name("kbatchd.toml")
    out = _replay(capsys, str(copy), "--verify", "--config", str(config))
    assert "reproduced exactly" in out


def test_export_to_stdout(run_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = _replay(capsys, str(run_log), "--export-jsonl", "-", "--until", "5").splitlines()
    assert len(lines) == 6
    assert json.loads(lines[0]) == {"format": "kbatchd-events", "version": 1, "events": 5}
    assert [json.loads(line)["seq"] for line in lines[1:]] == [1, 2, 3, 4, 5]


# ---------------------------------------------------------------------------------------------
# Schema versions


def test_a_log_of_an_older_schema_replays_from_a_migrated_copy(
    run_log: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """This kbatchd knows a migration the log has not had: replay migrates a copy, says so,
    and leaves the log as it was."""
    old = tmp_path / "old.db"
    shutil.copy(run_log, old)
    monkeypatch.setattr(migrate, "MIGRATIONS", (*migrate.MIGRATIONS, NEXT_MIGRATION))
    before = _digest(old)
    assert main(["replay", str(old), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["counts"]["Job"] == 2
    assert f"log schema version {CURRENT} is older than this kbatchd's" in captured.err
    assert f"replaying a copy migrated to schema version {CURRENT + 1}" in captured.err
    assert "the log itself is not changed" in captured.err
    text = _replay(capsys, str(old), "--explain", "Job/default/train")
    assert text.startswith(f"{TRAIN} at seq ")
    assert _digest(old) == before
    assert not list(tmp_path.glob("*.importing*"))


def test_a_log_of_a_newer_schema_is_refused(
    run_log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    newer = tmp_path / "newer.db"
    shutil.copy(run_log, newer)

    async def upgrade() -> None:
        async with EventLog.open(newer, migrations=(*migrate.MIGRATIONS, NEXT_MIGRATION)):
            pass

    anyio.run(upgrade)
    for mode in ([], ["--explain", "Job/default/train"], ["--timeline"], ["--verify"]):
        err = _replay(capsys, str(newer), *mode, code=2)
        assert f"{newer}: log schema version {CURRENT + 1} is newer than this kbatchd" in err, mode
        assert "upgrade kbatchd" in err


# ---------------------------------------------------------------------------------------------
# Progress


def test_progress_on_a_terminal(run_log: Path) -> None:
    seen = stderr_on_a_terminal("replay", str(run_log), "--timeline")
    assert b"(100%)" in seen
