"""Settings: the shipped example, the defaults, and errors that name the key and the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon import config

REPO = Path(__file__).resolve().parents[2]


def test_the_shipped_example_is_the_defaults() -> None:
    assert config.load(REPO / "config" / "kbatchd.toml") == config.Settings()


def test_no_file_gives_defaults_and_the_environment_names_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KBATCHD_CONFIG", raising=False)
    assert config.load(None) == config.Settings()
    path = tmp_path / "k.toml"
    path.write_text('log = "/tmp/x.db"\n')
    monkeypatch.setenv("KBATCHD_CONFIG", str(path))
    assert config.load(None).log == "/tmp/x.db"


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("colour = 1\n", "unknown field `colour`"),
        ("[daemon]\ntick_seconds = -1\n", "$.daemon.tick_seconds"),
        ("[daemon]\nconcurrency = 'many'\n", "$.daemon.concurrency"),
        ("[daemon]\nkeep_snapshots = -1\n", "$.daemon.keep_snapshots"),
        ('[[clusters]]\nname = "Bad_Name"\n', "$.clusters[0].name"),
        ('[[clusters]]\nname = "a"\n[[clusters]]\nname = "a"\n', "clusters: duplicate name"),
        ("clusters = []\n", "at least one cluster"),
        ("[daemon]\nwatch_timeout_seconds = [600, 300]\n", "daemon.watch_timeout_seconds"),
        ("log = \n", "not valid TOML"),
    ],
    ids=[
        "unknown-key",
        "negative-tick",
        "wrong-type",
        "negative-snapshot-count",
        "bad-cluster-name",
        "duplicate-cluster",
        "no-cluster",
        "inverted-range",
        "not-toml",
    ],
)
def test_bad_settings_name_the_key_and_the_file(tmp_path: Path, text: str, names: str) -> None:
    path = tmp_path / "kbatchd.toml"
    path.write_text(text)
    with pytest.raises(config.ConfigError) as caught:
        config.load(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ")
    assert names in message


def test_an_unreadable_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(config.ConfigError, match="cannot read"):
        config.load(tmp_path / "absent.toml")
