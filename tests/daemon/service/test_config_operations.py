"""The operations settings — leader election, health, logging, tracing, retry back-off — and
the environment: bad values name the key and the file, and the command exits 2 before
anything starts."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from daemon.service import config
from tests.processes import child_environment


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("[leader_election]\nlease_duration_seconds = 10\n", "renew_deadline_seconds"),
        ("[leader_election]\nretry_period_seconds = 9\n", "retry_period_seconds"),
        ("[leader_election]\nlease_duration_seconds = 1.5\n", "$.leader_election.lease_duration"),
        ('[leader_election]\ncluster = "elsewhere"\n', "leader_election.cluster"),
        ("[leader_election]\nenabled = 'yes'\n", "$.leader_election.enabled"),
        ('[health]\naddress = "9464"\n', "health.address"),
        ('[health]\naddress = "example.com:9464"\n', "health.address"),
        ('[health]\naddress = "127.0.0.1:99999"\n', "health.address"),
        ('[logging]\nlevel = "loud"\n', "$.logging.level"),
        ('[logging]\nformat = "xml"\n', "$.logging.format"),
        ('[tracing]\nendpoint = "collector:4318"\n', "tracing.endpoint"),
        ("[tracing]\nsample_ratio = 2\n", "$.tracing.sample_ratio"),
        ("[daemon]\nretry_backoff_seconds = [60, 1]\n", "daemon.retry_backoff_seconds"),
        ("[daemon]\napi_retry_seconds = [30, 1]\n", "daemon.api_retry_seconds"),
        ("[daemon]\nact_retry_seconds = [5, 0.1]\n", "daemon.act_retry_seconds"),
        (
            '[[clusters]]\nname = "a"\nkubeconfig = "$KBATCHD_TEST_UNSET/kubeconfig"\n',
            "clusters[0].kubeconfig",
        ),
    ],
    ids=[
        "renew-not-below-lease",
        "retry-too-slow",
        "fractional-lease",
        "unknown-lease-cluster",
        "enabled-not-bool",
        "address-without-host",
        "address-not-ip",
        "port-out-of-range",
        "unknown-level",
        "unknown-format",
        "endpoint-not-url",
        "ratio-above-one",
        "backoff-inverted",
        "api-retry-inverted",
        "act-retry-inverted",
        "unset-variable",
    ],
)
def test_bad_operations_settings_name_the_key_and_the_file(
    tmp_path: Path, text: str, names: str
) -> None:
    path = tmp_path / "kbatchd.toml"
    path.write_text(text)
    with pytest.raises(config.ConfigError) as caught:
        config.load(path)
    assert str(caught.value).startswith(f"{path}: ")
    assert names in str(caught.value)


def test_kubeconfig_paths_expand_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", "/run/credentials/kbatchd.service")
    path = tmp_path / "kbatchd.toml"
    path.write_text('[[clusters]]\nname = "a"\nkubeconfig = "$CREDENTIALS_DIRECTORY/kubeconfig"\n')
    (cluster,) = config.load(path).clusters
    assert cluster.kubeconfig_path() == "/run/credentials/kbatchd.service/kubeconfig"
    assert config.Cluster(name="b").kubeconfig_path() is None


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("127.0.0.1:9464", ("127.0.0.1", 9464)),
        ("[::1]:0", ("::1", 0)),
        ("localhost:80", ("localhost", 80)),
    ],
)
def test_health_addresses(text: str, parsed: tuple[str, int]) -> None:
    assert config.parse_address(text) == parsed


def _run(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "daemon.cli", "run", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=child_environment(env),
    )


def test_a_taken_health_port_exits_2_naming_the_key(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        path = tmp_path / "kbatchd.toml"
        path.write_text(f'log = "{tmp_path / "k.db"}"\n[health]\naddress = "127.0.0.1:{port}"\n')
        result = _run("--config", str(path))
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"kbatchd: health.address 127.0.0.1:{port}: ")
    assert not (tmp_path / "k.db").exists()


def test_tracing_over_another_protocol_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "kbatchd.toml"
    path.write_text(f'log = "{tmp_path / "k.db"}"\n[health]\naddress = ""\n')
    env = {
        **os.environ,
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
    }
    result = _run("--config", str(path), env=env)
    assert result.returncode == 2
    assert "OTEL_EXPORTER_OTLP_PROTOCOL=grpc" in result.stderr
    assert not (tmp_path / "k.db").exists()


def test_an_unwritable_log_file_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "kbatchd.toml"
    path.write_text(f'[logging]\nfile = "{tmp_path / "absent" / "k.log"}"\n')
    result = _run("--config", str(path))
    assert result.returncode == 2
    assert "logging.file" in result.stderr
