"""The systemd status line `kbatchd run` keeps up to date (`systemctl status` shows it)."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.service.run import systemd_status


class FakeDaemon:
    def __init__(self, role: str, unsynced: list[str], log_error: str = "") -> None:
        self.role = role
        self._unsynced = unsynced
        self.log_error = log_error

    def unsynced_clusters(self) -> list[str]:
        return self._unsynced


@pytest.mark.parametrize(
    ("role", "unsynced", "text"),
    [
        ("leader", [], "synced, acting"),
        ("standby", [], "synced, standby (another holds the lease)"),
        ("leader", ["far"], "synced but for far, acting"),
        ("standby", ["a", "b"], "synced but for a, b, standby (another holds the lease)"),
    ],
)
def test_the_status_names_the_role_and_any_cluster_not_synced(
    role: str, unsynced: list[str], text: str
) -> None:
    daemon: Any = FakeDaemon(role, unsynced)
    assert systemd_status(daemon) == text


def test_the_status_says_when_the_log_takes_nothing() -> None:
    daemon: Any = FakeDaemon(
        "leader", [], "LOG: appending seq 7..9 failed: database or disk is full"
    )
    assert systemd_status(daemon) == (
        "not acting: cannot append to the log "
        "(LOG: appending seq 7..9 failed: database or disk is full); trying again"
    )
