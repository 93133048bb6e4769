"""Settings: the shipped example, the defaults, and errors that name the key and the file."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path
from typing import Any

import msgspec
import pytest

from daemon.controllers.multicluster.reconciler import configured as multicluster_configured
from daemon.service import config

REPO = Path(__file__).resolve().parents[3]


def test_the_shipped_example_is_the_defaults() -> None:
    assert config.load(REPO / "config" / "kbatchd.toml") == config.Settings()


def _fields(struct: type[msgspec.Struct], prefix: str = "") -> set[str]:
    """Every setting of a settings struct as a dotted key (a list of tables by its element)."""
    keys: set[str] = set()
    for field in msgspec.structs.fields(struct):
        kind = field.type
        if getattr(kind, "__origin__", None) is list and isinstance(kind.__args__[0], type):
            kind = kind.__args__[0]
        if isinstance(kind, type) and issubclass(kind, msgspec.Struct):
            keys |= _fields(kind, f"{prefix}{field.name}.")
        else:
            keys.add(f"{prefix}{field.name}")
    return keys


def test_the_shipped_example_spells_out_every_setting() -> None:
    """config/kbatchd.toml is where every default is written (docs/configuration.md is checked
    against it): no setting may be left to the built-in default unseen."""
    raw = tomllib.loads((REPO / "config" / "kbatchd.toml").read_text(encoding="utf-8"))

    def flat(table: dict[str, Any], prefix: str = "") -> set[str]:
        keys: set[str] = set()
        for key, value in table.items():
            if isinstance(value, list) and value and isinstance(value[0], dict):
                value = value[0]
            if isinstance(value, dict):
                keys |= flat(value, f"{prefix}{key}.")
            else:
                keys.add(f"{prefix}{key}")
        return keys

    assert flat(raw) == _fields(config.Settings)


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


def _number_keys(
    struct: type[msgspec.Struct], prefix: str = ""
) -> list[tuple[str, msgspec.inspect.Type]]:
    """Every float and int setting as (dotted key, its type); a tuple's items as KEY[i]."""
    found: list[tuple[str, msgspec.inspect.Type]] = []
    info = msgspec.inspect.type_info(struct)
    assert isinstance(info, msgspec.inspect.StructType)
    for field in info.fields:
        key = f"{prefix}{field.name}"
        kind = field.type
        if isinstance(kind, msgspec.inspect.StructType):
            found += _number_keys(kind.cls, f"{key}.")
        elif isinstance(kind, msgspec.inspect.TupleType):
            found += [(f"{key}[{i}]", item) for i, item in enumerate(kind.item_types)]
        elif isinstance(kind, msgspec.inspect.FloatType | msgspec.inspect.IntType):
            found.append((key, kind))
    return found


NUMBER_KEYS = _number_keys(config.Settings)


def _below_range(kind: msgspec.inspect.Type) -> list[float]:
    """The values just under a key's lower bound, where one exists."""
    low = getattr(kind, "ge", None)
    above = getattr(kind, "gt", None)
    if above is not None:
        return [above, above - 1]
    return [] if low is None else [low - 1]


def _out_of_range() -> list[tuple[str, Any]]:
    cases: list[tuple[str, Any]] = []
    for key, kind in NUMBER_KEYS:
        if isinstance(kind, msgspec.inspect.FloatType):
            cases += [(key, value) for value in (math.inf, -math.inf, math.nan, 1e300)]
        else:
            cases += [(key, value) for value in (2**63, 10**30)]
        cases += [(key, value) for value in _below_range(kind)]
    return cases


def _toml(key: str, value: Any) -> str:
    """A settings file that sets one key (a tuple item among the item's defaults)."""
    *sections, name = key.split(".")
    if "[" in name:
        name, index = name.rstrip("]").split("[")
        items: Any = config.Settings()
        for part in (*sections, name):
            items = getattr(items, part)
        listed = list(items)
        listed[int(index)] = value
        text = f"{name} = [{', '.join(_toml_value(v) for v in listed)}]\n"
    else:
        text = f"{name} = {_toml_value(value)}\n"
    return (f"[{'.'.join(sections)}]\n" if sections else "") + text


def _toml_value(value: Any) -> str:
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return repr(value)


def test_every_number_key_is_found_and_bounded_above() -> None:
    keys = {key for key, _ in NUMBER_KEYS}
    assert {
        "daemon.tick_seconds",
        "daemon.retry_backoff_seconds[1]",
        "tracing.sample_ratio",
    } <= keys
    assert len(keys) >= 25
    unbounded = [key for key, kind in NUMBER_KEYS if getattr(kind, "le", None) is None]
    assert unbounded == []


