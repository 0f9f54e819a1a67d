"""A one-agent swarm with the stdlib file actions and the team file tools, answered by the
scripted LLM, for end-to-end tests against a real `mail server` process."""

from __future__ import annotations

import json
from typing import Any

from support.scripted_llm import Reply, ScriptedRequest, reply, tool_call

FS = ["read_file", "write_file", "read_directory"]


def swarm(name: str, llm_url: str) -> dict[str, Any]:
    return {
        "name": name,
        "version": "1.0.0",
        "entrypoint": "supervisor",
        "action_imports": [f"python::mail.stdlib.fs.actions:{a}" for a in FS],
        "agents": [
            {
                "name": "supervisor",
                "factory": "python::mail.factories.supervisor:LiteLLMSupervisorFunction",
                "comm_targets": [],
                "enable_entrypoint": True,
                "can_complete_tasks": True,
                "tool_format": "completions",
                "actions": FS,
                "team_tools": ["files"],
                "agent_params": {
                    "llm": "openai/gpt-4o-mini",
                    "use_proxy": False,
                    "api_base": llm_url,
                    "api_key": "test-key",
                    "system": "You are supervisor.",
                },
            }
        ],
        "actions": [],
    }


def tool_results(request: ScriptedRequest) -> list[str]:
    return [str(m["content"]) for m in request.messages if m.get("role") == "tool"]


def finish_with_results(request: ScriptedRequest) -> Reply:
    return reply(tool_call("task_complete", {"finish_message": json.dumps(tool_results(request))}))
