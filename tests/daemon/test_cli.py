"""`kbatchd replay` and `kbatchd demo` on real logs, and what bad input (to them and to
`kbatchd run`) gets."""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

import anyio
import pytest

from daemon.cli import main
from daemon.service import provenance
from daemon.service.config import Settings, Topology
from daemon.tools.synthetic import stream
from events.fold import fold
from events.objects import Node
from events.schema import Observed
from events.state import empty_state, encode_state
from events.store import EventLog
from events.topology import DEFAULT_LEVELS
from tests.events.builders import vandalize
from tests.processes import child_environment, stderr_on_a_terminal

EVENTS = 6_000
SNAPSHOT_AT = 4_000


async def _write_log(path: Path, events: int = EVENTS) -> None:
    state = empty_state()
    async with EventLog.open(path) as log:
        batch = list(stream(events, nodes=64))
        seqs = await log.append(batch)
        for seq, event in zip(seqs, batch, strict=True):
            fold(state, seq, event)
            if seq == SNAPSHOT_AT:
                await log.save_snapshot(seq, encode_state(state))


@pytest.fixture(scope="module")
def log_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("log") / "kbatchd.db"
    anyio.run(_write_log, path)
    return path


def _digest(path: Path) -> str:
    """The file and its WAL companion, if any: a read must change neither."""
    digest = hashlib.sha256(path.read_bytes())
    wal = Path(f"{path}-wal")
    if wal.exists():
        digest.update(wal.read_bytes())
    return digest.hexdigest()


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "daemon.cli", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=child_environment(),
    )


def test_summary_counts_objects_and_topology(
    log_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["replay", str(log_file)]) == 0
    out = capsys.readouterr().out
    assert f"state at seq {EVENTS:,} (snapshot {SNAPSHOT_AT:,} + {EVENTS - SNAPSHOT_AT:,}" in out
    assert "Node 64" in out
    assert "sim-0/b0 " in out
    assert "gpu " in out


def test_reading_a_log_does_not_load_the_kubernetes_client(log_file: Path) -> None:
    """`kbatchd replay` (and `place`) never talk to a cluster: the client and its thousand
    generated model classes would be a third of their start-up."""
    code = (
        "import sys; from daemon.cli import main; "
        f"code = main(['replay', {str(log_file)!r}, '--json']); "
        "print(code, sorted(m for m in sys.modules if m.startswith(('kubernetes', 'aiohttp'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env=child_environment(),
    )
    assert done.stdout.splitlines()[-1] == "0 []"


LEVELS = ["example.com/rack", "kubernetes.io/hostname"]


async def _write_started_log(path: Path) -> None:
    """A log as a daemon with other topology levels writes it: its start first, then a node."""
    settings = Settings(topology=Topology(levels=LEVELS))
    labels = {"example.com/rack": "r1", "kubernetes.io/hostname": "n1"}
    node = Node(name="n1", labels=labels, allocatable={"cpu": 8000}, ready=True)
    async with EventLog.open(path) as log:
        await log.append(
            [
                provenance.started(settings, at=1),
                Observed(at=2, cluster="c1", change="ADDED", obj=node),
            ]
        )


@pytest.mark.parametrize(
    ("config", "levels"),
    [(None, LEVELS), ("", list(DEFAULT_LEVELS))],
    ids=["recorded", "config-given"],
)
def test_replay_takes_the_topology_levels_its_daemon_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], config: str | None, levels: list[str]
) -> None:
    path = tmp_path / "log.db"
    anyio.run(_write_started_log, path)
    argv = ["replay", str(path), "--json"]
    if config is not None:
        (tmp_path / "kbatchd.toml").write_text(config)
        argv += ["--config", str(tmp_path / "kbatchd.toml")]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["levels"] == levels


def test_the_summary_says_which_kbatchd_wrote_the_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "log.db"
    anyio.run(_write_started_log, path)
    assert main(["replay", str(path), "--json"]) == 0
    [start] = json.loads(capsys.readouterr().out)["starts"]
    assert (start["seq"], start["version"], start["rules"]) == (
        1,
        provenance.kbatchd_version(),
        provenance.rules_digest(),
    )
    assert main(["replay", str(path)]) == 0
    assert (
        f"daemon starts  1, the newest at seq 1 ({start['at']}): kbatchd "
        f"{start['version']} started (decision rules {start['rules']})"
    ) in capsys.readouterr().out


