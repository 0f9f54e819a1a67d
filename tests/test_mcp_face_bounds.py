"""What an MCP client sends never makes an answer over ``[server.mcp] max_reply_bytes``, and
every answer has a way to fit, on a real `mail server` (CLI subprocess, stub swarm, the
smallest cap) with the `mcp` SDK's client over Streamable HTTP. The receiving clients read no
server-sent event over the cap (the SDK's own ``max_sse_event_size``), so an answer or an
error over it would fail the call instead of arriving.

- errors: a resource URI over ``max_uri_chars`` is refused without being echoed; an error
  that echoes a long URI or name (unknown resource, unknown prompt) is cut to fit;
- many threads: check_new_messages and mail://inbox list as many threads as fit (and say
  how many they left out), mail://swarm/threads comes in pages.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError
from mcp.types import JSONRPCResponse

from mcp_face_support import Agent, mcp_agent
from server_fixtures import keyed_stub_server

pytestmark = [
    pytest.mark.timeout(180),
    # The handshake-era subscription these clients use (2026-07-28 has subscriptions/listen).
    pytest.mark.filterwarnings("ignore:resources/(un)?subscribe is removed"),
]

CAP = 4096  # the smallest [server.mcp] max_reply_bytes
MAX_URI = 2048  # the default [server.mcp] max_uri_chars
SSE_LINES = len("event: message") + len("data: ")  # around the JSON-RPC message
KEYS = {"alice": ("user", "alice")}
THREADS = 200  # their unread counts alone take about 5 KB


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    extra = f"[server.mcp]\nmax_reply_bytes = {CAP}\n"
    with keyed_stub_server(tmp_path_factory.mktemp("mcp-bounds"), KEYS, extra=extra) as srv:
        yield srv


def capped(server: Any) -> Any:
    """A session whose transport reads no event over the cap (it only reads resources: the
    tool list, which the SDK's client fetches before calling a tool, is larger)."""
    return mcp_agent(server.base_url, server.keys["alice"], max_event_bytes=CAP + SSE_LINES)


def sent_bytes(result: Any) -> int:
    """Bytes of the JSON-RPC message that carried `result` (as the SDK's server writes it)."""
    message = JSONRPCResponse(
        jsonrpc="2.0", id=123, result=result.model_dump(by_alias=True, exclude_none=True)
    )
    return len(message.model_dump_json(by_alias=True, exclude_unset=True).encode())


async def call(agent: Agent, tool: str, **args: Any) -> Any:
    """The tool's answer, parsed, after checking that it was sent within the cap."""
    result = await agent.raw(tool, **args)
    assert not result.is_error, result.content
    assert sent_bytes(result) <= CAP
    return json.loads(result.content[0].text)


async def resource(agent: Agent, uri: str) -> Any:
    result = await agent.session.read_resource(uri)
    assert sent_bytes(result) <= CAP
    return json.loads(result.contents[0].text)


async def read_error(agent: Agent, uri: str) -> MCPError:
    with pytest.raises(MCPError) as failed:
        await agent.session.read_resource(uri)
    return failed.value


def error_bytes(error: MCPError) -> int:
    return len(json.dumps(error.error.model_dump(exclude_none=True), ensure_ascii=False).encode())


def test_errors_never_echo_more_than_fits(server: Any) -> None:
    async def main() -> None:
        async with capped(server) as client:
            # A URI over max_uri_chars is refused with a short error that names the setting.
            huge = "mail://tasks/" + "z" * 1_000_000 + "/events"
            refused = await read_error(client, huge)
            assert "max_uri_chars" in refused.message and error_bytes(refused) < 300
            for method in ("subscribe_resource", "unsubscribe_resource"):
                with pytest.raises(MCPError, match="max_uri_chars"):
                    await getattr(client.session, method)(huge)

            # Within max_uri_chars, an unknown URI is echoed (in the message and the data):
            # costly characters make that twice the cap, so both come cut, and say so.
            unknown = "mail://" + "é\\" * (MAX_URI // 2 - 4)
            assert len(unknown) <= MAX_URI
            cut = await read_error(client, unknown)
            assert "Unknown resource" in cut.message and "more characters cut" in cut.message
            assert error_bytes(cut) <= CAP

            # Any error: the SDK echoes an unknown prompt's name.
            with pytest.raises(MCPError) as prompt:
                await client.session.get_prompt("p" * 50_000)
            assert "more characters cut" in prompt.value.message
            assert error_bytes(prompt.value) <= CAP

            # The session is still fine, and short errors are left as they were.
            short = await read_error(client, "mail://nothing")
            assert short.message == "Unknown resource: mail://nothing"

    asyncio.run(main())


def test_many_threads_are_listed_as_far_as_they_fit(server: Any) -> None:
    async def main() -> None:
        tag = uuid.uuid4().hex[:6]
        async with (
            mcp_agent(server.base_url, server.keys["alice"]) as reader,
            mcp_agent(server.base_url, server.keys["alice"]) as maker,
        ):
            await reader.call("join_swarm", name=f"reader{tag}")
            await maker.call("join_swarm", name=f"maker{tag}")
            made: list[str] = []
            for start in range(0, THREADS, 20):  # a few at a time, like a busy agent
                made += await asyncio.gather(
                    *(
                        maker.call("create_thread", title=f"t{i}", participants=[f"reader{tag}"])
                        for i in range(start, start + 20)
                    )
                )
            thread_ids = {re.search(r"th_[0-9a-f]{16}", str(text))[0] for text in made}  # type: ignore[index]
            assert len(thread_ids) == THREADS

            # Each thread left one unread notice: every count is right, the threads listed
            # are as many as asked for and fit, and the rest are counted.
            counts = await call(reader, "check_new_messages")
            assert counts["unread"] == THREADS and counts["direct"] == 0
            assert len(counts["threads"]) == 50  # the default max_threads
            assert counts["threads_not_listed"] == THREADS - 50
            assert set(counts["threads"]) <= thread_ids
            assert set(counts["threads"].values()) == {1}
            every = await call(reader, "check_new_messages", max_threads=1000)
            assert 50 < len(every["threads"]) < THREADS  # as many as fit in one answer
            assert len(every["threads"]) + every["threads_not_listed"] == THREADS
            none = await call(reader, "check_new_messages", max_threads=0)
            assert none["threads"] == {} and none["threads_not_listed"] == THREADS

            # mail://inbox: the same, and the newest unread messages that fit.
            inbox = await resource(reader, "mail://inbox")
            assert inbox["unread"] == THREADS
            assert len(inbox["threads"]) == 20 and inbox["threads_not_listed"] == THREADS - 20
            # (20 heads of about 170 bytes do not all fit next to the counts in 4 KB.)
            assert 0 < len(inbox["latest_unread"]) and inbox["omitted"] > 0
            assert len(inbox["latest_unread"]) + inbox["omitted"] == 20
            most = await resource(reader, "mail://inbox?limit=100&threads=1000")
            assert 0 < len(most["latest_unread"]) < 100
            assert len(most["latest_unread"]) + most["omitted"] == 100
            assert len(most["threads"]) + most["threads_not_listed"] == THREADS
            bare = await resource(reader, "mail://inbox?limit=0&threads=0")
            assert bare["latest_unread"] == [] and bare["unread"] == THREADS

            # mail://swarm/threads pages: every thread once.
            listed: list[dict[str, Any]] = []
            first: int | None = 0
            pages = 0
            while first is not None:
                page = await resource(reader, f"mail://swarm/threads?first={first}")
                assert page["first"] == first and page["threads"]
                listed += page["threads"]
                first = page["next"]
                pages += 1
            assert pages > 1
            titles = sorted(t["title"] for t in listed if t["thread_id"] in thread_ids)
            assert titles == sorted(f"t{i}" for i in range(THREADS))
            assert len({t["thread_id"] for t in listed}) == len(listed) == page["total"]
            with pytest.raises(MCPError, match="first must be a number"):
                await reader.session.read_resource("mail://swarm/threads?first=-1")

    asyncio.run(main())
