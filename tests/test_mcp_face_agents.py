"""The MCP face end to end: a real `mail server` (CLI subprocess) with LiteLLM agents
answered by the scripted LLM, and outside agents connected with the `mcp` SDK's client over
Streamable HTTP: join and listing, requests and replies both ways, waits and their
timeouts, threads and attachments, a task driven to a breakpoint and answered, isolation of
two callers, a bad key refused, and the agent gone when it leaves or its session ends."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest

from mcp_face_support import ToolFailed, mcp_agent
from support.scripted_llm import reply, tool_call
from team_e2e_support import is_agent, results
from test_team_e2e import Env, llm_and_server  # noqa: F401 - the shared server fixture

pytestmark = pytest.mark.timeout(180)

LEAD, A = is_agent("lead"), is_agent("a")


@pytest.fixture
def env(llm_and_server: Any) -> Any:  # noqa: F811
    e = Env(llm_and_server)
    e.llm.requests.clear()
    yield e
    e.llm.requests.clear()


def swarm_agents(env: Env, key: str | None = None) -> dict[str, Any]:
    r = env.get("/swarm", key)
    assert r.status_code == 200, r.text
    return {a["name"]: a for a in r.json()["agents"]}


def test_join_listed_and_removed_on_leave_and_session_end(env: Env) -> None:
    async def main() -> None:
        async with mcp_agent(env.server.base_url, env.alice) as ext:
            joined = await ext.call("join_swarm", name="helper", description="I check facts")
            assert joined["joined_as"] == "helper"
            assert {"lead", "a", "b"} <= set(joined["agents"])
            listed = swarm_agents(env)
            assert listed["helper"]["external"] is True
            assert listed["helper"]["description"] == "I check facts"
            assert "helper" in listed["lead"]["comm_targets"]  # swarm agents may address it
            agents = await ext.resource("mail://swarm/agents")
            assert {"name": "helper", "external": True, "description": "I check facts"} in agents
            # Names are checked: no shadowing of a real agent, nothing malformed.
            async with mcp_agent(env.server.base_url, env.alice) as other:
                for bad in ("lead", "helper", "no spaces", ""):
                    with pytest.raises(ToolFailed):
                        await other.call("join_swarm", name=bad)
            await ext.call("leave_swarm")
            assert "helper" not in swarm_agents(env)
            assert "helper" not in swarm_agents(env)["lead"]["comm_targets"]
            await ext.call("join_swarm", name="helper2")
            assert "helper2" in swarm_agents(env)
        # The session ended (the client closed it): the agent is gone.
        deadline = time.monotonic() + 10
        while "helper2" in swarm_agents(env):
            assert time.monotonic() < deadline, "agent still listed after its session ended"
            await asyncio.sleep(0.05)

    asyncio.run(main())


def test_swarm_agent_asks_outside_agent_and_waits_for_its_reply(env: Env) -> None:
    """Swarm -> outside: lead waits on the outside agent, which long-polls its inbox."""

    async def main() -> None:
        async with mcp_agent(env.server.base_url, env.alice) as ext:
            await ext.call("join_swarm", name="oracle")
            env.queue(
                tool_call(
                    "send_request",
                    {"target": "oracle", "subject": "Q", "body": "6*7?", "wait_for_reply": True},
                ),
                match=LEAD,
            )
            env.queue(
                lambda r: reply(tool_call("task_complete", {"finish_message": results(r)[-1]})),
                match=LEAD,
            )
            post = asyncio.create_task(asyncio.to_thread(env.post, "ask the oracle"))
            got = await ext.call("wait_for_messages", timeout_seconds=60)
            assert not got["timed_out"]
            [message] = got["messages"]
            assert message["sender"] == "lead" and message["body"] == "6*7?"
            answer = await ext.call(
                "send_response", target="lead", subject="Re", body="42", task_id=message["task_id"]
            )
            assert "waiting" in answer["result"]
            r = await post
            assert r.status_code == 200, r.text
            assert "reply from oracle" in r.json()["response"] and "42" in r.json()["response"]
            # A long-poll with nothing to read times out, bounded by its timeout.
            started = time.monotonic()
            empty = await ext.call("wait_for_messages", timeout_seconds=0.5)
            assert empty == {"messages": [], "timed_out": True, "more": 0}
            assert 0.4 < time.monotonic() - started < 10

    asyncio.run(main())


def test_outside_agent_asks_swarm_agent_and_waits(env: Env) -> None:
    """Outside -> swarm: send_request with wait_for_reply returns the agent's answer; a
    request sent without waiting is answered into the inbox (wait_for_reply tool)."""

    async def main() -> None:
        async with mcp_agent(env.server.base_url, env.alice) as ext:
            await ext.call("join_swarm", name="asker")
            env.queue(
                tool_call("send_response", {"target": "asker", "subject": "Re", "body": "blue"}),
                match=A,
            )
            sent = await ext.call(
                "send_request",
                target="a",
                subject="Q",
                body="sky colour?",
                wait_for_reply=True,
                timeout_seconds=60,
            )
            assert "reply from a" in sent["result"] and "blue" in sent["result"]
            [seen] = [r for r in env.llm.requests if A(r)]
            assert "sky colour?" in str(seen.messages)
            # Without waiting: the answer lands in the inbox.
            env.queue(
                tool_call("send_response", {"target": "asker", "subject": "Re", "body": "green"}),
                match=A,
            )
            sent = await ext.call("send_request", target="a", subject="Q", body="grass?")
            got = await ext.call(
                "wait_for_reply", sender="a", task_id=sent["task_id"], timeout_seconds=60
            )
            assert [m["body"] for m in got["messages"]] == ["green"]
            # Nothing more from a: the wait times out.
            got = await ext.call("wait_for_reply", sender="a", timeout_seconds=0.3)
            assert got["timed_out"] is True
            # A swarm agent that does not answer in time: the waiting call says so.
            env.queue(tool_call("await_message", {}), match=A)
            with pytest.raises(ToolFailed, match="no reply from a within 0.5 seconds"):
                await ext.call(
                    "send_request",
                    target="a",
                    subject="Q",
                    body="slow?",
                    wait_for_reply=True,
                    timeout_seconds=0.5,
                )
            with pytest.raises(ToolFailed, match="unknown|not one of"):
                await ext.call("send_request", target="nobody", subject="Q", body="?")
            counts = await ext.call("check_new_messages")
            assert counts["unread"] == 0
            inbox = await ext.call("get_messages", limit=10)
            assert {m["body"] for m in inbox["messages"]} >= {"green"}

    asyncio.run(main())


def test_threads_and_attachments(env: Env) -> None:
    async def main() -> None:
        async with mcp_agent(env.server.base_url, env.alice) as ext:
            await ext.call("join_swarm", name="scribe")
            created = await ext.call(
                "create_thread", title="Plan", participants=["a"], initial_message="kickoff"
            )
            thread_id = created[created.index("th_") :].split('"')[0]
            r = env.get(f"/threads/{thread_id}")
            assert r.status_code == 200, r.text
            assert set(r.json()["participants"]) == {"scribe", "a"}
            # a posts to the thread on its next turn: the post reaches scribe's inbox.
            env.queue(
                tool_call("post_to_thread", {"thread_id": thread_id, "body": "on it"}),
                tool_call("read_attachment", {"attachment_id": "placeholder"}),
                match=A,
            )
            env.queue(tool_call("await_message", {}), match=A)
            sent = await ext.call(
                "transfer_file", recipient="a", filename="notes.txt", content="Launch Monday."
            )
            assert sent["size"] == len("Launch Monday.") and sent["sent_to"] == "a"
            got = await ext.call("wait_for_messages", timeout_seconds=60)
            assert [m["body"] for m in got["messages"]] == ["on it"]
            assert got["messages"][0]["thread_id"] == thread_id
            # The file a got is readable by its sender, and downloadable by the user.
            text = await ext.call("read_attachment", attachment_id=sent["id"])
            assert text == "Launch Monday."
            r = env.get(f"/attachments/{sent['id']}")
            assert r.status_code == 200 and r.content == b"Launch Monday."
            assert env.get(f"/attachments/{sent['id']}", env.bob).status_code == 404
            details = await ext.call("get_thread_details", thread_id=thread_id)
            assert "on it" in str(details)
            # A swarm agent sends the outside agent a file: it reads it by the id it got.
            root = env.dir / "files" / "user-alice"
            root.mkdir(parents=True, exist_ok=True)
            (root / "draft.txt").write_text("Draft: launch on Monday.", encoding="utf-8")
            env.queue(
                tool_call("transfer_file", {"recipient": "scribe", "source_path": "draft.txt"}),
                match=A,
            )
            env.queue(tool_call("await_message", {}), match=A)
            await ext.call("send_request", target="a", subject="draft?", body="send the draft")
            got = await ext.call("wait_for_messages", timeout_seconds=60)
            [file_message] = got["messages"]
            assert file_message["sender"] == "a"
            [attachment] = file_message["attachments"]
            assert attachment["filename"] == "draft.txt"
            text = await ext.call("read_attachment", attachment_id=attachment["id"])
            assert text == "Draft: launch on Monday."

    asyncio.run(main())


def test_callers_are_isolated_and_bad_keys_refused(env: Env) -> None:
    async def main() -> None:
        async with (
            mcp_agent(env.server.base_url, env.alice) as alice,
            mcp_agent(env.server.base_url, env.bob) as bob,
        ):
            await alice.call("join_swarm", name="twin")
            # bob's instance is another swarm instance: the same name is free there, and
            # alice's agent is not in it.
            await bob.call("join_swarm", name="twin")
            assert "twin" in swarm_agents(env, env.bob)
            await bob.call("leave_swarm")
            assert "twin" not in swarm_agents(env, env.bob)
            assert "twin" in swarm_agents(env, env.alice)
            with pytest.raises(ToolFailed, match="unknown|not one of"):
                await bob.call("join_swarm", name="other")
                await bob.call("send_request", target="twin", subject="Q", body="hi")
        r = httpx.post(
            f"{env.server.base_url}/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}},
            headers={"Authorization": "Bearer wrong", "Accept": "application/json"},
        )
        assert r.status_code == 401
        assert httpx.post(f"{env.server.base_url}/mcp", json={}).status_code == 401

    asyncio.run(main())


def test_acting_as_user_post_message_and_get_task(env: Env) -> None:
    async def main() -> None:
        async with mcp_agent(env.server.base_url, env.alice) as user:
            env.queue(tool_call("task_complete", {"finish_message": "done: hi"}), match=LEAD)
            answer = await user.call("post_message", body="say hi", timeout_seconds=60)
            assert answer["response"] == "done: hi"
            task = await user.call("get_task", task_id=answer["task_id"])
            assert task["task_id"] == answer["task_id"]
            events = await user.resource(f"mail://tasks/{answer['task_id']}/events")
            assert any(e.get("event") == "task_complete" for e in events)
            with pytest.raises(ToolFailed, match="404"):
                await user.call("get_task", task_id="no-such-task")
            # The same HTTP rules: resuming a task that is not paused is refused.
            with pytest.raises(ToolFailed):
                await user.call("answer_breakpoint", task_id=answer["task_id"], result="x")
        async with mcp_agent(env.server.base_url, env.bob) as bob:
            with pytest.raises(ToolFailed, match="404"):
                await bob.call("get_task", task_id=answer["task_id"])

    asyncio.run(main())
