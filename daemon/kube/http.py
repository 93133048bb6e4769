"""HTTP/1.1 for the API server's one-shot requests: a keep-alive connection pool on the event
loop's own transports.

aiohttp's client costs about 75 µs of CPU a request against the simulated API server on
loopback, this pool about 23 µs, and a run of 15,000 gang workloads makes 110,000 of them
(bindings and status writes): seconds of a CPU-bound daemon. Only what talking to an API
server needs is here: keep-alive, Content-Length and chunked bodies, TLS with the client
library's settings, a deadline per request. No redirects, cookies, compression (none is asked
for) or proxies: `daemon.kube.api` sends requests through a configured proxy, and every watch,
with aiohttp.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from typing import Any, Final

# A status line and headers longer than this are not an API server's.
MAX_HEAD: Final = 64 * 1024
# A connection idle for longer is closed instead of reused (aiohttp's default): a NAT or load
# balancer may have forgotten it without a word, and a request written into it would wait
# for its whole deadline.
KEEPALIVE_SECONDS: Final = 15.0
_NO_BODY: Final = frozenset({204, 304})

# status, body, the Retry-After header (None without one).
Answer = tuple[int, bytes, str | None]


class ProtocolError(ConnectionError):
    """The server's answer is not HTTP/1.1 that can be read; the connection is dropped."""


class Disconnected(ConnectionError):
    """The connection closed before the answer was complete."""

    def __init__(self, message: str, *, answered: bool) -> None:
        super().__init__(message)
        # Whether any byte of an answer had arrived: if not, a reused connection that the
        # server closed while idle may be retried on a new one.
        self.answered = answered


