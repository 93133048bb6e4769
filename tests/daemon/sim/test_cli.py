"""`kbatchd sim` as a process: ready lines, a kubeconfig with one context per cluster, clean
exit on SIGTERM, and bad arguments."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from kubernetes_asyncio import client, config

from daemon.sim.cli import main
from tests.processes import child_environment

pytestmark = pytest.mark.anyio

LAUNCH = "import sys; from daemon.sim.cli import main; sys.exit(main(sys.argv[1:]))"


async def test_serves_two_clusters_until_sigterm(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    args = [
        sys.executable,
        "-c",
        LAUNCH,
        "--kubeconfig",
        str(kubeconfig),
        "--clusters",
        "2",
        "--topology",
        "blocks=1,racks=1,hosts=2",
        "--seed",
        "4",
        "--time-scale",
        "10",
    ]
    async with await anyio.open_process(
        args, stdin=subprocess.DEVNULL, env=child_environment()
    ) as process:
        assert process.stdout is not None
        with anyio.fail_after(20):
            buffer = b""
            async for chunk in process.stdout:
                buffer += chunk
                if buffer.count(b"\n") >= 2:
                    break
        lines = buffer.decode().splitlines()
        assert len(lines) == 2
        assert all(line.startswith("ready http://127.0.0.1:") for line in lines)
        document = json.loads(kubeconfig.read_text())
        assert [c["name"] for c in document["contexts"]] == ["sim-0", "sim-1"]
        for index, line in enumerate(lines):
            configuration = client.Configuration()
            await config.load_kube_config(
                config_file=str(kubeconfig),
                context=f"sim-{index}",
                client_configuration=configuration,
            )
            assert configuration.host == line.split()[1]
            async with client.ApiClient(configuration) as api:
                nodes = await client.CoreV1Api(api).list_node()
            assert [n.metadata.name for n in nodes.items] == ["b0-r0-h0", "b0-r0-h1"]
        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(20):
            code = await process.wait()
    assert code == 0


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--topology", "racks=zero"], ["racks", "'zero'"]),
        (["--faults", "error-429=7"], ["error-429", "'7'"]),
        (["--clusters", "0"], ["--clusters"]),
        (["--time-scale", "-1"], ["--time-scale"]),
    ],
)
def test_bad_arguments(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], words: list[str]
) -> None:
    assert main(["--kubeconfig", str(tmp_path / "kc"), *args]) == 2
    err = capsys.readouterr().err
    for word in words:
        assert word in err
    assert not (tmp_path / "kc").exists()


def test_a_port_in_use_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["--kubeconfig", str(tmp_path / "kc"), "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kbatchd sim: cannot serve: ")
    assert "address already in use" in err
    assert err.count("\n") == 1
