"""A real headless browser for the tests of pages kbatchd writes: Debian's chromium, started
by the test with a bound on its run, and the DOM it ends with after the page's scripts ran.

Where chromium is not installed the test is skipped, saying how to install it."""

from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

INSTALL = "apt-get update && apt-get install -y chromium"


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip(f"chromium is not installed ({INSTALL}): the page is not checked in a browser")
    return found


def dump_dom(page: Path, profile: Path, *, within: float = 90.0) -> str:
    """The page's DOM after its scripts ran. Network is off: the page must need none (it
    also forbids itself any by its Content-Security-Policy)."""
    argv = [
        chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        f"--user-data-dir={profile}",
        "--window-size=1300,1000",
        "--dump-dom",
        page.resolve().as_uri(),
    ]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=within, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


class Elements(HTMLParser):
    """Every start tag of a document with its attributes, in order."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.found: list[tuple[str, dict[str, str]]] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.append((tag, {k: v or "" for k, v in attrs}))

    def with_class(self, name: str) -> list[dict[str, str]]:
        return [attrs for _, attrs in self.found if name in attrs.get("class", "").split()]

    def first(self, tag: str) -> dict[str, str]:
        return next(attrs for found, attrs in self.found if found == tag)
