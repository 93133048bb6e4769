"""HTTP/1.1 to the API server: a keep-alive connection pool on the event loop's own
transports, for one-shot requests and for watches (answers read as they arrive).

aiohttp's client costs about 75 µs of CPU a request against the simulated API server on
loopback, this pool about 25 µs, and a run of 15,000 gang workloads makes 110,000 of them
(bindings and status writes): seconds of a CPU-bound daemon. Only what talking to an API
server needs is here: keep-alive, Content-Length and chunked bodies, TLS with the client
library's settings, a deadline per request, an inactivity deadline and back-pressure for
streams, an HTTP proxy (a tunnel to a TLS server, absolute-form requests to a plain one). No
redirects, cookies or compression (none is asked for).
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, Final, NamedTuple, TypeVar

# A status line and headers longer than this are not an API server's.
MAX_HEAD: Final = 64 * 1024
# A connection idle for longer is closed instead of reused (aiohttp's default): a NAT or load
# balancer may have forgotten it without a word, and a request written into it would wait
# for its whole deadline.
KEEPALIVE_SECONDS: Final = 15.0
_NO_BODY: Final = frozenset({204, 304})

# status, body, the Retry-After header (None without one).
Answer = tuple[int, bytes, str | None]
T = TypeVar("T")


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
        self.last_received = 0.0  # loop time of the newest bytes received
        # Set for a streaming exchange (a watch): the body goes there as it arrives.
        self.stream: Stream | None = None
        self._expect_body = True
        self._tunnel = False
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
        self.last_received = asyncio.get_running_loop().time()
        self.buffer += data
        try:
            answer = self._parse()
        except ProtocolError as exc:
            if self.stream is not None:
                self.stream.fail(exc)
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
        stream = self.stream
        if waiter is None or waiter.done():
            return
        if self._head_done and self._length < 0 and not self._chunked:
            # A body delimited by the end of the connection (HTTP/1.0 style) is complete.
            if stream is not None:
                stream.end()
            waiter.set_result((self._status, bytes(self.buffer), self._retry_after))
            return
        reason = f": {exc}" if exc is not None else ""
        lost = Disconnected(
            f"the server closed the connection before its answer was complete{reason}",
            answered=self.received,
        )
        if stream is not None:
            stream.fail(lost)
        waiter.set_exception(lost)

    # -- exchange ----------------------------------------------------------------------------

    def send(
        self,
        request: bytes,
        *,
        expect_body: bool,
        stream: Stream | None = None,
        tunnel: bool = False,
    ) -> asyncio.Future[Answer]:
        """Write a request; the future is its answer (for a `stream`, the end of its body).
        A `tunnel` request (``CONNECT``) is answered, when granted, by a head alone."""
        self._start()
        self._expect_body = expect_body
        self._tunnel = tunnel
        self.stream = stream
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
        stream = self.stream
        body: bytes | None
        if stream is not None:
            if not stream.status:
                stream.begin(self._status, self._retry_after)
            if not self._stream_body(stream):
                return None
            body = b""
        elif self._chunked:
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
        if stream is not None:
            stream.end()
        return self._status, body, self._retry_after

    def _stream_body(self, stream: Stream) -> bool:
        """Hand what arrived of a streaming body on; whether the body is complete."""
        buffer = self.buffer
        if self._chunked:
            done = self._read_chunks() is not None
            for part in self._parts:
                stream.feed(part)
            self._parts.clear()
            return done
        if self._length >= 0:
            piece = bytes(buffer[: self._length])
            del buffer[: len(piece)]
            self._length -= len(piece)
            if piece:
                stream.feed(piece)
            return self._length == 0
        if buffer:  # until the connection closes
            stream.feed(bytes(buffer))
            buffer.clear()
        return False

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
        granted = self._tunnel and 200 <= self._status < 300
        if not self._expect_body or granted or self._status in _NO_BODY or self._status < 200:
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


class Stream:
    """A streaming answer (a watch): its status, then its body in pieces as they arrive, to
    one reader. Reading stops (the transport pauses) while more than `HIGH_WATER` bytes wait,
    so a slow reader holds the server back instead of filling memory."""

    HIGH_WATER: Final = 4 * 1024 * 1024

    def __init__(self, connection: _Connection, idle: float) -> None:
        self._connection = connection
        self._idle = idle
        self.status = 0
        self.retry_after: str | None = None
        self._pieces: deque[bytes] = deque()
        self._size = 0
        self._paused = False
        self._ended = False
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None

    # -- from the connection -----------------------------------------------------------------

    def begin(self, status: int, retry_after: str | None) -> None:
        self.status, self.retry_after = status, retry_after
        self._wake()

    def feed(self, piece: bytes) -> None:
        self._pieces.append(piece)
        self._size += len(piece)
        if self._size > self.HIGH_WATER and not self._paused:
            transport = self._connection.transport
            if transport is not None:
                transport.pause_reading()
                self._paused = True
        self._wake()

    def end(self) -> None:
        self._ended = True
        self._wake()

    def fail(self, error: BaseException) -> None:
        self._error = error
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None:
            _wake_up(self._waiter)

    # -- for the reader ----------------------------------------------------------------------

    @property
    def ended(self) -> bool:
        """The whole body was read."""
        return self._ended and not self._pieces

    def __aiter__(self) -> AsyncIterator[bytes]:
        """The body's pieces (`read`) to its end."""
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[bytes]:
        while piece := await self.read():
            yield piece

    async def wait_head(self) -> None:
        await self._wait(lambda: self.status != 0)

    async def read(self) -> bytes:
        """All of the body that has arrived and not been read, at least one byte; b"" at its
        end. `TimeoutError` when the server sent nothing for `idle` seconds while there was
        nothing to read."""
        await self._wait(lambda: bool(self._pieces) or self._ended)
        pieces = self._pieces
        if not pieces:
            return b""
        piece = pieces.popleft() if len(pieces) == 1 else b"".join(pieces)
        pieces.clear()
        self._size = 0
        if self._paused:
            self._paused = False
            transport = self._connection.transport
            if transport is not None and not self._connection.closed:
                transport.resume_reading()
        return piece

    async def _wait(self, ready: Callable[[], bool]) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        while not ready():
            if self._error is not None:
                raise self._error
            # Silence is measured from the newest bytes, or from when reading began.
            deadline = max(self._connection.last_received, started) + self._idle
            if deadline <= loop.time():
                raise TimeoutError(f"no data for {self._idle:g} s from the server")
            waiter = self._waiter = loop.create_future()
            timer = loop.call_at(deadline, _wake_up, waiter)
            try:
                await waiter
            finally:
                timer.cancel()
                self._waiter = None


