"""Several clusters for one test (`tests.backends.on_clusters`): three clusters, each with its
own nodes and objects, on both backends; on the real one a single etcd holds them all, each
API server under a prefix of its own; a daemon configured with every cluster, through one
kubeconfig of a context each, syncs every one of them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from daemon.sim import topology as sim_topology
from events.schema import Observed, Resynced
from tests.backends import (
    DEFAULT_TOPOLOGY,
    SIM,
    Cluster,
    clusters_config,
    on_clusters,
    real_params,
)
from tests.processes import Child, eventually, kube_client, logged_events, running_daemon

pytestmark = pytest.mark.anyio

NAMES = ("w1", "w2", "w3")
NODES = {node["metadata"]["name"] for node in sim_topology.load(DEFAULT_TOPOLOGY)}


async def _nodes(cluster: Cluster) -> dict[str, str]:
    """The cluster's nodes as its admin lists them: name to uid."""
    async with kube_client(cluster.admin) as api:
        found = (await client.CoreV1Api(api).list_node()).items
    return {node.metadata.name: node.metadata.uid for node in found}


async def test_on_clusters_names_each_cluster_as_asked(tmp_path: Path, backend: str) -> None:
    async with on_clusters(backend, tmp_path, NAMES) as clusters:
        assert [c.name for c in clusters] == list(NAMES)
        assert [c.context for c in clusters] == list(NAMES)
        assert len({c.kubeconfig for c in clusters}) == 1, "kbatchd's kubeconfig is shared"
        contexts = json.loads(clusters[0].kubeconfig.read_text())["contexts"]
        assert [c["name"] for c in contexts] == list(NAMES)
        assert len({c.admin for c in clusters}) == len(NAMES)


async def test_each_cluster_lists_only_its_own_nodes(tmp_path: Path, backend: str) -> None:
    async with on_clusters(backend, tmp_path, NAMES) as clusters:
        uids: dict[str, set[str]] = {}
        for cluster in clusters:
            nodes = await _nodes(cluster)
            assert set(nodes) == NODES, f"{cluster.name}: the topology's nodes, once each"
            uids[cluster.name] = set(nodes.values())
        for one in NAMES:
            for other in NAMES:
                if one < other:
                    assert not uids[one] & uids[other], f"{one} and {other} share nodes"


# Objects nothing acts on, by kind: the API (of kubernetes_asyncio), the noun of its
# `create_namespaced_<noun>` methods, and the body's fields beside metadata.
_INERT: dict[str, tuple[Any, str, dict[str, Any]]] = {
    "ConfigMap": (client.CoreV1Api, "config_map", {"data": {"cluster": "w1"}}),
    "Lease": (client.CoordinationV1Api, "lease", {"spec": {"holderIdentity": "w1"}}),
}


@pytest.mark.parametrize("kind", list(_INERT))
async def test_an_object_created_in_one_cluster_is_in_no_other(
    tmp_path: Path, backend: str, kind: str
) -> None:
    if kind == "ConfigMap" and backend == SIM:
        pytest.skip("the simulated cluster serves no ConfigMaps")
    api_type, noun, fields = _INERT[kind]
    async with on_clusters(backend, tmp_path, NAMES) as clusters:
        first, *others = clusters
        async with kube_client(first.admin) as api:
            typed = api_type(api)
            body = {"metadata": {"name": "only-in-w1"}, **fields}
            await getattr(typed, f"create_namespaced_{noun}")(first.namespace, body)
            read = await getattr(typed, f"read_namespaced_{noun}")("only-in-w1", first.namespace)
            assert read.metadata.name == "only-in-w1"
        for other in others:
            async with kube_client(other.admin) as api:
                typed = api_type(api)
                listed = await getattr(typed, f"list_namespaced_{noun}")(other.namespace)
                assert "only-in-w1" not in {o.metadata.name for o in listed.items}, other.name
                with pytest.raises(ApiException) as missing:
                    await getattr(typed, f"read_namespaced_{noun}")("only-in-w1", other.namespace)
                assert missing.value.status == 404, other.name


