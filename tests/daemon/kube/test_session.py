"""What a user of `KubeApi` sees of the HTTP underneath: every request's headers and body, a
dropped connection asked again, an answer that cannot be read or comes too late as one line
naming the server, a watch cut or gone silent. Against servers on loopback: aiohttp's for what
a request carries, a scripted one (each request answered with the next scripted reply, byte for
byte) for what a broken server does."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web

from daemon.kube.api import PATCH_TYPES, KubeApi, StreamStalled
from daemon.kube.ingest import INGEST_ERRORS, error_code
from tests.daemon.kube.test_api import answering, write_kubeconfig

pytestmark = pytest.mark.anyio

# A reply: bytes written at once, or a coroutine function given the writer (to stall, to
# write in pieces, to close).
Reply = bytes | Callable[[asyncio.StreamWriter], object]


@dataclass
class Scripted:
    replies: list[Reply]
    port: int = 0
    connections: int = 0
    requests: list[bytes] = field(default_factory=list)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                self.requests.append(head + await reader.readexactly(length))
                reply = self.replies.pop(0)
                if isinstance(reply, bytes):
                    writer.write(reply)
                else:
                    result = reply(writer)
                    if asyncio.iscoroutine(result):
                        await result
                    if writer.is_closing():
                        return
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


@asynccontextmanager
async def scripted(tmp_path: Path, replies: list[Reply]) -> AsyncIterator[tuple[Scripted, KubeApi]]:
    """A scripted server, and a `KubeApi` connected to it by a kubeconfig."""
    server = Scripted(list(replies))
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    server.port = listener.sockets[0].getsockname()[1]
    kubeconfig = write_kubeconfig(
        tmp_path / "kubeconfig", {"server": f"http://127.0.0.1:{server.port}"}
    )
    try:
        async with KubeApi.connect("c", kubeconfig, None) as api:
            yield server, api
    finally:
        listener.close()


def ok(body: bytes, *headers: bytes) -> bytes:
    extra = b"".join(h + b"\r\n" for h in headers)
    return b"HTTP/1.1 200 OK\r\n%sContent-Length: %d\r\n\r\n%s" % (extra, len(body), body)


def drop_after(data: bytes) -> Callable[[asyncio.StreamWriter], object]:
    async def reply(writer: asyncio.StreamWriter) -> None:
        writer.write(data)
        await writer.drain()
        writer.close()

    return reply


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


STREAM_HEAD = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"


# -- what a request carries ------------------------------------------------------------------------


@pytest.mark.parametrize("patch_type", sorted(PATCH_TYPES))
async def test_a_patch_carries_its_content_type_trace_context_user_agent_and_body(
    tmp_path: Path, patch_type: str
) -> None:
    seen: list[tuple[dict[str, str], bytes]] = []

    async def record(request: web.Request) -> web.Response:
        seen.append((dict(request.headers), await request.read()))
        return web.json_response({}, status=200)

    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    body = [{"op": "add", "path": "/metadata/labels/a", "value": "b"}]
    async with answering(record) as port:
        kubeconfig = write_kubeconfig(
            tmp_path / "kubeconfig", {"server": f"http://127.0.0.1:{port}"}
        )
        async with KubeApi.connect("c", kubeconfig, None) as api:
            answer = await api.request(
                "PATCH",
                "/api/v1/namespaces/default/pods/p",
                body=body,
                content_type=PATCH_TYPES[patch_type],
                headers={"traceparent": traceparent},
            )
    assert answer.ok
    [(headers, sent)] = seen
    assert headers["Content-Type"] == PATCH_TYPES[patch_type]
    assert headers["traceparent"] == traceparent
    assert headers["User-Agent"].startswith("OpenAPI-Generator/")  # the client library's
    assert headers["Content-Length"] == str(len(sent))
    assert "Accept-Encoding" not in headers  # answers come uncompressed, as they always have
    assert json.loads(sent) == body


async def test_retry_after_is_read_from_the_answer(tmp_path: Path) -> None:
    refusal = b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 3\r\nContent-Length: 2\r\n\r\n{}"
    async with scripted(tmp_path, [refusal]) as (_, api):
        answer = await api.request("GET", "/api/v1/pods")
    assert (answer.status, answer.body, answer.retry_after) == (429, b"{}", 3.0)


# -- a server that drops, garbles or stalls -------------------------------------------------------


@pytest.mark.parametrize("method", ["GET", "POST", "PATCH", "PUT"])
async def test_a_kept_alive_connection_the_server_drops_unanswered_is_asked_again(
    tmp_path: Path, method: str
) -> None:
    """The server closes a kept-alive connection as the next request arrives (its idle timeout
    racing the request): nothing was answered, so the request goes again on a new connection
    and its caller sees only the answer."""
    async with scripted(tmp_path, [ok(b"first"), drop_after(b""), ok(b"second")]) as (
        server,
        api,
    ):
        assert (await api.request(method, "/api/v1/pods", body={})).body == b"first"
        assert (await api.request(method, "/api/v1/pods", body={})).body == b"second"
    assert server.connections == 2
    assert len(server.requests) == 3


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(b"HTTP/2 200\r\n\r\n", id="not-http1"),
        pytest.param(b"HTTP/1.1 abc OK\r\n\r\n", id="bad-status"),
        pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", id="bad-length"),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 7\r\n\r\n{}",
            id="two-lengths",
        ),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", id="bad-chunk-size"
        ),
        pytest.param(
            drop_after(b'HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{"a"'), id="truncated-body"
        ),
        pytest.param(
            drop_after(STREAM_HEAD + b"5\r\nhel"),
            id="truncated-chunk",
        ),
    ],
)
async def test_an_answer_that_cannot_be_read_is_one_line_and_the_next_request_gets_its_own(
    tmp_path: Path, reply: Reply
) -> None:
    async with scripted(tmp_path, [reply, ok(b"next")]) as (server, api):
        with pytest.raises(ConnectionError) as caught:
            await api.request("POST", "/api/v1/pods", body={})
        message = str(caught.value)
        assert message.startswith(f"127.0.0.1:{server.port}: ")
        assert "\n" not in message
        assert isinstance(caught.value, INGEST_ERRORS)
        assert (await api.request("GET", "/api/v1/pods")).body == b"next"
    assert server.connections == 2


@pytest.mark.parametrize("give_up", ["timeout", "cancel"])
async def test_a_request_given_up_never_reads_its_late_answer_as_the_next_ones(
    tmp_path: Path, give_up: str
) -> None:
    """No answer in time is a `TimeoutError`; a cancelled request ends at once. Either way the
    next request gets its own answer."""
    stalled = asyncio.Event()

    async def stall(writer: asyncio.StreamWriter) -> None:
        stalled.set()
        await asyncio.sleep(0.5)
        writer.write(ok(b"late"))

    async with scripted(tmp_path, [stall, ok(b"next")]) as (_, api):
        if give_up == "timeout":
            with pytest.raises(TimeoutError, match=r"no answer within 0\.2 s"):
                await api.request("GET", "/api/v1/pods", request_timeout=0.2)
        else:
            task = asyncio.ensure_future(api.request("GET", "/api/v1/pods"))
            await stalled.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        assert (await api.request("GET", "/api/v1/pods")).body == b"next"


async def test_a_refused_connection_is_one_line_naming_the_server(tmp_path: Path) -> None:
    listener = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    listener.close()
    await listener.wait_closed()
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", {"server": f"http://127.0.0.1:{port}"})
    async with KubeApi.connect("c", kubeconfig, None) as api:
        with pytest.raises(ConnectionError) as caught:
            await api.request("GET", "/version")
    message = str(caught.value)
    assert message.startswith(f"cannot connect to 127.0.0.1:{port}: ")
    assert "\n" not in message


async def test_a_certificate_nobody_vouches_for_is_one_line_naming_the_server(
    tmp_path: Path, certificate: tuple[Path, Path]
) -> None:
    cert, key = certificate
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert, key)

    async def hello(request: web.Request) -> web.Response:
        return web.json_response({})

    async with answering(hello, tls) as port:
        server = f"https://127.0.0.1:{port}"
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", {"server": server})
        async with KubeApi.connect("c", kubeconfig, None) as api:
            with pytest.raises(ConnectionError) as caught:
                await api.request("GET", "/version")
    message = str(caught.value)
    assert message.startswith(f"cannot connect to 127.0.0.1:{port}: ")
    assert "certificate verify failed" in message
    assert "\n" not in message


# -- watches ------------------------------------------------------------------------------------


async def _watch(
    api: KubeApi, read_timeout: float = 5, into: list[bytes] | None = None
) -> list[bytes]:
    """A watch's lines, collected `into` a list (to see them when the watch fails)."""
    lines = [] if into is None else into
    async for read in api.stream_lines(
        "/api/v1/pods", {"watch": "true"}, connect_timeout=5, read_timeout=read_timeout
    ):
        lines.extend(read)
    return lines


