"""The connection pool against a scripted server on loopback: each request read is answered
with the next scripted reply, byte for byte, so framing, reuse and failures are exact."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from daemon.kube.http import Disconnected, HttpPool, ProtocolError, Stream

pytestmark = pytest.mark.anyio

GET = b"GET /api/v1/pods HTTP/1.1\r\nHost: x\r\n\r\n"
HEAD = b"HEAD /api/v1/pods HTTP/1.1\r\nHost: x\r\n\r\n"


def post(body: bytes) -> tuple[bytes, bytes]:
    head = b"POST /api/v1/pods HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body)
    return head, body


# A reply: bytes written at once, a list of pieces written one by one, or a coroutine
# function given the writer (to stall, close, ...).
Reply = bytes | list[bytes] | Callable[[asyncio.StreamWriter], object]


@dataclass
class Server:
    replies: list[Reply]
    port: int = 0
    connections: int = 0
    open_now: int = 0
    most_open: int = 0
    requests: list[bytes] = field(default_factory=list)
    closed_by_client: int = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open_now += 1
        self.most_open = max(self.most_open, self.open_now)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    self.closed_by_client += 1
                    return
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                body = await reader.readexactly(length)
                self.requests.append(head + body)
                reply = self.replies.pop(0)
                if isinstance(reply, bytes):
                    writer.write(reply)
                elif isinstance(reply, list):
                    for piece in reply:
                        writer.write(piece)
                        await writer.drain()
                        await asyncio.sleep(0)
                else:
                    result = reply(writer)
                    if asyncio.iscoroutine(result):
                        await result
                    if writer.is_closing():
                        return
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            self.closed_by_client += 1
        finally:
            self.open_now -= 1
            writer.close()


@asynccontextmanager
async def serving(
    replies: list[Reply], context: ssl.SSLContext | None = None
) -> AsyncIterator[Server]:
    server = Server(list(replies))
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0, ssl=context)
    server.port = listener.sockets[0].getsockname()[1]
    try:
        yield server
    finally:
        listener.close()


def ok(body: bytes, *headers: bytes) -> bytes:
    extra = b"".join(h + b"\r\n" for h in headers)
    return b"HTTP/1.1 200 OK\r\n%sContent-Length: %d\r\n\r\n%s" % (extra, len(body), body)


CHUNKED = (
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"5;name=value\r\nhello\r\n"
    b"1\r\n \r\n"
    b"5\r\nworld\r\n"
    b"0\r\nX-Trailer: yes\r\n\r\n"
)


@pytest.mark.parametrize(
    ("replies", "request_", "expected", "connections"),
    [
        pytest.param([ok(b"{}"), ok(b"[1]")], GET, (200, b"{}", None), 1, id="content-length"),
        pytest.param([CHUNKED, ok(b"")], GET, (200, b"hello world", None), 1, id="chunked"),
        pytest.param(
            [[CHUNKED[i : i + 1] for i in range(len(CHUNKED))], ok(b"")],
            GET,
            (200, b"hello world", None),
            1,
            id="chunked-a-byte-at-a-time",
        ),
        pytest.param(
            [[ok(b'{"a": 1}')[:20], ok(b'{"a": 1}')[20:]], ok(b"")],
            GET,
            (200, b'{"a": 1}', None),
            1,
            id="head-split",
        ),
        pytest.param(
            [b"HTTP/1.1 204 No Content\r\n\r\n", ok(b"")], GET, (204, b"", None), 1, id="204"
        ),
        pytest.param(
            [b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b"done"), ok(b"")],
            GET,
            (200, b"done", None),
            1,
            id="interim-100",
        ),
        pytest.param(
            [
                b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 3\r\nContent-Length: 2\r\n\r\n{}",
                ok(b""),
            ],
            GET,
            (429, b"{}", "3"),
            1,
            id="retry-after",
        ),
        pytest.param(
            [b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", ok(b"")],
            HEAD,
            (200, b"", None),
            1,
            id="head-has-no-body",
        ),
        pytest.param(
            [ok(b"{}", b"Connection: close"), ok(b"")],
            GET,
            (200, b"{}", None),
            2,
            id="connection-close",
        ),
        pytest.param(
            [ok(b"{}", b"connection: Keep-Alive, Close"), ok(b"")],
            GET,
            (200, b"{}", None),
            2,
            id="connection-close-among-tokens",
        ),
    ],
)
async def test_answers_are_read_exactly_and_connections_reused(
    replies: list[Reply], request_: bytes, expected: tuple[int, bytes, str | None], connections: int
) -> None:
    """Each reply is followed by a second request: it reuses the connection unless the first
    answer closed it."""
    async with serving(replies) as server:
        pool = HttpPool("127.0.0.1", server.port)
        assert await pool.request(request_, None, within=5) == expected
        assert (await pool.request(GET, None, within=5))[0] == 200
        await pool.close()
    assert server.connections == connections
    assert pool.connections_made == connections


@pytest.mark.parametrize(("keepalive", "connections"), [(60.0, 1), (0.0, 3)])
async def test_a_connection_idle_too_long_is_not_reused(keepalive: float, connections: int) -> None:
    """Idle past `keepalive` (0: any idle time at all), a connection is closed, not written
    to: a middlebox may have dropped it silently."""
    async with serving([ok(b"")] * 3) as server:
        pool = HttpPool("127.0.0.1", server.port, keepalive=keepalive)
        for _ in range(3):
            assert (await pool.request(GET, None, within=5))[0] == 200
        await pool.close()
    assert server.connections == pool.connections_made == connections


async def test_a_body_up_to_the_end_of_the_connection() -> None:
    async def old_server(writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.0 200 OK\r\n\r\nall of it")
        await writer.drain()
        writer.close()

    async with serving([old_server, ok(b"")]) as server:
        pool = HttpPool("127.0.0.1", server.port)
        assert await pool.request(GET, None, within=5) == (200, b"all of it", None)
        assert (await pool.request(GET, None, within=5))[0] == 200
        await pool.close()
    assert server.connections == 2


async def test_the_request_body_arrives() -> None:
    head, body = post(b'{"kind": "Binding"}')
    async with serving([ok(b"{}")]) as server:
        pool = HttpPool("127.0.0.1", server.port)
        await pool.request(head, body, within=5)
        await pool.close()
    assert server.requests == [head + body]


def _drop_after(data: bytes) -> Callable[[asyncio.StreamWriter], object]:
    async def reply(writer: asyncio.StreamWriter) -> None:
        writer.write(data)
        await writer.drain()
        writer.close()

    return reply


@pytest.mark.parametrize(
    ("reply", "error", "fragment"),
    [
        pytest.param(b"HTTP/2 200\r\n\r\n", ProtocolError, "status line", id="not-http1"),
        pytest.param(b"HTTP/1.1 abc OK\r\n\r\n", ProtocolError, "status line", id="bad-status"),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", ProtocolError, "header", id="bad-header"
        ),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nContent-Length: -4\r\n\r\n",
            ProtocolError,
            "Content-Length",
            id="negative-length",
        ),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
            ProtocolError,
            "Content-Length",
            id="bad-length",
        ),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            ProtocolError,
            "chunk size",
            id="bad-chunk-size",
        ),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabcd\r\n",
            ProtocolError,
            "CRLF",
            id="chunk-overrun",
        ),
        pytest.param(ok(b"{}") + b"extra", ProtocolError, "after the end", id="trailing-bytes"),
        pytest.param(
            _drop_after(b'HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{"a"'),
            Disconnected,
            "before its answer was complete",
            id="truncated-body",
        ),
        pytest.param(
            _drop_after(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel"),
            Disconnected,
            "before its answer was complete",
            id="truncated-chunk",
        ),
        pytest.param(
            _drop_after(b""), Disconnected, "before its answer was complete", id="no-answer"
        ),
    ],
)
async def test_an_answer_that_cannot_be_read_fails_the_request_and_drops_the_connection(
    reply: Reply, error: type[Exception], fragment: str
) -> None:
    async with serving([reply, ok(b"next")]) as server:
        pool = HttpPool("127.0.0.1", server.port, limit=1)
        with pytest.raises(error, match=fragment) as caught:
            await pool.request(GET, None, within=5)
        assert isinstance(caught.value, OSError)  # what every caller handles as a failure
        # The next request gets a new connection and its own answer.
        assert await pool.request(GET, None, within=5) == (200, b"next", None)
        await pool.close()
    assert server.connections == 2


async def test_a_reused_connection_closed_before_answering_is_replaced_without_an_error() -> None:
    """A kept-alive connection that the server closes as the next request arrives (an API
    server's idle timeout racing the request): nothing was answered, so the request goes again
    on a new connection. A fresh connection closed the same way is an error."""
    async with serving([ok(b"first"), _drop_after(b""), ok(b"second")]) as server:
        pool = HttpPool("127.0.0.1", server.port)
        assert (await pool.request(GET, None, within=5))[1] == b"first"
        assert (await pool.request(GET, None, within=5))[1] == b"second"
        await pool.close()
    assert server.connections == 2
    assert len(server.requests) == 3


@pytest.mark.parametrize("give_up", ["timeout", "cancel"])
async def test_a_request_given_up_drops_its_connection(give_up: str) -> None:
    """No answer in time is a `TimeoutError`; a cancelled request ends at once. Either way
    the connection goes: a late answer must never be read as the next request's."""
    stalled = asyncio.Event()

    async def stall(writer: asyncio.StreamWriter) -> None:
        stalled.set()
        await asyncio.sleep(30)

    async with serving([stall, ok(b"next")]) as server:
        # One connection at most: one kept after giving up would block the next request.
        pool = HttpPool("127.0.0.1", server.port, limit=1)
        if give_up == "timeout":
            with pytest.raises(TimeoutError, match="no answer"):
                await pool.request(GET, None, within=0.2)
            assert stalled.is_set()
        else:
            task = asyncio.ensure_future(pool.request(GET, None, within=30))
            await stalled.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        assert await pool.request(GET, None, within=5) == (200, b"next", None)
        await pool.close()
    assert server.connections == 2


async def test_at_most_limit_connections_and_every_request_answered() -> None:
    async def slow(writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(0.01)
        writer.write(ok(b"{}"))

    async with serving([slow] * 20) as server:
        pool = HttpPool("127.0.0.1", server.port, limit=3)
        answers = await asyncio.gather(*(pool.request(GET, None, within=10) for _ in range(20)))
        await pool.close()
    assert [status for status, _, _ in answers] == [200] * 20
    assert server.most_open == 3
    assert pool.connections_made == 3


async def test_waiting_for_a_busy_pool_times_out() -> None:
    arrived, release = asyncio.Event(), asyncio.Event()

    async def held(writer: asyncio.StreamWriter) -> None:
        arrived.set()
        await release.wait()
        writer.write(ok(b"{}"))

    async with serving([held]) as server:
        pool = HttpPool("127.0.0.1", server.port, limit=1)
        first = asyncio.ensure_future(pool.request(GET, None, within=10))
        await arrived.wait()  # the one connection is taken
        with pytest.raises(TimeoutError, match="no free connection"):
            await pool.request(GET, None, within=0.1)
        release.set()
        assert (await first)[0] == 200
        await pool.close()


async def test_a_refused_connection_names_the_server() -> None:
    async with serving([]) as server:
        port = server.port
    pool = HttpPool("127.0.0.1", port)
    with pytest.raises(ConnectionError, match=f"cannot connect to 127.0.0.1:{port}"):
        await pool.request(GET, None, within=5)


async def test_a_connection_not_made_in_time_is_a_timeout() -> None:
    """A server that accepts but never finishes the TLS handshake."""

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()

    listener = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    try:
        pool = HttpPool("127.0.0.1", port, ssl_context=ssl.create_default_context())
        with pytest.raises(TimeoutError, match=f"connecting to 127.0.0.1:{port} timed out"):
            await pool.request(GET, None, within=0.2)
        assert pool.connections_made == 0
        await pool.close()
    finally:
        listener.close()


async def test_a_closed_pool_refuses_requests() -> None:
    async with serving([ok(b"")]) as server:
        pool = HttpPool("127.0.0.1", server.port)
        await pool.request(GET, None, within=5)
        await pool.close()
        with pytest.raises(ConnectionError, match="closed"):
            await pool.request(GET, None, within=5)


def test_a_pool_needs_room_for_a_connection() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        HttpPool("127.0.0.1", 1, limit=0)


async def test_tls_with_the_clusters_ca_and_refused_without_it(
    certificate: tuple[Path, Path],
) -> None:
    cert, key = certificate
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(cert, key)
    async with serving([ok(b"secure"), ok(b"")], server_context) as server:
        trusting = HttpPool(
            "127.0.0.1", server.port, ssl_context=ssl.create_default_context(cafile=cert)
        )
        assert await trusting.request(GET, None, within=5) == (200, b"secure", None)
        await trusting.close()
        strange = HttpPool("127.0.0.1", server.port, ssl_context=ssl.create_default_context())
        with pytest.raises(ConnectionError, match="certificate verify failed"):
            await strange.request(GET, None, within=5)
        await strange.close()


# -- streaming answers (watches) ---------------------------------------------------------------


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


STREAM_HEAD = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"


async def _read_all(stream: Stream) -> bytes:
    return b"".join([piece async for piece in stream])


async def test_a_stream_hands_on_each_piece_as_it_arrives_then_frees_its_connection() -> None:
    """The second piece is sent only once the first was read: nothing waits for the end."""
    first_read = asyncio.Event()

    async def watch(writer: asyncio.StreamWriter) -> None:
        writer.write(STREAM_HEAD + _chunk(b'{"type":"ADDED"}\n'))
        await writer.drain()
        await first_read.wait()
        writer.write(_chunk(b'{"type":"DELETED"}\n') + b"0\r\n\r\n")

    async with serving([watch, ok(b"after")]) as server:
        pool = HttpPool("127.0.0.1", server.port, limit=1)
        async with pool.stream(GET, within=5, idle=5) as stream:
            assert stream.status == 200
            assert await stream.read() == b'{"type":"ADDED"}\n'
            first_read.set()
            assert await _read_all(stream) == b'{"type":"DELETED"}\n'
        assert await pool.request(GET, None, within=5) == (200, b"after", None)
        await pool.close()
    assert server.connections == 1  # read to its end: the connection went back to the pool


@pytest.mark.parametrize(
    ("reply", "status", "body"),
    [
        pytest.param(
            _drop_after(b"HTTP/1.0 200 OK\r\n\r\nuntil the end"), 200, b"until the end", id="close"
        ),
        pytest.param(ok(b"whole", b"Connection: close"), 200, b"whole", id="content-length"),
        pytest.param(
            b"HTTP/1.1 410 Gone\r\nConnection: close\r\nContent-Length: 7\r\n\r\nExpired",
            410,
            b"Expired",
            id="refused",
        ),
    ],
)
async def test_a_stream_reads_any_framing_to_its_end(
    reply: Reply, status: int, body: bytes
) -> None:
    async with serving([reply]) as server:
        pool = HttpPool("127.0.0.1", server.port)
        async with pool.stream(GET, within=5, idle=5) as stream:
            assert stream.status == status
            assert await _read_all(stream) == body
            assert stream.ended
        await pool.close()


@pytest.mark.parametrize("ending", ["silence", "cut", "left-early"])
async def test_a_stream_that_does_not_end_drops_its_connection(ending: str) -> None:
    """The server goes silent past `idle` (a timeout), cuts the connection mid-body (a
    disconnection), or the reader leaves before the end: the connection never serves
    another request (at one connection at most, the next request still gets through)."""

    async def watch(writer: asyncio.StreamWriter) -> None:
        writer.write(STREAM_HEAD + _chunk(b"first\n"))
        await writer.drain()
        if ending == "cut":
            writer.close()
            return
        await asyncio.sleep(30)

    async with serving([watch, ok(b"next")]) as server:
        pool = HttpPool("127.0.0.1", server.port, limit=1)
        expected: type[Exception] = TimeoutError if ending == "silence" else Disconnected
        async with pool.stream(GET, within=5, idle=0.2) as stream:
            assert await stream.read() == b"first\n"
            if ending != "left-early":
                with pytest.raises(expected):
                    await stream.read()
        assert await pool.request(GET, None, within=5) == (200, b"next", None)
        await pool.close()
    assert server.connections == 2


async def test_a_stream_nobody_reads_stops_the_transport_until_it_is_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(Stream, "HIGH_WATER", 1024)
    pieces = [bytes([65 + i % 26]) * 1024 for i in range(64)]

    async def flood(writer: asyncio.StreamWriter) -> None:
        for piece in pieces:
            writer.write(_chunk(piece) if piece is not pieces[0] else STREAM_HEAD + _chunk(piece))
            await writer.drain()
        writer.write(b"0\r\n\r\n")

    async with serving([flood]) as server:
        pool = HttpPool("127.0.0.1", server.port)
        async with pool.stream(GET, within=5, idle=5) as stream:
            for _ in range(1000):  # until the pool has taken more than the high water mark
                if stream._paused:
                    break
                await asyncio.sleep(0.001)
            assert stream._paused
            assert await _read_all(stream) == b"".join(pieces)
        await pool.close()
