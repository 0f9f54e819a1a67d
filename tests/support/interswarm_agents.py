"""Deterministic agents for the two-server interswarm tests (no LLM).

Both sides use the same layout, as real federations do: every swarm's entrypoint is
`supervisor`, so `supervisor@swarm-alpha` talks to `supervisor@swarm-beta`.

* `supervisor`: a message from its own user asks `supervisor@<remote>` (subject `question`);
  a `question` from an agent is answered with `beta says: <body>`; any other agent message
  (an answer, a task-end notice) completes the task with `alpha got: <body>`; a remote user's
  direct message (`<from type="user">id@swarm</from>`) is completed with
  `beta completes: <body>`; a system message completes it with `error: <body>`.
* `alpha_supervisor`: the older one-way supervisor (asks its first comm target).
* `beta_worker`: answers whoever asked with `beta says: <body>`.
* `relay` / `sleeper`: a user's `ASK agent@swarm text` goes to that agent; the sleeper
  answers after 30 s (for peers that die, or callers that time out, meanwhile).
* `looping_worker`: calls `await_message` forever (nothing is ever on its way).
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from tests.support.stub_agents import _call, _last_incoming

_SUBJECT = re.compile(r"<subject>(.*?)</subject>", re.S)


def _last_subject(history: list[dict[str, Any]]) -> str:
    for item in reversed(history):
        content = item.get("content")
        if item.get("role") == "user" and isinstance(content, str) and "<subject>" in content:
            found = _SUBJECT.findall(content)
            return found[-1] if found else ""
    return ""


def supervisor(name: str, comm_targets: list[str], **_: Any):  # noqa: ANN201
    async def agent(history: list[dict[str, Any]], tool_choice: Any = "required"):  # noqa: ANN202
        kind, sender, body = _last_incoming(history)
        subject = _last_subject(history)
        if kind in ("user", "admin") and "@" in sender:  # a peer's user, sent to us directly
            return None, [_call("task_complete", {"finish_message": f"beta completes: {body}"})]
        if kind in ("user", "admin"):
            args = {"target": comm_targets[0], "subject": "question", "body": body}
            return None, [_call("send_request", args)]
        if kind == "system":
            return None, [_call("task_complete", {"finish_message": f"error: {body}"})]
        if subject == "question":
            args = {"target": sender, "subject": "answer", "body": f"beta says: {body}"}
            return None, [_call("send_response", args)]
        return None, [_call("task_complete", {"finish_message": f"alpha got: {body}"})]

    return agent


def alpha_supervisor(name: str, comm_targets: list[str], **_: Any):  # noqa: ANN201
    async def agent(history: list[dict[str, Any]], tool_choice: Any = "required"):  # noqa: ANN202
        kind, _sender, body = _last_incoming(history)
        if kind in ("user", "admin"):
            target = comm_targets[0]
            return None, [
                _call("send_request", {"target": target, "subject": "question", "body": body})
            ]
        if kind == "system":
            return None, [_call("task_complete", {"finish_message": f"error: {body}"})]
        return None, [_call("task_complete", {"finish_message": f"alpha got: {body}"})]

    return agent


def beta_worker(name: str, comm_targets: list[str], **_: Any):  # noqa: ANN201
    async def agent(history: list[dict[str, Any]], tool_choice: Any = "required"):  # noqa: ANN202
        kind, sender, body = _last_incoming(history)
        if kind in ("user", "admin"):
            return None, [_call("task_complete", {"finish_message": f"beta completes: {body}"})]
        return None, [
            _call(
                "send_response",
                {"target": sender, "subject": "answer", "body": f"beta says: {body}"},
            )
        ]

    return agent


def looping_worker(name: str, comm_targets: list[str], **_: Any):  # noqa: ANN201
    """Whatever it receives, it waits for a message that never comes (issue 12, item 2)."""

    async def agent(history: list[dict[str, Any]], tool_choice: Any = "required"):  # noqa: ANN202
        await asyncio.sleep(0.01)  # like a model, it takes a moment to answer
        return None, [_call("await_message", {})]

    return agent


def relay(name: str, comm_targets: list[str], **_: Any):  # noqa: ANN201
    """`ASK <agent@swarm> <text>` from a user asks that agent; an agent's answer completes
    the task with `relay got: <answer>`, a system notice with `error: <notice>`."""

    async def agent(history: list[dict[str, Any]], tool_choice: Any = "required"):  # noqa: ANN202
        kind, _sender, body = _last_incoming(history)
        if kind in ("user", "admin"):
            _, target, text = body.split(" ", 2)
            return None, [_call("send_request", {"target": target, "subject": "q", "body": text})]
        if kind == "system":
            return None, [_call("task_complete", {"finish_message": f"error: {body}"})]
        return None, [_call("task_complete", {"finish_message": f"relay got: {body}"})]

    return agent


def sleeper(name: str, comm_targets: list[str], **_: Any):  # noqa: ANN201
    """Takes 30 seconds, then answers whoever asked (a peer that is slow, or dies meanwhile)."""

    async def agent(history: list[dict[str, Any]], tool_choice: Any = "required"):  # noqa: ANN202
        kind, sender, body = _last_incoming(history)
        await asyncio.sleep(30)
        return None, [_call("send_response", {"target": sender, "subject": "a", "body": body})]

    return agent


def swarm_json(name: str, remote: str) -> list[dict[str, Any]]:
    """swarms.json for one side: `supervisor` (asks supervisor@remote) and a local `worker`."""
    factory = "python::tests.support.interswarm_agents:"
    return [
        {
            "name": name,
            "version": "1.0.0",
            "entrypoint": "supervisor",
            "enable_interswarm": True,
            "public": True,
            "description": f"test swarm {name}",
            "agents": [
                {
                    "name": "supervisor",
                    "factory": factory + "supervisor",
                    "comm_targets": [f"supervisor@{remote}", "worker"],
                    "agent_params": {},
                    "enable_entrypoint": True,
                    "can_complete_tasks": True,
                    "enable_interswarm": True,
                },
                {
                    "name": "worker",
                    "factory": factory + "beta_worker",
                    "comm_targets": [f"supervisor@{remote}", "supervisor"],
                    "agent_params": {},
                    "can_complete_tasks": True,
                    "enable_entrypoint": True,
                    "enable_interswarm": True,
                },
                {
                    "name": "relay",
                    "factory": factory + "relay",
                    "comm_targets": [f"sleeper@{remote}", "sleeper@swarm-gamma", "worker"],
                    "agent_params": {},
                    "can_complete_tasks": True,
                    "enable_entrypoint": True,
                    "enable_interswarm": True,
                },
                {
                    "name": "sleeper",
                    "factory": factory + "sleeper",
                    "comm_targets": [f"relay@{remote}", "relay@swarm-alpha"],
                    "agent_params": {},
                    "enable_entrypoint": True,
                    "enable_interswarm": True,
                },
                {
                    "name": "looper",
                    "factory": factory + "looping_worker",
                    "comm_targets": ["supervisor"],
                    "agent_params": {},
                    "can_complete_tasks": True,
                    "enable_entrypoint": True,
                    "enable_interswarm": True,
                },
            ],
            "actions": [],
        }
    ]