def test_json_summary_until_a_seq_before_the_snapshot(
    log_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["replay", str(log_file), "--until", "100", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["seq"] == 100
    assert data["snapshot"] is None
    assert data["folded"] == 100
    assert data["counts"]["Node"] == 64
    assert data["starts"] == []  # a log no daemon wrote
    leaf_free = {
        domain: amounts["capacity"].get("pods", 0) - amounts["used"].get("pods", 0)
        for domain, amounts in data["occupancy"].items()
    }
    assert all(free >= 0 for free in leaf_free.values())


@pytest.mark.parametrize(
    ("until", "noted"),
    [
        pytest.param(str(EVENTS), False, id="the-last-seq"),
        pytest.param(str(EVENTS + 1), True, id="past-the-end"),
    ],
)
def test_an_until_past_the_end_is_noted(
    log_file: Path, capsys: pytest.CaptureFixture[str], until: str, noted: bool
) -> None:
    assert main(["replay", str(log_file), "--until", until, "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["seq"] == EVENTS
    expected = f"kbatchd: note: {log_file}: --until {until} is past the log's end (seq {EVENTS}"
    assert (expected in captured.err) is noted, captured.err


def test_show_prints_the_object_and_its_history(
    log_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["replay", str(log_file), "--show", "Node/b0-r0-h1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    (node,) = data["objects"]
    assert node["ref"] == "Node/sim-0//b0-r0-h1"
    assert node["object"]["name"] == "b0-r0-h1"
    assert node["events"][0]["seq"] == 2
    assert node["events"][0]["summary"].startswith("observed ADDED")


def test_show_a_pod_that_is_gone_still_lists_its_life(
    log_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["replay", str(log_file), "--json"]) == 0
    # A pod of the first Job was created, bound, ran, finished and was deleted by the end.
    found = None
    for event in stream(EVENTS, nodes=64):
        name = getattr(event, "name", "")
        if getattr(event, "change", "") == "DELETED" and getattr(event, "kind", "") == "Pod":
            found = f"Pod/{event.namespace}/{name}"  # type: ignore[union-attr]
            break
    assert found is not None
    capsys.readouterr()
    assert main(["replay", str(log_file), "--show", found]) == 0
    out = capsys.readouterr().out
    assert ": gone" in out
    assert "observed ADDED" in out
    assert "observed DELETED" in out
    assert "phase=Running" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--show", "Pod/none/such"], "no Pod none/such"),
        (["--show", "Gadget/x/y"], "unknown kind 'Gadget'"),
        (["--show", "Pod"], "expected KIND/NAMESPACE/NAME"),
        (
            ["--show", "Job/train"],
            "kbatchd: --show: Job is namespaced: expected Job/NAMESPACE/NAME, got 'Job/train'",
        ),
        (
            ["--explain", "node/ns/h1"],
            "kbatchd: --explain: Node is cluster-scoped: expected Node/NAME, got 'node/ns/h1'",
        ),
    ],
    ids=["absent-object", "unknown-kind", "malformed-ref", "namespaced-without", "scoped-with"],
)
def test_show_errors(
    log_file: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main(["replay", str(log_file), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--verify", "--from", "50", "--until", "10"],
            "kbatchd: --from 50 is after --until 10: nothing between",
        ),
        (
            ["--timeline", "--from", "50", "--until", "10"],
            "kbatchd: --from 50 is after --until 10: nothing between",
        ),
        (["--explain", ""], "kbatchd: --explain: expected KIND/NAMESPACE/NAME, got ''"),
        (["--show", ""], "kbatchd: --show: expected KIND/NAMESPACE/NAME, got ''"),
        (["--explain", "Gadget/x/y"], "kbatchd: --explain: unknown kind 'Gadget'"),
    ],
    ids=[
        "verify-from-after-until",
        "timeline-from-after-until",
        "empty-explain",
        "empty-show",
        "explain-unknown-kind",
    ],
)
def test_replay_arguments_that_select_nothing_are_one_line(
    log_file: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main(["replay", str(log_file), *argv]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(message)
    assert len(captured.err.strip().splitlines()) == 1
    assert captured.out == ""


def _not_sqlite(tmp: Path, good: Path) -> Path:
    path = tmp / "notes.txt"
    path.write_text("this is not a database\n" * 100)
    return path


def _other_app(tmp: Path, good: Path) -> Path:
    path = tmp / "other.db"
    db = sqlite3.connect(path)
    with db:
        db.execute("CREATE TABLE t (x)")
    db.close()
    return path


def _truncated(tmp: Path, good: Path) -> Path:
    path = tmp / "truncated.db"
    data = good.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def _corrupt_event(tmp: Path, good: Path) -> Path:
    path = tmp / "corrupt.db"
    path.write_bytes(good.read_bytes())
    db = sqlite3.connect(path)
    with db:
        triggers = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='trigger'")]
        for trigger in triggers:
            db.execute(f"DROP TRIGGER {trigger}")
        db.execute("UPDATE events SET body = x'c1c1c1' WHERE seq = 4321")
    db.close()
    return path


def _changed_at(tmp: Path, good: Path) -> Path:
    """An event after the snapshot that still decodes, its time changed: only the digest
    chain tells."""
    path = tmp / "changed.db"
    path.write_bytes(good.read_bytes())
    vandalize(path, "UPDATE events SET at = at + 1 WHERE seq = 4500")
    return path


def _missing_before_snapshot(tmp: Path, good: Path) -> Path:
    """An event before the snapshot gone: what a start folds never reads it."""
    path = tmp / "missing.db"
    path.write_bytes(good.read_bytes())
    vandalize(path, "DELETE FROM events WHERE seq = 1234")
    return path


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (_not_sqlite, "not"),
        (_other_app, "not a kbatchd"),
        (_truncated, ""),
        (_corrupt_event, "seq 4321"),
        (_changed_at, "the log breaks at seq 4500: the event's digest does not follow"),
        (_missing_before_snapshot, "the log breaks at seq 1234: the event is missing"),
    ],
    ids=[
        "not-sqlite",
        "other-application",
        "truncated",
        "corrupt-event",
        "changed-after-the-snapshot",
        "missing-before-the-snapshot",
    ],
)
@pytest.mark.parametrize("command", ["replay", "run"])
def test_bad_logs_get_one_line_and_exit_2_and_stay_unchanged(
    tmp_path: Path, log_file: Path, make: object, message: str, command: str
) -> None:
    path = make(tmp_path, log_file)  # type: ignore[operator]
    before = _digest(path)
    if command == "replay":
        result = _run("replay", str(path))
    else:
        # The daemon reads its log before it reaches any cluster (this one has none to reach).
        config = tmp_path / "kbatchd.toml"
        config.write_text(
            '[[clusters]]\nname = "c"\nkubeconfig = "/no/such/kubeconfig"\n[health]\naddress = ""\n'
        )
        result = _run("run", "--config", str(config), "--log", str(path))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert str(path) in lines[0]
    assert message in lines[0]
    assert _digest(path) == before


@pytest.mark.parametrize("verify", [False, True], ids=["summary", "verify"])
def test_a_snapshot_that_does_not_decode_is_noted_and_folded_past(
    tmp_path: Path, log_file: Path, verify: bool
) -> None:
    path = tmp_path / "snapshot-damaged.db"
    path.write_bytes(log_file.read_bytes())
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("UPDATE snapshots SET body = x'c1c1c1' WHERE seq = ?", (SNAPSHOT_AT,))
    # --verify from a seq past the snapshot starts from it; from seq 1 it reads none.
    flags = ["--verify", "--from", str(SNAPSHOT_AT + 1000)] if verify else []
    intact = _run("replay", str(log_file), "--json", *flags)
    result = _run("replay", str(path), "--json", *flags)
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        f"kbatchd: note: {path}: snapshot seq {SNAPSHOT_AT} does not decode (MessagePack data "
        "is malformed: invalid opcode '\\xc1' (byte 0)); folded past it"
    ]
    data, expected = json.loads(result.stdout), json.loads(intact.stdout)
    if verify:
        assert data["divergence"] is None
        assert data["skipped"] == [{"seq": SNAPSHOT_AT, "reason": data["skipped"][0]["reason"]}]
    else:
        assert (data["snapshot"], data["folded"]) == (None, EVENTS)
        assert (expected["snapshot"], expected["folded"]) == (SNAPSHOT_AT, EVENTS - SNAPSHOT_AT)
        for key in ("seq", "now", "counts", "occupancy"):
            assert data[key] == expected[key], key


@pytest.mark.parametrize(
    "argv",
    [
        ["replay", "/no/such/dir/kbatchd.db"],
        ["replay", "/"],
        ["replay", "LOG", "--bogus"],
        ["replay", "LOG", "--until", "zero"],
        ["frobnicate"],
    ],
    ids=["missing-file", "a-directory", "unknown-flag", "bad-until", "unknown-command"],
)
def test_unusable_paths_and_arguments_exit_2(argv: list[str]) -> None:
    result = _run(*argv)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.strip()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda tmp: tmp / "notes.txt", "not a directory"),
        (lambda tmp: tmp / "notes.txt" / "var", "cannot use it: Not a directory"),
    ],
    ids=["a-file", "under-a-file"],
)
def test_demo_var_that_is_no_directory_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: Any, message: str
) -> None:
    (tmp_path / "notes.txt").write_text("kept\n")
    var = make(tmp_path)
    assert main(["demo", "--var", str(var)]) == 2
    assert capsys.readouterr().err == f"kbatchd: --var {var}: {message}\n"
    assert (tmp_path / "notes.txt").read_text() == "kept\n"


