"""`make chaos`: every fault of the campaign, then one table of fault, runs and invariant
violations; exits 1 if any run broke an invariant.

    python -m tests.chaos [--seed N] [--runs N] [--fault NAME ...] [--size short|full]
                          [--jobs N]

Run k of a fault uses seed N + k, so a violation is played again with `--fault NAME
--seed N+k --runs 1` (timing plays its part too: a violating run keeps its logs). Runs on
simulated clusters go `--jobs` at a time (2): such a run keeps under half of one core busy,
most of it waiting for its load's pods to run. Runs on the real control plane go one at a
time, after them: its kube-apiserver and etcd take the machine."""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import anyio

from tests.chaos.campaign import FAULTS, Fault, Result, run
from tests.chaos.load import FULL, SHORT, Size


def _arguments(argv: list[str]) -> argparse.Namespace:
    names = [f.name for f in FAULTS]
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__)
    parser.add_argument("--seed", type=int, default=1, help="seed of the first run (default 1)")
    parser.add_argument("--runs", type=int, help="runs of each fault (default: the fault's own)")
    parser.add_argument("--fault", action="append", choices=names, help="only these faults")
    parser.add_argument("--size", choices=("short", "full"), default="full")
    parser.add_argument(
        "--jobs", type=int, default=2, help="simulated-cluster runs at a time (default 2)"
    )
    return parser.parse_args(argv)


def _injected(results: list[Result]) -> str:
    total: Counter[str] = sum((r.injected for r in results), Counter())
    return ", ".join(f"{name} {n}" for name, n in sorted(total.items())) or "none"


def _violations(results: list[Result]) -> str:
    skipped = {r.skipped for r in results if r.skipped}
    if skipped:
        return f"skipped: {'; '.join(sorted(skipped))}"
    return str(sum(len(r.violations) for r in results))


def _table(rows: list[tuple[Fault, list[Result]]]) -> str:
    headers = ("fault", "runs", "injected", "changes checked", "violations", "seconds")
    cells = [
        (
            fault.name,
            str(len(results)),
            _injected(results),
            f"{sum(sum(r.changes.values()) for r in results):,}",
            _violations(results),
            f"{sum(r.seconds for r in results):.0f}",
        )
        for fault, results in rows
    ]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]

    def line(values: tuple[str, ...]) -> str:
        return "| " + " | ".join(v.ljust(w) for v, w in zip(values, widths, strict=True)) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(headers), rule, *(line(c) for c in cells)])


async def _one(fault: Fault, seed: int, size: Size) -> Result:
    tmp = Path(tempfile.mkdtemp(prefix=f"kbatchd-chaos-{fault.name}-{seed}-"))
    result = await run(fault, seed, tmp, size)
    mark = "ok"
    if result.violations:
        # Timing plays its part too: the seed alone may not bring a violation back, its
        # daemons' logs (`kbatchd replay LOG --explain`) show what happened.
        mark = f"{len(result.violations)} VIOLATIONS, logs kept in {tmp}"
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    if result.skipped:
        mark = f"skipped: {result.skipped}"
    print(
        f"{fault.name} seed {seed}: {result.seconds:.1f} s, {mark}; injected: "
        f"{_injected([result])}",
        flush=True,
    )
    for violation in result.violations:
        print(f"    {violation}", flush=True)
    return result


async def _campaign(options: argparse.Namespace) -> int:
    size = FULL if options.size == "full" else SHORT
    chosen = [f for f in FAULTS if not options.fault or f.name in options.fault]
    found: dict[tuple[str, int], Result] = {}
    started = time.monotonic()

    async def each(fault: Fault, seed: int, limiter: anyio.CapacityLimiter) -> None:
        async with limiter:
            found[(fault.name, seed)] = await _one(fault, seed, size)

    for plane, jobs in ((False, max(1, options.jobs)), (True, 1)):
        limiter = anyio.CapacityLimiter(jobs)
        async with anyio.create_task_group() as group:
            for fault in chosen:
                if fault.plane == plane:
                    for k in range(options.runs or fault.runs):
                        group.start_soon(each, fault, options.seed + k, limiter)
    rows = [
        (f, [found[(f.name, options.seed + k)] for k in range(options.runs or f.runs)])
        for f in chosen
    ]
    print()
    print(_table(rows))
    print(f"\n{time.monotonic() - started:.0f} s in all")
    return 1 if any(r.violations for _, results in rows for r in results) else 0


def main(argv: list[str] | None = None) -> int:
    options = _arguments(sys.argv[1:] if argv is None else argv)
    # A request the simulated cluster cuts ends in an exception aiohttp logs with its
    # traceback: that is the injected fault, not news.
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
    code: int = anyio.run(_campaign, options)
    return code


if __name__ == "__main__":
    sys.exit(main())
