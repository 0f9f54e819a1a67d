"""A TCP proxy on 127.0.0.1 that passes everything on, except that it resets the client's
side of the first connection carrying a POST once that POST reached the server whole: the
server does the work, the client never hears the answer. Requests before it on the same
kept-alive connection (a card fetch, a login) pass untouched."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct


class PostResettingProxy:
    """127.0.0.1:<port> -> the server, passing everything on, except that the first
    connection carrying a POST is reset (RST) on the client's side once that POST went to
    the server whole (the card fetch before it, on the same kept-alive connection, passes)."""

    def __init__(self, target_port: int, port: int = 0) -> None:
        self.target_port = target_port
        self.port = port
        self.connections = 0
        self.reset_done = False
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> PostResettingProxy:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)

        async def down() -> None:
            with contextlib.suppress(OSError, asyncio.IncompleteReadError):
                while data := await up_reader.read(65536):
                    writer.write(data)
                    await writer.drain()
            writer.transport.abort()

        answers = asyncio.ensure_future(down())
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                up_writer.write(head + await reader.readexactly(length))
                await up_writer.drain()
                if head.startswith(b"POST ") and not self.reset_done:
                    self.reset_done = True
                    answers.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await answers
                    sock = writer.get_extra_info("socket")
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    writer.transport.abort()
                    await up_reader.read(65536)  # the server's answer, which nobody gets
                    break
        up_writer.close()
        with contextlib.suppress(asyncio.CancelledError):
            await answers
