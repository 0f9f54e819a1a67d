"""Shared pieces of the team-tools end-to-end tests: a swarms.json of LiteLLM agents that
talk to the scripted LLM, and helpers to read what the models were sent."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from support.scripted_llm import ScriptedRequest

TEAM = ["reply_wait", "threads", "inbox", "files"]


def team_swarms_json(name: str, llm_url: str) -> list[dict[str, Any]]:
    common = {"llm": "openai/gpt-4o-mini", "use_proxy": False, "api_base": llm_url}
    common["api_key"] = "test-key"

    def agent(agent_name: str, targets: list[str], **extra: Any) -> dict[str, Any]:
        factory = "python::mail.factories.base:LiteLLMAgentFunction"
        if extra.get("can_complete_tasks"):
            factory = "python::mail.factories.supervisor:LiteLLMSupervisorFunction"
        return {
            "name": agent_name,
            "factory": factory,
            "comm_targets": targets,
            "agent_params": {**common, "system": f"You are {agent_name}."},
            "tool_format": "completions",
            "team_tools": TEAM,
            **extra,
        }

    return [
        {
            "name": name,
            "version": "1.0.0",
            "entrypoint": "lead",
            "agents": [
                agent("lead", ["a", "b"], enable_entrypoint=True, can_complete_tasks=True),
                agent("a", ["lead", "b"]),
                agent("b", ["lead", "a"]),
            ],
            "actions": [],
        }
    ]


def write_team_swarm(directory: Path, name: str, llm_url: str) -> None:
    (directory / "swarms.json").write_text(
        json.dumps(team_swarms_json(name, llm_url)), encoding="utf-8"
    )


def team_config_extra(directory: Path, max_bytes: int = 1000) -> str:
    return f"""
[server.team_tools]
files_root = "{directory / "files"}"
attachments_dir = "{directory / "attachments"}"
max_attachment_bytes = {max_bytes}
reply_timeout = 20
"""


def is_agent(name: str) -> Any:
    return lambda request: request.system_text.startswith(f"You are {name}.")


def results(request: ScriptedRequest) -> list[str]:
    return [m["content"] for m in request.messages if m.get("role") == "tool"]


def json_result(text: str) -> Any:
    """The JSON value in a tool result such as ``SUCCESS: thread created: {...}``."""
    starts = [i for i in (text.find("{"), text.find("[")) if i >= 0]
    return json.loads(text[min(starts) :])


def incoming_texts(request: ScriptedRequest) -> list[str]:
    out = []
    for m in request.messages:
        if m.get("role") == "user":
            content = m.get("content")
            out.append(content if isinstance(content, str) else json.dumps(content))
    return out


def body_of(text: str) -> str:
    match = re.search(r"<body>(.*)</body>", text, re.S)
    return match.group(1) if match else text


def requests_of(llm: Any, name: str) -> list[ScriptedRequest]:
    return [r for r in llm.requests if is_agent(name)(r)]
