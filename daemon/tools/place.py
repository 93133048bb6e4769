"""``kbatchd place REQUEST.json``: what-if placement, JSON in, JSON out.

Exit 0 with the result on stdout whether admitted or not; exit 2 with one line on stderr for
a malformed request or a file that cannot be read.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final, TextIO

import msgspec

from daemon.placement.model import PlacementResult
from daemon.placement.place import place
from daemon.placement.request import RequestError, parse_request

PROG: Final = "kbatchd place"
EXIT_OK: Final = 0
EXIT_USAGE: Final = 2
USAGE: Final = f"usage: {PROG} REQUEST.json   (- reads the request from stdin)"


def result_document(result: PlacementResult) -> dict[str, Any]:
    """The output shape: ``admitted``, ``assignments`` and ``reason``; a refusal also names the
    pod set (``podSet``: the first pod set of the unit that could not be placed)."""
    document: dict[str, Any] = {
        "admitted": result.admitted,
        "assignments": (
            {
                name: msgspec.to_builtins(assignment)
                for name, assignment in result.assignments.items()
            }
            if result.assignments is not None
            else None
        ),
        "reason": result.reason,
    }
    if not result.admitted:
        document["podSet"] = result.pod_set
    return document


def main(
    argv: Sequence[str],
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Run ``kbatchd place`` with the arguments after ``place``."""
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    args = list(argv)
    if args in (["-h"], ["--help"]):
        print(USAGE, file=out)
        return EXIT_OK
    if len(args) != 1:
        print(f"{PROG}: expected one request file, got {len(args)} arguments ({USAGE})", file=err)
        return EXIT_USAGE
    try:
        data = _read(args[0], stdin or sys.stdin)
        request = parse_request(data)
    except RequestError as exc:
        print(f"{PROG}: {exc}", file=err)
        return EXIT_USAGE
    result = place(request.levels, request.nodes, request.pod_sets, request.algorithm)
    text = msgspec.json.format(msgspec.json.encode(result_document(result)), indent=2)
    out.write(text.decode() + "\n")
    return EXIT_OK


def _read(path: str, stdin: TextIO) -> bytes:
    if path == "-":
        return stdin.buffer.read() if hasattr(stdin, "buffer") else stdin.read().encode()
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise RequestError(f"cannot read {path}: {exc.strerror or exc}") from None
