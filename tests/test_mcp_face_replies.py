"""Bounded MCP answers and inbox notifications, on a real `mail server` (CLI subprocess,
stub swarm, ``[server.mcp] max_reply_bytes`` set low) with the `mcp` SDK's client over
Streamable HTTP. The receiving client reads no server-sent event over the cap (the SDK's own
``max_sse_event_size``), so an answer over it would fail the call.

- many messages and a long one: every message arrives, in order, whole or read on with
  read_message; every answer is under the cap and says how many wait (`more`);
- get_messages pages, get_task pages its events, a long reply to send_request(wait) is cut;
- a client subscribed to mail://inbox is pushed notifications/resources/updated.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from mcp.shared.exceptions import MCPError

from mcp_face_support import Agent, ToolFailed, mcp_agent
from server_fixtures import keyed_stub_server

pytestmark = [
    pytest.mark.timeout(180),
    # The handshake-era subscription these clients use (2026-07-28 has subscriptions/listen).
    pytest.mark.filterwarnings("ignore:resources/(un)?subscribe is removed"),
]

CAP = 16384
# The SSE event around the JSON-RPC message: "event: message" and "data: " (httpx2 counts
# every line's bytes).
SSE_LINES = len("event: message") + len("data: ")
KEYS = {"alice": ("user", "alice")}
# (No step limit: one task carries dozens of messages here.)
LIMITS = f"""
task_message_limit = 0

[server.mcp]
max_reply_bytes = {CAP}
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with keyed_stub_server(tmp_path_factory.mktemp("mcp-replies"), KEYS, extra=LIMITS) as srv:
        yield srv


def capped(server: Any) -> Any:
    """A session whose transport reads no event over the cap."""
    return mcp_agent(server.base_url, server.keys["alice"], max_event_bytes=CAP + SSE_LINES)