@pytest.mark.parametrize(
    ("key", "value"), _out_of_range(), ids=[f"{k}={v!r}" for k, v in _out_of_range()]
)
def test_a_number_out_of_range_is_refused_naming_the_key_and_the_rule(
    tmp_path: Path, key: str, value: Any
) -> None:
    path = tmp_path / "kbatchd.toml"
    path.write_text(_toml(key, value))
    with pytest.raises(config.ConfigError) as caught:
        config.load(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: Expected `")
    assert message.endswith(f" - at `$.{key}`")
    assert "\n" not in message


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("[daemon]\ntick_seconds = 11\n", "`float` <= 10.0 - at `$.daemon.tick_seconds`"),
        ("[topology]\nlevels = []\n", "topology.levels: 1 to 16 levels required, got 0"),
        (
            '[topology]\nlevels = ["kubernetes.io/hostname", "rack"]\n',
            "topology.levels[0]: kubernetes.io/hostname may only be the last level",
        ),
        ('[topology]\nlevels = ["rack", "rack"]\n', "topology.levels[1]: duplicate level 'rack'"),
        ('[topology]\nlevels = ["rack", ""]\n', "topology.levels[1]: empty level"),
        (
            '[reconcilers.job]\nmanaged_by = ""\n',
            "length >= 1 - at `$.reconcilers.job.managed_by`",
        ),
        (
            '[reconcilers.jobset]\nmanaged_by = ""\n',
            "length >= 1 - at `$.reconcilers.jobset.managed_by`",
        ),
        (
            '[reconcilers.job]\nmanaged_by = "kbatchd"\n',
            "reconcilers.job.managed_by: expected a domain-prefixed path",
        ),
        (
            f'[reconcilers.jobset]\nmanaged_by = "kbatchd.dev/{"x" * 60}"\n',
            "length <= 63 - at `$.reconcilers.jobset.managed_by`",
        ),
        (
            "[reconcilers.job]\nbackoff_base_seconds = 700\n",
            "reconcilers.job.backoff_base_seconds: must not exceed backoff_max_seconds",
        ),
        ("a = " + "[" * 5000 + "]" * 5000 + "\n", "not valid TOML: nested too deeply"),
        ("a = " + "{b = " * 5000 + "}" * 5000 + "\n", "not valid TOML: nested too deeply"),
    ],
    ids=[
        "tick-beyond-the-watchdog",
        "no-levels",
        "hostname-first",
        "duplicate-level",
        "empty-level",
        "empty-job-manager",
        "empty-jobset-manager",
        "manager-not-a-path",
        "manager-too-long",
        "job-backoff-inverted",
        "nested-arrays",
        "nested-tables",
    ],
)
def test_bad_values_name_the_key_and_the_rule(tmp_path: Path, text: str, names: str) -> None:
    _refused(tmp_path, text, names)


def _refused(tmp_path: Path, text: str, names: str) -> None:
    path = tmp_path / "kbatchd.toml"
    path.write_text(text)
    with pytest.raises(config.ConfigError) as caught:
        config.load(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ")
    assert names in message
    assert "\n" not in message


THREE = "".join(f'[[clusters]]\nname = "{n}"\n' for n in ("m", "w1", "w2"))


@pytest.mark.parametrize(
    ("section", "names"),
    [
        ("enabled = true\n", "reconcilers.multicluster.manager: expected one of the [[clusters]]"),
        (
            'enabled = true\nmanager = "x"\n',
            "reconcilers.multicluster.manager: expected one of the [[clusters]] names "
            "['m', 'w1', 'w2'], got 'x'",
        ),
        (
            'enabled = true\nmanager = "m"\nworkers = ["w1", "w9"]\n',
            "reconcilers.multicluster.workers: no cluster named 'w9'",
        ),
        (
            'enabled = true\nmanager = "m"\nworkers = ["w1", "m"]\n',
            "reconcilers.multicluster.workers: the manager 'm' cannot be a worker",
        ),
        (
            'enabled = true\nmanager = "m"\nworkers = ["w1", "w1"]\n',
            "reconcilers.multicluster.workers: duplicate name in ['w1', 'w1']",
        ),
        (
            'enabled = true\nmanager = "m"\ndispatcher = "Random"\n',
            "Invalid enum value 'Random' - at `$.reconcilers.multicluster.dispatcher`",
        ),
    ],
    ids=[
        "no-manager",
        "unknown-manager",
        "unknown-worker",
        "manager-as-worker",
        "duplicate",
        "dispatcher",
    ],
)
def test_bad_multicluster_settings_name_the_key(tmp_path: Path, section: str, names: str) -> None:
    _refused(tmp_path, THREE + "[reconcilers.multicluster]\n" + section, names)


def test_a_manager_alone_has_no_worker(tmp_path: Path) -> None:
    text = '[[clusters]]\nname = "m"\n[reconcilers.multicluster]\nenabled = true\nmanager = "m"\n'
    _refused(tmp_path, text, "reconcilers.multicluster.workers: at least one worker cluster")


def test_the_workers_default_to_every_cluster_but_the_manager(tmp_path: Path) -> None:
    path = tmp_path / "kbatchd.toml"
    path.write_text(THREE + '[reconcilers.multicluster]\nenabled = true\nmanager = "w1"\n')
    settings = config.load(path)
    rec = multicluster_configured(settings)
    assert (rec.manager, rec.workers) == ("w1", ("m", "w2"))
