"""Logs: JSON lines off a terminal, console on one, context in every line, third-party lines
in the same stream, SIGHUP reopening the file — and no secret in any line, whoever logged it."""

from __future__ import annotations

import io
import json
import logging
import secrets
import signal
from pathlib import Path
from typing import Any

import pytest
import structlog
from kubernetes_asyncio import client

from daemon.cli import main
from daemon.service import logs
from tests.daemon.embedded import job
from tests.processes import daemon_config, eventually, kube_client, simulated_cluster_here, spawn

TOKEN = "sk-" + secrets.token_hex(16)
JWT = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2EifQ.c2lnbmF0dXJlLWJ5dGVz"
PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def captured() -> io.StringIO:
    out = io.StringIO()
    logs.configure("debug", out)
    return out


def _lines(out: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


@pytest.mark.parametrize(
    "fields",
    [
        {"token": TOKEN},
        {"Authorization": f"Bearer {TOKEN}"},
        {"headers": {"authorization": f"Bearer {TOKEN}"}},
        {"user": {"client-key-data": TOKEN, "client-certificate-data": TOKEN}},
        {"users": [{"name": "u", "user": {"password": TOKEN}}]},
        {"error": f"401 for request with header Authorization: Bearer {TOKEN}"},
        {"error": f"bad kubeconfig: {{'token': '{TOKEN}'}}"},
        {"error": f"users:\n- user:\n    token: {TOKEN}\n"},
        {"url": f"https://admin:{TOKEN}@10.0.0.1:6443/api"},
        {"error": f"rejected {JWT}"},
        {"error": f"cannot parse {PEM}"},
        {"raw": f"Bearer {TOKEN}".encode()},
    ],
    ids=[
        "token-field",
        "authorization-field",
        "nested-header",
        "client-key-data",
        "password-in-list",
        "bearer-in-text",
        "token-in-quoted-dict",
        "token-in-yaml",
        "url-userinfo",
        "jwt",
        "private-key",
        "bytes",
    ],
)
def test_secrets_never_reach_a_line(captured: io.StringIO, fields: dict[str, Any]) -> None:
    structlog.get_logger("t").info("something", **fields)
    text = captured.getvalue()
    for secret in (TOKEN, JWT, "MIIEowIBAAKCAQEA"):
        assert secret not in text
    assert logs.REDACTED in text


def test_what_is_not_secret_is_left_alone(captured: io.StringIO) -> None:
    structlog.get_logger("t").info(
        "intent done", key="Job/sim-0/default/train", kind="Pod", code=201, reason="TrackPods"
    )
    (line,) = _lines(captured)
    assert line["key"] == "Job/sim-0/default/train"
    assert line["code"] == 201
    assert line["reason"] == "TrackPods"


def test_a_traceback_is_redacted(captured: io.StringIO) -> None:
    try:
        raise RuntimeError(f"request failed: Authorization: Bearer {TOKEN}")
    except RuntimeError:
        structlog.get_logger("t").exception("boom")
    (line,) = _lines(captured)
    assert "RuntimeError" in line["exception"]
    assert TOKEN not in captured.getvalue()


def test_stdlib_logging_takes_the_same_way(captured: io.StringIO) -> None:
    logging.getLogger("kubernetes_asyncio.client.rest").warning(
        "retrying with headers %s", {"Authorization": f"Bearer {TOKEN}"}
    )
    (line,) = _lines(captured)
    assert line["logger"] == "kubernetes_asyncio.client.rest"
    assert line["level"] == "warning"
    assert TOKEN not in captured.getvalue()


def test_context_travels_in_contextvars(captured: io.StringIO) -> None:
    with structlog.contextvars.bound_contextvars(
        cluster="sim-0", key="Job/sim-0/default/a", reconciler="job", seq=42
    ):
        structlog.get_logger("t").info("inside")
    structlog.get_logger("t").info("outside")
    inside, outside = _lines(captured)
    assert (inside["cluster"], inside["key"], inside["reconciler"], inside["seq"]) == (
        "sim-0",
        "Job/sim-0/default/a",
        "job",
        42,
    )
    assert "cluster" not in outside


def test_json_off_a_terminal_console_on_one() -> None:
    plain = io.StringIO()
    logs.configure("info", plain)
    structlog.get_logger("t").info("hello", n=1)
    assert json.loads(plain.getvalue())["event"] == "hello"
    terminal = Terminal()
    logs.configure("info", terminal)
    structlog.get_logger("t").info("hello", n=1)
    text = terminal.getvalue()
    assert "hello" in text
    assert not text.lstrip().startswith("{")
    forced = Terminal()
    logs.configure("info", forced, fmt="json")
    structlog.get_logger("t").info("hello")
    assert json.loads(forced.getvalue())["event"] == "hello"


def test_the_level_filters(captured: io.StringIO) -> None:
    quiet = io.StringIO()
    logs.configure("warning", quiet)
    structlog.get_logger("t").info("dropped")
    structlog.get_logger("t").warning("kept")
    assert [line["event"] for line in _lines(quiet)] == ["kept"]


def test_a_config_error_quoting_a_secret_is_redacted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A kubeconfig the client cannot use, whose user carries a token and a key.
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": TOKEN, "client-key-data": TOKEN}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "absent",
            }
        )
    )
    settings = tmp_path / "k.toml"
    settings.write_text(f'log = "{tmp_path / "k.db"}"\n[health]\naddress = ""\n')
    code = main(["run", "--config", str(settings), "--kubeconfig", str(kubeconfig)])
    captured = capsys.readouterr()
    assert code == 2
    assert "kbatchd: " in captured.err
    assert TOKEN not in captured.out + captured.err


