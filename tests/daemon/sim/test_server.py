"""How the simulated API server reads a request path: the one parser the fault proxy in
front of a real kube-apiserver uses too."""

from __future__ import annotations

import pytest

from daemon.sim.server import is_true, route_of


@pytest.mark.parametrize(
    ("path", "route"),
    [
        ("/api/v1/namespaces/default/pods", ("pods", "default", "", "")),
        ("/apis/coordination.k8s.io/v1/namespaces/d/leases/a", ("leases", "d", "a", "")),
        ("/api/v1/namespaces/default/pods/p/binding", ("pods", "default", "p", "binding")),
        ("/api/v1/pods", ("pods", "", "", "")),
        ("/api/v1/nodes/n1", ("nodes", "", "n1", "")),
        ("/api/v1/nodes/n1/status", ("nodes", "", "n1", "status")),
        ("/api/v1/namespaces/default", ("namespaces", "", "default", "")),
        ("/apis/batch/v1/namespaces/ns/jobs/j/status", ("jobs", "ns", "j", "status")),
        ("/api/v1/pods/p", None),  # a namespaced kind named outside a namespace
        ("/api/v1/namespaces/default/pods/p/binding/extra", None),
        ("/api/v1", None),
        ("/api/v2/pods", None),
        ("/apis/batch/v1", None),
        ("/version", None),
        ("/apis/example.com/v1/widgets", None),
    ],
)
def test_route_of_names_the_resource_namespace_name_and_subresource(
    path: str, route: tuple[str, str, str, str] | None
) -> None:
    found = route_of(path)
    named = found and (found.resource.plural, found.namespace, found.name, found.subresource)
    assert named == route


@pytest.mark.parametrize(
    ("value", "true"),
    [("true", True), ("True", True), ("1", True), ("false", False), ("0", False), (None, False)],
)
def test_is_true_reads_a_boolean_query_parameter(value: str | None, true: bool) -> None:
    assert is_true(value) is true
