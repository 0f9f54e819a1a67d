"""A real `mail server` on PostgreSQL that reaches its database through a TCP proxy the test
stops (connection refused: the database is away) and starts again on the same port."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.stub_agents import stub_swarms_json
from tests.support.tcp_proxy import TcpProxy, via_proxy

from server_fixtures import ServerProcess, create_key, free_port, write_config


class ThreadedProxy:
    """`TcpProxy` on an event loop of its own thread (the test itself is synchronous)."""

    def __init__(self, url: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.proxy = TcpProxy.to(url)
        self.up = False

    def _run(self, coro: Any) -> None:
        asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    def start(self) -> None:
        self._run(self.proxy.start())
        self.up = True

    def stop(self) -> None:
        self._run(self.proxy.stop())
        self.up = False

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@dataclass
class BehindProxy:
    server: ServerProcess  # running, DATABASE_URL through the proxy
    proxy: ThreadedProxy  # up at the start
    key: str  # alice's API key
    config: Path  # the server's mail.toml (a test may start another server on it)

    @property
    def url(self) -> str:
        return self.server.base_url


@contextlib.contextmanager
def server_behind_proxy(
    directory: Path, database: str, swarm_prefix: str, *, extra: str = ""
) -> Iterator[BehindProxy]:
    """A stub swarm named ``swarm_prefix``-<random> (a swarm of its own in a shared database),
    alice's key, ``extra`` added to the mail.toml, the server started. On exit the proxy is
    brought back if the test left it down (so the server can stop), the server must stop
    cleanly (exit 0), then the proxy goes."""
    swarm = f"{swarm_prefix}-{uuid.uuid4().hex[:8]}"
    (directory / "swarms.json").write_text(json.dumps(stub_swarms_json(swarm)), "utf-8")
    key = create_key(directory / "registries" / "keys.json", "user", "alice")
    proxy = ThreadedProxy(database)
    proxy.start()
    port = free_port()
    config = write_config(directory, port=port, swarm=swarm, extra=extra)
    server = ServerProcess(
        directory,
        port,
        args=["--config", str(config)],
        env={"DATABASE_URL": via_proxy(database, proxy.proxy.port)},
    )
    server.start()
    try:
        yield BehindProxy(server, proxy, key, config)
    finally:
        if not proxy.up:
            proxy.start()
        assert server.stop() == 0, server.logs()[-3000:]
        proxy.stop()
        proxy.close()
