"""A real `mail server` on the stub swarms that a test kills (SIGKILL) and starts again on the
same folder and store: for "acknowledged means stored" tests.

`KilledServers` owns one folder (swarms.json, alice's key, mail.toml) and the store's
environment; `kill_and_restart` kills the running server, no shutdown hook running, and starts
a new one on a fresh port. `tasks_gone_after_kill` is the loop most such tests run: do
something that is told a task exists, kill right after the answer, ask the new server for it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from server_fixtures import (
    ServerProcess,
    auth,
    create_key,
    free_port,
    write_config,
    write_stub_swarms,
)


class KilledServers:
    """One server folder and store, started again after each kill -9 (``server`` is the one
    running now). Use as a context manager, or call ``stop`` at the end."""

    def __init__(self, directory: Path, env: dict[str, str] | None = None) -> None:
        write_stub_swarms(directory)
        self.directory = directory
        self.env = env or {}
        self.keys = {"alice": create_key(directory / "registries" / "keys.json", "user", "alice")}
        self.headers = auth(self.keys["alice"])
        self.server = self.start()

    def start(self) -> ServerProcess:
        port = free_port()
        config = write_config(self.directory, port=port)
        server = ServerProcess(self.directory, port, args=["--config", str(config)], env=self.env)
        server.keys = self.keys
        return server.start()

    def kill_and_restart(self, delay: float = 0.0) -> None:
        """SIGKILL the running server ``delay`` seconds from now, then start a new one."""
        assert self.server.proc is not None
        if delay:
            time.sleep(delay)  # the delay under test, not a wait for something
        self.server.proc.kill()  # kill -9: no shutdown hook runs
        self.server.proc.wait(10)
        self.server = self.start()

    def get(self, path: str, **params: Any) -> httpx.Response:
        return httpx.get(
            f"{self.server.base_url}{path}", params=params, headers=self.headers, timeout=60
        )

    def post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        return httpx.post(
            f"{self.server.base_url}{path}", json=body, headers=self.headers, timeout=60
        )

    def stop(self) -> None:
        self.server.stop()

    def __enter__(self) -> KilledServers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def tasks_gone_after_kill(
    directory: Path, tries: int, act: Callable[[ServerProcess], str]
) -> list[str]:
    """``tries`` rounds of: ``act`` (which checks its answer and returns the id of the task it
    was told exists), kill -9 right after, restart; what ``GET /task`` of the new server did
    not find ("status task_id")."""
    lost: list[str] = []
    with KilledServers(directory) as servers:
        for _ in range(tries):
            task_id = act(servers.server)
            servers.kill_and_restart()
            found = servers.get("/task", task_id=task_id)
            if found.status_code != 200:
                lost.append(f"{found.status_code} {task_id}")
    return lost
