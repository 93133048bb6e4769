"""`make install DESTDIR=ROOT` lays the service out as the README's install steps do: a virtual
environment at /opt/kbatchd whose scripts run from there, the unit whose ExecStart names its
kbatchd, the sysusers and tmpfiles snippets, and the settings readable by root and the group
only. The installed unit passes `systemd-analyze verify`."""

from __future__ import annotations

import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PREFIX = "/opt/kbatchd"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("make") is None, reason="needs make"),
]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("root")
    base = getattr(sys, "_base_executable", sys.executable)
    result = subprocess.run(
        ["make", "-s", "-C", str(REPO), "install", f"DESTDIR={root}", f"PYTHON={base}"],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return root


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_files_land_where_the_unit_and_the_readme_expect_them(root: Path) -> None:
    installed = {
        "etc/systemd/system/kbatchd.service": (REPO / "systemd/kbatchd.service", 0o644),
        "usr/lib/sysusers.d/kbatchd.conf": (REPO / "systemd/kbatchd.sysusers.conf", 0o644),
        "usr/lib/tmpfiles.d/kbatchd.conf": (REPO / "systemd/kbatchd.tmpfiles.conf", 0o644),
        "etc/kbatchd/kbatchd.toml": (REPO / "config/kbatchd.toml", 0o640),
    }
    for path, (source, mode) in installed.items():
        assert (root / path).read_bytes() == source.read_bytes(), path
        assert _mode(root / path) == mode, path


def test_the_environment_runs_from_its_prefix_not_the_staging_root(root: Path) -> None:
    kbatchd = root / PREFIX.lstrip("/") / "bin" / "kbatchd"
    assert kbatchd.read_text().splitlines()[0] == f"#!{PREFIX}/bin/python"
    for script in kbatchd.parent.iterdir():
        if script.is_file() and not script.is_symlink():
            assert str(root) not in script.read_text(errors="replace"), script
    # Installed, not linked to this checkout.
    found = subprocess.run(
        [str(kbatchd.with_name("python")), "-c", "import daemon; print(daemon.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=root,
    ).stdout
    assert found.startswith(str(root / PREFIX.lstrip("/"))), found


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_the_installed_unit_verifies(root: Path, tmp_path: Path) -> None:
    unit = (root / "etc/systemd/system/kbatchd.service").read_text()
    assert f"ExecStart={PREFIX}/bin/kbatchd run" in unit
    # verify checks that ExecStart's program exists: point it into the staging root.
    copy = tmp_path / "kbatchd.service"
    copy.write_text(unit.replace(f"{PREFIX}/bin/kbatchd", f"{root}{PREFIX}/bin/kbatchd"))
    result = subprocess.run(
        ["systemd-analyze", "verify", str(copy)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "", result.stderr


def test_settings_already_there_are_kept(root: Path) -> None:
    settings = root / "etc/kbatchd/kbatchd.toml"
    settings.write_text('log = "/var/lib/kbatchd/kbatchd.db"\n')
    result = subprocess.run(
        ["make", "-s", "-C", str(REPO), "install", f"DESTDIR={root}"],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert settings.read_text() == 'log = "/var/lib/kbatchd/kbatchd.db"\n'