class Proxy(NamedTuple):
    """An HTTP proxy: its address and the headers it wants (``Proxy-Authorization``)."""

    host: str
    port: int
    headers: tuple[tuple[str, str], ...] = ()


class HttpPool:
    """Keep-alive connections to one server, at most `limit` open at once; a request waits
    for one when all are busy.

    Through a `proxy`, a TLS server is reached through a tunnel (``CONNECT``), so the proxy
    sees only encrypted bytes; a plain HTTP server is sent requests in absolute form, which
    the caller writes with `forward_prefix` and `forward_headers`."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        limit: int = 100,
        keepalive: float = KEEPALIVE_SECONDS,
        proxy: Proxy | None = None,
    ) -> None:
        if limit < 1:
            raise ValueError(f"a connection pool needs a limit of at least 1, not {limit}")
        self.host, self.port = host, port
        self.authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self._ssl = ssl_context
        self._server_hostname = server_hostname
        self.tls = ssl_context is not None
        self.proxy = proxy
        forwarding = proxy is not None and ssl_context is None
        # What a request through a forwarding proxy carries: an absolute target, its headers.
        self.forward_prefix = f"http://{self.authority}" if forwarding else ""
        self.forward_headers = proxy.headers if forwarding and proxy is not None else ()
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
        deadline = asyncio.get_running_loop().time() + within
        request = head + body if body else head
        expect_body = not head.startswith(b"HEAD ")

        async def exchange(connection: _Connection) -> Answer:
            waiter = connection.send(request, expect_body=expect_body)
            timer = asyncio.get_running_loop().call_at(deadline, _expire, waiter, "no answer")
            try:
                return await waiter
            finally:
                timer.cancel()

        connection, answer = await self._on_a_connection(deadline, exchange)
        self._release(connection)
        return answer

    @asynccontextmanager
    async def stream(self, head: bytes, *, within: float, idle: float) -> AsyncIterator[Stream]:
        """Send a request whose answer is read as it arrives (a watch): the connection is made
        within `within` seconds, and the server may then be silent for at most `idle` seconds
        at a time. The connection goes back to the pool only if the body was read to its end;
        leaving early drops it."""

        async def begin(connection: _Connection) -> tuple[Stream, asyncio.Future[Answer]]:
            stream = Stream(connection, idle)
            done = connection.send(head, expect_body=True, stream=stream)
            done.add_done_callback(_consume)  # its outcome reaches the reader via the stream
            await stream.wait_head()
            return stream, done

        deadline = asyncio.get_running_loop().time() + within
        connection, (stream, done) = await self._on_a_connection(deadline, begin)
        try:
            yield stream
        except BaseException:
            connection.close(abort=True)
            raise
        if stream.ended and done.done() and not done.exception():
            self._release(connection)
        else:
            connection.close(abort=True)

    async def _on_a_connection(
        self, deadline: float, exchange: Callable[[_Connection], Awaitable[T]]
    ) -> tuple[_Connection, T]:
        """Run `exchange` on a pooled connection, again on another if the server had closed a
        reused one before answering anything (the request never got there); any failure drops
        the connection."""
        while True:
            connection = await self._acquire(deadline)
            reused = connection.used
            try:
                return connection, await exchange(connection)
            except Disconnected as exc:
                connection.close(abort=True)
                if reused and not exc.answered:
                    continue
                raise
            except BaseException:
                connection.close(abort=True)
                raise

    async def _acquire(self, deadline: float) -> _Connection:
        while True:
            if self._closed:
                raise ConnectionError(f"the connection pool to {self.authority} is closed")
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

        proxy = self.proxy
        where = self.authority + (f" through the proxy {proxy.host}:{proxy.port}" if proxy else "")
        self._connecting += 1
        try:
            async with asyncio.timeout_at(deadline):
                if proxy is None:
                    await loop.create_connection(
                        protocol,
                        self.host,
                        self.port,
                        ssl=self._ssl,
                        server_hostname=self._server_hostname if self._ssl is not None else None,
                    )
                else:
                    await loop.create_connection(protocol, proxy.host, proxy.port)
                    if self._ssl is not None:
                        await self._tunnel(made[0], self._ssl, proxy)
        except BaseException as exc:
            for connection in made:
                connection.close(abort=True)
            if isinstance(exc, TimeoutError):
                raise TimeoutError(f"connecting to {where} timed out") from None
            if isinstance(exc, OSError):
                raise ConnectionError(f"cannot connect to {where}: {exc}") from exc
            raise
        finally:
            self._connecting -= 1
            self._wake()
        [connection] = made
        if self._closed or connection.closed:  # closed meanwhile, or lost as it was made
            connection.close(abort=True)
            raise Disconnected(
                f"the connection to {self.authority} closed as it was made", answered=False
            )
        self.connections_made += 1
        self._open.add(connection)
        return connection

    async def _tunnel(self, connection: _Connection, context: ssl.SSLContext, proxy: Proxy) -> None:
        """Ask the proxy for a tunnel to the server, then speak TLS to the server through it."""
        lines = [f"CONNECT {self.authority} HTTP/1.1", f"Host: {self.authority}"]
        lines += [f"{name}: {value}" for name, value in proxy.headers]
        request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        status, _, _ = await connection.send(request, expect_body=True, tunnel=True)
        if not 200 <= status < 300:
            raise ConnectionError(f"the proxy refused a tunnel (HTTP {status})")
        assert connection.transport is not None
        transport = await asyncio.get_running_loop().start_tls(
            connection.transport,
            connection,
            context,
            server_hostname=self._server_hostname or self.host,
        )
        if transport is None:  # pragma: no cover - only for a transport closing meanwhile
            raise ConnectionError("the tunnel closed as TLS began")
        connection.transport = transport

    def _release(self, connection: _Connection) -> None:
        """Take back a connection whose exchange is complete: kept for the next one, or
        closed when the server asked to."""
        connection.used = True
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


def _wake_up(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _consume(done: asyncio.Future[Answer]) -> None:
    """Retrieve a streaming exchange's outcome (asyncio warns of one never retrieved)."""
    if not done.cancelled():
        done.exception()


def _expire(waiter: asyncio.Future[Any], what: str) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError(f"{what} within the request's timeout"))
