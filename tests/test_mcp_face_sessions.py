"""MCP sessions are shared out per caller ([server.mcp] max_sessions_per_caller), on a real
`mail server`: one user's thousand bare ``initialize`` calls take only that user's share, the
idle ones first, and another user still joins with the `mcp` SDK's own client. A caller
whose sessions are all in use is refused with 429 rather than ending a live one."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from mcp_face_support import ACCEPT, INITIALIZE, mcp_agent
from server_fixtures import keyed_stub_server

pytestmark = [pytest.mark.timeout(240)]

SHARE = 4
SERVER_WIDE = 10
KEYS = {"mallory": ("user", "mallory"), "alice": ("user", "alice"), "carol": ("user", "carol")}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    extra = (
        f"[server.mcp]\nmax_sessions = {SERVER_WIDE}\nmax_sessions_per_caller = {SHARE}\n"
        "session_idle_timeout = 1800\n"
    )
    with keyed_stub_server(tmp_path_factory.mktemp("mcp-sessions"), KEYS, extra=extra) as srv:
        yield srv


@contextlib.asynccontextmanager
async def bare_client(server: Any, who: str) -> AsyncIterator[httpx.AsyncClient]:
    headers = {"Authorization": f"Bearer {server.keys[who]}", "Accept": ACCEPT}
    async with httpx.AsyncClient(base_url=server.base_url, headers=headers, timeout=60) as http:
        yield http


async def initialize(http: httpx.AsyncClient) -> httpx.Response:
    return await http.post("/mcp", json=INITIALIZE)


async def joins_and_works(server: Any, who: str) -> None:
    """A real MCP client of `who` connects, joins the swarm and lists its agents."""
    async with mcp_agent(server.base_url, server.keys[who]) as agent:
        joined = await agent.call("join_swarm", name=f"helper-{who}", description="helps")
        assert "helper" in str(joined)
        agents = await agent.resource("mail://swarm/agents")
        assert any("supervisor" in str(entry) for entry in agents), agents


def test_a_thousand_bare_initializes_do_not_lock_out_another_user(server: Any) -> None:
    async def run() -> None:
        async with bare_client(server, "mallory") as http:
            answers = [await initialize(http) for _ in range(1000)]
        # Every one was let in: each new one ended mallory's idlest session.
        assert {r.status_code for r in answers} == {200}, {r.status_code for r in answers}
        ids = {r.headers["mcp-session-id"] for r in answers}
        assert len(ids) == 1000
        # Mallory's newest sessions are the ones still open; the older ones were ended.
        async with bare_client(server, "mallory") as http:
            newest = answers[-1].headers["mcp-session-id"]
            oldest = answers[0].headers["mcp-session-id"]
            ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
            alive = await http.post("/mcp", json=ping, headers={"mcp-session-id": newest})
            gone = await http.post("/mcp", json=ping, headers={"mcp-session-id": oldest})
            assert alive.status_code == 200, alive.text
            assert gone.status_code == 404, gone.text
        await joins_and_works(server, "alice")

    asyncio.run(run())


def test_sessions_all_in_use_are_not_ended_the_new_one_is_refused(server: Any) -> None:
    async def run() -> None:
        async with contextlib.AsyncExitStack() as stack:
            # carol's whole share, each session with its push stream open (in use)
            for _ in range(SHARE):
                agent = await stack.enter_async_context(
                    mcp_agent(server.base_url, server.keys["carol"])
                )
                await asyncio.wait_for(agent.push_stream_open.wait(), 60)
            async with bare_client(server, "carol") as http:
                refused = await initialize(http)
            assert refused.status_code == 429, refused.text
            assert "max_sessions_per_caller" in refused.json()["detail"]
            assert refused.headers.get("retry-after")
            # somebody else is not affected
            await joins_and_works(server, "alice")

    asyncio.run(run())


def test_at_the_server_limit_an_idle_session_of_the_largest_holder_makes_room(
    server: Any,
) -> None:
    async def run() -> None:
        async with bare_client(server, "mallory") as http:
            for _ in range(SHARE):  # mallory holds her whole share, idle
                assert (await initialize(http)).status_code == 200
        async with bare_client(server, "carol") as http:
            for _ in range(SHARE):
                assert (await initialize(http)).status_code == 200
        async with bare_client(server, "alice") as http:
            for _ in range(SERVER_WIDE - 2 * SHARE):  # the server is full now
                assert (await initialize(http)).status_code == 200
            extra = await initialize(http)  # not refused: an idle session made room
            assert extra.status_code == 200, extra.text
        await joins_and_works(server, "alice")

    asyncio.run(run())
