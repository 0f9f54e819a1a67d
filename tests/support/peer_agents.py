"""Deterministic agents for the peer-reachability and peer-review tests (no LLM).

Both swarms' entrypoint is `supervisor`, as in real deployments.

* `peer_supervisor`: `EMAIL <text>` calls the reviewed action `send_email`; a system notice
  (an `::action_error::`, say) completes the task with `supervisor saw: <notice>`; anything
  else completes with `supervisor@<swarm>: <body>`.
  `BREAK <text>` calls the breakpoint tool `ask_human`.
* `peer_worker`: not an entrypoint; completes with `worker: <body>`.
* `relay` (from interswarm_agents): `ASK <agent@swarm> <text>` asks that agent and completes
  with `relay got: <answer>`.
"""

from __future__ import annotations

from typing import Any

from tests.support.stub_agents import _call, _last_incoming


def peer_supervisor(name: str, comm_targets: list[str], **params: Any):  # noqa: ANN201
    swarm = str(params.get("swarm_label") or "?")

    async def agent(history: list[dict[str, Any]], tool_choice: Any = "required"):  # noqa: ANN202
        if isinstance(tool_choice, dict) and tool_choice.get("name") == "task_complete":
            return None, [_call("task_complete", {"finish_message": "stopped"})]
        kind, _sender, body = _last_incoming(history)
        if kind == "system":
            return None, [_call("task_complete", {"finish_message": f"supervisor saw: {body}"})]
        if body.startswith("BREAK "):
            return None, [_call("ask_human", {"question": body[len("BREAK ") :]})]
        if body.startswith("EMAIL "):
            args = {"to": "team@example.com", "body": body[len("EMAIL ") :]}
            return None, [_call("send_email", args)]
        return None, [_call("task_complete", {"finish_message": f"supervisor@{swarm}: {body}"})]

    return agent


def peer_worker(name: str, comm_targets: list[str], **_: Any):  # noqa: ANN201
    async def agent(history: list[dict[str, Any]], tool_choice: Any = "required"):  # noqa: ANN202
        _kind, _sender, body = _last_incoming(history)
        return None, [_call("task_complete", {"finish_message": f"worker: {body}"})]

    return agent


def peer_swarm_json(name: str, remote: str) -> list[dict[str, Any]]:
    """`supervisor` (entrypoint, with a reviewed `send_email`), `worker` (not an
    entrypoint) and `relay` (an entrypoint that asks agents of `remote`)."""
    factory = "python::tests.support.peer_agents:"
    return [
        {
            "name": name,
            "version": "1.0.0",
            "entrypoint": "supervisor",
            "enable_interswarm": True,
            "public": True,
            "description": f"peer test swarm {name}",
            "breakpoint_tools": ["ask_human"],
            "agents": [
                {
                    "name": "supervisor",
                    "factory": factory + "peer_supervisor",
                    "comm_targets": ["worker"],
                    "actions": ["send_email", "ask_human"],
                    "agent_params": {"swarm_label": name},
                    "enable_entrypoint": True,
                    "can_complete_tasks": True,
                    "enable_interswarm": True,
                },
                {
                    "name": "relay",
                    "factory": "python::tests.support.interswarm_agents:relay",
                    "comm_targets": [f"supervisor@{remote}", f"worker@{remote}"],
                    "agent_params": {},
                    "enable_entrypoint": True,
                    "can_complete_tasks": True,
                    "enable_interswarm": True,
                },
                {
                    "name": "worker",
                    "factory": factory + "peer_worker",
                    "comm_targets": ["supervisor"],
                    "agent_params": {},
                    "can_complete_tasks": True,
                    "enable_interswarm": True,
                },
            ],
            "actions": [
                {
                    "name": "send_email",
                    "description": "Send an email.",
                    "parameters": {
                        "type": "object",
                        "properties": {"to": {"type": "string"}, "body": {"type": "string"}},
                        "required": ["to", "body"],
                    },
                    "function": "python::tests.support.scripted_agents:echo_action",
                    "review": ["accept", "ignore"],
                },
                {
                    "name": "ask_human",
                    "description": "Ask a person (a breakpoint tool: the task pauses).",
                    "parameters": {
                        "type": "object",
                        "properties": {"question": {"type": "string"}},
                        "required": ["question"],
                    },
                    "function": "python::tests.support.scripted_agents:echo_action",
                },
            ],
        }
    ]