def test_check_of_an_intact_log_says_so_in_one_line(
    log_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["replay", str(log_file), "--check"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1
    assert out[0].startswith(
        f"{log_file}: digest chain whole over seq 1..{EVENTS:,}, 1 snapshot(s) agreeing with it"
    )
    assert main(["replay", str(log_file), "--check", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["log"], data["last_seq"], data["snapshots"]) == (str(log_file), EVENTS, 1)


@pytest.mark.parametrize(
    ("sql", "seq", "found_by_replay"),
    [
        ("DELETE FROM events WHERE seq = 1234", 1234, True),
        ("UPDATE events SET body = x'c1' WHERE seq = 1234", 1234, False),
        ("UPDATE events SET ref = 'Job/c/ns/other' WHERE seq = 4500", 4500, True),
    ],
    ids=["missing-before-the-snapshot", "garbage-before-the-snapshot", "ref-after-the-snapshot"],
)
def test_check_names_where_the_chain_breaks_and_exits_1(
    tmp_path: Path,
    log_file: Path,
    capsys: pytest.CaptureFixture[str],
    sql: str,
    seq: int,
    found_by_replay: bool,
) -> None:
    path = tmp_path / "damaged.db"
    path.write_bytes(log_file.read_bytes())
    vandalize(path, sql)
    before = _digest(path)
    assert main(["replay", str(path), "--check"]) == 1
    captured = capsys.readouterr()
    assert captured.out.splitlines() == [captured.out.strip()]
    assert captured.out.startswith(f"{path}: the log breaks at seq {seq}: ")
    assert captured.err == ""
    assert main(["replay", str(path), "--check", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["broken"].startswith(f"{path}: the log breaks at ")
    # Plain replay starts from the snapshot: it sees a gap anywhere (a count), a changed event
    # only after the snapshot.
    code = main(["replay", str(path)])
    captured = capsys.readouterr()
    if found_by_replay:
        assert code == 2
        assert (
            captured.err
            == f"kbatchd: {path}: the log breaks at seq {seq}: "
            + (captured.err.split(f"seq {seq}: ", 1)[1])
        )
    else:
        assert code == 0, captured.err
    assert _digest(path) == before


def test_progress_is_shown_on_a_terminal(log_file: Path) -> None:
    seen = stderr_on_a_terminal("replay", str(log_file), "--until", "3000")
    assert b"replaying 3,000/3,000 (100%)" in seen


def test_demo_runs_the_daemon_on_the_simulated_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--var", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "daemon synced" in out
    assert "train Complete" in out
    assert "BackoffLimitExceeded: Failed" in out
    assert "gang-main scheduled: all 16 pods bound" in out
    assert "the gang's pods are on rack(s): " in out
    assert out.split("the gang's pods are on rack(s): ")[1].split("\n")[0].count(",") == 0
    assert "JobSet pipeline Completed" in out
    assert "failed intents: 0" in out
    # The hint it closes with runs as written (the console script is not on PATH).
    hint = re.search(r"\(more: (\S+) replay (\S+) --explain KIND/default/NAME\)", out)
    assert hint is not None, out
    command = [hint[1], "replay", hint[2], "--explain", "Job/default/train"]
    ran = subprocess.run(
        command, capture_output=True, text=True, timeout=120, check=False, env=child_environment()
    )
    assert ran.returncode == 0, ran.stderr
    assert main(["replay", str(tmp_path / "kbatchd.db"), "--verify"]) == 0
    assert "reproduced exactly" in capsys.readouterr().out


def test_version_names_the_package_and_its_decision_rules(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out == (
        f"kbatchd {provenance.kbatchd_version()} (decision rules {provenance.rules_digest()})\n"
    )
