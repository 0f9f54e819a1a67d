"""The original's documented swarms.json example with `action_imports` from mail.stdlib.mcp.

It loads as written, and an agent driven by the scripted LLM calls `mcp_ping` and
`mcp_list_tools` against a real MCP server; the results reach its history.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.test_stdlib_mcp import SERVER_SCRIPT, _serve

import mail.stdlib.fs
import mail.stdlib.http
import mail.stdlib.interswarm
import mail.stdlib.mcp
from mail import MAILSwarmTemplate
from mail.api.actions import MAILAction
from mail.utils.parsing import read_python_string
from support.scripted_llm import ScriptedLLM, ScriptedRequest, reply, text, tool_call

pytestmark = pytest.mark.timeout(120)

# The example of the original's configuration page (url:: prompts replaced by text).
DOCUMENTED: dict[str, Any] = {
    "name": "example",
    "version": "1.3.6",
    "entrypoint": "supervisor",
    "enable_interswarm": True,
    "agents": [
        {
            "name": "supervisor",
            "factory": "python::mail.factories.supervisor:LiteLLMSupervisorFunction",
            "comm_targets": ["weather", "math"],
            "enable_entrypoint": True,
            "can_complete_tasks": True,
            "agent_params": {"llm": "openai/gpt-5-mini", "system": "You are supervisor."},
        },
        {
            "name": "weather",
            "factory": "python::mail.examples.weather_dummy.agent:LiteLLMWeatherFunction",
            "comm_targets": ["supervisor", "math"],
            "actions": ["get_weather_forecast"],
            "agent_params": {"llm": "openai/gpt-5-mini", "system": "You are weather."},
        },
        {
            "name": "math",
            "factory": "python::mail.examples.math_dummy.agent:LiteLLMMathFunction",
            "comm_targets": ["supervisor", "weather"],
            "actions": ["calculate_expression"],
            "agent_params": {"llm": "openai/gpt-5-mini", "system": "You are math."},
        },
    ],
    "actions": [
        {
            "name": "get_weather_forecast",
            "description": "Get the weather forecast for a given location",
            "parameters": {
                "type": "object",
                "properties": {
                    "location": {"type": "string"},
                    "days_ahead": {"type": "integer"},
                    "metric": {"type": "boolean"},
                },
            },
            "function": "python::mail.examples.weather_dummy.actions:get_weather_forecast",
        },
        {
            "name": "calculate_expression",
            "description": "Evaluate a basic arithmetic expression inside the math agent",
            "parameters": {
                "type": "object",
                "properties": {
                    "expression": {"type": "string"},
                    "precision": {"type": "integer", "minimum": 0, "maximum": 12},
                },
                "required": ["expression"],
            },
            "function": "python::mail.examples.math_dummy.actions:calculate_expression",
        },
    ],
    "action_imports": [
        "python::mail.stdlib.mcp.actions:mcp_ping",
        "python::mail.stdlib.mcp.actions:mcp_list_tools",
    ],
}

ALL_ACTIONS = {
    "fs": ["read_file", "write_file", "delete_file", "create_directory", "read_directory"],
    "http": [
        "http_get",
        "http_post",
        "http_put",
        "http_delete",
        "http_patch",
        "http_head",
        "http_options",
    ],
    "interswarm": ["ping_swarm", "get_swarm_health", "get_swarm_registry"],
    "mcp": [
        "mcp_ping",
        "mcp_list_tools",
        "mcp_call_tool",
        "mcp_get_prompt",
        "mcp_list_prompts",
        "mcp_read_resource",
        "mcp_list_resources",
    ],
}


def test_every_action_imports_in_both_documented_forms() -> None:
    packages = {
        "fs": mail.stdlib.fs,
        "http": mail.stdlib.http,
        "interswarm": mail.stdlib.interswarm,
        "mcp": mail.stdlib.mcp,
    }
    for package, names in ALL_ACTIONS.items():
        assert sorted(packages[package].__all__) == sorted(names)
        for name in names:
            by_module = read_python_string(f"python::mail.stdlib.{package}.actions:{name}")
            by_package = read_python_string(f"python::mail.stdlib.{package}:{name}")
            assert by_module is by_package
            assert isinstance(by_module, MAILAction) and by_module.name == name
            assert by_module.parameters_model is None and callable(by_module.callback)
            tool = by_module.to_tool_dict()
            assert tool["name"] == name and tool["parameters"]["type"] == "object"


@pytest.mark.parametrize(
    ("args", "got"), [(None, "null"), (["path"], "an array"), ("notes.txt", "a string")]
)
async def test_arguments_that_are_not_an_object_never_raise(args: Any, got: str) -> None:
    # Bad arguments never raise (docs/stdlib.md), not even arguments that are not an object.
    for package, names in ALL_ACTIONS.items():
        for name in names:
            act = read_python_string(f"python::mail.stdlib.{package}:{name}")
            result = await act.function(args)
            assert result == f"Error: the arguments must be an object, got {got}", name


def test_documented_example_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    # Its agents call through a LiteLLM proxy (use_proxy is true by default): checked when the
    # swarm is built, so the proxy's URL must be known.
    monkeypatch.setenv("LITELLM_PROXY_API_BASE", "http://127.0.0.1:4000")
    template = MAILSwarmTemplate.from_swarms_json(copy.deepcopy(DOCUMENTED))
    names = {a.name for a in template.actions}
    assert {"mcp_ping", "mcp_list_tools", "calculate_expression"} <= names
    assert next(a for a in template.actions if a.name == "mcp_ping") is mail.stdlib.mcp.mcp_ping


@pytest.fixture(scope="module")
def mcp_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    script = tmp_path_factory.mktemp("mcp-example") / "server.py"
    script.write_text(SERVER_SCRIPT, encoding="utf-8")
    for base in _serve(Path(script), "streamable-http"):
        yield base + "/mcp"


def _tool_results(request: ScriptedRequest) -> list[str]:
    return [
        m.get("content") or m.get("output") or ""
        for m in request.messages
        if m.get("role") == "tool" or m.get("type") == "function_call_output"
    ]


async def test_documented_example_runs_mcp_actions_through_an_agent(
    mcp_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MAIL_STDLIB_NET_ALLOWED_HOSTS", "127.0.0.1")
    for var in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    async with ScriptedLLM() as llm:
        doc = copy.deepcopy(DOCUMENTED)
        for agent in doc["agents"]:
            agent["agent_params"].update(
                use_proxy=False, api_base=llm.base_url, api_key="k", print_llm_streams=False
            )
            agent["tool_format"] = "responses"  # an api_base alone would mean "completions"
        # Importing makes the actions known; an agent still has to list them to call them.
        doc["agents"][0]["actions"] = ["mcp_ping", "mcp_list_tools"]
        template = MAILSwarmTemplate.from_swarms_json(doc)

        llm.queue(tool_call("mcp_ping", {"server_url": mcp_server}))
        llm.queue(tool_call("mcp_list_tools", {"server_url": mcp_server}))
        llm.queue(
            lambda request: reply(
                text("done"),
                tool_call(
                    "task_complete",
                    {"finish_message": " | ".join(r[:40] for r in _tool_results(request))},
                ),
            )
        )
        swarm = template.instantiate(
            instance_params={"user_token": "t"}, user_id="tester", print_llm_streams=False
        )
        runner = asyncio.create_task(swarm.run_continuous())
        try:
            response, events = await asyncio.wait_for(
                swarm.post_message(body="Check the MCP server.", show_events=True), 60
            )
        finally:
            await swarm.shutdown()
            await asyncio.wait_for(runner, 10)

    first = llm.requests[0]
    assert {"mcp_ping", "mcp_list_tools"} <= set(first.tool_names)
    assert first.tool("mcp_ping")["parameters"]["required"] == ["server_url"]
    results = _tool_results(llm.requests[2])
    assert results[0] == "SUCCESS: True"
    assert results[1].startswith("SUCCESS: [Tool(name='add'")
    assert response["message"]["body"].startswith("SUCCESS: True | SUCCESS: [Tool(name='add'")
    completes = [e for e in events if e.event == "action_complete"]
    assert len(completes) == 2
