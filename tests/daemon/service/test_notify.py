"""systemd notifications: the protocol on both kinds of socket, and a real `kbatchd run` under a
fake systemd — READY=1 once synced, WATCHDOG=1 while running, STOPPING=1 on SIGTERM, in that
order."""

from __future__ import annotations

import os
import secrets
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from daemon.service.notify import Notifier
from tests.processes import daemon_config, simulated_cluster_here, spawn


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    path = str(tmp_path / "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(5)
    yield sock, path
    sock.close()


def test_a_datagram_of_assignments_to_a_path_socket(receiver: tuple[socket.socket, str]) -> None:
    sock, path = receiver
    assert Notifier(path).send("READY=1", "STATUS=synced")
    assert sock.recv(4096) == b"READY=1\nSTATUS=synced"


def test_at_names_the_abstract_namespace() -> None:
    name = f"kbatchd-test-{secrets.token_hex(4)}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(5)
        assert Notifier.from_environment({"NOTIFY_SOCKET": f"@{name}"}).send("WATCHDOG=1")
        assert sock.recv(4096) == b"WATCHDOG=1"


def test_without_systemd_nothing_is_sent() -> None:
    notifier = Notifier.from_environment({})
    assert not notifier.enabled
    assert not notifier.send("READY=1")
    assert notifier.watchdog_seconds is None


def test_a_vanished_socket_is_not_an_error(tmp_path: Path) -> None:
    assert not Notifier(str(tmp_path / "gone")).send("READY=1")


@pytest.mark.parametrize(
    ("env", "seconds"),
    [
        ({"WATCHDOG_USEC": "30000000"}, 30.0),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": str(os.getpid())}, 30.0),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1"}, None),
        ({"WATCHDOG_USEC": "0"}, None),
        ({"WATCHDOG_USEC": "soon"}, None),
    ],
    ids=["set", "for-this-process", "for-another-process", "zero", "garbage"],
)
def test_the_watchdog_interval(env: dict[str, str], seconds: float | None) -> None:
    assert Notifier.from_environment(env).watchdog_seconds == seconds


@pytest.mark.anyio
async def test_ready_watchdog_and_stopping_arrive_in_order(
    tmp_path: Path, receiver: tuple[socket.socket, str]
) -> None:
    sock, path = receiver
    sock.setblocking(False)
    received: list[str] = []

    async def collect(line: str, count: int = 1) -> None:
        with anyio.fail_after(30):
            while received.count(line) < count:
                await anyio.wait_readable(sock)
                received.extend(sock.recv(4096).decode().splitlines())

    env = {"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "400000"}
    async with simulated_cluster_here(tmp_path) as (_, kubeconfig):
        config = daemon_config(tmp_path, kubeconfig)
        async with spawn("daemon", "run", "--config", str(config), env=env) as daemon:
            await collect("READY=1")
            # WATCHDOG_USEC=0.4 s: a ping every 0.2 s while the daemon runs.
            await collect("WATCHDOG=1", count=3)
            daemon.send_signal(signal.SIGTERM)
            await collect("STOPPING=1")
            assert await daemon.wait(within=15) == 0
    protocol = [line for line in received if not line.startswith("STATUS=")]
    ready, stopping = protocol.index("READY=1"), protocol.index("STOPPING=1")
    assert ready < protocol.index("WATCHDOG=1") < stopping
    assert set(protocol) == {"READY=1", "WATCHDOG=1", "STOPPING=1"}
    assert protocol.count("READY=1") == 1
    assert any(line.startswith("STATUS=synced") for line in received)
