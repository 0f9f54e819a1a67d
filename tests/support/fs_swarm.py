"""A one-agent swarm with the stdlib file actions and the team file tools, answered by the
scripted LLM, for end-to-end tests against a real `mail server` process."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

from server_fixtures import ServerProcess
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


async def healthy(server: ServerProcess, timeout: float = 240.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    async with httpx.AsyncClient(timeout=1) as client:
        while loop.time() < deadline:
            assert server.proc is not None
            if server.proc.poll() is not None:
                raise AssertionError(f"server exited:\n{server.logs()}")
            try:
                if (await client.get(f"{server.base_url}/health")).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError(f"server not healthy in {timeout}s:\n{server.logs()}")


def tool_results(request: ScriptedRequest) -> list[str]:
    return [str(m["content"]) for m in request.messages if m.get("role") == "tool"]


def finish_with_results(request: ScriptedRequest) -> Reply:
    return reply(tool_call("task_complete", {"finish_message": json.dumps(tool_results(request))}))
