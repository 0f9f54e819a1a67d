"""A TCP proxy on 127.0.0.1 that resets the client's first connections after passing their
request on whole: the server does the work, the client never hears the answer (what a client
retrying with an Idempotency-Key must survive)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct


class ResettingProxy:
    """127.0.0.1:<port> -> the server. The first `resets` connections: the client's request
    is passed on whole, then the client's side is reset (RST) while the server's side stays
    open until the server answered (so the server does the work; the client never hears)."""

    def __init__(self, target_port: int, resets: int = 1) -> None:
        self.target_port = target_port
        self.resets = resets
        self.connections = 0
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> ResettingProxy:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        if self.connections <= self.resets:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                (
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                ),
                0,  # a request without a body (a DELETE)
            )
            up_writer.write(head + await reader.readexactly(length))
            await up_writer.drain()
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()  # RST: "connection reset by peer" for the client
            with contextlib.suppress(OSError, asyncio.IncompleteReadError):
                await up_reader.read(65536)  # the server's answer, which nobody gets
            up_writer.close()
            return

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, asyncio.IncompleteReadError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.transport.abort()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
