"""Tool rights (which tools an agent may call) and instance-scoped discovery, in-process.

The end-to-end proofs over real servers are in test_discovery_and_tool_rights.py; these pin
the pure pieces: where the offered set comes from, and what discovery accepts.
"""

from __future__ import annotations

from typing import Any

import pytest

from mail.core.agents import AgentCore
from mail.core.tool_rights import function_tool_names, offered_tool_names, refusal_reason
from mail.factories.base import LiteLLMAgentFunction
from mail.factories.supervisor import LiteLLMSupervisorFunction
from mail.net.discovery import DiscoveredSwarms, PeerHttpError, discovery_base_url
from support.scripted_agents import (
    AgentSpec,
    ScriptedAgent,
    make_runtime,
    run_task,
    tool_call,
    tool_results,
)

LLM = {"llm": "openai/gpt-4o-mini", "use_proxy": False, "api_base": "http://127.0.0.1:9/v1"}


def _core(function: Any, **wiring: Any) -> AgentCore:
    return AgentCore(function=function, **wiring)


def test_the_offered_set_is_the_functions_own_tool_list() -> None:
    worker = LiteLLMAgentFunction(name="worker", comm_targets=["supervisor"], tools=[], **LLM)
    supervisor = LiteLLMSupervisorFunction(
        name="supervisor", comm_targets=["worker"], tools=[], enable_interswarm=True, **LLM
    )
    worker_tools = function_tool_names(worker)
    assert worker_tools == {_tool_name(t) for t in worker.build_tools()}
    assert worker_tools is not None and "send_request" in worker_tools
    assert not {"discover_swarms", "send_interrupt", "task_complete"} & worker_tools
    supervisor_tools = function_tool_names(supervisor)
    assert supervisor_tools is not None
    assert {"discover_swarms", "send_interswarm_broadcast", "task_complete"} <= supervisor_tools
    # A plain coroutine cannot say: None, and the wiring decides.
    assert function_tool_names(ScriptedAgent("x")) is None


def test_the_wiring_fallback_follows_the_factories() -> None:
    plain, exact = offered_tool_names(_core(ScriptedAgent("w"), comm_targets=["boss"]))
    assert not exact
    assert {"send_request", "send_response", "await_message", "help"} <= plain
    assert not {"send_broadcast", "send_interrupt", "task_complete", "discover_swarms"} & plain
    boss, _ = offered_tool_names(
        _core(
            ScriptedAgent("b"),
            comm_targets=["w"],
            can_complete_tasks=True,
            enable_interswarm=True,
            exclude_tools=("send_interrupt",),
            actions=["lookup"],
        )
    )
    assert {"task_complete", "send_broadcast", "discover_swarms", "lookup"} <= boss
    assert "send_interrupt" not in boss
    why = refusal_reason(
        "send_interrupt", _core(ScriptedAgent("b"), exclude_tools=("send_interrupt",)), boss
    )
    assert "excluded for you (exclude_tools)" in why and "task_complete" in why


async def test_a_refused_call_is_an_error_result_and_the_agent_runs_again() -> None:
    worker_script = [
        [tool_call("send_interrupt", {"target": "supervisor", "subject": "s", "body": "b"})],
        lambda history, _: [
            tool_call(
                "send_response",
                {"target": "supervisor", "subject": "r", "body": tool_results(history)[-1]},
            )
        ],
    ]
    supervisor = ScriptedAgent(
        "supervisor",
        [
            [tool_call("send_request", {"target": "worker", "subject": "s", "body": "go"})],
            lambda history, _: [tool_call("task_complete", {"finish_message": str(history[-1])})],
        ],
    )
    worker = ScriptedAgent("worker", worker_script)
    rt = make_runtime(
        {
            "supervisor": AgentSpec(supervisor, ["worker"], can_complete_tasks=True),
            "worker": AgentSpec(worker, ["supervisor"]),
        }
    )
    response = await run_task(rt)
    body = response["message"]["body"]
    assert "send_interrupt" in body and "it is offered only to supervisors" in body
    assert len(worker.calls) == 2
    assert "::action_error::" in str(worker.calls[1].history[-1])


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://127.0.0.1:8000/any/path", "without a path"),
        ("http://127.0.0.1:8000?x=1", "without a path"),
        ("http://127.0.0.1:8000/#frag", "without a path"),
        ("http://user:pw@host.example", "credentials"),
        ("ftp://host.example", "only http and https"),
        ("http://", "has no host"),
        (42, "is not a URL"),
    ],
)
def test_discovery_urls_are_base_urls(url: Any, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        discovery_base_url(url)


def test_discovery_base_urls_are_normalised() -> None:
    assert discovery_base_url("HTTP://Host.Example:8080/") == "http://host.example:8080"
    assert discovery_base_url("https://[::1]:9") == "https://[::1]:9"


class _FakeHttp:
    def __init__(self, listed: list[dict[str, Any]], refused: set[str] = frozenset()) -> None:
        self.listed = listed
        self.refused = refused
        self.gets: list[str] = []

    async def get_json(self, url: str) -> Any:
        self.gets.append(url)
        return {"swarms": self.listed}

    async def check_address(self, url: str) -> None:
        if url in self.refused:
            raise PeerHttpError("refused to connect: loopback addresses are blocked")

    async def post_json(self, url: str, body: dict[str, Any], timeout: float) -> tuple[int, str]:
        raise AssertionError("not sent in these tests")


async def test_discovery_skips_known_names_bad_entries_and_refused_addresses() -> None:
    http = _FakeHttp(
        [
            {"swarm_name": "new", "base_url": "https://new.example", "auth_token": "T"},
            {"swarm_name": "known", "base_url": "https://evil.example"},
            {"swarm_name": "local", "base_url": "https://evil.example"},
            {"swarm_name": "bad name", "base_url": "https://x.example"},
            {"swarm_name": "pathy", "base_url": "https://x.example/prefix"},
            {"swarm_name": "inside", "base_url": "http://10.0.0.1"},
        ],
        refused={"http://10.0.0.1"},
    )
    found = DiscoveredSwarms(http, "local", lambda name: name in ("known", "local"))
    result = await found.discover(["https://dir.example"])
    assert http.gets == ["https://dir.example/swarms"]
    assert result.startswith("SUCCESS") and "new at https://new.example" in result
    assert "'known' is already registered" in result and "'local' is this swarm" in result
    assert "'pathy'" in result and "'inside': refused" in result
    assert set(found.entries) == {"new"}
    assert found.get("known") is None and found.get("new") is not None
    assert "T" not in repr(found.entries)


async def test_a_bad_url_refuses_the_whole_call_before_any_fetch() -> None:
    http = _FakeHttp([])
    found = DiscoveredSwarms(http, "local", lambda name: False)
    result = await found.discover(["https://ok.example", "https://x.example/p?q=1"])
    assert result.startswith("ERROR: discovery refused, nothing was fetched")
    assert http.gets == []
    assert (await found.discover("https://ok.example")).startswith("ERROR")
    assert (await found.discover([f"https://h{i}.example" for i in range(9)])).startswith(
        "ERROR: at most 8"
    )


def _tool_name(tool: dict[str, Any]) -> str:
    return str(tool.get("name") or tool["function"]["name"])
