"""Label and annotation keys of the JobSet API that the Job controller reads too: it shapes
the pods of a JobSet's child Jobs for exclusive placement (`job.exclusive`), as upstream's
pod webhook does. Here so that neither controller imports the other for them."""

from __future__ import annotations

from typing import Final

JOBSET_PREFIX: Final = "jobset.sigs.k8s.io/"
JOBSET_NAME: Final = JOBSET_PREFIX + "jobset-name"
JOB_KEY: Final = JOBSET_PREFIX + "job-key"
EXCLUSIVE_TOPOLOGY: Final = "alpha.jobset.sigs.k8s.io/exclusive-topology"
NODE_SELECTOR_STRATEGY: Final = "alpha.jobset.sigs.k8s.io/node-selector"
