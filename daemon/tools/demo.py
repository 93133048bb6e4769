"""`kbatchd demo`, what `make run` runs: the simulated GPU cluster on loopback, the daemon
against it with its log under ``var/``, a scenario that exercises the reconcilers, and an
account of what happened, read back from the log. Ends by itself."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
from kubernetes_asyncio import client, config, watch

from daemon.service import logs, run
from daemon.service.config import Cluster, Daemon, Settings
from daemon.sim.cluster import SimCluster
from events.replay import describe, iso_time, rebuild, render_summary, summary
from events.schema import STARTED_REF, Decided, Outcome
from events.store import EventLog

TOPOLOGY = "blocks=2,racks=4,hosts=8,gpus=8,cpu=96,memory=1Ti"
MANAGER = "kbatchd.dev/job-controller"
TIME_SCALE = 10.0


def fresh_log_path(var: Path) -> Path:
    """``var/kbatchd.db``, emptied: each demo starts a new log."""
    var.mkdir(parents=True, exist_ok=True)
    path = var / "kbatchd.db"
    for stale in (path, path.with_name("kbatchd.db-wal"), path.with_name("kbatchd.db-shm")):
        stale.unlink(missing_ok=True)
    return path


def _job(
    name: str,
    *,
    completions: int,
    parallelism: int,
    annotations: dict[str, str],
    gpus: int = 1,
    **spec: Any,
) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "managedBy": MANAGER,
            "completions": completions,
            "parallelism": parallelism,
            "template": {
                "metadata": {"annotations": annotations},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "trainer:latest",
                            "resources": {
                                "requests": {"cpu": "4", "nvidia.com/gpu": str(gpus)},
                                "limits": {"nvidia.com/gpu": str(gpus)},
                            },
                        }
                    ],
                },
            },
            **spec,
        },
    }


SCENARIO = [
    (
        "an Indexed training Job: 8 completions, 4 at a time, one GPU each",
        _job(
            "train",
            completions=8,
            parallelism=4,
            annotations={"sim.kbatchd.dev/run-seconds": "20"},
            completionMode="Indexed",
        ),
    ),
    (
        "a Job whose pods exit 1: back-off between retries, then BackoffLimitExceeded",
        _job(
            "flaky",
            completions=1,
            parallelism=1,
            annotations={"sim.kbatchd.dev/run-seconds": "5", "sim.kbatchd.dev/exit-code": "1"},
            backoffLimit=1,
        ),
    ),
    (
        "a suspended Job, given 2 GPUs per pod and a rack while suspended, resumed in one update",
        _job(
            "later",
            completions=2,
            parallelism=2,
            annotations={"sim.kbatchd.dev/run-seconds": "10"},
            suspend=True,
        ),
    ),
]


RACK = "cloud.provider.com/topology-rack"
GANG = "gang"
GANG_SIZE = 16
JOBSETS = ("jobset.x-k8s.io", "v1alpha2", "jobsets")


def _gang_objects() -> tuple[Any, Any, list[Any]]:
    """A Workload, its PodGroup and 16 one-GPU members that must share one rack."""
    group = f"{GANG}-main"
    policy = {
        "schedulingPolicy": {"gang": {"minCount": GANG_SIZE}},
        "schedulingConstraints": {"topology": [{"key": RACK}]},
    }
    workload = {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "Workload",
        "metadata": {"name": GANG},
        "spec": {"podGroupTemplates": [{"name": "main", **policy}]},
    }
    pod_group = {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": group},
        "spec": {
            "podGroupTemplateRef": {
                "workload": {"workloadName": GANG, "podGroupTemplateName": "main"}
            },
            **policy,
        },
    }
    members = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{GANG}-{i:02d}",
                "annotations": {"sim.kbatchd.dev/run-seconds": "20"},
            },
            "spec": {
                "schedulerName": "kbatchd",
                "schedulingGroup": {"podGroupName": group},
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "main",
                        "image": "trainer:latest",
                        "resources": {
                            "requests": {"nvidia.com/gpu": "1"},
                            "limits": {"nvidia.com/gpu": "1"},
                        },
                    }
                ],
            },
        }
        for i in range(GANG_SIZE)
    ]
    return workload, pod_group, members


def _jobset() -> dict[str, Any]:
    """Data preparation, then training that starts only once preparation is Complete."""

    def replicated(name: str, replicas: int, pods: int, **extra: Any) -> dict[str, Any]:
        return {
            "name": name,
            "replicas": replicas,
            "template": {
                "spec": {
                    "parallelism": pods,
                    "completions": pods,
                    "template": {
                        "metadata": {"annotations": {"sim.kbatchd.dev/run-seconds": "10"}},
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [{"name": "main", "image": "trainer:latest"}],
                        },
                    },
                }
            },
            **extra,
        }

    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "pipeline"},
        "spec": {
            "managedBy": "kbatchd.dev/jobset-controller",
            "replicatedJobs": [
                replicated("prep", 1, 1),
                replicated("train", 2, 2, dependsOn=[{"name": "prep", "status": "Complete"}]),
            ],
        },
    }


async def _until_scheduled(scheduling: Any, name: str) -> None:
    with anyio.fail_after(120):
        async with watch.Watch() as stream:
            async for event in stream.stream(scheduling.list_namespaced_pod_group, "default"):
                group = event["object"]
                conditions = (group.status.conditions or []) if group.status else []
                if group.metadata.name == name and any(
                    c.type == "PodGroupScheduled" and c.status == "True" for c in conditions
                ):
                    print(f"  … {name} scheduled: all {GANG_SIZE} pods bound")
                    return


async def _until_jobset(custom: Any, name: str, kind: str) -> None:
    with anyio.fail_after(120):
        async with watch.Watch() as stream:
            async for event in stream.stream(
                custom.list_namespaced_custom_object, *JOBSETS[:2], "default", JOBSETS[2]
            ):
                obj = event["object"]
                conditions = (obj.get("status") or {}).get("conditions") or []
                if obj["metadata"]["name"] == name and any(
                    c.get("type") == kind and c.get("status") == "True" for c in conditions
                ):
                    print(f"  … JobSet {name} {kind}")
                    return


async def _until_condition(batch: client.BatchV1Api, name: str, kind: str) -> None:
    """Watch Jobs until `name` has condition `kind` True (bounded: the demo must end)."""
    with anyio.fail_after(120):
        async with watch.Watch() as stream:
            async for event in stream.stream(batch.list_namespaced_job, "default"):
                job = event["object"]
                conditions = job.status.conditions or [] if job.status else []
                if job.metadata.name == name and any(
                    c.type == kind and c.status == "True" for c in conditions
                ):
                    print(f"  … {name} {kind}")
                    return


async def run_demo(path: Path) -> int:
    logs.configure("warning")
    print(f"simulated cluster: {TOPOLOGY} (time ×{TIME_SCALE:g}); log: {path}")
    async with SimCluster.start(topology=TOPOLOGY, seed=1, time_scale=TIME_SCALE) as sim:
        assert sim.kubeconfig_path is not None
        settings = Settings(
            log=str(path),
            clusters=[Cluster(name="sim-0", kubeconfig=str(sim.kubeconfig_path))],
            daemon=Daemon(tick_seconds=0.2),
        )
        supervisor = run.build(settings)
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: supervisor.run(handle_signals=False))
            with anyio.fail_after(30):
                await supervisor.synced.wait()
            print("daemon synced: every watch has listed\n")
            await _play(sim)
            supervisor.stop()
    print()
    await _account(path)
    return 0


async def _play(sim: SimCluster) -> None:
    configuration = client.Configuration()
    await config.load_kube_config(
        config_file=str(sim.kubeconfig_path), client_configuration=configuration
    )
    async with client.ApiClient(configuration) as api:
        batch = client.BatchV1Api(api)
        for text, body in SCENARIO:
            print(f"create {body['metadata']['name']}: {text}")
            manifest: Any = body
            await batch.create_namespaced_job("default", manifest)
        await _until_condition(batch, "later", "Suspended")
        await batch.patch_namespaced_job(
            "later",
            "default",
            {
                "spec": {
                    "suspend": False,
                    "template": {
                        "spec": {
                            "nodeSelector": {"cloud.provider.com/topology-rack": "b1-r1"},
                            "containers": [
                                {
                                    "name": "main",
                                    "resources": {
                                        "requests": {"nvidia.com/gpu": "2"},
                                        "limits": {"nvidia.com/gpu": "2"},
                                    },
                                }
                            ],
                        }
                    },
                }
            },
        )
        print("  resumed later with 2 GPUs per pod on rack b1-r1, in one update")

        core, scheduling = client.CoreV1Api(api), client.SchedulingV1alpha2Api(api)
        custom = client.CustomObjectsApi(api)
        workload, pod_group, members = _gang_objects()
        print(f"create {GANG}: a gang of {GANG_SIZE} one-GPU pods that must share one rack")
        await scheduling.create_namespaced_workload("default", workload)
        await scheduling.create_namespaced_pod_group("default", pod_group)
        for member in members:
            await core.create_namespaced_pod("default", member)
        print("create pipeline: a JobSet whose training starts once data preparation completes")
        await custom.create_namespaced_custom_object(*JOBSETS[:2], "default", JOBSETS[2], _jobset())
        await _until_scheduled(scheduling, pod_group["metadata"]["name"])
        for name, kind in (("flaky", "Failed"), ("later", "Complete"), ("train", "Complete")):
            await _until_condition(batch, name, kind)
        await _until_jobset(custom, "pipeline", "Completed")
        racks = {
            pod.spec.node_name.rsplit("-", 1)[0]
            for pod in (await core.list_namespaced_pod("default")).items
            if pod.metadata.name.startswith(f"{GANG}-") and pod.spec.node_name
        }
        print(f"  … the gang's pods are on rack(s): {', '.join(sorted(racks))}")


def program() -> str:
    """How to run this kbatchd from here: the console script beside the interpreter (in a
    virtual environment, ``.venv/bin/kbatchd``, which is not on PATH), relative to the working
    directory when under it."""
    script = Path(sys.executable).with_name("kbatchd")
    if not script.exists():
        return "kbatchd"
    try:
        return str(script.relative_to(Path.cwd()))
    except ValueError:
        return str(script)


async def _account(path: Path) -> None:
    print(f"what the log says (more: {program()} replay {path} --explain KIND/default/NAME):")
    async with EventLog.open(path, readonly=True) as log:
        refs = [f"Job/sim-0/default/{body['metadata']['name']}" for _, body in SCENARIO]
        refs += [f"PodGroup/sim-0/default/{GANG}-main", "JobSet/sim-0/default/pipeline"]
        for ref in refs:
            kind, _, _, name = ref.split("/")
            print(f"\n{kind} {name}")
            decisions = [
                (seq, event)
                for seq, event in await log.events_for(ref)
                if isinstance(event, Decided)
            ]
            for seq, event in decisions:
                print(f"  {seq:>6}  {iso_time(event.at)[11:23]}  {describe(event)[:150]}")
        replayed = await rebuild(log)
        failed = 0
        async for _, logged in log.read():
            failed += isinstance(logged, Outcome) and not logged.ok
        print()
        starts = await log.events_for(STARTED_REF)
        print(render_summary(summary(replayed, str(path), starts)))
        print(f"failed intents: {failed}")
