"""config/rbac.yaml grants exactly what kbatchd uses.

What kbatchd may call is read from the code: ingest lists and watches every kind in
`daemon.kube.resources.RESOURCES`; the actuator carries out the intents the reconcilers
construct (found in their source: every `Create`/`Patch`/`Delete`/`Bind` names its kind as a
literal) with one HTTP call per intent; the recorder creates Kubernetes Events and patches
their counts (`daemon.kube.recorder.EVENT_VERBS`); leader election reads, creates and updates
one Lease; owner references that block deletion need `update` on the owner's finalizers. The
granted rules must equal that set. Then a real daemon runs (leader election on) through Jobs
that complete and are suspended, every HTTP call it makes is recorded, and each must be
allowed by the rules and be one of the calls the code analysis predicted."""

from __future__ import annotations

import ast
import re
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any, Final, NamedTuple

import pytest
import yaml

from daemon.kube import api as kube_api
from daemon.kube.recorder import EVENT_VERBS
from daemon.kube.resources import RESOURCES
from daemon.service.config import LeaderElection
from daemon.sim.cluster import SimCluster
from daemon.sim.resources import JOBS, PODS
from tests.daemon.embedded import embedded, job, settings_for, short_leases
from tests.processes import eventually

REPO = Path(__file__).resolve().parents[2]
RBAC = REPO / "config" / "rbac.yaml"
RECONCILERS = REPO / "daemon" / "controllers"
LEASE = LeaderElection()


class Access(NamedTuple):
    verb: str
    group: str
    resource: str  # plural, or plural/subresource
    namespace: str = ""  # only for namespaced grants (a Role)
    name: str = ""  # only where the rule names its objects


_BY_KIND = {kind: r for kind, r in RESOURCES.items()}
_BY_PLURAL = {(r.group, r.plural): r for r in RESOURCES.values()}
_OP_VERB = {"Create": "create", "Patch": "patch", "Delete": "delete"}


def _resource_of(kind: str) -> tuple[str, str]:
    resource = _BY_KIND[kind]
    return resource.group, resource.plural


def _intent_calls() -> Iterator[tuple[str, str, str]]:
    """(operation, kind, subresource) of every intent a reconciler constructs."""
    for path in sorted(RECONCILERS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
                continue
            if node.func.id not in ("Create", "Patch", "Delete", "Bind"):
                continue
            kind = node.args[1] if len(node.args) > 1 else None
            assert isinstance(kind, ast.Constant), f"{path.name}:{node.lineno}: kind not literal"
            sub = next((k.value for k in node.keywords if k.arg == "subresource"), None)
            assert sub is None or isinstance(sub, ast.Constant), f"{path.name}:{node.lineno}"
            yield node.func.id, str(kind.value), str(sub.value) if sub is not None else ""


def _blocking_owners() -> set[str]:
    """Kinds that reconcilers name as owners with blockOwnerDeletion."""
    owners = set()
    for path in sorted(RECONCILERS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Dict):
                continue
            fields = {
                k.value: v for k, v in zip(node.keys, node.values, strict=True)
                if isinstance(k, ast.Constant)
            }  # fmt: skip
            kind = fields.get("kind")
            if "blockOwnerDeletion" in fields and isinstance(kind, ast.Constant):
                owners.add(str(kind.value))
    return owners


# Discovery documents (/api, /apis, /apis/GROUP/VERSION): every authenticated user may read
# them through the built-in system:discovery ClusterRole, so config/rbac.yaml grants nothing.
DISCOVERY: Final = Access("get", "", "(discovery)")
_DISCOVERY_PATH: Final = re.compile(r"^/apis?(?:/[^/]+(?:/[^/]+)?)?$")


def required() -> set[Access]:
    needed: set[Access] = {DISCOVERY}
    for resource in RESOURCES.values():
        needed |= {Access(v, resource.group, resource.plural) for v in ("list", "watch")}
    for op, kind, sub in _intent_calls():
        group, plural = _resource_of(kind)
        if op == "Bind":
            needed.add(Access("create", group, f"{plural}/binding"))
        else:
            needed.add(Access(_OP_VERB[op], group, f"{plural}/{sub}" if sub else plural))
    needed |= {Access(verb, "", "events") for verb in EVENT_VERBS}
    for owner in _blocking_owners():
        group, plural = _resource_of(owner)
        needed.add(Access("update", group, f"{plural}/finalizers"))
    lease = ("coordination.k8s.io", "leases", LEASE.namespace)
    needed.add(Access("create", *lease))
    needed |= {Access(v, *lease, LEASE.name) for v in ("get", "update")}
    return needed


def granted() -> set[Access]:
    documents = list(yaml.safe_load_all(RBAC.read_text()))
    rules: set[Access] = {DISCOVERY}
    for doc in documents:
        if doc["kind"] not in ("ClusterRole", "Role"):
            continue
        namespace = doc["metadata"].get("namespace", "") if doc["kind"] == "Role" else ""
        for rule in doc["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        for name in rule.get("resourceNames") or [""]:
                            rules.add(Access(verb, group, resource, namespace, name))
    return rules


def test_the_rules_are_exactly_what_the_code_uses() -> None:
    have, need = granted(), required()
    assert not need - have, f"missing from {RBAC.name}: {sorted(need - have)}"
    assert not have - need, f"granted but never used: {sorted(have - need)}"
    assert all(a.verb not in ("*",) and a.resource != "*" for a in have)


def test_every_role_is_bound_to_the_service_account() -> None:
    documents = list(yaml.safe_load_all(RBAC.read_text()))
    roles = {(d["kind"], d["metadata"]["name"]) for d in documents if "rules" in d}
    bound = {
        (d["roleRef"]["kind"], d["roleRef"]["name"])
        for d in documents
        if d["kind"] in ("ClusterRoleBinding", "RoleBinding")
        and d["subjects"]
        == [{"kind": "ServiceAccount", "name": "kbatchd", "namespace": "kube-system"}]
    }
    assert roles == bound


_PATH = re.compile(
    r"^/(?:api/(?P<core>v1)|apis/(?P<group>[^/]+)/(?P<version>[^/]+))"
    r"(?:/namespaces/(?P<namespace>[^/]+))?/(?P<plural>[^/]+)(?:/(?P<name>[^/]+))?"
    r"(?:/(?P<sub>[^/]+))?$"
)


def access_of(method: str, path: str, query: Mapping[str, Any]) -> Access:
    """The RBAC verb and resource of one HTTP call, as the API server's request info has it."""
    if method == "GET" and _DISCOVERY_PATH.match(path) and not _PATH.match(path):
        return DISCOVERY
    match = _PATH.match(path)
    assert match, path
    group = match["group"] or ""
    plural, name, sub = match["plural"], match["name"] or "", match["sub"] or ""
    resource = f"{plural}/{sub}" if sub else plural
    if method == "GET":
        verb = "get" if name else ("watch" if query.get("watch") else "list")
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}[method]
    return Access(verb, group, resource, match["namespace"] or "", name)


def allowed(call: Access, rules: set[Access]) -> bool:
    for rule in rules:
        if (rule.verb, rule.group, rule.resource) != (call.verb, call.group, call.resource):
            continue
        if rule.namespace and rule.namespace != call.namespace:
            continue
        if rule.name and rule.name != call.name:
            continue
        return True
    return False


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Access, Any]]:
    """Every call any KubeApi makes from now on: its access and its body."""
    calls: list[tuple[Access, Any]] = []
    request, stream = kube_api.KubeApi.request, kube_api.KubeApi.stream_lines

    async def recording_request(
        self: kube_api.KubeApi, method: str, path: str, **kw: Any
    ) -> kube_api.Response:
        calls.append((access_of(method, path, kw.get("query") or {}), kw.get("body")))
        return await request(self, method, path, **kw)

    def recording_stream(
        self: kube_api.KubeApi, path: str, query: Mapping[str, Any], **kw: Any
    ) -> AsyncIterator[list[bytes]]:
        calls.append((access_of("GET", path, query), None))
        return stream(self, path, query, **kw)

    monkeypatch.setattr(kube_api.KubeApi, "request", recording_request)
    monkeypatch.setattr(kube_api.KubeApi, "stream_lines", recording_stream)
    return calls


