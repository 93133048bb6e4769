"""Server-side printing: the `Table` kubectl asks for, with the real server's columns per kind
and cells computed as its printers compute them."""

from __future__ import annotations

from typing import Any

import aiohttp
import anyio
import pytest

from daemon.sim import tables
from daemon.sim.cluster import SimCluster
from daemon.sim.resources import JOBS, PODS, Resource, lookup
from daemon.sim.store import rfc3339
from tests.daemon.sim.helpers import call, job_body, pod_body

KUBECTL_ACCEPT = (
    "application/json;as=Table;v=v1;g=meta.k8s.io,"
    "application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
)
NOW = 1_000_000.0


def at(seconds_ago: float) -> str:
    return rfc3339(NOW - seconds_ago)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (-3, "<invalid>"),
        (-1, "0s"),
        (0, "0s"),
        (119, "119s"),
        (120, "2m"),
        (150, "2m30s"),
        (600, "10m"),
        (3 * 3600 - 1, "179m"),
        (3 * 3600, "3h"),
        (3 * 3600 + 300, "3h5m"),
        (8 * 3600 + 300, "8h"),
        (48 * 3600, "2d"),
        (49 * 3600, "2d1h"),
        (8 * 86400, "8d"),
        (2 * 365 * 86400 + 3 * 86400, "2y3d"),
        (9 * 365 * 86400, "9y"),
    ],
)
def test_ages_read_as_the_real_printers_write_them(seconds: float, text: str) -> None:
    assert tables.human_duration(seconds) == text


@pytest.mark.parametrize(
    ("accept", "version"),
    [
        (KUBECTL_ACCEPT, "v1"),
        ("application/json;as=Table;v=v1beta1;g=meta.k8s.io", "v1beta1"),
        ("application/json;as=Table;v=v2;g=meta.k8s.io,application/json", None),
        ("application/json, application/json;as=Table;v=v1;g=meta.k8s.io", None),
        ("application/json", None),
        ("", None),
    ],
)
def test_the_first_media_type_the_server_can_serve_decides(accept: str, version: str) -> None:
    assert tables.table_version(accept) == version


def _pod(status: dict[str, Any], *, deleting: bool = False, **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "creationTimestamp": at(30)}
    if deleting:
        meta["deletionTimestamp"] = at(0)
    containers = [{"name": "main", "image": "img:1"}]
    return {"metadata": meta, "spec": {"containers": containers, **spec}, "status": status}


RUNNING = {"running": {"startedAt": at(20)}}


@pytest.mark.parametrize(
    ("pod", "cells"),
    [
        (_pod({"phase": "Pending"}), ["0/1", "Pending", "0"]),
        (
            _pod({"phase": "Running", "containerStatuses": [{"ready": True, "state": RUNNING}]}),
            ["1/1", "Running", "0"],
        ),
        (
            _pod(
                {
                    "phase": "Running",
                    "containerStatuses": [
                        {
                            "ready": False,
                            "restartCount": 3,
                            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                            "lastState": {"terminated": {"exitCode": 1, "finishedAt": at(5)}},
                        }
                    ],
                }
            ),
            ["0/1", "CrashLoopBackOff", "3 (5s ago)"],
        ),
        (
            _pod(
                {
                    "phase": "Failed",
                    "containerStatuses": [{"state": {"terminated": {"exitCode": 2}}}],
                }
            ),
            ["0/1", "ExitCode:2", "0"],
        ),
        (
            _pod(
                {
                    "phase": "Pending",
                    "initContainerStatuses": [
                        {"name": "init", "state": {"waiting": {"reason": "PodInitializing"}}}
                    ],
                },
                initContainers=[{"name": "init", "image": "i:1"}],
            ),
            ["0/1", "Init:0/1", "0"],
        ),
        (_pod({"phase": "Running"}, deleting=True), ["0/1", "Terminating", "0"]),
        (
            _pod(
                {
                    "phase": "Pending",
                    "conditions": [{"type": "PodScheduled", "reason": "SchedulingGated"}],
                }
            ),
            ["0/1", "SchedulingGated", "0"],
        ),
    ],
)
def test_a_pod_row_says_what_kubectl_get_pods_says(pod: dict[str, Any], cells: list[str]) -> None:
    row = tables.table(PODS, [pod], {}, now=NOW, include="None", version="v1")["rows"][0]
    assert row["cells"][:5] == ["p", *cells, "30s"]


