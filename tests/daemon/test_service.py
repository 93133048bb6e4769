"""The systemd status line `kbatchd run` keeps up to date (`systemctl status` shows it)."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.service import systemd_status


class FakeDaemon:
    def __init__(self, role: str, unsynced: list[str]) -> None:
        self.role = role
        self._unsynced = unsynced

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
