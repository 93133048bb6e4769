"""The built wheel carries the migrations: a fresh install, away from the source tree, can
create a log. Guards pyproject's force-include and `events.migrate.migrations_dir`. The
source distribution carries what the README links to."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest

from events.migrate import CODE_SCHEMA_VERSION

REPO = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import json, sqlite3, sys
    import anyio
    import events
    from events.migrate import CODE_SCHEMA_VERSION, migrations_dir
    from events.schema import Tick
    from events.store import EventLog

    async def main() -> list[list[int]]:
        async with EventLog.open(sys.argv[1]) as log:
            await log.append([Tick(at=42)])
            return [[seq, event.at] async for seq, event in log.read()]

    read = anyio.run(main)
    conn = sqlite3.connect(sys.argv[1])
    (user_version,) = conn.execute("PRAGMA user_version").fetchone()
    conn.close()
    print(json.dumps({
        "package": events.__file__,
        "migrations": str(migrations_dir()),
        "code_schema_version": CODE_SCHEMA_VERSION,
        "user_version": user_version,
        "read": read,
    }))
    """
)


def run(*args: str | Path, cwd: Path) -> str:
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.mark.slow
def test_an_installed_wheel_creates_a_log(tmp_path: Path) -> None:
    dist, venv, work = tmp_path / "dist", tmp_path / "venv", tmp_path / "work"
    work.mkdir()
    run(sys.executable, "-m", "build", "--wheel", "--outdir", dist, REPO, cwd=work)
    (wheel,) = dist.glob("kbatchd-*.whl")
    # No pip inside the new venv: this venv's pip installs into it, which is much faster; and
    # without compiling what it installs (half its time), which nothing here reads.
    run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=work)
    python = venv / "bin" / "python"
    install = ("install", "--quiet", "--no-compile", wheel)
    run(sys.executable, "-m", "pip", "--python", python, *install, cwd=work)

    # -I: nothing from the environment or the working directory may reach the source tree.
    out = json.loads(run(python, "-I", "-c", SCRIPT, work / "log.db", cwd=work))

    site_packages = next((venv / "lib").glob("python3.*/site-packages"))
    assert Path(out["package"]).is_relative_to(site_packages)
    assert Path(out["migrations"]) == site_packages / "events" / "migrations"
    assert out["code_schema_version"] == CODE_SCHEMA_VERSION
    assert out["user_version"] == CODE_SCHEMA_VERSION
    assert out["read"] == [[1, 42]]


@pytest.mark.slow
def test_the_sdist_carries_every_file_the_readme_links_to(tmp_path: Path) -> None:
    run(sys.executable, "-m", "build", "--sdist", "--outdir", tmp_path, REPO, cwd=tmp_path)
    (sdist,) = tmp_path.glob("kbatchd-*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    readme = (REPO / "README.md").read_text()
    linked = set(re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", readme))
    assert linked, "the README links to no file of the repository"
    missing = sorted(t for t in linked if not any(n == t or n.startswith(t) for n in names))
    assert not missing, f"not in the sdist: {missing}"
