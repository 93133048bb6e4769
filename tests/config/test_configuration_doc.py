"""docs/configuration.md documents every key of config/kbatchd.toml exactly once, with the
default that file gives it; no other doc names a key that does not exist.

config/kbatchd.toml is the one source of every default (tests/daemon/test_config.py checks that
the daemon's built-in defaults equal it); this test reads only files, never the daemon's code.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
SETTINGS = REPO / "config" / "kbatchd.toml"
DOC = REPO / "docs" / "configuration.md"

# A section heading: "## Top level", "## `[daemon]`", "## `[[clusters]]`".
_HEADING = re.compile(r"^## (?:Top level|`\[\[?(?P<section>[a-z_.]+)\]\]?`)\s*$")
# A settings row: "| `key` | `default` | bounds | meaning |".
_ROW = re.compile(r"^\| `(?P<key>[a-z_]+)` \| `(?P<default>[^`]+)` \|")
# A reference in prose: "`[daemon] drain_seconds`".
_REFERENCE = re.compile(r"`\[\[?(?P<section>[a-z_.]+)\]\]? (?P<key>[a-z_]+)`")


def _flatten(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Dotted key → value; an array of tables (`[[clusters]]`) counts by its first table."""
    flat: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            value = value[0]
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def _settings() -> dict[str, Any]:
    return _flatten(tomllib.loads(SETTINGS.read_text(encoding="utf-8")))


def _documented() -> list[tuple[str, str, int]]:
    """Every settings row of the doc: dotted key, default as written, line number."""
    rows: list[tuple[str, str, int]] = []
    section: str | None = None
    for number, line in enumerate(DOC.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("## "):
            heading = _HEADING.match(line)
            section = None if heading is None else (heading["section"] or "")
            continue
        row = _ROW.match(line)
        if row is not None and section is not None:
            prefix = f"{section}." if section else ""
            rows.append((prefix + row["key"], row["default"], number))
    return rows


def _value(written: str) -> Any:
    return tomllib.loads(f"v = {written}")["v"]


def test_the_doc_documents_every_key_once() -> None:
    keys = [key for key, _, _ in _documented()]
    twice = sorted({key for key in keys if keys.count(key) > 1})
    assert not twice, f"{DOC.name}: documented more than once: {twice}"
    missing = sorted(set(_settings()) - set(keys))
    assert not missing, f"{DOC.name}: keys of {SETTINGS.name} not documented: {missing}"
    unknown = sorted(set(keys) - set(_settings()))
    assert not unknown, f"{DOC.name}: documents keys {SETTINGS.name} does not have: {unknown}"


def test_the_doc_gives_the_defaults_of_the_settings_file() -> None:
    settings = _settings()
    wrong = []
    for key, written, number in _documented():
        if key not in settings:
            continue  # the test above names it
        value = _value(written)
        expected = settings[key]
        # 0 and 0.0 are equal but read differently: the doc writes what the file writes.
        if value != expected or type(value) is not type(expected):
            wrong.append(f"line {number}: {key}: doc {written}, {SETTINGS.name} {expected!r}")
    assert not wrong, f"{DOC.name}: " + "; ".join(wrong)


def _docs() -> list[Path]:
    return [REPO / "README.md", REPO / "BENCHMARKS.md", *sorted((REPO / "docs").glob("*.md"))]


@pytest.mark.parametrize("path", _docs(), ids=lambda p: str(p.relative_to(REPO)))
def test_other_docs_name_only_keys_that_exist(path: Path) -> None:
    settings = _settings()
    named = {
        f"{m['section']}.{m['key']}" for m in _REFERENCE.finditer(path.read_text(encoding="utf-8"))
    }
    unknown = sorted(named - set(settings))
    assert not unknown, f"{path.name} names settings that do not exist: {unknown}"


def test_a_wrong_default_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check itself: a doc whose default differs from the file's fails."""
    text = DOC.read_text(encoding="utf-8").replace(
        "| `concurrency` | `64` |", "| `concurrency` | `32` |"
    )
    assert "| `concurrency` | `32` |" in text
    doc = tmp_path / "configuration.md"
    doc.write_text(text, encoding="utf-8")
    monkeypatch.setattr(f"{__name__}.DOC", doc)
    with pytest.raises(AssertionError, match=r"daemon\.concurrency: doc 32"):
        test_the_doc_gives_the_defaults_of_the_settings_file()
