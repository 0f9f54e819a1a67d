"""A path-prefix reverse proxy on 127.0.0.1, the layout of `https://host/mail` deployments.

`GET /mail/health` is forwarded to `<upstream>/health`, and so on for every method; anything
outside the prefix gets a 404 from the proxy itself. Response bodies are relayed chunk by
chunk as they arrive (server-sent events pass through live). It runs on its own event loop
in a thread, so synchronous tests can use it; `paths` records what it forwarded.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import aiohttp
from aiohttp import web

# Hop-by-hop headers (RFC 9110 7.6.1) and the ones aiohttp sets itself.
_SKIP = {
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "proxy-authorization",
    "proxy-authenticate",
    "host",
    "content-length",
}


class PrefixProxy:
    def __init__(self, upstream: str, prefix: str = "/mail") -> None:
        self.upstream = upstream.rstrip("/")
        self.prefix = prefix.rstrip("/")
        self.port = 0
        self.paths: list[str] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.prefix}"

    def start(self) -> PrefixProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def __enter__(self) -> PrefixProxy:
        return self.start()

    def __exit__(self, *_: Any) -> None:
        self.stop()

    async def _start(self) -> None:
        self._session = aiohttp.ClientSession(auto_decompress=False)
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server  # noqa: SLF001 - the only way to learn the bound port
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        if path != self.prefix and not path.startswith(self.prefix + "/"):
            return web.json_response({"detail": f"proxy: no route for {path}"}, status=404)
        tail = path[len(self.prefix) :] or "/"
        self.paths.append(tail)
        url = self.upstream + tail + (f"?{request.query_string}" if request.query_string else "")
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _SKIP}
        assert self._session is not None
        body = await request.read()
        try:
            return await self._relay(request, url, headers, body)
        except aiohttp.ClientConnectionError as exc:
            # What nginx and friends answer when the upstream is down.
            return web.json_response({"detail": f"proxy: upstream down: {exc}"}, status=502)

    async def _relay(
        self, request: web.Request, url: str, headers: dict[str, str], body: bytes
    ) -> web.StreamResponse:
        assert self._session is not None
        async with self._session.request(
            request.method, url, headers=headers, data=body or None, allow_redirects=False
        ) as upstream:
            response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            for key, value in upstream.headers.items():
                if key.lower() not in _SKIP:
                    response.headers[key] = value
            await response.prepare(request)
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response
