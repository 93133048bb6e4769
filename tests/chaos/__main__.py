"""`make chaos`: every fault of the campaign, its runs one after the other, then one table of
fault, runs and invariant violations; exits 1 if any run broke an invariant.

    python -m tests.chaos [--seed N] [--runs N] [--fault NAME ...] [--size short|full]

Run k of a fault uses seed N + k, so a violation is reproduced with `--fault NAME --seed
N+k --runs 1`."""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import anyio

from tests.chaos.campaign import FAULTS, Fault, Result, run
from tests.chaos.load import FULL, SHORT


def _arguments(argv: list[str]) -> argparse.Namespace:
    names = [f.name for f in FAULTS]
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__)
    parser.add_argument("--seed", type=int, default=1, help="seed of the first run (default 1)")
    parser.add_argument("--runs", type=int, help="runs of each fault (default: the fault's own)")
    parser.add_argument("--fault", action="append", choices=names, help="only these faults")
    parser.add_argument("--size", choices=("short", "full"), default="full")
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


async def _campaign(options: argparse.Namespace) -> int:
    size = FULL if options.size == "full" else SHORT
    chosen = [f for f in FAULTS if not options.fault or f.name in options.fault]
    rows: list[tuple[Fault, list[Result]]] = []
    started = time.monotonic()
    for fault in chosen:
        results = []
        for k in range(options.runs or fault.runs):
            seed = options.seed + k
            with tempfile.TemporaryDirectory(prefix="kbatchd-chaos-") as tmp:
                result = await run(fault, seed, Path(tmp), size)
            mark = "ok" if not result.violations else f"{len(result.violations)} VIOLATIONS"
            if result.skipped:
                mark = f"skipped: {result.skipped}"
            print(
                f"{fault.name} seed {seed}: {result.seconds:.1f} s, {mark}; injected: "
                f"{_injected([result])}",
                flush=True,
            )
            for violation in result.violations:
                print(f"    {violation}", flush=True)
            results.append(result)
        rows.append((fault, results))
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
