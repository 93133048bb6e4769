"""A full disk, and reading a log that lives on another process's disk: for the tests and the
fault campaign that fill the disk under a running daemon."""

from __future__ import annotations

import errno
import shutil
from pathlib import Path


def fill(path: Path) -> None:
    """Write `path` until its filesystem is full."""
    chunk = bytes(1 << 20)
    with path.open("wb", buffering=0) as file:
        while True:
            try:
                file.write(chunk)
            except OSError as exc:
                if exc.errno == errno.ENOSPC:
                    return
                raise


def copy_of_log(directory: Path, into: Path, name: str = "kbatchd.db") -> Path:
    """A copy of the log `name` in `directory`, which a daemon may be writing: its WAL copied
    after the database, so that the copy holds a prefix of the commits (a frame torn by the
    copy fails its checksum, and what follows it is not read)."""
    into.mkdir(parents=True, exist_ok=True)
    for file in (name, f"{name}-wal"):
        if (directory / file).exists():
            shutil.copyfile(directory / file, into / file)
    return into / name