@pytest.mark.anyio
async def test_every_call_a_running_daemon_makes_is_allowed(
    tmp_path: Path, recorded: list[tuple[Access, Any]]
) -> None:
    async with SimCluster.start(topology="blocks=1,racks=1,hosts=2,gpus=8", time_scale=20) as sim:
        settings = settings_for(sim, tmp_path / "kbatchd.db", leader_election=short_leases())
        async with embedded(settings) as daemon:
            sim.registry.create(JOBS, "default", job("finishes", parallelism=2))
            sim.registry.create(JOBS, "default", job("paused", parallelism=2, run_seconds=600))

            async def running() -> bool:
                pods = sim.objects(PODS, "default")
                return any(
                    p["metadata"]["name"].startswith("paused-")
                    and p.get("status", {}).get("phase") == "Running"
                    for p in pods
                )

            await eventually(running, what="paused's pods running")
            paused = sim.get(JOBS, "default", "paused")
            assert paused is not None
            paused["spec"]["suspend"] = True
            sim.registry.update(JOBS, "default", "paused", paused)

            async def settled() -> bool:
                done = sim.get(JOBS, "default", "finishes") or {}
                conditions = done.get("status", {}).get("conditions") or []
                left = [p for p in sim.objects(PODS, "default") if "paused-" in str(p["metadata"])]
                return not left and any(c["type"] == "Complete" for c in conditions)

            await eventually(settled, within=30, what="finishes Complete, paused's pods gone")
            assert daemon.leading
    calls = {access for access, _ in recorded}
    rules, predicted = granted(), required()
    assert not [c for c in calls if not allowed(c, rules)]
    # Each call is one the analysis of the code foresaw (it is not missing a kind of call).
    assert not [c for c in calls if not allowed(c, predicted)]
    verbs = {(c.verb, c.resource) for c in calls}
    for expected in [
        ("list", "pods"),
        ("watch", "pods"),
        ("create", "pods"),
        ("patch", "pods"),
        ("delete", "pods"),
        ("patch", "jobs/status"),
        ("create", "events"),
        ("create", "leases"),
        ("get", "leases"),
        ("update", "leases"),
    ]:
        assert expected in verbs, expected
    # Pods carry a blocking owner reference to their Job: why jobs/finalizers is granted.
    owners = [
        ref
        for access, body in recorded
        if access.verb == "create" and access.resource == "pods" and isinstance(body, dict)
        for ref in body.get("metadata", {}).get("ownerReferences", [])
    ]
    assert owners
    assert all(r["kind"] == "Job" and r["blockOwnerDeletion"] for r in owners)
