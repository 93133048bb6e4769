"""Discovery: which version of each kind a cluster serves, from its discovery documents."""

from __future__ import annotations

import json
from typing import Any

import pytest

from daemon.kube.api import Response, WatchHttpError
from daemon.kube.discovery import listable, missing_message, served_resources
from daemon.kube.resources import CANDIDATES

pytestmark = pytest.mark.anyio

STATUS = "podgroups/status"
SCHEDULING_136 = {
    "scheduling.k8s.io/v1": ["priorityclasses"],
    "scheduling.k8s.io/v1alpha2": ["workloads", "podgroups", STATUS],
}
SCHEDULING_137 = {
    "scheduling.k8s.io/v1": ["priorityclasses"],
    "scheduling.k8s.io/v1beta1": ["workloads", "podgroups", STATUS],
    "scheduling.k8s.io/v1alpha3": ["workloads", "podgroups", "compositepodgroups"],
}
JOBSET = {"jobset.x-k8s.io/v1alpha2": ["jobsets", "jobsets/status"]}


class ScriptedApi:
    """Answers GET /apis and GET /apis/GROUP/VERSION from a map of group version -> resources,
    and a list of a collection it serves (`lists`: its status, default 200 where served)."""

    cluster = "c"

    def __init__(
        self, served: dict[str, list[str]], failing: int = 0, lists: int | None = None
    ) -> None:
        self.served = served
        self.failing = failing
        self.lists = lists
        self.paths: list[str] = []

    async def request(self, method: str, path: str, **_: Any) -> Response:
        self.paths.append(path)
        if self.failing:
            return Response(self.failing, b'{"message": "down"}')
        gv, _, plural = path.removeprefix("/apis/").rpartition("/")
        if gv.count("/") == 1:
            status = self.lists or (200 if plural in self.served.get(gv, []) else 404)
            return Response(status, b'{"items": []}')
        if path == "/apis":
            groups: dict[str, list[dict[str, str]]] = {}
            for gv in self.served:
                groups.setdefault(gv.split("/")[0], []).append({"groupVersion": gv})
            body = {"groups": [{"name": g, "versions": v} for g, v in groups.items()]}
            return Response(200, json.dumps(body).encode())
        gv = path.removeprefix("/apis/")
        if gv not in self.served:
            return Response(404, b"{}")
        resources = [{"name": name} for name in self.served[gv]]
        return Response(200, json.dumps({"resources": resources}).encode())


def versions(served: dict[str, Any]) -> dict[str, str]:
    return {kind: resource.api_version for kind, resource in served.items()}


CORE = {
    "Node": "v1",
    "Pod": "v1",
    "PersistentVolumeClaim": "v1",
    "Service": "v1",
    "Job": "batch/v1",
}
# Served by every cluster since Kubernetes 1.14.
PRIORITY = {"PriorityClass": "scheduling.k8s.io/v1"}


@pytest.mark.parametrize(
    ("served", "expected"),
    [
        pytest.param({}, CORE, id="nothing-but-core"),
        pytest.param(
            {**SCHEDULING_136, **JOBSET},
            {
                **CORE,
                **PRIORITY,
                "JobSet": "jobset.x-k8s.io/v1alpha2",
                "Workload": "scheduling.k8s.io/v1alpha2",
                "PodGroup": "scheduling.k8s.io/v1alpha2",
            },
            id="1.36-everything",
        ),
        pytest.param(
            SCHEDULING_137,
            {
                **CORE,
                **PRIORITY,
                "Workload": "scheduling.k8s.io/v1beta1",
                "PodGroup": "scheduling.k8s.io/v1beta1",
                "CompositePodGroup": "scheduling.k8s.io/v1alpha3",
            },
            id="1.37-no-jobset",
        ),
        pytest.param(
            {**SCHEDULING_136, **SCHEDULING_137},
            {
                **CORE,
                **PRIORITY,
                "Workload": "scheduling.k8s.io/v1beta1",
                "PodGroup": "scheduling.k8s.io/v1beta1",
                "CompositePodGroup": "scheduling.k8s.io/v1alpha3",
            },
            id="both-versions-newest-wins",
        ),
        pytest.param(
            {"scheduling.k8s.io/v1alpha2": ["workloads"]},
            {**CORE, "Workload": "scheduling.k8s.io/v1alpha2"},
            id="a-version-without-a-kind",
        ),
        pytest.param(
            {"scheduling.k8s.io/v1": ["priorityclasses"]},
            {**CORE, **PRIORITY},
            id="scheduling-gates-off",
        ),
    ],
)
async def test_the_newest_served_version_of_each_kind(
    served: dict[str, list[str]], expected: dict[str, str]
) -> None:
    assert versions(await served_resources(ScriptedApi(served))) == expected  # type: ignore[arg-type]


async def test_each_group_version_is_asked_once() -> None:
    api = ScriptedApi({**SCHEDULING_137, **JOBSET})
    await served_resources(api)  # type: ignore[arg-type]
    assert sorted(api.paths) == [
        "/apis",
        "/apis/jobset.x-k8s.io/v1alpha2",
        "/apis/scheduling.k8s.io/v1",
        "/apis/scheduling.k8s.io/v1alpha3",
        "/apis/scheduling.k8s.io/v1beta1",
    ]


async def test_an_unreachable_discovery_raises_for_the_caller_to_retry() -> None:
    with pytest.raises(WatchHttpError, match="HTTP 503"):
        await served_resources(ScriptedApi({}, failing=503))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kind", "names"),
    [
        ("JobSet", ("jobset.x-k8s.io/v1alpha2", "JobSet CRDs")),
        (
            "PodGroup",
            ("scheduling.k8s.io/v1beta1 or scheduling.k8s.io/v1alpha2", "GenericWorkload"),
        ),
    ],
)
def test_a_missing_kind_names_what_to_install(kind: str, names: tuple[str, ...]) -> None:
    message = missing_message(kind, CANDIDATES[kind])
    for name in names:
        assert name in message


@pytest.mark.parametrize(
    ("served", "lists", "expected"),
    [
        pytest.param(SCHEDULING_137, None, "scheduling.k8s.io/v1beta1", id="newest-lists"),
        pytest.param(SCHEDULING_136, None, "scheduling.k8s.io/v1alpha2", id="older-lists"),
        pytest.param({}, None, None, id="every-version-404"),
        pytest.param({}, 503, "scheduling.k8s.io/v1beta1", id="unknown-is-the-newest"),
    ],
)
async def test_a_kind_discovery_lacks_is_absent_only_when_its_list_says_so(
    served: dict[str, list[str]], lists: int | None, expected: str | None
) -> None:
    api = ScriptedApi(served, lists=lists)
    found = await listable(api, CANDIDATES["PodGroup"])  # type: ignore[arg-type]
    assert (found.api_version if found else None) == expected
