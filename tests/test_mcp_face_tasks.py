"""Which task an outside agent's message goes to, and what a waited-for reply marks read, on a
real `mail server` (CLI subprocess, stub swarm) with the `mcp` SDK's client over Streamable
HTTP:

- send_request(wait_for_reply=true) marks read only the reply it hands over: an earlier
  unread request from the same agent in the same task stays unread (short and long replies);
- a file to a completed task is refused (the runtime would drop it), and without task_id it
  goes to a task that is still running;
- once the default task is completed, send_broadcast and transfer_file without task_id start
  a new task (and reach the agents); send_response without task_id is refused with advice
  that fits a response (a response needs its request's task).

The stub supervisor completes a task as soon as an agent's message reaches it
(``delegated: <body>``), so sending to it is how these tests complete a task; a task's end
is read from ``GET /task/events`` (its closing ``task_complete``).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from mcp_face_support import Agent, ToolFailed, mcp_agent
from server_fixtures import aparse_sse_stream, auth, keyed_stub_server

pytestmark = pytest.mark.timeout(180)

KEYS = {"alice": ("user", "alice")}
CAP = 4096  # the smallest [server.mcp] max_reply_bytes: a few KB of reply come cut


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    extra = f"[server.mcp]\nmax_reply_bytes = {CAP}\n"
    with keyed_stub_server(tmp_path_factory.mktemp("mcp-tasks"), KEYS, extra=extra) as srv:
        yield srv


def outside(server: Any) -> Any:
    return mcp_agent(server.base_url, server.keys["alice"])


async def final_response(server: Any, task_id: str) -> str:
    """The response of `task_id` once it completes (the closing event of GET /task/events)."""
    async with (
        httpx.AsyncClient(timeout=60) as client,
        client.stream(
            "GET",
            f"{server.base_url}/task/events",
            params={"task_id": task_id},
            headers=auth(server.keys["alice"]),
        ) as r,
    ):
        assert r.status_code == 200, await r.aread()
        async for event in aparse_sse_stream(r):
            if event.event == "task_complete" and event.id is None:
                return str(event.json()["response"])
            assert event.event != "task_error", event.data
    raise AssertionError(f"the stream of {task_id} ended without task_complete")


async def unread_bodies(agent: Agent) -> list[str]:
    got = await agent.call("wait_for_messages", timeout_seconds=0)
    return [m["body"] for m in got["messages"]]


@pytest.mark.parametrize("reply_chars", [20, 3 * CAP], ids=["short-reply", "long-reply"])
def test_a_waited_reply_marks_only_itself_read(server: Any, reply_chars: int) -> None:
    reply = ("the answer " * (reply_chars // 11 + 1))[:reply_chars]

    async def main() -> None:
        tag = uuid.uuid4().hex[:6]
        asker, helper = f"asker{tag}", f"helper{tag}"
        async with outside(server) as x, outside(server) as y:
            await x.call("join_swarm", name=asker)
            await y.call("join_swarm", name=helper)
            task = str(uuid.uuid4())
            # helper asks first; asker has not read it when it asks helper and waits.
            await y.call(
                "send_request", target=asker, subject="earlier", body="EARLIER", task_id=task
            )
            assert (await x.call("check_new_messages"))["unread"] == 1
            asking = asyncio.create_task(
                x.call(
                    "send_request",
                    target=helper,
                    subject="q",
                    body="QUESTION",
                    task_id=task,
                    wait_for_reply=True,
                    timeout_seconds=60,
                )
            )
            assert await asyncio.wait_for(unread_bodies_waiting(y), 60) == ["QUESTION"]
            await y.call("send_response", target=asker, subject="re", body=reply, task_id=task)
            answer = await asking
            if reply_chars <= 20:
                assert answer["result"].endswith(f"<body>{reply}</body>")
            else:  # too long for one answer: the reply itself comes cut, not the request
                assert answer["reply"]["truncated"] is True
                assert answer["reply"]["kind"] == "reply"
                assert reply.startswith(answer["reply"]["body"]) and answer["reply"]["body"]
            # The earlier request was never handed over: it is still unread.
            counts = await x.call("check_new_messages")
            assert counts["unread"] == 1, counts
            assert await unread_bodies(x) == ["EARLIER"]

    asyncio.run(main())


async def unread_bodies_waiting(agent: Agent) -> list[str]:
    got = await agent.call("wait_for_messages", timeout_seconds=60)
    return [m["body"] for m in got["messages"]]


def test_a_file_to_a_completed_task_is_refused(server: Any) -> None:
    async def main() -> None:
        async with outside(server) as ext:
            await ext.call("join_swarm", name=f"filer{uuid.uuid4().hex[:6]}")
            task = str(uuid.uuid4())
            await ext.call("send_request", target="supervisor", subject="s", body="b", task_id=task)
            assert await final_response(server, task) == "delegated: b"
            with pytest.raises(ToolFailed, match="is completed.*leave out task_id"):
                await ext.call(
                    "transfer_file",
                    recipient="supervisor",
                    filename="late.txt",
                    content="too late",
                    task_id=task,
                )
            # A file for the user is stored and listed with the task, not dropped: it goes.
            sent = await ext.call(
                "transfer_file", recipient="user", filename="r.txt", content="hi", task_id=task
            )
            assert sent["task_id"] == task and sent["sent_to"] == "user"

    asyncio.run(main())


def test_without_task_id_messages_go_to_a_running_task(server: Any) -> None:
    async def main() -> None:
        async with outside(server) as ext:
            me = f"lone{uuid.uuid4().hex[:6]}"
            await ext.call("join_swarm", name=me)
            # Its first file (no task_id) goes to its own task, which the supervisor ends.
            first = await ext.call(
                "transfer_file", recipient="supervisor", filename="a.txt", content="one"
            )
            home = first["task_id"]
            uuid.UUID(home)  # a task id GET /task takes
            assert "a.txt" in await final_response(server, home)

            # That task is completed: the next file without task_id starts a new one, and
            # the supervisor gets it (it ends that task with the file's notice).
            second = await ext.call(
                "transfer_file", recipient="supervisor", filename="b.txt", content="two"
            )
            assert second["task_id"] != home
            assert second["id"] in await final_response(server, second["task_id"])

            # The same for a broadcast (to the supervisor only: it ends the task at once).
            cast = await ext.call(
                "send_broadcast", subject="news", body="NEWS", targets=["supervisor"]
            )
            assert cast["task_id"] not in (home, second["task_id"])
            assert await final_response(server, cast["task_id"]) == "delegated: NEWS"

            # A response needs the task of its request: none is picked for it, and the
            # advice says what to pass (not "leave out task_id", which it did).
            with pytest.raises(ToolFailed) as refused:
                await ext.call("send_response", target="supervisor", subject="s", body="b")
            assert "pass the task_id of the request you are answering" in str(refused.value)
            assert "leave out task_id" not in str(refused.value)

            # Explicitly to a completed task: refused, with advice that fits each tool.
            with pytest.raises(ToolFailed, match="send_request starts a new task"):
                await ext.call(
                    "send_response", target="supervisor", subject="s", body="b", task_id=home
                )
            with pytest.raises(ToolFailed, match="leave out task_id to send it in a task"):
                await ext.call("send_broadcast", subject="s", body="b", task_id=home)

            # The events of the new tasks name this agent as the sender: nothing was dropped.
            r = httpx.get(
                f"{server.base_url}/task",
                params={"task_id": cast["task_id"]},
                headers=auth(server.keys["alice"]),
            )
            assert r.status_code == 200, r.text
            assert me in json.dumps(r.json()["events"])

    asyncio.run(main())
