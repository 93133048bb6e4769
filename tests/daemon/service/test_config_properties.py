"""Properties of `config.load` on settings files it must refuse: the shipped example with
random values of the wrong type or out of range at its keys, unknown keys, keys removed, and
TOML that is broken or no TOML at all.

The promise: the settings, or one `ConfigError` whose message is one line starting with the
file's name; nothing else. Through `kbatchd run` the same refusal is one stderr line and exit
code 2, before anything starts.
"""

from __future__ import annotations

import datetime
import json
import math
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from daemon.cli import main
from daemon.service import config
from tests.strategies import json_paths

REPO = Path(__file__).resolve().parents[3]
SHIPPED_TEXT = (REPO / "config" / "kbatchd.toml").read_text(encoding="utf-8")
SHIPPED = tomllib.loads(SHIPPED_TEXT)

# Strings as settings are written, and near misses of them.
WORDS = st.sampled_from(
    ["", "c1", "Bad_Name", "default", "127.0.0.1:9464", "[::1]:80", "localhost:99999",
     "host:²", "http://collector:4318", "ftp://x", "$HOME/kube", "$KBATCHD_NO_SUCH_VARIABLE",
     "kubernetes.io/hostname", "example.com/rack", "acme.io/foo", "kbatchd.dev/x", "debug",
     "json", "Random", "nan", "-1", "1e999"]
)  # fmt: skip
TEXT = st.text(st.characters(blacklist_categories=("Cc", "Cs")), max_size=12)
SCALARS = st.one_of(
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),
    st.sampled_from([0, 1, -1, 0.5, 10, 1000, 2**63, math.inf, math.nan]),
    TEXT,
    WORDS,
    st.datetimes(timezones=st.just(datetime.UTC)),
    st.dates(),
    st.times(),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT | WORDS, inner, max_size=3),
    max_leaves=8,
)


def toml_value(value: Any) -> str:
    """`value` as a TOML value, tables inline (valid at any depth)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    assert isinstance(value, dict)
    items = (f"{json.dumps(k, ensure_ascii=False)} = {toml_value(v)}" for k, v in value.items())
    return "{" + ", ".join(items) + "}"


def toml_document(table: dict[str, Any]) -> str:
    return "".join(f"{json.dumps(k)} = {toml_value(v)}\n" for k, v in table.items())


@st.composite
def damaged_settings(draw: st.DrawFn) -> str:
    """The shipped settings with a few values replaced, keys removed or unknown keys added."""
    doc = json.loads(json.dumps(SHIPPED))  # a deep copy, plain types
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(json_paths(doc)[1:]))
        *parents, last = path
        node: Any = doc
        for part in parents:
            node = node[part]
        action = draw(st.sampled_from(["replace", "replace", "remove", "unknown"]))
        if action == "remove":
            del node[last]
        elif action == "unknown" and isinstance(node[last], dict):
            node[last][draw(TEXT | WORDS)] = draw(VALUES)
        else:
            node[last] = draw(VALUES)
    return toml_document(doc)


@st.composite
def broken_text(draw: st.DrawFn) -> str:
    """The shipped file with characters deleted, inserted or swapped; or random text."""
    text = SHIPPED_TEXT
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(text)))
        cut = draw(st.integers(0, 8))
        text = (
            text[:at]
            + draw(st.sampled_from(["", "=", "[", "]", '"', "\n", "#", "x"]))
            + text[at + cut :]
        )
    return text


DOCUMENTS = st.one_of(damaged_settings(), damaged_settings(), broken_text(), TEXT)


def load_or_refuse(path: Path, text: str) -> str | None:
    """Load `text` from `path`: None when it loads, else the ConfigError's message, checked
    to be one line naming the file."""
    path.write_text(text, encoding="utf-8")
    try:
        config.load(path)
    except config.ConfigError as exc:
        message = str(exc)
        assert message.startswith(f"{path}: "), message
        assert "\n" not in message, message
        return message
    return None


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(DOCUMENTS)
@example('"health" = {"address" = "host:²"}\n')  # isdigit() and still no int()
@example("[daemon]\ntick_seconds = nan\n")
@example('"clusters" = [{"name" = "a", "kubeconfig" = "$KBATCHD_NO_SUCH_VARIABLE/k"}]\n')
@example("a = " + "[" * 3000 + "]" * 3000 + "\n")
def test_any_settings_file_loads_or_is_one_config_error_naming_the_file(
    tmp_path: Path, text: str
) -> None:
    load_or_refuse(tmp_path / "kbatchd.toml", text)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(DOCUMENTS)
def test_kbatchd_run_refuses_a_bad_settings_file_in_one_line_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    path = tmp_path / "kbatchd.toml"
    message = load_or_refuse(path, text)
    if message is None:
        return  # settings that load would start the daemon: not this test's business
    capsys.readouterr()
    assert main(["run", "--config", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert captured.err.startswith(f"kbatchd: {path}: ")
    assert "Traceback" not in captured.err
