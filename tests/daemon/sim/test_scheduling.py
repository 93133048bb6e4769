"""The stand-in scheduler's required inter-pod affinity and anti-affinity
(`daemon.sim.scheduling.pod_affinity_ok`), table-driven over a two-rack cluster."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.sim.scheduling import NodeInfo, pod_affinity_ok

RACK = "rack"


def _node(name: str, rack: str | None, pods: set[str]) -> NodeInfo:
    labels = {RACK: rack} if rack is not None else {}
    return NodeInfo(name, labels, {}, [], True, False, pods=pods)


def _pod(namespace: str, labels: dict[str, str], phase: str = "Running", **spec: Any) -> Any:
    return {
        "metadata": {"namespace": namespace, "labels": labels},
        "spec": spec,
        "status": {"phase": phase},
    }


def _term(op: str, value: str, *, everywhere: bool = True) -> dict[str, Any]:
    term: dict[str, Any] = {
        "labelSelector": {"matchExpressions": [{"key": "job", "operator": op, "values": [value]}]},
        "topologyKey": RACK,
    }
    if everywhere:
        term["namespaceSelector"] = {}
    return term


def _with(kind: str, *terms: dict[str, Any]) -> dict[str, Any]:
    return {kind: {"requiredDuringSchedulingIgnoredDuringExecution": list(terms)}}


# Rack r1 holds a pod of job a (namespace ns); rack r2 a finished pod of job b and, in
# namespace other, a running pod of job c.
BOUND = {
    "ns/a-0": _pod("ns", {"job": "a"}),
    "ns/b-0": _pod("ns", {"job": "b"}, phase="Succeeded"),
    "other/c-0": _pod("other", {"job": "c"}),
}
NODES = {
    "n1": _node("n1", "r1", {"ns/a-0"}),
    "n2": _node("n2", "r1", set()),
    "n3": _node("n3", "r2", {"ns/b-0", "other/c-0"}),
    "bare": _node("bare", None, set()),
}


@pytest.mark.parametrize(
    ("labels", "affinity", "node", "fits"),
    [
        pytest.param({}, {}, "n1", True, id="no-terms"),
        pytest.param({}, _with("podAffinity", _term("In", "a")), "n2", True, id="join-a-rack"),
        pytest.param({}, _with("podAffinity", _term("In", "a")), "n3", False, id="not-a's-rack"),
        pytest.param({}, _with("podAffinity", _term("In", "a")), "bare", False, id="no-domain"),
        # Nobody matches yet: a pod that matches its own term may start the group anywhere.
        pytest.param({"job": "d"}, _with("podAffinity", _term("In", "d")), "n3", True, id="first"),
        pytest.param({}, _with("podAffinity", _term("In", "d")), "n3", False, id="first-not-self"),
        pytest.param({}, _with("podAntiAffinity", _term("In", "a")), "n2", False, id="anti-a"),
        pytest.param({}, _with("podAntiAffinity", _term("In", "a")), "n3", True, id="anti-other"),
        pytest.param({}, _with("podAntiAffinity", _term("In", "a")), "bare", True, id="anti-bare"),
        pytest.param({}, _with("podAntiAffinity", _term("In", "b")), "n3", True, id="finished"),
        pytest.param({}, _with("podAntiAffinity", _term("In", "c")), "n3", False, id="all-ns"),
        pytest.param(
            {},
            _with("podAntiAffinity", _term("In", "c", everywhere=False)),
            "n3",
            True,
            id="own-namespace-only",
        ),
    ],
)
def test_pod_affinity(
    labels: dict[str, str], affinity: dict[str, Any], node: str, fits: bool
) -> None:
    pod = _pod("ns", labels, phase="Pending", affinity=affinity)
    assert pod_affinity_ok(pod, NODES[node], NODES.values(), BOUND.get) is fits
