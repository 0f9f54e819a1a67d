"""The stub swarm plus what webhook tests need: a reviewed action and interswarm.

Agents are ``tests.support.stub_agents``' (see its docstring for the commands), and one more:
``REVIEW <text>`` calls the reviewed action ``send_email``; once decided, the supervisor
completes with ``reviewed: <result>``.
"""

from __future__ import annotations

from typing import Any

from tests.support.stub_agents import _call, _last_incoming, stub_factory, stub_swarms_json

FACTORY = "python::tests.support.webhook_swarm:webhook_factory"


def webhook_factory(name: str, comm_targets: list[str], **params: Any):  # noqa: ANN201
    inner = stub_factory(name, comm_targets, **params)

    async def agent(history: list[dict[str, Any]], tool_choice: Any = "required"):  # noqa: ANN202
        last = history[-1] if history else {}
        if last.get("role") != "tool" and name == "supervisor":
            _sender_type, _sender, body = _last_incoming(history)
            if body.startswith("REVIEW"):
                return None, [_call("send_email", {"to": "someone", "text": body[6:].strip()})]
        return await inner(history, tool_choice)

    return agent


async def send_email(args: dict[str, Any]) -> str:
    return f"sent to {args.get('to')}"


def webhook_swarms_json(name: str = "hooks", *, interswarm: bool = False) -> list[dict[str, Any]]:
    swarms = stub_swarms_json(name)
    swarm = swarms[0]
    for agent in swarm["agents"]:
        agent["factory"] = FACTORY
    swarm["agents"][0]["actions"].append("send_email")
    swarm["actions"].append(
        {
            "name": "send_email",
            "description": "Send an email (a person reviews it first).",
            "parameters": {
                "type": "object",
                "properties": {"to": {"type": "string"}, "text": {"type": "string"}},
                "required": ["to"],
            },
            "function": "python::tests.support.webhook_swarm:send_email",
            "review": ["accept", "ignore"],
        }
    )
    if interswarm:
        swarm["enable_interswarm"] = True
        for agent in swarm["agents"]:
            agent["enable_interswarm"] = True
    return swarms
