"""A TCP proxy on 127.0.0.1 that tests stop and start to simulate a database outage."""

from __future__ import annotations

import asyncio
import contextlib
from urllib.parse import urlsplit


class TcpProxy:
    """Forwards 127.0.0.1:<port> to the database; stop() kills it and every open link."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @classmethod
    def to(cls, url: str) -> TcpProxy:
        """A proxy (not started yet) to the host and port of a database URL."""
        target = urlsplit(url)
        return cls(target.hostname or "127.0.0.1", target.port or 5432)

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()
        await self._server.wait_closed()

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_connection(*self.target)
        except OSError:
            client_w.transport.abort()
            return
        self._writers |= {client_w, up_w}

        async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, asyncio.IncompleteReadError):
                while data := await reader.read(65536):
                    writer.write(data)
                    await writer.drain()
            writer.transport.abort()

        await asyncio.gather(pipe(client_r, up_w), pipe(up_r, client_w))
        self._writers -= {client_w, up_w}


def via_proxy(url: str, port: int) -> str:
    netloc = urlsplit(url).netloc
    userinfo = netloc.rsplit("@", 1)[0] + "@" if "@" in netloc else ""
    return url.replace(netloc, f"{userinfo}127.0.0.1:{port}", 1)
