"""Defaulting the real API server applies (and admission plugins that behave like
defaulting): Pod and PodSpec defaults, Job defaults with the generated selector, JobSet
webhook and CRD defaults.

The scheme's defaults (`SetDefaults_*`, the CRD schema's) run whenever a body is decoded, so
on every create, update and patch result alike; the admission plugins, the generated selector
and the JobSet webhook run on create only.

Clients see these fields on every object they read back, and kbatchd's reconcilers read some
of them (parallelism, completions, backoffLimit, podReplacementPolicy), so they must be here.
"""

from __future__ import annotations

from typing import Any, Final

from daemon.controllers.jobset.spec import webhook_job_template

Obj = dict[str, Any]

MAX_INT32: Final = 2**31 - 1
DEFAULT_TOLERATIONS: Final = (
    {
        "key": "node.kubernetes.io/not-ready",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
    {
        "key": "node.kubernetes.io/unreachable",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
)


def _image_pull_policy(image: str) -> str:
    last = image.rsplit("/", 1)[-1]
    if "@" in last:
        return "IfNotPresent"
    tag = last.split(":", 1)[1] if ":" in last else "latest"
    return "Always" if tag == "latest" else "IfNotPresent"


def _container(container: Obj) -> None:
    if isinstance(container.get("image"), str):
        container.setdefault("imagePullPolicy", _image_pull_policy(container["image"]))
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    container.setdefault("resources", {})


def pod_spec(spec: Obj) -> None:
    """`SetDefaults_PodSpec`: applies to pods and to pod templates alike."""
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    for field in ("containers", "initContainers"):
        for container in spec.get(field) or ():
            if isinstance(container, dict):
                _container(container)


def _requests_from_limits(container: Obj) -> None:
    resources = container.get("resources")
    if not isinstance(resources, dict) or not isinstance(resources.get("limits"), dict):
        return
    requests = resources.setdefault("requests", {})
    if isinstance(requests, dict):
        for name, value in resources["limits"].items():
            requests.setdefault(name, value)


def _qos_class(spec: Obj) -> str:
    containers = [c for c in spec.get("containers") or () if isinstance(c, dict)]
    containers += [c for c in spec.get("initContainers") or () if isinstance(c, dict)]
    any_set = False
    guaranteed = True
    for container in containers:
        resources = container.get("resources") or {}
        requests = resources.get("requests") or {}
        limits = resources.get("limits") or {}
        if requests or limits:
            any_set = True
        for name in ("cpu", "memory"):
            if name not in limits or str(requests.get(name, limits[name])) != str(limits[name]):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def pod_scheme(obj: Obj) -> None:
    """`SetDefaults_Pod` (with the PodSpec's): what every decoded pod gets."""
    spec = obj.setdefault("spec", {})
    pod_spec(spec)
    spec.setdefault("enableServiceLinks", True)
    for field in ("containers", "initContainers"):
        for container in spec.get(field) or ():
            if isinstance(container, dict):
                _requests_from_limits(container)


def pod(obj: Obj, priority: int, preemption_policy: str) -> None:
    """A created pod: `pod_scheme` plus what the Priority and DefaultTolerationSeconds
    admission plugins add; the status starts over as the real server resets it on create."""
    pod_scheme(obj)
    spec = obj["spec"]
    spec["priority"] = priority
    spec.setdefault("preemptionPolicy", preemption_policy)
    tolerations = spec.setdefault("tolerations", [])
    if isinstance(tolerations, list):
        for default in DEFAULT_TOLERATIONS:
            if not any(
                isinstance(t, dict)
                and (
                    t.get("key") == default["key"]
                    or (not t.get("key") and t.get("operator") == "Exists")
                )
                and t.get("effect") in ("NoExecute", None, "")
                for t in tolerations
            ):
                tolerations.append(dict(default))
    obj["status"] = {"phase": "Pending", "qosClass": _qos_class(spec)}


def pod_template(template: Any) -> None:
    if isinstance(template, dict) and isinstance(template.get("spec"), dict):
        pod_spec(template["spec"])


def job_scheme(obj: Obj) -> None:
    """`SetDefaults_Job`: what every decoded Job gets."""
    spec = obj.setdefault("spec", {})
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
        spec["parallelism"] = 1
    if spec.get("parallelism") is None:
        spec["parallelism"] = 1
    if spec.get("backoffLimit") is None:
        spec["backoffLimit"] = MAX_INT32 if spec.get("backoffLimitPerIndex") is not None else 6
    template = spec.get("template")
    meta = obj.setdefault("metadata", {})
    if isinstance(template, dict):
        labels = (template.get("metadata") or {}).get("labels")
        if labels and not meta.get("labels"):
            meta["labels"] = dict(labels)
    if spec.get("completionMode") is None:
        spec["completionMode"] = "NonIndexed"
    if spec.get("suspend") is None:
        spec["suspend"] = False
    failure_policy = spec.get("podFailurePolicy")
    if isinstance(failure_policy, dict):
        for rule in failure_policy.get("rules") or ():
            for pattern in (rule.get("onPodConditions") or ()) if isinstance(rule, dict) else ():
                if isinstance(pattern, dict) and not pattern.get("status"):
                    pattern["status"] = "True"
    if spec.get("podReplacementPolicy") is None:
        spec["podReplacementPolicy"] = "Failed" if failure_policy else "TerminatingOrFailed"
    if spec.get("manualSelector") is None:
        spec["manualSelector"] = False
    pod_template(template)


def job(obj: Obj) -> None:
    """A created Job: `job_scheme` and a status started over (the selector is generated
    later, once the uid is known)."""
    job_scheme(obj)
    obj["status"] = {}


def job_selector(obj: Obj) -> None:
    """The Job strategy's generated selector: template labels keyed on the Job's uid."""
    spec = obj["spec"]
    meta = obj["metadata"]
    if spec.get("manualSelector"):
        return
    template = spec.setdefault("template", {})
    template_meta = template.setdefault("metadata", {})
    labels = template_meta.get("labels") or {}
    uid, name = meta["uid"], meta["name"]
    labels.update(
        {
            "batch.kubernetes.io/controller-uid": uid,
            "batch.kubernetes.io/job-name": name,
            "controller-uid": uid,
            "job-name": name,
        }
    )
    template_meta["labels"] = labels
    if spec.get("selector") is None:
        spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    if not meta.get("labels"):
        # Defaulting runs again when the object is read back, copying the generated labels.
        meta["labels"] = dict(labels)


def jobset_schema(obj: Obj) -> None:
    """The JobSet CRD's structural schema defaults, applied on every write like the real
    server does for custom resources (unlike the webhook's, which run on create only)."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    failure_policy = spec.get("failurePolicy")
    if isinstance(failure_policy, dict):
        failure_policy.setdefault("restartStrategy", "Recreate")
    for replicated in spec.get("replicatedJobs") or ():
        if isinstance(replicated, dict):
            replicated.setdefault("replicas", 1)
            replicated.setdefault("groupName", "default")


def jobset(obj: Obj) -> None:
    """The JobSet mutating webhook (create only) and CRD defaults."""
    spec = obj.setdefault("spec", {})
    jobset_schema(obj)
    if spec.get("successPolicy") is None:
        spec["successPolicy"] = {"operator": "All"}
    if spec.get("startupPolicy") is None:
        spec["startupPolicy"] = {"startupPolicyOrder": "AnyOrder"}
    network = spec.get("network")
    if network is None:
        network = spec["network"] = {}
    if isinstance(network, dict):
        network.setdefault("enableDNSHostnames", True)
        network.setdefault("publishNotReadyAddresses", True)
    failure_policy = spec.get("failurePolicy")
    if isinstance(failure_policy, dict):
        for index, rule in enumerate(failure_policy.get("rules") or ()):
            if isinstance(rule, dict) and not rule.get("name"):
                rule["name"] = f"failurePolicyRule{index}"
    for policy in spec.get("volumeClaimPolicies") or ():
        if isinstance(policy, dict):
            retention = policy.setdefault("retentionPolicy", {})
            if isinstance(retention, dict):
                retention.setdefault("whenDeleted", "Delete")
    for replicated in spec.get("replicatedJobs") or ():
        if isinstance(replicated, dict) and isinstance(replicated.get("template"), dict):
            replicated["template"] = webhook_job_template(replicated["template"])
    obj.pop("status", None)