@pytest.mark.anyio
async def test_a_daemon_on_a_token_cluster_never_logs_the_token(tmp_path: Path) -> None:
    """The whole daemon at debug level against a cluster that requires a bearer token: a Job
    runs to completion, the log file is rotated and reopened on SIGHUP, and no line on
    stdout, stderr or in either file holds the token."""
    log_file = tmp_path / "kbatchd.log"
    extra = f'[logging]\nlevel = "debug"\nfile = "{log_file}"\n'
    async with simulated_cluster_here(tmp_path, "--token", TOKEN, "--time-scale", "10") as (
        _,
        kubeconfig,
    ):
        assert TOKEN in kubeconfig.read_text()
        config = daemon_config(tmp_path, kubeconfig, extra=extra)
        async with (
            spawn("daemon", "run", "--config", str(config)) as daemon,
            kube_client(kubeconfig) as api,
        ):

            async def logged(event: str) -> bool:
                return log_file.exists() and f'"event":"{event}"' in log_file.read_text()

            await eventually(lambda: logged("synced"), what="synced in the log file")
            await client.BatchV1Api(api).create_namespaced_job("default", job("quiet"))

            async def complete() -> bool:
                found = await client.BatchV1Api(api).read_namespaced_job("quiet", "default")
                conditions = found.status.conditions or []
                return any(c.type == "Complete" and c.status == "True" for c in conditions)

            await eventually(complete, what="Job quiet Complete")
            rotated = tmp_path / "kbatchd.log.1"
            log_file.rename(rotated)
            daemon.send_signal(signal.SIGHUP)
            await eventually(lambda: logged("log file reopened"), what="a new log file")
            daemon.send_signal(signal.SIGTERM)
            assert await daemon.wait(within=15) == 0
        lines = [*rotated.read_text().splitlines(), *log_file.read_text().splitlines()]
        everything = [*lines, *daemon.stdout, *daemon.stderr]
    assert not [line for line in everything if TOKEN in line]
    parsed = [json.loads(line) for line in lines]
    assert any(line["event"] == "stopped" for line in parsed)
    # `kbatchd run` is on uvloop (a dependency here), and says so.
    assert [line["event_loop"] for line in parsed if line["event"] == "starting"] == ["uvloop"]
    # Lines logged while an intent was carried out say which decision and object.
    acted = [line for line in parsed if line["event"] == "intent done"]
    assert acted
    assert {"cluster", "key", "reconciler", "seq"} <= set(acted[0])
