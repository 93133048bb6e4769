"""The systemd files: the unit passes `systemd-analyze verify`, scores as well hardened, says
what the daemon relies on (Type=notify, the watchdog, the state directory, a dedicated user),
and the sysusers and tmpfiles snippets create that user and those directories."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SYSTEMD = Path(__file__).resolve().parents[2] / "systemd"
UNIT = SYSTEMD / "kbatchd.service"

pytestmark = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="needs systemd-analyze (Debian: systemd)"
)


def _directives(text: str) -> dict[str, list[str]]:
    """KEY -> every value it is given, in order (systemd allows repeating keys)."""
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";", "[")):
            continue
        key, _, value = line.partition("=")
        found.setdefault(key.strip(), []).append(value.strip())
    return found


def _runnable_copy(tmp_path: Path) -> Path:
    """The unit with ExecStart pointing at this environment's `kbatchd` (verify checks that
    the program exists); nothing else changes."""
    kbatchd = Path(sys.executable).with_name("kbatchd")
    assert kbatchd.exists(), kbatchd
    text = UNIT.read_text().replace("/opt/kbatchd/bin/kbatchd", str(kbatchd))
    copy = tmp_path / "kbatchd.service"
    copy.write_text(text)
    return copy


def _run(*argv: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, capture_output=True, text=True, input=stdin, timeout=60, check=False
    )


def test_the_unit_verifies(tmp_path: Path) -> None:
    result = _run("systemd-analyze", "verify", str(_runnable_copy(tmp_path)))
    assert result.returncode == 0, result.stderr
    # verify reports unknown keys, bad values and missing programs as warnings on stderr.
    assert result.stderr.strip() == "", result.stderr


def test_the_unit_is_hardened(tmp_path: Path) -> None:
    result = _run(
        "systemd-analyze", "security", "--offline=yes", "--no-pager", str(_runnable_copy(tmp_path))
    )
    assert result.returncode == 0, result.stderr
    match = re.search(r"Overall exposure level for \S+: ([0-9.]+)", result.stdout)
    assert match, result.stdout[-2000:]
    # 0 is a fully locked-down service, 10 an unprotected one; up to 2 counts as "OK".
    assert float(match.group(1)) <= 2.0, result.stdout


def test_the_unit_says_what_the_daemon_relies_on() -> None:
    unit = _directives(UNIT.read_text())
    one = {key: values[-1] for key, values in unit.items()}
    assert one["Type"] == "notify"
    assert one["NotifyAccess"] == "main"
    assert one["ExecStart"] == "/opt/kbatchd/bin/kbatchd run --config /etc/kbatchd/kbatchd.toml"
    assert re.fullmatch(r"\d+s", one["WatchdogSec"])
    assert one["Restart"] == "on-failure"
    # Exit code 2 is a bad configuration, which a restart cannot fix.
    assert one["RestartPreventExitStatus"] == "2"
    assert one["User"] == "kbatchd"
    assert one["StateDirectory"] == "kbatchd"
    assert one["ExecReload"] == "/bin/kill -HUP $MAINPID"
    # The drain ([daemon] drain_seconds <= 9 s) must fit in the stop timeout.
    assert int(one["TimeoutStopSec"].rstrip("s")) > 9
    for key, value in {
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "CapabilityBoundingSet": "",
        "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6",
    }.items():
        assert one[key] == value, key
    assert "@system-service" in unit["SystemCallFilter"]


def test_sysusers_creates_the_user_and_tmpfiles_its_directories(tmp_path: Path) -> None:
    if shutil.which("systemd-sysusers") is None or shutil.which("systemd-tmpfiles") is None:
        pytest.skip("needs systemd-sysusers and systemd-tmpfiles")
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    for name in ("passwd", "group", "shadow", "gshadow"):
        (root / "etc" / name).touch()
    sysusers = (SYSTEMD / "kbatchd.sysusers.conf").read_text()
    result = _run("systemd-sysusers", f"--root={root}", "-", stdin=sysusers)
    assert result.returncode == 0, result.stderr
    entry = next(
        line.split(":")
        for line in (root / "etc" / "passwd").read_text().splitlines()
        if line.startswith("kbatchd:")
    )
    uid, gid, home, shell = int(entry[2]), int(entry[3]), entry[5], entry[6]
    assert uid < 1000  # a system user
    assert home == "/var/lib/kbatchd"
    assert shell.endswith("nologin")
    # `make install` has put the settings there, as root (its own group, 0640).
    toml = root / "etc/kbatchd/kbatchd.toml"
    toml.parent.mkdir()
    toml.write_text("")
    toml.chmod(0o640)
    tmpfiles = (SYSTEMD / "kbatchd.tmpfiles.conf").read_text()
    result = _run("systemd-tmpfiles", f"--root={root}", "--create", "-", stdin=tmpfiles)
    assert result.returncode == 0, result.stderr
    state, settings = (root / "var/lib/kbatchd").stat(), (root / "etc/kbatchd").stat()
    assert (state.st_uid, state.st_gid, state.st_mode & 0o777) == (uid, gid, 0o750)
    assert (settings.st_uid, settings.st_gid, settings.st_mode & 0o777) == (0, gid, 0o750)
    # The service, running as the kbatchd group, can read them.
    read = toml.stat()
    assert (read.st_uid, read.st_gid, read.st_mode & 0o777) == (0, gid, 0o640)
