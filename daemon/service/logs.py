"""Structured logs: JSON lines when the output is not a terminal (journald), console rendering
on a terminal. Context (cluster, object key, reconciler, event seq) travels in contextvars.

Every line passes through `redact` last before rendering: bearer tokens, client keys and
other kubeconfig secrets never reach the output, whoever logged them (the daemon, the
Kubernetes client, aiohttp: stdlib `logging` is routed through the same chain).
"""

from __future__ import annotations

import logging
import re
import sys
import threading
from collections.abc import Mapping
from typing import Any, Final, Literal, TextIO

import msgspec
import structlog
from structlog.typing import EventDict, WrappedLogger

REDACTED: Final = "[redacted]"

# Field names whose values are secrets whatever they hold. Substrings of the lower-cased name;
# `key` alone is not one of them (object keys are logged on purpose).
_SECRET_NAMES: Final = (
    "token",
    "authorization",
    "password",
    "passwd",
    "secret",
    "client-key",
    "client_key",
    "key-data",
    "key_data",
    "private_key",
    "certificate-data",
    "certificate_data",
    "credential",
    "cookie",
    "api_key",
    "apikey",
)

# Secrets inside free text: exception messages, URLs, kubeconfig or header snippets.
_SECRET_TEXT: Final = (
    (re.compile(r"(?i)\b(bearer|basic)(\s+)[A-Za-z0-9._~+/=-]+"), rf"\1\2{REDACTED}"),
    (
        re.compile(
            r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(-----END [A-Z ]*PRIVATE KEY-----|$)", re.S
        ),
        REDACTED,
    ),
    # JSON Web Tokens (service-account and OIDC tokens): header.payload.signature.
    (re.compile(r"\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*"), REDACTED),
    (
        re.compile(
            r"(?i)((?:token|password|secret|client-key-data|client-certificate-data|"
            r"authorization)[\"']?\s*[:=]\s*[\"']?)[^\s\"',}\]]+"
        ),
        rf"\1{REDACTED}",
    ),
    # user:password@ in URLs.
    (re.compile(r"(://)[^/@\s:]+:[^/@\s]+@"), rf"\1{REDACTED}@"),
)


def redact_text(text: str) -> str:
    for pattern, replacement in _SECRET_TEXT:
        text = pattern.sub(replacement, text)
    return text


def _is_secret_name(name: str) -> bool:
    lowered = name.lower()
    return any(part in lowered for part in _SECRET_NAMES)


def _scrub(value: Any) -> Any:
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, Mapping):
        return {
            k: REDACTED if isinstance(k, str) and _is_secret_name(k) else _scrub(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple | set | frozenset):
        return [_scrub(v) for v in value]
    if isinstance(value, bytes | bytearray):
        return redact_text(bytes(value).decode("utf-8", "replace"))
    if isinstance(value, int | float | bool) or value is None:
        return value
    # Anything else is rendered with str() by the JSON encoder: scrub that text now.
    return redact_text(str(value))


def redact(_: WrappedLogger, __: str, event_dict: EventDict) -> EventDict:
    """structlog processor: secret-named fields blanked, secrets in text replaced."""
    return {
        key: REDACTED if _is_secret_name(key) else _scrub(value)
        for key, value in event_dict.items()
    }


class ReopenableFile:
    """The log output: stdout, or a file appended to that SIGHUP reopens (after logrotate
    moved it away, the next line goes to a new file at the configured path).

    Stdout is looked up at each write, not kept: whoever replaced `sys.stdout` since (a test
    harness capturing output) gets the lines, and a closed old one is never written to."""

    def __init__(self, path: str = "") -> None:
        self.path = path
        self._lock = threading.Lock()
        self._file: TextIO | None = self._open() if path else None

    def _open(self) -> TextIO:
        # Kept open for the life of the daemon (closed on reopen): no context manager.
        return open(self.path, "a", encoding="utf-8", buffering=1)

    @property
    def _stream(self) -> TextIO:
        return self._file if self._file is not None else sys.stdout

    def reopen(self) -> None:
        if not self.path:
            return
        with self._lock:
            old, self._file = self._file, self._open()
        if old is not None:
            old.close()

    def isatty(self) -> bool:
        return self._stream.isatty()

    def write(self, text: str) -> int:
        with self._lock:
            return self._stream.write(text)

    def flush(self) -> None:
        with self._lock:
            self._stream.flush()

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()


_output: ReopenableFile | None = None


# Loggers bound once, on first use, with the configuration of that moment: no rebinding on
# every call. A process that configures logging more than once (the test suite does) turns
# it off, or a logger keeps whichever configuration it met first.
cache_loggers = True


def _json(obj: Any, **_: Any) -> str:
    return msgspec.json.encode(obj, enc_hook=str).decode()


def configure(
    level: str = "info",
    stream: TextIO | None = None,
    *,
    fmt: Literal["auto", "json", "console"] = "auto",
    file: str = "",
) -> None:
    """Logs to `stream`, or to `file` when given, else stdout."""
    global _output
    if _output is not None and _output.path:
        _output.close()
    _output = ReopenableFile(file) if file or stream is None else None
    out: Any = _output if _output is not None else stream
    console = fmt == "console" or (fmt == "auto" and out.isatty())
    renderer: Any = (
        structlog.dev.ConsoleRenderer() if console else structlog.processors.JSONRenderer(_json)
    )
    threshold = logging.getLevelNamesMapping()[level.upper()]
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            redact,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(threshold),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=cache_loggers,
    )
    _route_stdlib(threshold)


def reopen() -> None:
    """SIGHUP: reopen the log file (nothing to do when logging to stdout)."""
    if _output is not None:
        _output.reopen()


class _ToStructlog(logging.Handler):
    """Third-party libraries log through stdlib `logging`; their lines take the same way as
    ours (same format, same redaction)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
            fields: dict[str, Any] = {"logger": record.name}
            if record.exc_info:
                fields["exc_info"] = record.exc_info
            structlog.get_logger(record.name).log(record.levelno, message, **fields)
        except Exception:  # a log line must never take the daemon down
            self.handleError(record)


def _route_stdlib(threshold: int) -> None:
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, _ToStructlog):
            root.removeHandler(handler)
    root.addHandler(_ToStructlog())
    # Libraries' debug lines (aiosqlite logs every statement with its parameters) would
    # drown the daemon's own: they start at info.
    root.setLevel(max(threshold, logging.INFO))
