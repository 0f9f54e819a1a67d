"""Agents for the restart-continues-the-task tests: a supervisor and two workers (no LLM).

Referenced from swarms.json as ``python::tests.support.durable_agents:factory``.

* The supervisor, given ``FANOUT <text>``, asks ``worker1`` and ``worker2`` at once; it waits
  (``await_message``) until both answered, then completes with ``both: <answer> + <answer>``.
* ``BREAKPOINT <text>`` makes the supervisor call the breakpoint tool ``human_review``; re-prompted
  with the result it completes with ``reviewed: <result>``.
* A worker answers ``worked(<name>): <text>``.
* ``CHATTY <text>`` makes the supervisor ask ``worker1`` again after every answer, for ever:
  only a forced ``task_complete`` (the step limit's last call) ends it.

Every call first records itself: a line ``<agent> <pid> start`` appended to the file named by
``MAIL_DURABLE_CALL_LOG`` (so a test waits for "a worker call started" instead of sleeping, and
counts how often each agent was called), then waits ``MAIL_STUB_LATENCY_MS``, and, while the
file named by ``MAIL_DURABLE_GATE`` (if set) does not exist, until it does (a model call that
hangs until the test lets it answer); with ``MAIL_DURABLE_GATE_FROM=N``, only the Nth call logged
and later ones wait for it.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import uuid
from typing import Any

from mail.core.tools import AgentToolCall

_BODY = re.compile(r"<body>(.*?)</body>", re.S)
_FROM = re.compile(r'<from type="(\w+)">([^<]*)</from>')


def _call(name: str, args: dict[str, Any]) -> AgentToolCall:
    call_id = f"call_{uuid.uuid4().hex[:12]}"
    completion = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
        ],
    }
    return AgentToolCall(
        tool_name=name, tool_args=args, tool_call_id=call_id, completion=completion
    )


def _incoming(history: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """(sender type, sender, body) of every MAIL message in the history, oldest first."""
    found = []
    for item in history:
        content = item.get("content")
        if (
            item.get("role") == "user"
            and isinstance(content, str)
            and "<incoming_message>" in content
        ):
            body, sender = _BODY.search(content), _FROM.search(content)
            found.append(
                (
                    sender.group(1) if sender else "",
                    sender.group(2) if sender else "",
                    body.group(1) if body else "",
                )
            )
    return found


def _log(name: str) -> int:
    """Record a call; returns its number (1: the first call logged), 0 without a log."""
    path = os.environ.get("MAIL_DURABLE_CALL_LOG")
    if not path:
        return 0
    with open(path, "a+", encoding="utf-8") as f:
        f.write(f"{name} {os.getpid()} start\n")
        f.seek(0)
        return sum(1 for _ in f)


def factory(name: str, comm_targets: list[str], **_: Any):  # noqa: ANN201
    latency = float(os.environ.get("MAIL_STUB_LATENCY_MS") or 0) / 1000

    async def agent(history: list[dict[str, Any]], tool_choice: Any = "required"):  # noqa: ANN202
        number = _log(name)
        if latency:
            await asyncio.sleep(latency)
        gate = os.environ.get("MAIL_DURABLE_GATE")
        if number < int(os.environ.get("MAIL_DURABLE_GATE_FROM") or 0):
            gate = None
        while gate and not os.path.exists(gate):
            await asyncio.sleep(0.05)
        last = history[-1] if history else {}
        if last.get("role") == "tool" and name == "supervisor":
            return None, [
                _call("task_complete", {"finish_message": f"reviewed: {last['content']}"})
            ]
        incoming = _incoming(history)
        if name != "supervisor":
            sender = incoming[-1][1]
            body = incoming[-1][2]
            return None, [
                _call(
                    "send_response",
                    {"target": sender, "subject": "Re: work", "body": f"worked({name}): {body}"},
                )
            ]
        if incoming and incoming[0][2].startswith("CHATTY"):
            if isinstance(tool_choice, dict) and tool_choice.get("name") == "task_complete":
                return None, [_call("task_complete", {"finish_message": "stopped by max_steps"})]
            return None, [_call("send_request", {"target": "worker1", "subject": "w", "body": "x"})]
        answers = [body for kind, _s, body in incoming if kind == "agent"]
        if answers:
            if len(answers) >= 2:
                text = " + ".join(sorted(answers))
                return None, [_call("task_complete", {"finish_message": f"both: {text}"})]
            return None, [_call("await_message", {"reason": "the other worker"})]
        body = incoming[-1][2] if incoming else ""
        if body.startswith("BREAKPOINT"):
            return None, [_call("human_review", {"question": body})]
        text = body.removeprefix("FANOUT").strip()
        return None, [
            _call("send_request", {"target": "worker1", "subject": "work", "body": text + " A"}),
            _call("send_request", {"target": "worker2", "subject": "work", "body": text + " B"}),
        ]

    return agent


async def human_review(args: dict[str, Any]) -> str:
    return f"auto-approved: {args.get('question')}"


def swarms_json(name: str) -> list[dict[str, Any]]:
    ref = "python::tests.support.durable_agents:factory"
    return [
        {
            "name": name,
            "version": "1.0.0",
            "entrypoint": "supervisor",
            "description": "supervisor and two workers for restart tests",
            "keywords": ["test"],
            "public": False,
            "breakpoint_tools": ["human_review"],
            "agents": [
                {
                    "name": "supervisor",
                    "factory": ref,
                    "comm_targets": ["worker1", "worker2"],
                    "enable_entrypoint": True,
                    "can_complete_tasks": True,
                    "actions": ["human_review"],
                    "agent_params": {},
                },
                {
                    "name": "worker1",
                    "factory": ref,
                    "comm_targets": ["supervisor"],
                    "agent_params": {},
                },
                {
                    "name": "worker2",
                    "factory": ref,
                    "comm_targets": ["supervisor"],
                    "agent_params": {},
                },
            ],
            "actions": [
                {
                    "name": "human_review",
                    "description": "Ask a human to review something.",
                    "parameters": {
                        "type": "object",
                        "properties": {"question": {"type": "string"}},
                        "required": ["question"],
                    },
                    "function": "python::tests.support.durable_agents:human_review",
                }
            ],
        }
    ]
