"""The MCP face against misuse, on a real `mail server` (CLI subprocess, stub swarm) and the
`mcp` SDK's client: names that shadow, a stale session removing a newer agent of its name,
taking over a name a crashed session left behind, a pause answered by another caller,
concurrent long-polls per agent, oversize subjects; and `review_actions` over MCP on LiteLLM
agents answered by the scripted LLM."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError

from mail.factories import LiteLLMAgentFunction, RetryPolicy
from mcp_face_support import ToolFailed, mcp_agent
from server_fixtures import create_key, keyed_stub_server
from support.review_swarm import review_swarms_json, serve_swarm
from support.scripted_llm import ScriptedLLM, reply, tool_call

pytestmark = pytest.mark.timeout(180)

KEYS = {"alice": ("user", "alice"), "bob": ("user", "bob")}
LIMITS = """
[server.mcp]
max_waits_per_agent = 2
max_subject_chars = 100
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with keyed_stub_server(tmp_path_factory.mktemp("mcp-attack"), KEYS, extra=LIMITS) as srv:
        yield srv


def listed(server: Any, key: str) -> set[str]:
    import httpx

    r = httpx.get(f"{server.base_url}/swarm", headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 200, r.text
    return {a["name"] for a in r.json()["agents"]}


def test_names_that_differ_only_in_case_are_taken(server: Any) -> None:
    async def main() -> None:
        async with mcp_agent(server.base_url, server.keys["alice"]) as ext:
            for bad in ("Supervisor", "WORKER", "User", "ALL", "System", "Stub"):
                with pytest.raises(ToolFailed, match="taken"):
                    await ext.call("join_swarm", name=bad)
            await ext.call("join_swarm", name="helper")
            async with mcp_agent(server.base_url, server.keys["alice"]) as other:
                with pytest.raises(ToolFailed, match="taken"):
                    await other.call("join_swarm", name="HELPER")

    asyncio.run(main())


def test_a_stale_session_never_removes_a_newer_agent_of_its_name(server: Any) -> None:
    async def main() -> None:
        key = server.keys["alice"]
        async with mcp_agent(server.base_url, key) as first:
            await first.call("join_swarm", name="twin")
            await first.call("leave_swarm")
            async with mcp_agent(server.base_url, key) as second:
                await second.call("join_swarm", name="twin")
                # `first` ends its session now: its end must not take `second`'s agent.
            assert "twin" not in listed(server, key)
        async with mcp_agent(server.base_url, key) as third:
            await third.call("join_swarm", name="twin")
            async with mcp_agent(server.base_url, key) as fourth:
                await fourth.call("join_swarm", name="twin2")
            assert "twin" in listed(server, key)

    asyncio.run(main())


def test_replace_takes_over_a_name_left_by_an_earlier_session(server: Any) -> None:
    async def main() -> None:
        key = server.keys["alice"]
        async with mcp_agent(server.base_url, key) as crashed:
            await crashed.call("join_swarm", name="phoenix")
            async with mcp_agent(server.base_url, key) as again:
                with pytest.raises(ToolFailed, match="replace=true"):
                    await again.call("join_swarm", name="phoenix")
                joined = await again.call("join_swarm", name="phoenix", replace=True)
                assert joined["joined_as"] == "phoenix"
                # The old session is no longer that agent: it cannot act or leave as it.
                with pytest.raises(ToolFailed, match="join"):
                    await crashed.call("send_request", target="worker", subject="s", body="b")
                with pytest.raises(ToolFailed, match="join"):
                    await crashed.call("leave_swarm")
                assert "phoenix" in listed(server, key)
                got = await again.call("check_new_messages")
                assert "unread" in got
            # `crashed` ends after `again`: nothing of `phoenix` is left.
        assert "phoenix" not in listed(server, key)
        # replace never reaches a swarm agent.
        async with mcp_agent(server.base_url, key) as ext:
            with pytest.raises(ToolFailed, match="taken"):
                await ext.call("join_swarm", name="supervisor", replace=True)

    asyncio.run(main())


def test_a_breakpoint_is_answered_only_by_its_caller(server: Any) -> None:
    async def main() -> None:
        async with (
            mcp_agent(server.base_url, server.keys["alice"]) as alice,
            mcp_agent(server.base_url, server.keys["bob"]) as bob,
        ):
            paused = await alice.call("post_message", body="BREAKPOINT ship it?")
            task_id = paused["task_id"]
            with pytest.raises(ToolFailed, match="404"):
                await bob.call("answer_breakpoint", task_id=task_id, result="no")
            with pytest.raises(ToolFailed, match="404"):
                await bob.call("get_task", task_id=task_id)
            with pytest.raises(MCPError, match="404"):
                await bob.session.read_resource(f"mail://tasks/{task_id}/events")
            done = await alice.call("answer_breakpoint", task_id=task_id, result="yes")
            assert done["response"] == "reviewed: yes"

    asyncio.run(main())


def test_concurrent_long_polls_per_agent_are_capped(server: Any) -> None:
    async def main() -> None:
        async with mcp_agent(server.base_url, server.keys["bob"]) as ext:
            await ext.call("join_swarm", name="poller")
            waits = [
                asyncio.create_task(ext.call("wait_for_messages", timeout_seconds=20))
                for _ in range(3)
            ]
            done, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            (refused,) = done  # the third is refused at once; the refusal names the setting
            with pytest.raises(ToolFailed, match="max_waits_per_agent"):
                refused.result()
            await ext.call("leave_swarm")  # leaving ends the other two at once
            for wait in pending:
                assert (await asyncio.wait_for(wait, 10))["timed_out"] is True

    asyncio.run(main())


def test_oversize_subjects_are_refused(server: Any) -> None:
    async def main() -> None:
        async with mcp_agent(server.base_url, server.keys["bob"]) as ext:
            await ext.call("join_swarm", name="shouter")
            for tool, args in (
                ("send_request", {"target": "worker"}),
                ("send_response", {"target": "worker"}),
                ("send_broadcast", {}),
            ):
                with pytest.raises(ToolFailed, match="max_subject_chars"):
                    await ext.call(tool, subject="s" * 101, body="b", **args)
            sent = await ext.call("send_request", target="worker", subject="s" * 100, body="b")
            assert sent["task_id"]

    asyncio.run(main())


# ---------------------------------------------------------------------------- review_actions
@pytest.fixture
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        LiteLLMAgentFunction, "retry_policy", RetryPolicy(max_attempts=1, base_delay=0.01)
    )


