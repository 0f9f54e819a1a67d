"""A load balancer on 127.0.0.1 that sends each new TCP connection to the next front end.

Connections are spread in turn over the targets (front end 0, 1, 0, ...), so consecutive
requests of a client that opens a connection per request land on different front ends. It
runs its own event loop in a daemon thread, so synchronous tests can use it as a plain port.

Each direction is relayed on plain non-blocking sockets, and a side that ends (EOF, or a
reset) half-closes the other once what it sent is delivered, as a real balancer does. So a
response a server sent before resetting the connection (a 413 to a body it will not read)
still reaches the client. asyncio's transports and streams lose it: a failed write closes
the transport without reading what the socket still holds, and a stream reader raises the
reset before the data it buffered.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket
import threading


class RoundRobinProxy:
    def __init__(self, targets: list[int], port: int = 0) -> None:
        self.targets = list(targets)
        self.port = port
        self.connections = [0] * len(self.targets)
        self._turn = itertools.cycle(range(len(self.targets)))
        self._loop = asyncio.new_event_loop()
        self._listener: socket.socket | None = None
        self._accepting: asyncio.Task[None] | None = None
        self._relays: set[asyncio.Task[None]] = set()
        self._sockets: set[socket.socket] = set()
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
        listener = socket.create_server(("127.0.0.1", self.port))
        listener.setblocking(False)
        self._listener = listener
        self.port = listener.getsockname()[1]
        self._accepting = self._loop.create_task(self._accept())

    async def _close(self) -> None:
        if self._accepting is not None:
            self._accepting.cancel()
        if self._listener is not None:
            self._listener.close()
        for task in list(self._relays):
            task.cancel()
        await asyncio.gather(*self._relays, return_exceptions=True)
        for sock in list(self._sockets):
            _abort(sock)

    async def _accept(self) -> None:
        assert self._listener is not None
        while True:
            client, _ = await self._loop.sock_accept(self._listener)
            task = self._loop.create_task(self._relay(client))
            self._relays.add(task)
            task.add_done_callback(self._relays.discard)

    async def _relay(self, client: socket.socket) -> None:
        client.setblocking(False)
        self._sockets.add(client)
        index = next(self._turn)
        self.connections[index] += 1
        upstream = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        upstream.setblocking(False)
        self._sockets.add(upstream)
        try:
            try:
                await self._loop.sock_connect(upstream, ("127.0.0.1", self.targets[index]))
            except OSError:
                _abort(client)
                return
            await asyncio.gather(self._pipe(client, upstream), self._pipe(upstream, client))
        finally:
            for sock in (client, upstream):
                self._sockets.discard(sock)
                sock.close()

    async def _pipe(self, source: socket.socket, target: socket.socket) -> None:
        """Relay ``source`` to ``target`` until ``source`` ends (or ``target`` stops taking
        data), then half-close ``target``: what ``source`` sent before it ended is delivered."""
        with contextlib.suppress(OSError):
            while data := await self._loop.sock_recv(source, 65536):
                await self._loop.sock_sendall(target, data)
        with contextlib.suppress(OSError):
            target.shutdown(socket.SHUT_WR)


def _abort(sock: socket.socket) -> None:
    """Close with a reset (as a killed process's connections end)."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    sock.close()