class _Connection(asyncio.Protocol):
    """One connection, one exchange at a time (no pipelining)."""

    def __init__(self, pool: HttpPool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.waiter: asyncio.Future[Answer] | None = None
        self.closed = False
        self.used = False  # has completed an exchange before: the server may have closed it
        self.idle_since = 0.0  # loop time of the end of its last exchange
        self._expect_body = True
        self._start()

    def _start(self) -> None:
        self.received = False
        self.keep_alive = True
        self._status = 0
        self._head_done = False
        self._scan = 0
        self._length = -1  # Content-Length; -1: chunked or until the connection closes
        self._chunked = False
        self._chunk_size = -1  # -1: a size line is next; 0 after the last chunk: trailers
        self._parts: list[bytes] = []
        self._retry_after: str | None = None

    # -- asyncio.Protocol --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        waiter = self.waiter
        if waiter is None or waiter.done():
            # Bytes nobody asked for: what they belong to cannot be known any more.
            self.close(abort=True)
            return
        self.received = True
        self.buffer += data
        try:
            answer = self._parse()
        except ProtocolError as exc:
            waiter.set_exception(exc)
            self.close(abort=True)
            return
        if answer is not None:
            waiter.set_result(answer)

    def eof_received(self) -> bool:
        return False  # close the transport; connection_lost does the rest

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool._forget(self)
        waiter = self.waiter
        if waiter is None or waiter.done():
            return
        if self._head_done and self._length < 0 and not self._chunked:
            # A body delimited by the end of the connection (HTTP/1.0 style) is complete.
            waiter.set_result((self._status, bytes(self.buffer), self._retry_after))
            return
        reason = f": {exc}" if exc is not None else ""
        waiter.set_exception(
            Disconnected(
                f"the server closed the connection before its answer was complete{reason}",
                answered=self.received,
            )
        )

    # -- exchange ----------------------------------------------------------------------------

    def send(self, request: bytes, *, expect_body: bool) -> asyncio.Future[Answer]:
        self._start()
        self._expect_body = expect_body
        waiter = self.waiter = asyncio.get_running_loop().create_future()
        assert self.transport is not None
        self.transport.write(request)
        return waiter

    def close(self, *, abort: bool = False) -> None:
        """Close the connection after what was written, or with `abort` at once (whatever it
        was in the middle of is lost)."""
        if self.closed:
            return
        self.closed = True
        if self.transport is not None:
            if abort:
                self.transport.abort()
            else:
                self.transport.close()
        self.pool._forget(self)

    def _parse(self) -> Answer | None:
        """The answer, once the buffer holds all of it."""
        buffer = self.buffer
        while not self._head_done:
            end = buffer.find(b"\r\n\r\n", self._scan)
            if end < 0:
                if len(buffer) > MAX_HEAD:
                    raise ProtocolError(f"the response head is over {MAX_HEAD} bytes")
                self._scan = max(0, len(buffer) - 3)
                return None
            self._read_head(bytes(buffer[:end]))
            del buffer[: end + 4]
            self._scan = 0
            if 100 <= self._status < 200:  # an interim answer: the real one follows
                self._start()
                self.received = True
        if self._chunked:
            body = self._read_chunks()
            if body is None:
                return None
        elif self._length >= 0:
            if len(buffer) < self._length:
                return None
            body = bytes(buffer[: self._length])
            del buffer[: self._length]
        else:
            return None  # until the connection closes
        if buffer:
            raise ProtocolError(f"{len(buffer)} bytes after the end of the answer")
        self.waiter = None
        return self._status, body, self._retry_after

    def _read_head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        status_line = lines[0]
        if not status_line.startswith(b"HTTP/1.") or status_line[12:13] not in (b" ", b""):
            raise ProtocolError(f"not an HTTP/1.x status line: {status_line[:80]!r}")
        try:
            self._status = int(status_line[9:12])
        except ValueError:
            raise ProtocolError(f"not an HTTP/1.x status line: {status_line[:80]!r}") from None
        self.keep_alive = status_line[7:8] == b"1"  # HTTP/1.0 closes unless asked not to
        length = -1
        chunked = False
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon:
                raise ProtocolError(f"not a header line: {line[:80]!r}")
            name = name.strip().lower()
            if name == b"content-length":
                try:
                    length = int(value)
                except ValueError:
                    length = -2
                if length < 0:
                    raise ProtocolError(f"bad Content-Length: {value.strip()[:40]!r}")
            elif name == b"transfer-encoding":
                chunked = value.strip().lower().endswith(b"chunked")
                if not chunked:
                    length = -1  # some other coding: the body runs until the connection closes
                    self.keep_alive = False
            elif name == b"connection":
                tokens = {token.strip() for token in value.lower().split(b",")}
                if b"close" in tokens:
                    self.keep_alive = False
                elif b"keep-alive" in tokens:
                    self.keep_alive = True
            elif name == b"retry-after":
                self._retry_after = value.strip().decode("latin-1")
        self._head_done = True
        if not self._expect_body or self._status in _NO_BODY or self._status < 200:
            self._length, self._chunked = 0, False
        elif chunked:
            self._length, self._chunked = -1, True
        else:
            self._length = length
            if length < 0:
                self.keep_alive = False

    def _read_chunks(self) -> bytes | None:
        buffer = self.buffer
        while True:
            if self._chunk_size > 0:  # inside a chunk: its data and CRLF
                size = self._chunk_size
                if len(buffer) < size + 2:
                    return None
                if buffer[size : size + 2] != b"\r\n":
                    raise ProtocolError("a chunk does not end with CRLF")
                self._parts.append(bytes(buffer[:size]))
                del buffer[: size + 2]
                self._chunk_size = -1
                continue
            end = buffer.find(b"\r\n")
            if end < 0:
                if len(buffer) > MAX_HEAD:
                    raise ProtocolError(f"a chunk size line is over {MAX_HEAD} bytes")
                return None
            line = bytes(buffer[:end])
            del buffer[: end + 2]
            if self._chunk_size == 0:  # trailers, up to an empty line
                if not line:
                    return b"".join(self._parts)
                continue
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise ProtocolError(f"bad chunk size line: {line[:40]!r}") from None
            if size < 0:
                raise ProtocolError(f"bad chunk size line: {line[:40]!r}")
            self._chunk_size = size


class HttpPool:
    """Keep-alive connections to one server, at most `limit` open at once; a request waits
    for one when all are busy."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        limit: int = 100,
        keepalive: float = KEEPALIVE_SECONDS,
    ) -> None:
        if limit < 1:
            raise ValueError(f"a connection pool needs a limit of at least 1, not {limit}")
        self.host, self.port = host, port
        self._ssl = ssl_context
        self._server_hostname = server_hostname
        self.tls = ssl_context is not None
        self.limit = limit
        self.keepalive = keepalive
        self._open: set[_Connection] = set()
        self._idle: list[_Connection] = []
        self._connecting = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._closed = False
        self.connections_made = 0

    async def request(self, head: bytes, body: bytes | None, *, within: float) -> Answer:
        """Send a request (its head: request line and headers, ending in an empty line) and
        return the answer. Raises `TimeoutError` when no complete answer came within
        `within` seconds, `OSError` (`ConnectionError` and its kind, `ssl.SSLError`) when
        the connection could not be made or broke."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        request = head + body if body else head
        expect_body = not head.startswith(b"HEAD ")
        while True:
            connection = await self._acquire(deadline)
            reused = connection.used
            try:
                answer = await self._exchange(connection, request, expect_body, deadline)
            except Disconnected as exc:
                connection.close(abort=True)
                if reused and not exc.answered:
                    continue  # closed by the server while idle: the request never got there
                raise
            except BaseException:
                connection.close(abort=True)
                raise
            connection.used = True
            self._release(connection)
            return answer

    async def _exchange(
        self, connection: _Connection, request: bytes, expect_body: bool, deadline: float
    ) -> Answer:
        waiter = connection.send(request, expect_body=expect_body)
        timer = asyncio.get_running_loop().call_at(deadline, _expire, waiter, "no answer")
        try:
            return await waiter
        finally:
            timer.cancel()

    async def _acquire(self, deadline: float) -> _Connection:
        while True:
            if self._closed:
                raise ConnectionError(f"the connection pool to {self.host}:{self.port} is closed")
            idle = self._idle
            if idle:
                now = asyncio.get_running_loop().time()
                while idle:
                    connection = idle.pop()  # the most recently used: warm, least likely gone
                    if connection.closed:
                        continue
                    if now - connection.idle_since < self.keepalive:
                        return connection
                    connection.close()
            if len(self._open) + self._connecting < self.limit:
                return await self._connect(deadline)
            loop = asyncio.get_running_loop()
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.append(waiter)  # `_wake` passes over those timed out or cancelled
            timer = loop.call_at(deadline, _expire, waiter, "no free connection")
            try:
                await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                    self._wake()  # woken and cancelled at once: the turn passes on
                raise
            finally:
                timer.cancel()

    async def _connect(self, deadline: float) -> _Connection:
        loop = asyncio.get_running_loop()
        made: list[_Connection] = []  # what the transport made, to close on any failure

        def protocol() -> _Connection:
            made.append(_Connection(self))
            return made[-1]

        self._connecting += 1
        try:
            async with asyncio.timeout_at(deadline):
                await loop.create_connection(
                    protocol,
                    self.host,
                    self.port,
                    ssl=self._ssl,
                    server_hostname=self._server_hostname if self._ssl is not None else None,
                )
        except BaseException as exc:
            for connection in made:
                connection.close(abort=True)
            if isinstance(exc, TimeoutError):
                raise TimeoutError(f"connecting to {self.host}:{self.port} timed out") from None
            if isinstance(exc, OSError):
                raise ConnectionError(f"cannot connect to {self.host}:{self.port}: {exc}") from exc
            raise
        finally:
            self._connecting -= 1
            self._wake()
        [connection] = made
        if self._closed or connection.closed:  # closed meanwhile, or lost as it was made
            connection.close(abort=True)
            raise Disconnected(
                f"the connection to {self.host}:{self.port} closed as it was made", answered=False
            )
        self.connections_made += 1
        self._open.add(connection)
        return connection

    def _release(self, connection: _Connection) -> None:
        if connection.closed:
            return
        if not connection.keep_alive or self._closed:
            connection.close()
            return
        connection.idle_since = asyncio.get_running_loop().time()
        self._idle.append(connection)
        self._wake()

    def _forget(self, connection: _Connection) -> None:
        if connection in self._open:
            self._open.discard(connection)
            self._wake()

    def _wake(self) -> None:
        """Let the first request still waiting for a connection look again."""
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def close(self) -> None:
        """Close every connection; requests made afterwards fail."""
        self._closed = True
        for connection in list(self._open):
            connection.close()
        self._idle.clear()
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # wakes to find the pool closed


def _expire(waiter: asyncio.Future[Any], what: str) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError(f"{what} within the request's timeout"))