def _job(conditions: list[str], *, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "j", "creationTimestamp": at(600)}
    if deleting:
        meta["deletionTimestamp"] = at(0)
    return {
        "metadata": meta,
        "spec": {"completions": 4, "template": {"spec": {"containers": []}}},
        "status": {
            "succeeded": 1,
            "startTime": at(300),
            "conditions": [{"type": c, "status": "True"} for c in conditions],
        },
    }


@pytest.mark.parametrize(
    ("job", "status"),
    [
        (_job([]), "Running"),
        (_job(["Suspended"]), "Suspended"),
        (_job(["SuccessCriteriaMet", "Complete"]), "Complete"),
        (_job(["FailureTarget", "Failed"]), "Failed"),
        (_job(["FailureTarget"]), "FailureTarget"),
        (_job(["SuccessCriteriaMet"]), "SuccessCriteriaMet"),
        (_job(["Suspended"], deleting=True), "Terminating"),
    ],
)
def test_a_job_row_prints_its_status_column(job: dict[str, Any], status: str) -> None:
    row = tables.table(JOBS, [job], {}, now=NOW, include="None", version="v1")["rows"][0]
    assert row["cells"][:5] == ["j", status, "1/4", "5m", "10m"]


@pytest.mark.parametrize(
    ("selector", "text"),
    [
        (None, "<none>"),
        ({"matchLabels": {"b": "2", "a": "1"}}, "a=1,b=2"),
        (
            {
                "matchExpressions": [
                    {"key": "z", "operator": "In", "values": ["y", "x"]},
                    {"key": "m", "operator": "DoesNotExist"},
                ]
            },
            "!m,z in (x,y)",
        ),
    ],
)
def test_selectors_print_as_label_queries(selector: Any, text: str) -> None:
    assert tables.label_selector_text(selector) == text


def _resource(path: str) -> Resource:
    parts = path.strip("/").split("/")
    group, version = ("", "v1") if parts[0] == "api" else (parts[1], parts[2])
    found = lookup(group, version, parts[-1])
    assert found is not None
    return found


COLUMNS = [
    (
        "/api/v1/namespaces/default/pods",
        ["Name", "Ready", "Status", "Restarts", "Age"],
        ["IP", "Node", "Nominated Node", "Readiness Gates"],
    ),
    (
        "/apis/batch/v1/namespaces/default/jobs",
        ["Name", "Status", "Completions", "Duration", "Age"],
        ["Containers", "Images", "Selector"],
    ),
    (
        "/api/v1/nodes",
        ["Name", "Status", "Roles", "Age", "Version"],
        ["Internal-IP", "External-IP", "OS-Image", "Kernel-Version", "Container-Runtime"],
    ),
    (
        "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets",
        ["Name", "TerminalState", "Restarts", "Completed", "Suspended", "Age"],
        [],
    ),
    (
        "/apis/scheduling.k8s.io/v1alpha2/namespaces/default/podgroups",
        ["Name", "Policy", "Workload", "Status", "Age"],
        [],
    ),
    ("/apis/scheduling.k8s.io/v1alpha2/namespaces/default/workloads", ["Name", "Age"], []),
    ("/api/v1/namespaces", ["Name", "Status", "Age"], []),
    ("/api/v1/namespaces/default/events", ["Name", "Age"], []),
]


@pytest.mark.anyio
@pytest.mark.parametrize(("path", "columns", "wide"), COLUMNS)
async def test_each_kind_is_printed_with_the_real_servers_columns(
    sim: SimCluster, path: str, columns: list[str], wide: list[str]
) -> None:
    async with aiohttp.ClientSession(sim.url) as http:
        answer = await call(http, "GET", path, accept=KUBECTL_ACCEPT)
    assert answer.status == 200
    table = answer.body
    assert (table["kind"], table["apiVersion"]) == ("Table", "meta.k8s.io/v1")
    assert table["metadata"]["resourceVersion"] == str(sim.store.rv)
    definitions = table["columnDefinitions"]
    assert [c["name"] for c in definitions] == columns + wide
    assert [c["priority"] for c in definitions] == [0] * len(columns) + [1] * len(wide)
    assert all({"name", "type", "format", "description", "priority"} <= set(c) for c in definitions)
    assert definitions[0]["format"] == "name"
    stored = sim.objects(_resource(path), "default" if "/namespaces/default/" in path else None)
    assert len(table["rows"]) == len(stored)
    for row in table["rows"]:
        assert len(row["cells"]) == len(definitions)
        assert row["object"]["kind"] == "PartialObjectMetadata"