@pytest.mark.usefixtures("fast_retries")
async def test_review_actions_over_mcp(tmp_path: Path) -> None:
    from mail.factories._litellm import load_litellm

    load_litellm()
    async with ScriptedLLM() as llm:
        swarm = review_swarms_json(f"review-{uuid.uuid4().hex[:6]}", llm.base_url)
        alice = create_key(tmp_path / "keys.json", "user", "alice")
        bob = create_key(tmp_path / "keys.json", "user", "bob")
        async with serve_swarm(tmp_path, swarm) as url, mcp_agent(url, alice) as user:
            llm.queue(tool_call("send_email", {"to": "bob@x.org", "body": "Hi Bob"}, "a1"))
            paused = await user.call("post_message", body="email bob", timeout_seconds=60)
            task_id = paused["task_id"]
            task = await user.call("get_task", task_id=task_id)
            assert any(e["event"] == "action_review" for e in task["events"])
            decisions = [{"tool_call_id": "a1", "type": "accept"}]
            async with mcp_agent(url, bob) as other:  # another caller cannot decide it
                with pytest.raises(ToolFailed, match="404"):
                    await other.call("review_actions", task_id=task_id, decisions=decisions)
            with pytest.raises(ToolFailed, match="400"):  # a decision for no held call
                bad = [{"tool_call_id": "nope", "type": "accept"}]
                await user.call("review_actions", task_id=task_id, decisions=bad)
            llm.queue(reply(tool_call("task_complete", {"finish_message": "sent it"})))
            done = await user.call("review_actions", task_id=task_id, decisions=decisions)
            assert done["task_id"] == task_id
            assert done["response"] == "sent it"
            results = {
                m.get("tool_call_id"): m.get("content")
                for m in llm.requests[-1].messages
                if m.get("role") == "tool"
            }
            assert results["a1"] == "SUCCESS: echo: " + json.dumps(
                {"body": "Hi Bob", "to": "bob@x.org"}, sort_keys=True
            )
