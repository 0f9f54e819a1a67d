"""A real `mail server` over the review swarm (support.review_swarm) and a scripted model:
the module fixture several HTTP tests share, started as a user would, from a scratch folder."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path

from server_fixtures import ServerProcess, create_key, free_port, write_config
from support.review_swarm import review_swarms_json


@contextlib.contextmanager
def review_server(
    directory: Path,
    llm_url: str,
    users: Iterable[str],
    *,
    prefix: str,
    team_tools: list[str] | None = None,
    extra: str = "",
) -> Iterator[ServerProcess]:
    """Start the server with one user key per name in `users` (``srv.keys``); on exit it must
    stop cleanly (exit status 0)."""
    swarm = f"{prefix}-{uuid.uuid4().hex[:8]}"
    definition = review_swarms_json(swarm, llm_url)
    if team_tools is not None:
        for agent in definition["agents"]:
            agent["team_tools"] = team_tools
    (directory / "swarms.json").write_text(json.dumps([definition]), encoding="utf-8")
    keys_file = directory / "registries" / "keys.json"
    keys = {user: create_key(keys_file, "user", user) for user in users}
    port = free_port()
    config = write_config(directory, port=port, swarm=swarm, extra=extra)
    srv = ServerProcess(directory, port, args=["--config", str(config)])
    srv.keys = keys
    srv.start()
    try:
        yield srv
    finally:
        assert srv.stop(timeout=60) == 0, srv.logs()


class ReviewRestarts:
    """The review swarm (support.review_swarm, its model at `llm_url`) configured in
    `directory` for servers started one after another on one port and one store (`env`):
    the kill -9 tests start one, kill it, and start the next (`server()`)."""

    def __init__(self, directory: Path, llm_url: str, env: dict[str, str], api: str) -> None:
        swarm = f"review-{uuid.uuid4().hex[:8]}"
        self.directory = directory
        self.env = env
        self.port = free_port()
        self.key = create_key(directory / "registries" / "keys.json", "user", "alice")
        definition = review_swarms_json(swarm, llm_url, api)
        (directory / "swarms.json").write_text(json.dumps([definition]), encoding="utf-8")
        self.config = write_config(directory, port=self.port, swarm=swarm)

    def server(self) -> ServerProcess:
        return ServerProcess(
            self.directory, self.port, args=["--config", str(self.config)], env=self.env
        )