@pytest.mark.anyio
async def test_a_running_pod_and_a_suspended_jobset_read_as_kubectl_prints_them(
    sim: SimCluster,
) -> None:
    async with aiohttp.ClientSession(sim.url) as http:
        created = await call(http, "POST", "/api/v1/namespaces/default/pods", pod_body("web"))
        assert created.status == 201
        with anyio.fail_after(10):
            pod = await sim.wait_for(
                PODS,
                "default",
                "web",
                lambda p: (
                    p is not None
                    and all(s.get("ready") for s in p["status"].get("containerStatuses") or [{}])
                ),
            )
        assert pod is not None
        path = "/api/v1/namespaces/default/pods/web"
        answer = await call(http, "GET", path, accept=KUBECTL_ACCEPT)
        row = answer.body["rows"][0]
        assert row["cells"][:4] == ["web", "1/1", "Running", "0"]
        assert row["cells"][5:] == [
            pod["status"]["podIPs"][0]["ip"],
            pod["spec"]["nodeName"],
            "<none>",
            "<none>",
        ]
        assert answer.body["metadata"] == {"resourceVersion": pod["metadata"]["resourceVersion"]}
        assert row["object"] == {
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": pod["metadata"],
        }
        full = await call(http, "GET", path + "?includeObject=Object", accept=KUBECTL_ACCEPT)
        assert full.body["rows"][0]["object"] == pod
        bare = await call(http, "GET", path + "?includeObject=None", accept=KUBECTL_ACCEPT)
        assert bare.body["rows"][0]["object"] is None
        beta = "application/json;as=Table;v=v1beta1;g=meta.k8s.io"
        old = await call(http, "GET", path, accept=beta)
        assert old.body["apiVersion"] == "meta.k8s.io/v1beta1"
        assert old.body["rows"][0]["object"]["apiVersion"] == "meta.k8s.io/v1beta1"
        wrong = await call(http, "GET", path + "?includeObject=All", accept=KUBECTL_ACCEPT)
        assert wrong.status == 400
        assert wrong.body["message"] == (
            'Unable to convert to Table as requested: includeObject: Invalid value: "All": '
            "must be 'Metadata', 'Object', 'None', or empty"
        )
        plain = await call(http, "GET", path)
        assert plain.body == pod

        jobset = {
            "metadata": {"name": "train"},
            "spec": {
                "suspend": True,
                "replicatedJobs": [{"name": "w", "template": job_body("w")}],
            },
        }
        jobsets = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets"
        assert (await call(http, "POST", jobsets, jobset)).status == 201
        listed = await call(http, "GET", jobsets, accept=KUBECTL_ACCEPT)
        assert listed.body["rows"][0]["cells"][:5] == ["train", None, None, None, "true"]
        assert listed.body["columnDefinitions"][-1]["type"] == "date"


@pytest.mark.anyio
async def test_a_table_page_carries_the_continue_token(sim: SimCluster) -> None:
    async with aiohttp.ClientSession(sim.url) as http:
        first = await call(http, "GET", "/api/v1/nodes?limit=1", accept=KUBECTL_ACCEPT)
        assert len(first.body["rows"]) == 1
        token = first.body["metadata"]["continue"]
        rest = await call(
            http, "GET", f"/api/v1/nodes?limit=100&continue={token}", accept=KUBECTL_ACCEPT
        )
    names = [r["cells"][0] for r in first.body["rows"] + rest.body["rows"]]
    assert sorted(names) == sorted(
        n["metadata"]["name"] for n in sim.objects(_resource("/api/v1/nodes"))
    )
