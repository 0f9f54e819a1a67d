"""A real `mail server` running `swarm-alpha` of `interswarm_agents` (interswarm on, with
`swarm-beta` as its remote), as the interswarm route tests start it."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

from tests.support.interswarm_agents import swarm_json

from server_fixtures import ServerProcess, create_key, free_port, write_config


@contextlib.contextmanager
def alpha_server(
    directory: Path, keys: dict[str, tuple[str, str]], *, extra: str = ""
) -> Iterator[ServerProcess]:
    """The server, with a key per entry of ``keys`` (name -> (role, id)) in ``server.keys``
    and ``extra`` added to its mail.toml's [server.settings]; stopped on exit."""
    (directory / "swarms.json").write_text(
        json.dumps(swarm_json("swarm-alpha", "swarm-beta")), encoding="utf-8"
    )
    port = free_port()
    config = write_config(directory, port=port, swarm="swarm-alpha", extra=extra)
    keys_file = directory / "registries" / "keys.json"
    server = ServerProcess(directory, port, args=["--config", str(config)])
    server.keys = {name: create_key(keys_file, role, id_) for name, (role, id_) in keys.items()}
    server.start()
    try:
        yield server
    finally:
        server.stop()
