"""A swarm with reviewed actions on LiteLLM agents (answered by the scripted LLM), and a
real HTTP server for it on 127.0.0.1 (the FastAPI app under uvicorn, in this process)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import uvicorn

from mail.api import MAILSwarmTemplate
from mail.config import ServerConfig
from mail.server.app_factory import create_app

MODELS = {"completions": "openai/gpt-4o-mini", "responses": "openai/gpt-5-mini"}
ECHO = "python::tests.support.scripted_agents:echo_action"
ALL_DECISIONS = ["accept", "edit", "ignore", "respond"]


def review_swarms_json(
    name: str,
    api_base: str,
    tool_format: str = "completions",
    *,
    memory: bool = False,
    ignore_ends_task: bool | None = None,
) -> dict[str, Any]:
    """assistant (entrypoint) with send_email (all decisions), ask_question (respond/ignore)
    and lookup (not reviewed); a helper it may talk to."""
    params = {
        "llm": MODELS[tool_format],
        "use_proxy": False,
        "api_base": api_base,
        "api_key": "test-key",
    }
    swarm: dict[str, Any] = {
        "name": name,
        "version": "1.3.6",
        "entrypoint": "assistant",
        "agents": [
            {
                "name": "assistant",
                "factory": "python::mail.factories.supervisor:LiteLLMSupervisorFunction",
                "comm_targets": ["helper"],
                "enable_entrypoint": True,
                "can_complete_tasks": True,
                "tool_format": tool_format,
                "actions": ["send_email", "ask_question", "lookup"],
                "agent_params": {
                    **params,
                    "system": "You are assistant.",
                    **({"memory": True} if memory else {}),
                },
            },
            {
                "name": "helper",
                "factory": "python::mail.factories.action:LiteLLMActionAgentFunction",
                "comm_targets": ["assistant"],
                "tool_format": tool_format,
                "actions": [],
                "agent_params": {**params, "system": "You are helper."},
            },
        ],
        "actions": [
            _action("send_email", "Send an email.", ["to", "body"], ALL_DECISIONS),
            _action(
                "ask_question", "Ask the user a question.", ["question"], ["respond", "ignore"]
            ),
            _action("lookup", "Look something up.", ["query"], None),
        ],
    }
    if ignore_ends_task is not None:
        swarm["review_ignore_ends_task"] = ignore_ends_task
    return swarm


def _action(name: str, description: str, fields: list[str], review: list[str] | None) -> dict:
    action: dict[str, Any] = {
        "name": name,
        "description": description,
        "parameters": {
            "type": "object",
            "properties": {f: {"type": "string"} for f in fields},
            "required": fields,
        },
        "function": ECHO,
    }
    if review is not None:
        action["review"] = review
    return action


def server_config(tmp_path: Path, name: str, port: int) -> ServerConfig:
    return ServerConfig.model_validate(
        {
            "host": "127.0.0.1",
            "port": port,
            "swarm": {"name": name, "registry": str(tmp_path / "registries" / f"{name}.json")},
            "settings": {"instance_idle_timeout": 0, "sse_ping_interval": 0.5},
            "auth": {"mode": "local", "keys_file": str(tmp_path / "keys.json")},
        }
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.asynccontextmanager
async def serve_swarm(tmp_path: Path, swarm: dict[str, Any]) -> AsyncIterator[str]:
    """Serve `swarm` over real HTTP on 127.0.0.1; yields the base URL."""
    port = free_port()
    template = MAILSwarmTemplate.from_swarms_json(swarm)
    app = create_app(server_config(tmp_path, swarm["name"], port), template=template)
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    serving = asyncio.create_task(server.serve())
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while not server.started:
        if serving.done():
            serving.result()  # raises what stopped it
        if loop.time() > deadline:
            raise RuntimeError("the test server did not start in 30s")
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, 30)