def _etcds() -> dict[int, list[str]]:
    """Every etcd process on this machine (whoever started it), by pid: its arguments."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = [a.decode() for a in (entry / "cmdline").read_bytes().split(b"\0") if a]
        except OSError:
            continue  # gone meanwhile, or not ours to read
        if argv and Path(argv[0]).name == "etcd":
            found[int(entry.name)] = argv
    return found


def _arguments(pid: int) -> list[str]:
    return [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]


def _flag(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


@pytest.mark.parametrize("backend", real_params())
async def test_one_etcd_process_holds_every_cluster(tmp_path: Path, backend: str) -> None:
    async with on_clusters(backend, tmp_path, NAMES) as clusters:
        planes = [c.plane for c in clusters]
        assert all(planes)
        apiservers = {
            c.name: _arguments(c.plane.pid("kube-apiserver")) for c in clusters if c.plane
        }
        urls = {_flag(argv, "--etcd-servers") for argv in apiservers.values()}
        assert len(urls) == 1, f"the API servers use several etcds: {urls}"
        prefixes = {name: _flag(argv, "--etcd-prefix") for name, argv in apiservers.items()}
        assert prefixes == {name: f"/registry-{name}" for name in NAMES}
        etcds = _etcds()
        serving = [
            pid for pid, argv in etcds.items() if _flag(argv, "--listen-client-urls") in urls
        ]
        etcd = clusters[0].plane.etcd if clusters[0].plane else None
        assert etcd is not None
        assert serving == [etcd.pid]
        roots = [c.plane.root for c in clusters if c.plane]
        own = [
            pid
            for pid, argv in etcds.items()
            if any(Path(_flag(argv, "--data-dir")).is_relative_to(root) for root in roots)
        ]
        assert not own, "no cluster has an etcd of its own"

        # The one etcd holds every cluster's objects, each under its prefix.
        for name in NAMES:
            nodes = await anyio.to_thread.run_sync(etcd.keys, f"/registry-{name}/minions/")
            assert {key.rsplit("/", 1)[1] for key in nodes} == NODES, name
        first = clusters[0]
        body: Any = {"metadata": {"name": "stored-once"}}
        async with kube_client(first.admin) as api:
            await client.CoreV1Api(api).create_namespaced_config_map(first.namespace, body)
        stored = {
            name: await anyio.to_thread.run_sync(
                etcd.keys, f"/registry-{name}/configmaps/{first.namespace}/stored-once"
            )
            for name in NAMES
        }
        assert stored == {
            "w1": [f"/registry-w1/configmaps/{first.namespace}/stored-once"],
            "w2": [],
            "w3": [],
        }


async def _ready(daemon: Child) -> dict[str, Any]:
    """The daemon's /readyz answer once it is 200."""
    line = await daemon.wait_for(lambda text: '"health serving"' in text)
    url = json.loads(line)["url"]
    async with aiohttp.ClientSession() as session:

        async def answer() -> dict[str, Any] | None:
            async with session.get(f"{url}/readyz") as response:
                body: dict[str, Any] = await response.json()
                return body if response.status == 200 else None

        ready: dict[str, Any] = await eventually(answer, within=60, what="/readyz 200")
        return ready


async def test_a_daemon_syncs_every_cluster_through_its_context(
    tmp_path: Path, backend: str
) -> None:
    async with on_clusters(backend, tmp_path, NAMES) as clusters:
        config = clusters_config(tmp_path, clusters)
        async with running_daemon(config) as daemon:
            readiness = await _ready(daemon)
            assert readiness["unsynced_clusters"] == []
            assert not daemon.lines(
                "acting without the clusters not synced yet; each joins when it syncs"
            ), "every cluster synced before the daemon began"
        events = [event for _, event in await logged_events(tmp_path / "kbatchd.db")]
        assert {e.cluster for e in events if isinstance(e, Resynced)} == set(NAMES)
        # Each cluster's watch reached that cluster's API server (its context), not another
        # one: the nodes the daemon saw there are the ones that cluster lists.
        for cluster in clusters:
            seen = {
                e.uid
                for e in events
                if isinstance(e, Observed) and e.kind == "Node" and e.cluster == cluster.name
            }
            assert seen == set((await _nodes(cluster)).values()), cluster.name
