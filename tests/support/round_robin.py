"""A load balancer on 127.0.0.1 that sends each new TCP connection to the next front end.

Connections are spread in turn over the targets (front end 0, 1, 0, ...), so consecutive
requests of a client that opens a connection per request land on different front ends. It
runs its own event loop in a daemon thread, so synchronous tests can use it as a plain port.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading


class RoundRobinProxy:
    def __init__(self, targets: list[int], port: int = 0) -> None:
        self.targets = list(targets)
        self.port = port
        self.connections = [0] * len(self.targets)
        self._turn = itertools.cycle(range(len(self.targets)))
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def start(self) -> RoundRobinProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(10)
        return self

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _close(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        await self._server.wait_closed()

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        index = next(self._turn)
        self.connections[index] += 1
        try:
            up_r, up_w = await asyncio.open_connection("127.0.0.1", self.targets[index])
        except OSError:
            client_w.transport.abort()
            return
        self._writers |= {client_w, up_w}

        async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, asyncio.IncompleteReadError):
                while data := await reader.read(65536):
                    writer.write(data)
                    await writer.drain()
            # Half-close first so a response still in flight the other way is delivered.
            with contextlib.suppress(OSError):
                if writer.can_write_eof():
                    writer.write_eof()

        try:
            await asyncio.gather(pipe(client_r, up_w), pipe(up_r, client_w))
        finally:
            for writer in (client_w, up_w):
                writer.transport.abort()
            self._writers -= {client_w, up_w}
