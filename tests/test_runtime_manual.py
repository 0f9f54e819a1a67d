"""Manual mode: buffering, manual_step rendering and response types, await_queue_empty."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from mail.core.runtime import MAILRuntime
from mail.core.system_messages import system_response
from support.scripted_agents import (
    AgentSpec,
    PromptedScriptedAgent,
    ScriptedAgent,
    make_runtime,
    tool_call,
    user_message,
)


def say(text: str) -> list[Any]:
    return [tool_call("text_output", {"body": text})]


@pytest.fixture
async def manual() -> AsyncIterator[tuple[MAILRuntime, ScriptedAgent, ScriptedAgent, Any]]:
    alice = ScriptedAgent("alice")
    bob = ScriptedAgent("bob")
    carol = ScriptedAgent("carol")
    rt = make_runtime(
        {
            "alice": AgentSpec(alice, ["bob", "carol"], True),
            "bob": AgentSpec(bob, ["alice", "carol"]),
            "carol": AgentSpec(carol, ["alice", "bob"]),
        },
        entrypoint="alice",
    )
    loop = asyncio.create_task(rt.run_continuous(mode="manual"))
    await asyncio.sleep(0)
    try:
        yield rt, alice, bob, carol
    finally:
        await rt.shutdown(grace_period=1)
        await asyncio.wait_for(loop, 2)


async def step(rt: MAILRuntime, *args: Any, **kwargs: Any) -> Any:
    return await asyncio.wait_for(rt.manual_step(*args, **kwargs), 3)


async def test_messages_are_buffered_until_a_manual_step(manual: Any) -> None:
    rt, alice, _, _ = manual
    await rt.submit_message_nowait(user_message("g1", "Let the game begin", to="alice"))
    await asyncio.wait_for(rt.await_queue_empty(), 2)
    # No race: as soon as the queue is reported empty the message sits in the buffer.
    assert [m["message"]["body"] for m in rt.manual_message_buffer["g1::alice"]] == [
        "Let the game begin"
    ]
    assert alice.calls == []


async def test_manual_step_renders_buffer_and_payload_and_returns_a_broadcast(
    manual: Any,
) -> None:
    rt, alice, bob, carol = manual
    alice.script.append(say("I open with e4"))
    rt.submit(user_message("g1", "Let the game begin", to="alice"))
    await rt.await_queue_empty()
    result = await step(rt, "g1", "alice", payload="It is your move.   \n")
    assert alice.calls[0].tool_choice == "auto"
    assert alice.calls[0].last == {
        "role": "user",
        "content": (
            "<private_message>\n<from>u1</from>\nLet the game begin\n</private_message>"
            "\n\n\nIt is your move."
        ),
    }
    assert "g1::alice" not in rt.manual_message_buffer
    assert result["msg_type"] == "broadcast"
    payload = result["message"]
    assert payload["sender"] == {"address_type": "agent", "address": "alice"}
    assert payload["recipients"] == [{"address_type": "agent", "address": "all"}]
    assert payload["subject"] == "" and payload["body"] == "I open with e4"
    assert payload["sender_swarm"] is None and payload["recipient_swarms"] is None
    # The returned broadcast is queued like any other message: the others buffer it.
    await rt.await_queue_empty()
    for name in ("bob", "carol"):
        [buffered] = rt.manual_message_buffer[f"g1::{name}"]
        assert buffered["message"]["body"] == "I open with e4"
    assert "g1::alice" not in rt.manual_message_buffer
    assert bob.calls == [] and carol.calls == []


async def test_public_and_private_blocks_and_response_types(manual: Any) -> None:
    rt, alice, bob, carol = manual
    alice.script += [say("public hello")]
    carol.script += [say("whisper to bob")]
    bob.script += [say("reply to alice")]

    rt.submit(user_message("g1", "start", to="alice"))
    await rt.await_queue_empty()
    await step(rt, "g1", "alice")
    private = await step(rt, "g1", "carol", response_targets=["bob"])
    assert [r["address"] for r in private["message"]["recipients"]] == ["bob"]

    answer = await step(rt, "g1", "bob", response_targets=["alice"], response_type="response")
    assert bob.calls[0].last["content"] == (
        "<public_message>\n<from>alice</from>\npublic hello\n</public_message>"
        "\n\n\n"
        "<private_message>\n<from>carol</from>\n<to>bob</to>\nwhisper to bob\n</private_message>"
    )
    assert answer["msg_type"] == "response"
    assert answer["message"]["recipient"] == {"address_type": "agent", "address": "alice"}
    assert answer["message"]["body"] == "reply to alice"
    assert answer["message"]["subject"] == ""

    await rt.await_queue_empty()
    alice_buffer = rt.manual_message_buffer["g1::alice"]
    assert [m["message"]["body"] for m in alice_buffer] == ["reply to alice"]
    # carol's private message did not reach alice.
    assert all("whisper" not in m["message"]["body"] for m in alice_buffer)


async def test_request_response_type(manual: Any) -> None:
    rt, alice, _, _ = manual
    alice.script.append(say("bob, your turn"))
    result = await step(
        rt, "g1", "alice", response_targets=["bob", "carol"], response_type="request", payload="go"
    )
    assert result["msg_type"] == "request"
    assert result["message"]["recipient"]["address"] == "bob"
    # With an empty buffer the payload alone is the prompt.
    assert alice.calls[0].last == {"role": "user", "content": "go"}
    await rt.await_queue_empty()
    assert [m["message"]["body"] for m in rt.manual_message_buffer["g1::bob"]] == ["bob, your turn"]
    assert "g1::carol" not in rt.manual_message_buffer


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"target": "zed"}, "unknown agent target: 'zed'"),
        (
            {"target": "alice", "response_targets": ["bob", "zed"]},
            "unknown agent response target: 'zed'",
        ),
        ({"target": "alice", "response_type": "response"}, "requires response_targets"),
        ({"target": "alice", "response_type": "shout"}, "invalid response_type 'shout'"),
    ],
)
async def test_manual_step_validation(manual: Any, kwargs: dict[str, Any], message: str) -> None:
    rt, alice, _, _ = manual
    target = kwargs.pop("target")
    with pytest.raises(ValueError, match=message):
        await step(rt, "g1", target, **kwargs)
    assert alice.calls == []


async def test_system_messages_are_delivered_at_once_with_auto_tool_choice(manual: Any) -> None:
    rt, alice, _, _ = manual
    alice.script.append([tool_call("ignore_broadcast", {})])
    rt.submit(system_response("testswarm", "g1", "alice", "::note::", "system note"))
    await asyncio.wait_for(rt.await_queue_empty(), 2)
    assert len(alice.calls) == 1
    assert alice.calls[0].tool_choice == "auto"
    assert "<subject>::note::</subject>" in alice.calls[0].last_content
    assert "g1::alice" not in rt.manual_message_buffer


async def test_llm_and_system_overrides_apply_for_one_step_only() -> None:
    seen: list[tuple[str, str]] = []
    agent = PromptedScriptedAgent("alice")
    agent.system = "original prompt"
    agent.llm = "model-a"  # type: ignore[attr-defined]

    def reply(history: list[dict[str, Any]], tool_choice: Any) -> list[Any]:
        seen.append((agent.llm, agent.system))  # type: ignore[attr-defined]
        return say("ok")

    agent.script += [reply, reply]
    rt = make_runtime({"alice": AgentSpec(agent, [], True)}, entrypoint="alice")
    loop = asyncio.create_task(rt.run_continuous(mode="manual"))
    try:
        await step(rt, "g1", "alice", payload="x", _llm="model-b", _system="override prompt")
        await step(rt, "g1", "alice", payload="y")
    finally:
        await rt.shutdown(grace_period=1)
        await asyncio.wait_for(loop, 2)
    assert seen == [("model-b", "override prompt"), ("model-a", "original prompt")]
    assert agent.system == "original prompt"


@pytest.mark.parametrize(
    "reply",
    [[tool_call("ignore_broadcast", {})], RuntimeError("model exploded")],
    ids=["real-tool-call", "agent-exception"],
)
async def test_manual_step_does_not_hang_when_the_agent_gives_no_text_output(
    manual: Any, reply: Any
) -> None:
    # The original waited forever here; a step whose turn ends without text output must
    # come back (with a result or an error naming the agent) instead of hanging the caller.
    rt, alice, _, _ = manual
    alice.script.append(reply)
    try:
        result = await asyncio.wait_for(rt.manual_step("g1", "alice", payload="go"), 2)
    except TimeoutError:
        pytest.fail("manual_step hung after alice's turn ended without text_output")
    except Exception as exc:  # noqa: BLE001 - an error is an acceptable outcome
        assert "alice" in str(exc)
    else:
        assert result["message"]["sender"]["address"] == "alice"
    assert len(alice.calls) == 1
    assert rt.manual_return_messages == {}
