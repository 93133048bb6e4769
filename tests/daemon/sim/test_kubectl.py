"""kubectl against the simulated cluster: get, apply (create, then patch), patch and delete."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from daemon.sim.background import BackgroundSim
from daemon.sim.cluster import SimCluster
from daemon.sim.resources import JOBS, JOBSETS, PODS

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed on this machine")

MANIFEST = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: demo
  namespace: default
spec:
  suspend: true
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: busybox:1.36
---
apiVersion: v1
kind: Pod
metadata:
  name: web
  labels: {app: LABEL}
spec:
  schedulerName: kbatchd
  containers:
  - name: main
    image: nginx:1.27
---
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: train
  labels: {team: LABEL}
spec:
  replicatedJobs:
  - name: workers
    template:
      spec:
        completionMode: Indexed
        template:
          spec:
            restartPolicy: OnFailure
            containers:
            - name: c
              image: trainer:1
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[BackgroundSim, SimCluster]]:
    runner = BackgroundSim(topology="blocks=1,racks=1,hosts=2", seed=5, time_scale=50.0)
    with runner as sim:
        yield runner, sim


def kubectl(sim: SimCluster, cache: Path, *args: str) -> str:
    assert KUBECTL is not None
    result = subprocess.run(
        [KUBECTL, "--kubeconfig", str(sim.kubeconfig_path), "--cache-dir", str(cache), *args],
        stdin=subprocess.DEVNULL,  # kubectl probes stdin; pytest's capture makes that slow
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
    return result.stdout


def test_get_all_namespaces_as_json(
    cluster: tuple[BackgroundSim, SimCluster], tmp_path: Path
) -> None:
    _, sim = cluster
    out = json.loads(kubectl(sim, tmp_path, "get", "nodes,pods,jobs", "-A", "-o", "json"))
    kinds = [item["kind"] for item in out["items"]]
    assert kinds.count("Node") == 2
    assert {"b0-r0-h0", "b0-r0-h1"} <= {i["metadata"]["name"] for i in out["items"]}


def test_apply_patch_delete(cluster: tuple[BackgroundSim, SimCluster], tmp_path: Path) -> None:
    runner, sim = cluster
    manifest = tmp_path / "manifest.yaml"
    manifest.write_text(MANIFEST.replace("LABEL", "one"))
    created = kubectl(sim, tmp_path, "apply", "-f", str(manifest))
    assert "job.batch/demo created" in created
    assert "pod/web created" in created
    assert "jobset.jobset.x-k8s.io/train created" in created
    manifest.write_text(MANIFEST.replace("LABEL", "two"))
    configured = kubectl(sim, tmp_path, "apply", "-f", str(manifest))
    assert "job.batch/demo unchanged" in configured
    assert "pod/web configured" in configured
    assert "jobset.jobset.x-k8s.io/train configured" in configured
    pod: Any = runner.call(lambda: sim.get(PODS, "default", "web"))
    assert pod["metadata"]["labels"] == {"app": "two"}
    jobset: Any = runner.call(lambda: sim.get(JOBSETS, "default", "train"))
    assert jobset["metadata"]["labels"] == {"team": "two"}
    assert jobset["spec"]["successPolicy"] == {"operator": "All"}
    kubectl(sim, tmp_path, "patch", "job", "demo", "-p", '{"spec":{"parallelism":3}}')
    job: Any = runner.call(lambda: sim.get(JOBS, "default", "demo"))
    assert job["spec"]["parallelism"] == 3
    kubectl(sim, tmp_path, "label", "pod", "web", "extra=yes")
    names = kubectl(sim, tmp_path, "get", "pods", "-l", "extra=yes", "-o", "name")
    assert names.strip() == "pod/web"
    deleted = kubectl(sim, tmp_path, "delete", "-f", str(manifest), "--wait=false")
    assert 'job.batch "demo" deleted' in deleted
    assert runner.call(lambda: sim.get(JOBS, "default", "demo")) is None
    assert runner.call(lambda: sim.get(PODS, "default", "web")) is None
    assert runner.call(lambda: sim.get(JOBSETS, "default", "train")) is None


def test_plain_get_prints_names(cluster: tuple[BackgroundSim, SimCluster], tmp_path: Path) -> None:
    _, sim = cluster
    out = kubectl(sim, tmp_path, "get", "nodes")
    assert "b0-r0-h0" in out
    assert "b0-r0-h1" in out


def test_get_prints_the_servers_table(
    cluster: tuple[BackgroundSim, SimCluster], tmp_path: Path
) -> None:
    _, sim = cluster
    # kubectl prints the columns the server's Table defines (priority 1 ones with -o wide).
    header, *rows = kubectl(sim, tmp_path, "get", "nodes", "-o", "wide").splitlines()
    wide = ["NAME", "STATUS", "ROLES", "AGE", "VERSION", "INTERNAL-IP", "EXTERNAL-IP", "OS-IMAGE"]
    assert header.split()[: len(wide)] == wide
    assert len(rows) == 2
    assert rows[0].split()[1] == "Ready"
    header = kubectl(sim, tmp_path, "get", "nodes").splitlines()[0]
    assert header.split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]


@pytest.mark.parametrize(
    ("field", "listed"),
    [
        ("pods.spec.containers", "imagePullPolicy"),
        ("jobs.spec", "podReplacementPolicy"),
        ("nodes.status", "allocatable"),
        ("jobsets.spec.replicatedJobs", "replicas"),
        ("podgroups.spec", "schedulingPolicy"),
    ],
)
def test_explain_walks_the_served_schemas(
    cluster: tuple[BackgroundSim, SimCluster], tmp_path: Path, field: str, listed: str
) -> None:
    _, sim = cluster
    out = kubectl(sim, tmp_path, "explain", field)
    assert f"FIELD: {field.rsplit('.', 1)[-1]}" in out
    assert f"  {listed}\t<" in out
