"""A proxy in front of a real kube-apiserver that strikes the simulated cluster's request and
watch faults on real traffic.

A real kube-apiserver has no switch to drop a watch, stall it, answer a storm of 409s, 429s
and 500s, cut a request or delay it. The daemon's requests and watches go through this proxy
instead, which draws those faults from one seeded `daemon.sim.faults.Faults`, as the simulated
cluster does, and passes everything else on as the server answered it: so a fault that
struck the simulated cluster strikes the real one the same way, and what follows (a retried
create answered ``AlreadyExists``, a resumed watch answered ``410 Gone``) is the real
server's.

- A watch stream is dropped (ended) or stalled (left open and silent until the client gives
  up) after a batch of events, as it came from the server: whole lines only.
- 409, 429 and 500 are answered in the server's place: the request never reaches it.
- A cut request's connection is closed without an answer, before the request is passed on or
  after the server acted on it.
- Latency delays a request before it is passed on.

Requests for what the simulated cluster does not serve (discovery, version) pass untouched."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Final

import aiohttp
from aiohttp import web

from daemon.sim.faults import Faults
from daemon.sim.server import cut, is_true, route_of, status_response
from daemon.sim.watching import until_gone

# Passed on each way. The rest (connection, transfer and content encodings) belongs to each
# of the proxy's two connections.
REQUEST_HEADERS: Final = ("Authorization", "Accept", "Content-Type", "User-Agent")
RESPONSE_HEADERS: Final = ("Content-Type", "Retry-After", "Warning", "Audit-Id")


def _passed(headers: Mapping[str, str], names: tuple[str, ...]) -> dict[str, str]:
    return {name: headers[name] for name in names if name in headers}


class FaultProxy:
    """Forwards each request to `upstream`, striking `faults` on the way."""

    def __init__(self, upstream: str, faults: Faults, session: aiohttp.ClientSession) -> None:
        self.upstream = upstream.rstrip("/")
        self.faults = faults
        self._session = session

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        route = route_of(request.path)
        if route is None:
            return await self._forward(request)
        if self.faults.latency:
            await asyncio.sleep(self.faults.latency)
        error = self.faults.request_error(
            request.method, route.resource, route.name, route.namespace
        )
        if error is not None:
            return status_response(error)
        if is_true(request.query.get("watch")):
            return await self._watch(request)
        drop = self.faults.request_drop()
        if drop == "before":
            cut(request)
        response = await self._forward(request)
        if drop == "after":
            cut(request)
        return response

    async def _forward(self, request: web.BaseRequest) -> web.Response:
        async with self._session.request(
            request.method,
            self.upstream + request.path_qs,
            headers=_passed(request.headers, REQUEST_HEADERS),
            data=await request.read(),
        ) as upstream:
            body = await upstream.read()
            headers = _passed(upstream.headers, RESPONSE_HEADERS)
            return web.Response(body=body, status=upstream.status, headers=headers)

    async def _watch(self, request: web.BaseRequest) -> web.StreamResponse:
        """The server's watch stream, batch by batch, until it ends or a fault ends or stalls
        it."""
        stalled = False
        async with self._session.get(
            self.upstream + request.path_qs, headers=_passed(request.headers, REQUEST_HEADERS)
        ) as upstream:
            headers = _passed(upstream.headers, RESPONSE_HEADERS)
            if upstream.status != 200:
                return web.Response(
                    body=await upstream.read(), status=upstream.status, headers=headers
                )
            response = web.StreamResponse(status=200, headers=headers)
            await response.prepare(request)
            partial = b""
            async for chunk in upstream.content.iter_any():
                lines, newline, partial = (partial + chunk).rpartition(b"\n")
                if not newline:
                    continue
                await response.write(lines + newline)
                if self.faults.drop_watch_now():
                    break
                if self.faults.stall_watch_now():
                    stalled = True
                    break
        if stalled:
            await until_gone(request)
        return response


@asynccontextmanager
async def fault_proxy(
    upstream: str,
    faults: Faults,
    *,
    upstream_tls: ssl.SSLContext | None = None,
    serving_tls: ssl.SSLContext | None = None,
) -> AsyncIterator[str]:
    """The proxy serving on a free loopback port until the block ends; yields its URL."""
    # No cap on connections to the server, and no deadline: a watch lasts as long as the
    # client and server keep it.
    connector = aiohttp.TCPConnector(limit=0, ssl=upstream_tls or True)
    timeout = aiohttp.ClientTimeout(total=None)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        proxy = FaultProxy(upstream, faults, session)
        # A client gone ends its request here too, as it ends the server's side of it: the
        # watch it had open upstream is closed, not left waiting for the server's timeout.
        server = web.Server(proxy.handle, handler_cancellation=True, access_log=None)
        runner = web.ServerRunner(server, handle_signals=False, shutdown_timeout=1.0)
        await runner.setup()
        try:
            site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=serving_tls)
            await site.start()
            host, port = runner.addresses[0][:2]
            yield f"{'https' if serving_tls else 'http'}://{host}:{port}"
        finally:
            await runner.cleanup()
