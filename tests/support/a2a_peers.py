"""Processes for the outbound A2A tests: a stock a2a-sdk server, and a MAIL swarm whose
`relay` agent asks A2A agents registered as peers (`ASK <agent@peer> <text>`)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from server_fixtures import (
    REPO_ROOT,
    ServerProcess,
    create_key,
    free_port,
    server_env,
    write_config,
)
from support.hostile_a2a import STREAMS

PEERS = ("echoer", "plainer", "streamer", "doomed", "dying")
# The misbehaving agents of tests/support/hostile_a2a.py, registered by test_a2a_hostile_peers.
HOSTILE_PEERS = (
    "good",
    "huge",
    "redirect",
    "garbage",
    "elsewhere",
    "hugecard",
    "errorplain",
    *STREAMS,
)


@contextlib.contextmanager
def sample_a2a_process(directory: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The stock sample agents on a free loopback port: (base URL, process)."""
    port = free_port()
    log_path = directory / f"a2a-sample-{port}.log"
    log = log_path.open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.a2a_sample_server", str(port)],
        cwd=REPO_ROOT,
        env=server_env(),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise RuntimeError(log_path.read_text())
            try:
                if (
                    httpx.get(f"{base}/echo/.well-known/agent-card.json", timeout=1).status_code
                    == 200
                ):
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the sample A2A server did not start")
            time.sleep(0.05)
        yield base, proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(10)
        log.close()


@contextlib.contextmanager
def sample_a2a_server(directory: Path) -> Iterator[str]:
    """The stock sample agents on a free loopback port; yields the base URL."""
    with sample_a2a_process(directory) as (base, _):
        yield base


def relay_swarms_json(
    name: str = "hub", peers: tuple[str, ...] = PEERS, more_targets: tuple[str, ...] = ()
) -> list[dict[str, Any]]:
    """The relay swarm: `relay` may ask `echo@<peer>` and `stream@<peer>` of each peer, and
    the `more_targets` (e.g. `worker@beta` of a MAIL peer)."""
    factory = "python::tests.support.interswarm_agents:relay"
    return [
        {
            "name": name,
            "version": "1.0.0",
            "entrypoint": "relay",
            "enable_interswarm": True,
            "description": "asks A2A agents",
            "agents": [
                {
                    "name": "relay",
                    "factory": factory,
                    "comm_targets": [
                        *(f"{agent}@{peer}" for peer in peers for agent in ("echo", "stream")),
                        *more_targets,
                    ],
                    "agent_params": {},
                    "enable_entrypoint": True,
                    "can_complete_tasks": True,
                    "enable_interswarm": True,
                }
            ],
            "actions": [],
        }
    ]


def write_relay_swarm(
    directory: Path, peers: tuple[str, ...] = PEERS, more_targets: tuple[str, ...] = ()
) -> None:
    text = json.dumps(relay_swarms_json(peers=peers, more_targets=more_targets))
    (directory / "swarms.json").write_text(text, encoding="utf-8")


def hub_server(
    directory: Path,
    extra: str,
    peers: tuple[str, ...] = PEERS,
    more_targets: tuple[str, ...] = (),
) -> ServerProcess:
    """A `mail server` (not started) for the relay swarm `hub`, keys `admin` and `alice`."""
    write_relay_swarm(directory, peers, more_targets)
    keys_file = directory / "registries" / "keys.json"
    port = free_port()
    config = write_config(directory, port=port, swarm="hub", extra=extra)
    server = ServerProcess(directory, port, args=["--config", str(config)])
    server.keys = {
        "admin": create_key(keys_file, "admin", "root"),
        "alice": create_key(keys_file, "user", "alice"),
    }
    return server
