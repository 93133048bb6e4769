"""A simulated Kubernetes cluster on loopback: an API server speaking the real REST and watch
protocol for the kinds kbatchd uses, a node agent standing in for kubelet and kube-scheduler,
fault injection and a GPU topology generator.

Tests and the demo talk to it through ordinary Kubernetes clients; nothing in the daemon knows
it is simulated. Entry points: `daemon.sim.cluster.SimCluster` (async, for tests and the demo),
`daemon.sim.background.BackgroundSim` (its own loop in a thread, for synchronous clients) and
`daemon.sim.cli.main` (`kbatchd sim`).

Where things live: `store` (objects, resourceVersions, watch history), `registry` (the API
operations), `strategy`/`defaults`/`shapes`/`validation`/`job_validation`/`job_status` (what the
real server does to each kind on create and update), `gc` (garbage and namespace collection),
`server`/`watching`/`discovery` (HTTP), `agent`/`scheduling` (pods through their phases),
`faults`, `topology`, `kubeconfig`.
"""
