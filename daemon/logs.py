"""Structured logs: JSON lines when stdout is not a terminal (journald), console rendering on
a terminal. Context (cluster, object key, reconciler, event seq) travels in contextvars."""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import msgspec
import structlog


def _json(obj: Any, **_: Any) -> str:
    return msgspec.json.encode(obj, enc_hook=str).decode()


def configure(level: str = "info", stream: TextIO | None = None) -> None:
    out = stream or sys.stdout
    renderer: Any = (
        structlog.dev.ConsoleRenderer()
        if out.isatty()
        else structlog.processors.JSONRenderer(serializer=_json)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=True,
    )