def body_of(i: int, size: int) -> str:
    # Quotes, backslashes, newlines and non-ASCII take more bytes escaped than they count.
    unit = f'#{i} "q" \\ é\n'
    return (unit * (size // len(unit) + 1))[:size]


async def rejoin(ext: Agent, name: str) -> None:
    await ext.call("join_swarm", name=name)


async def read_whole(ext: Agent, message: dict[str, Any]) -> str:
    """A message's body, read on with read_message when it came cut."""
    body = message["body"]
    offset = message.get("next_offset")
    while message.get("truncated") and offset is not None:
        part = await ext.call("read_message", entry_id=message["entry_id"], offset=offset)
        assert part["offset"] == offset and part["body_chars"] == message["body_chars"]
        assert part["body"], "read_message made no progress"
        body += part["body"]
        offset = part["next_offset"]
    return body


def test_many_messages_and_a_long_one_all_arrive_in_answers_under_the_cap(server: Any) -> None:
    sent = [body_of(i, 900) for i in range(40)]
    sent.insert(17, body_of(99, 50_000))  # over three answers' worth

    async def main() -> None:
        async with capped(server) as inbox, mcp_agent(server.base_url, server.keys["alice"]) as out:
            await rejoin(inbox, "inbox1")
            await rejoin(out, "sender1")
            task = str(uuid.uuid4())
            for i, body in enumerate(sent):
                await out.call(
                    "send_request", target="inbox1", subject=f"m{i}", body=body, task_id=task
                )
            got: list[dict[str, Any]] = []
            answers = 0
            more = 0
            while len(got) < len(sent):
                # Messages are delivered as the runtime gets to them: wait for the next ones.
                # Those `more` counted were in the inbox: they come without waiting.
                answer = await inbox.call("wait_for_messages", timeout_seconds=0 if more else 30)
                answers += 1
                assert answer["messages"], answer
                got += answer["messages"]
                more = answer["more"]
                assert 0 <= more <= len(sent) - len(got)
            assert answers >= 4  # 40 x 900 characters and a long one do not fit in one
            assert [m["subject"] for m in got] == [f"m{i}" for i in range(len(sent))]
            long_one = got[17]
            assert long_one["truncated"] is True and long_one["body_chars"] == 50_000
            assert 0 < long_one["next_offset"] < 50_000
            assert [await read_whole(inbox, m) for m in got] == sent  # nothing lost or changed
            assert (await inbox.call("check_new_messages"))["unread"] == 0
            empty = await inbox.call("wait_for_messages", timeout_seconds=0)
            assert empty == {"messages": [], "timed_out": True, "more": 0}

            # get_messages: newest first, as many as fit; the rest of the page is "omitted".
            page = await inbox.call("get_messages", limit=100)
            assert page["omitted"] == len(sent) - len(page["messages"]) > 0
            assert page["messages"][0]["subject"] == f"m{len(sent) - 1}"
            assert all(m["was_read"] for m in page["messages"])
            assert (await inbox.call("get_messages", unread_only=True))["messages"] == []

    asyncio.run(main())


def test_get_messages_leaves_what_does_not_fit_unread(server: Any) -> None:
    async def main() -> None:
        async with capped(server) as inbox, mcp_agent(server.base_url, server.keys["alice"]) as out:
            await rejoin(inbox, "inbox2")
            await rejoin(out, "sender2")
            task = str(uuid.uuid4())
            for i in range(30):
                await out.call(
                    "send_request",
                    target="inbox2",
                    subject=f"g{i}",
                    body=body_of(i, 1500),
                    task_id=task,
                )
            seen: list[str] = []
            while True:
                page = await inbox.call("get_messages", limit=100, unread_only=True)
                if not page["messages"]:
                    break
                seen += [m["subject"] for m in page["messages"]]
                assert page["more"] == 30 - len(seen)
            assert sorted(seen) == sorted(f"g{i}" for i in range(30))
            assert len(set(seen)) == 30

    asyncio.run(main())


def test_a_long_reply_to_a_waiting_request_is_cut_and_read_on(server: Any) -> None:
    long_reply = body_of(7, 40_000)

    async def main() -> None:
        async with (
            capped(server) as asker,
            mcp_agent(server.base_url, server.keys["alice"]) as helper,
        ):
            await rejoin(asker, "asker3")
            await rejoin(helper, "helper3")
            task = str(uuid.uuid4())
            asking = asyncio.create_task(
                asker.call(
                    "send_request",
                    target="helper3",
                    subject="q",
                    body="tell me all",
                    task_id=task,
                    wait_for_reply=True,
                    timeout_seconds=60,
                )
            )
            got = await helper.call("wait_for_messages", timeout_seconds=60)
            assert [m["body"] for m in got["messages"]] == ["tell me all"]
            await helper.call(
                "send_response", target="asker3", subject="all", body=long_reply, task_id=task
            )
            answer = await asking
            assert "too long for one answer" in answer["result"]
            reply = answer["reply"]
            assert reply["sender"] == "helper3" and reply["truncated"] is True
            assert await read_whole(asker, reply) == long_reply
            # The reply was this call's result: it is not left unread in the inbox.
            assert (await asker.call("check_new_messages"))["unread"] == 0

    asyncio.run(main())


def test_get_task_pages_its_events(server: Any) -> None:
    async def main() -> None:
        async with capped(server) as user, mcp_agent(server.base_url, server.keys["alice"]) as out:
            await rejoin(out, "sender4")
            await rejoin(user, "inbox4")
            task = str(uuid.uuid4())
            for i in range(25):
                await out.call(
                    "send_request",
                    target="inbox4",
                    subject=f"t{i}",
                    body=body_of(i, 2000),
                    task_id=task,
                )
            r = httpx.get(
                f"{server.base_url}/task",
                params={"task_id": task},
                headers={"Authorization": f"Bearer {server.keys['alice']}"},
            )
            assert r.status_code == 200, r.text
            everything = r.json()["events"]
            events: list[Any] = []
            first: int | None = 0
            pages = 0
            while first is not None:
                page = await user.call("get_task", task_id=task, first_event=first)
                assert page["task_id"] == task and page["first_event"] == first
                events += page["events"]
                first = page["next_event"]
                pages += 1
            assert pages > 1
            assert len(events) >= len(everything)  # (a running task may have added some)
            assert [e["event"] for e in events[: len(everything)]] == [
                e["event"] for e in everything
            ]
            # The events resource has no pages: its longest strings are cut, and say so.
            listed = await user.resource(f"mail://tasks/{task}/events")
            assert len(listed) >= len(everything)
            assert "more characters cut" in json.dumps(listed, ensure_ascii=False)

    asyncio.run(main())


def test_other_answers_are_cut_to_fit_and_say_so(server: Any) -> None:
    """Thread details (the last 20 posts) and other answers without pages of their own."""

    async def main() -> None:
        async with (
            capped(server) as reader,
            mcp_agent(server.base_url, server.keys["alice"]) as out,
        ):
            await rejoin(reader, "reader6")
            await rejoin(out, "writer6")
            made = await out.call("create_thread", title="long", participants=["reader6"])
            thread_id = made[made.index("th_") :].split('"')[0].split()[0].rstrip(".,;")
            posts = [body_of(i, 3000) for i in range(12)]
            for body in posts:
                await out.call("post_to_thread", thread_id=thread_id, body=body)
            details = await reader.call("get_thread_details", thread_id=thread_id)
            shown = [p["body"] for p in details["recent_posts"] if p.get("kind") == "post"]
            assert len(shown) == len(posts)
            assert all("more characters cut" in b for b in shown)
            assert all(posts[i].startswith(b.split(" …[")[0]) for i, b in enumerate(shown))
            # The posts themselves reached the reader's inbox whole (after the notice that
            # it was added to the thread).
            got: list[str] = []
            while len(got) < len(posts) + 1:
                answer = await reader.call("wait_for_messages", timeout_seconds=30)
                got += [await read_whole(reader, m) for m in answer["messages"]]
            assert "created thread" in got[0] and got[1:] == posts

    asyncio.run(main())


def test_sending_to_a_completed_task_is_refused(server: Any) -> None:
    async def main() -> None:
        async with mcp_agent(server.base_url, server.keys["alice"]) as ext:
            done = await ext.call("post_message", body="hello", timeout_seconds=60)
            await rejoin(ext, "late7")
            with pytest.raises(ToolFailed, match="completed"):
                await ext.call(
                    "send_request",
                    target="worker",
                    subject="s",
                    body="b",
                    task_id=done["task_id"],
                )

    asyncio.run(main())


def test_a_subscribed_client_is_notified_when_a_message_arrives(server: Any) -> None:
    async def main() -> None:
        async with capped(server) as ext, mcp_agent(server.base_url, server.keys["alice"]) as out:
            caps = ext.session.initialize_result
            assert caps is not None and caps.capabilities.resources is not None
            assert caps.capabilities.resources.subscribe is True
            with pytest.raises(MCPError, match="only mail://inbox"):
                await ext.session.subscribe_resource("mail://swarm/agents")
            await ext.session.subscribe_resource("mail://inbox")
            await rejoin(ext, "listener5")
            await rejoin(out, "sender5")
            await ext.push_stream_open.wait()  # notices travel on the session's GET stream
            await out.call("send_request", target="listener5", subject="ping", body="hello")
            uri = await asyncio.wait_for(ext.notices.get(), 30)
            assert uri == "mail://inbox"
            inbox = await ext.resource("mail://inbox")
            assert inbox["agent"] == "listener5" and inbox["unread"] == 1
            assert [m["sender"] for m in inbox["latest_unread"]] == ["sender5"]
            got = await ext.call("wait_for_messages", timeout_seconds=0)
            assert [m["body"] for m in got["messages"]] == ["hello"]
            # Long-polling still works next to the notices.
            waiting = asyncio.create_task(ext.call("wait_for_messages", timeout_seconds=60))
            await out.call("send_request", target="listener5", subject="ping", body="again")
            assert [m["body"] for m in (await waiting)["messages"]] == ["again"]
            assert await asyncio.wait_for(ext.notices.get(), 30) == "mail://inbox"
            # Not subscribed (any more): the inbox still fills, without notices.
            await ext.session.unsubscribe_resource("mail://inbox")
            async with mcp_agent(server.base_url, server.keys["alice"]) as quiet:
                await rejoin(quiet, "quiet5")
                await out.call("send_request", target="quiet5", subject="ping", body="shh")
                got = await quiet.call("wait_for_messages", timeout_seconds=30)
                assert [m["body"] for m in got["messages"]] == ["shh"]
                assert quiet.notices.empty()

    asyncio.run(main())
