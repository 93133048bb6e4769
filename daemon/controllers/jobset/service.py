"""The headless Service of a JobSet (spec B0): with `network.enableDNSHostnames` (the default),
child pods get `subdomain` and this Service gives them DNS names
(`<pod hostname>.<subdomain>.<namespace>.svc`), so that the pods of a job can find each other,
ready or not.

As upstream's `createHeadlessSvcIfNecessary`: named after the subdomain (`network.subdomain`,
else the JobSet's name), `clusterIP: None`, selecting the JobSet's pods by `jobset-name`,
`publishNotReadyAddresses` from the spec (default true), with a controller reference to the
JobSet so the garbage collector removes it with the JobSet. A Service of that name that already
exists is left as it is, whoever made it.
"""

from __future__ import annotations

from typing import Any

from daemon.controllers.jobset.spec import JOBSET_NAME, JobSetView
from events.intents import Create
from events.state import State


def service_body(view: JobSetView) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": view.subdomain,
            "namespace": view.namespace,
            "ownerReferences": [view.owner_reference()],
        },
        "spec": {
            "clusterIP": "None",
            "selector": {JOBSET_NAME: view.name},
            "publishNotReadyAddresses": view.publish_not_ready_addresses,
        },
    }


def missing_service(state: State, cluster: str, view: JobSetView) -> Create | None:
    """The create of the JobSet's headless Service when it needs one the cluster lacks."""
    if not view.dns_hostnames:
        return None
    if f"{cluster}/{view.namespace}/{view.subdomain}" in state.services:
        return None
    return Create(cluster, "Service", view.namespace, view.subdomain, body=service_body(view))
