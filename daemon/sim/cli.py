"""`kbatchd sim`: serve one or more simulated clusters on loopback until SIGINT/SIGTERM.

Once every cluster serves, the kubeconfig (one context per cluster, ``sim-0``, ``sim-1``, ...)
is written and one ``ready <url>`` line per cluster is printed on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from pathlib import Path

from daemon.runtime import eventloop
from daemon.runtime.heap import relax_collector
from daemon.sim import kubeconfig
from daemon.sim import topology as topologies
from daemon.sim.cluster import SimCluster
from daemon.sim.faults import Faults


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kbatchd sim", description=__doc__.split("\n")[0])
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=0, help="first port; 0 picks free ports (default)")
    p.add_argument("--kubeconfig", required=True, type=Path, help="where to write the kubeconfig")
    p.add_argument("--topology", default="", help="generator spec or JSON/YAML file of nodes")
    p.add_argument("--time-scale", type=float, default=1.0, help="simulated seconds per second")
    p.add_argument("--faults", default="", help="e.g. drop-watch=0.01,error-429=0.05,latency=5ms")
    p.add_argument("--seed", type=int, default=None, help="seed for uids, names and faults")
    p.add_argument("--clusters", type=int, default=1, help="independent clusters to serve")
    p.add_argument("--bookmark-seconds", type=float, default=60.0, help="watch bookmark interval")
    p.add_argument("--history", type=int, default=10_000, help="watch history per kind")
    p.add_argument("--token", default=None, help="require this bearer token")
    p.add_argument(
        "--not-ready-fail-seconds",
        type=float,
        default=None,
        help="fail pods on a NotReady node after this long (default: they stay as they are)",
    )
    return p


def _check(args: argparse.Namespace) -> None:
    if args.clusters < 1:
        raise ValueError(f"--clusters: must be at least 1, got {args.clusters}")
    if args.time_scale <= 0:
        raise ValueError(f"--time-scale: must be positive, got {args.time_scale}")
    if args.bookmark_seconds <= 0:
        raise ValueError(f"--bookmark-seconds: must be positive, got {args.bookmark_seconds}")
    if args.history < 1:
        raise ValueError(f"--history: must be at least 1, got {args.history}")
    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port: {args.port} is not a port number")
    Faults.parse(args.faults)
    if args.topology:
        topologies.load(args.topology)


async def serve(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    clusters: list[SimCluster] = []
    try:
        for index in range(args.clusters):
            seed = None if args.seed is None else args.seed + index
            sim = SimCluster(
                topology=args.topology or None,
                seed=seed,
                time_scale=args.time_scale,
                faults=Faults.parse(args.faults, seed=seed),
                bookmark_seconds=args.bookmark_seconds,
                history=args.history,
                host=args.host,
                port=args.port + index if args.port else 0,
                token=args.token,
                name=f"sim-{index}",
                not_ready_fail_seconds=args.not_ready_fail_seconds,
            )
            clusters.append(sim)
            await sim.open()
        kubeconfig.write(args.kubeconfig, [(c.name, c.url) for c in clusters], args.token)
        for sim in clusters:
            print(f"ready {sim.url}", flush=True)
        await stop.wait()
    finally:
        for sim in clusters:
            with contextlib.suppress(Exception):
                await sim.close()


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    try:
        _check(args)
    except ValueError as exc:
        print(f"kbatchd sim: {exc}", file=sys.stderr)
        return 2
    relax_collector()
    try:
        eventloop.run(serve, args)
    except OSError as exc:
        # A taken port or an unwritable kubeconfig path: input to fix, as bad arguments are.
        print(f"kbatchd sim: cannot serve: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
