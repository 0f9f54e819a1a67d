"""Registering an A2A peer whose card arrives a byte at a time (issue 39, item 13): the whole
read of the card has a deadline (`[stdlib.http] total_timeout`, at most the registry's 10 s
check), and it stops as soon as the admin's request ends."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from server_fixtures import ServerProcess, auth
from support.a2a_peers import hub_server
from support.hostile_a2a import HostileA2A

pytestmark = pytest.mark.timeout(120)

DEADLINE = 8  # seconds ([stdlib.http] total_timeout)
EXTRA = f"""
[stdlib.net]
allowed_hosts = ["127.0.0.1"]

[stdlib.http]
total_timeout = {DEADLINE}
"""


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, HostileA2A]]:
    server = hub_server(tmp_path_factory.mktemp("a2a_card_deadline"), EXTRA, peers=())
    with HostileA2A() as hostile:
        server.start()
        try:
            yield server, hostile
        finally:
            assert server.stop() == 0, server.logs()


def _register(server: ServerProcess, name: str, base_url: str, timeout: float) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/swarms",
        json={"name": name, "base_url": base_url, "metadata": {"kind": "a2a"}, "volatile": True},
        headers=auth(server.keys["admin"]),
        timeout=timeout,
    )


def test_a_card_that_drips_is_given_up_at_the_deadline(
    world: tuple[ServerProcess, HostileA2A],
) -> None:
    server, hostile = world
    started = time.monotonic()
    r = _register(server, "drip", f"{hostile.url}/drip", timeout=DEADLINE + 30)
    took = time.monotonic() - started
    assert r.status_code == 500, r.text
    assert f"reading the card took longer than {DEADLINE}s" in r.text, r.text
    assert DEADLINE - 1 < took < DEADLINE + 10, took
    # The read was stopped there: the agent saw its reader hang up.
    assert hostile.closed_by_caller["drip"].wait(5)
    registry = httpx.get(f"{server.base_url}/swarms/registry", headers=auth(server.keys["admin"]))
    assert "drip" not in [entry["swarm_name"] for entry in registry.json()["swarms"]]


def test_the_read_stops_when_the_admin_goes_away(world: tuple[ServerProcess, HostileA2A]) -> None:
    server, hostile = world
    started = time.monotonic()
    with pytest.raises(httpx.TimeoutException):
        _register(server, "dripleft", f"{hostile.url}/dripleft", timeout=1)
    left = time.monotonic() - started
    # Well before the deadline, the server stopped reading the card.
    assert hostile.closed_by_caller["dripleft"].wait(DEADLINE - left - 2), (
        "the card was still being read after the admin's request ended"
    )
