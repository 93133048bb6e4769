"""The process's own readings, as every Prometheus client library exposes them (``process_*``):
CPU seconds, resident and virtual memory, open and allowed file descriptors, start time.

Read from ``/proc`` on Linux, as those libraries do, only when metrics are collected (a
scrape), never on the daemon's path. Elsewhere only what the standard library can tell is
given (CPU time and the descriptor limit); a reading that cannot be made is left out rather
than reported as 0.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path
from typing import Final

_PROC: Final = Path("/proc")
_PAGE: Final = resource.getpagesize()
_TICKS: Final = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds() -> float:
    """User and system CPU time of the process (all threads), in seconds."""
    times = os.times()
    return times.user + times.system


def _stat_fields() -> list[str] | None:
    """``/proc/self/stat`` after the command name (which may hold spaces and parentheses), or
    None without /proc."""
    try:
        text = (_PROC / "self" / "stat").read_text()
    except OSError:
        return None
    return text[text.rfind(")") + 2 :].split()


def memory_bytes() -> tuple[float, float] | None:
    """(resident, virtual) memory in bytes, or None where /proc cannot tell."""
    fields = _stat_fields()
    if fields is None:
        return None
    # Fields 23 and 24 of proc(5) (vsize, rss), counted from the state, which is field 3.
    return float(int(fields[21]) * _PAGE), float(fields[20])


def start_time_seconds() -> float | None:
    """When the process started, in seconds since the epoch: the boot time plus the start's
    offset in clock ticks (field 22 of proc(5)), as the Prometheus clients compute it."""
    fields = _stat_fields()
    if fields is None:
        return None
    try:
        for line in (_PROC / "stat").read_text().splitlines():
            if line.startswith("btime "):
                return int(line.split()[1]) + int(fields[19]) / _TICKS
    except OSError:
        return None
    return None


def open_fds() -> float | None:
    try:
        return float(len(os.listdir(_PROC / "self" / "fd")))
    except OSError:
        return None


# What an unlimited resource reads as: the kernel's RLIM_INFINITY as an unsigned 64-bit number,
# as client_golang reports it (a metric value cannot be infinite in OpenTelemetry).
UNLIMITED: Final = float(2**64 - 1)


def _limit(which: int) -> float:
    soft = resource.getrlimit(which)[0]
    return UNLIMITED if soft == resource.RLIM_INFINITY else float(soft)


def max_fds() -> float:
    return _limit(resource.RLIMIT_NOFILE)


def max_virtual_memory_bytes() -> float:
    return _limit(resource.RLIMIT_AS)