@pytest.mark.parametrize("ending", ["cut", "silence"])
async def test_a_watch_cut_or_silent_mid_stream_fails_after_its_lines_and_can_be_resumed(
    tmp_path: Path, ending: str
) -> None:
    """The lines before the cut are handed on; then a connection error (or, for a stream gone
    silent past the read timeout, `StreamStalled`): both are failures the informer watches
    again after, and the next watch on the same client gets its lines."""

    async def watch(writer: asyncio.StreamWriter) -> None:
        writer.write(STREAM_HEAD + chunk(b'{"n":1}\n{"n":2}\n{"n"'))
        await writer.drain()
        if ending == "cut":
            writer.close()
        else:
            await asyncio.sleep(30)

    rest = STREAM_HEAD + chunk(b'{"n":3}\n') + b"0\r\n\r\n"
    async with scripted(tmp_path, [watch, rest]) as (_, api):
        lines: list[bytes] = []
        expected = StreamStalled if ending == "silence" else ConnectionError
        with pytest.raises(expected) as caught:
            await _watch(api, 0.3, lines)
        assert lines == [b'{"n":1}', b'{"n":2}']
        assert "\n" not in str(caught.value)
        assert isinstance(caught.value, INGEST_ERRORS)
        assert await _watch(api) == [b'{"n":3}']


async def test_a_watch_never_answered_times_out_as_a_server_that_does_not_answer(
    tmp_path: Path,
) -> None:
    """No answer at all within the read timeout is the server's silence (a timeout, which
    counts towards "cannot reach the cluster"), not a stream that stalled."""

    async def silent(writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(30)

    async with scripted(tmp_path, [silent]) as (_, api):
        with pytest.raises(TimeoutError) as caught:
            await _watch(api, 0.3)
    assert error_code(caught.value) == "timeout"


async def test_a_watch_line_longer_than_any_read_buffer_arrives_whole(tmp_path: Path) -> None:
    big = b'{"annotations":"' + b"x" * 600_000 + b'"}'
    reply = STREAM_HEAD + chunk(big[:1000]) + chunk(big[1000:] + b"\n{}\n") + b"0\r\n\r\n"
    async with scripted(tmp_path, [reply]) as (_, api):
        assert await _watch(api) == [big, b"{}"]
