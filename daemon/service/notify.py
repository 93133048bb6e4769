"""The systemd notification protocol (sd_notify(3)) in the standard library.

One datagram of ``KEY=VALUE`` lines to the AF_UNIX socket named by ``$NOTIFY_SOCKET``; a
leading ``@`` names a socket in the abstract namespace. Without the variable (not started by
systemd with Type=notify) every call does nothing. Sending never blocks: a lost datagram is
better than a stalled event loop.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import Final

import structlog

log = structlog.get_logger("kbatchd.notify")

READY: Final = "READY=1"
WATCHDOG: Final = "WATCHDOG=1"
STOPPING: Final = "STOPPING=1"


class Notifier:
    def __init__(self, address: str = "", watchdog_usec: int = 0) -> None:
        self.address = address
        # How often systemd expects WATCHDOG=1 at the latest, in seconds; None: no watchdog.
        self.watchdog_seconds = watchdog_usec / 1e6 if watchdog_usec > 0 else None
        self._warned = False

    @classmethod
    def from_environment(cls, env: Mapping[str, str] | None = None) -> Notifier:
        env = os.environ if env is None else env
        usec = env.get("WATCHDOG_USEC", "")
        pid = env.get("WATCHDOG_PID", "")
        # WATCHDOG_PID names the process meant; a child that inherited the variables is not it.
        watchdog = int(usec) if usec.isdigit() and (not pid or pid == str(os.getpid())) else 0
        return cls(env.get("NOTIFY_SOCKET", ""), watchdog)

    @property
    def enabled(self) -> bool:
        return bool(self.address)

    def send(self, *assignments: str) -> bool:
        """Send ``KEY=VALUE`` assignments in one datagram; whether it was delivered."""
        if not self.address:
            return False
        target = "\0" + self.address[1:] if self.address.startswith("@") else self.address
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.setblocking(False)
                sock.sendto("\n".join(assignments).encode(), target)
        except OSError as exc:
            if not self._warned:
                self._warned = True
                log.warning("systemd notification failed", socket=self.address, error=str(exc))
            return False
        return True

    def status(self, text: str) -> bool:
        """What `systemctl status` shows as the service's status line."""
        return self.send(f"STATUS={text}")
