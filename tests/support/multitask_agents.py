"""Agents for the multitask-strategy tests: a supervisor and a slow worker (no LLM).

Referenced from swarms.json as ``python::tests.support.multitask_agents:factory``.

* The supervisor, given ``ASK <text>``, asks ``worker`` with ``<text>`` and completes with
  ``done: <worker's answer>``; given ``COUNT`` it completes with ``callers: <every caller
  message in its history, joined by ' | '>`` (what of the earlier messages it still has);
  anything else completes with ``echo: <body>``.
* The worker, given ``SLOW <seconds> <text>``, waits that long, then answers ``worked:
  <text>``; given anything else it answers ``worked: <text> (request <n>)``, n being how many
  requests its history holds (what of the earlier ones it still has).

With ``MAIL_MULTITASK_BROKEN_FACTORY`` set, making an agent fails with its value.

Every call appends ``<agent> start <body>`` to the file named by ``MAIL_MULTITASK_LOG``, and a
worker call that finished its wait ``worker end <body>`` (so a test waits for "the worker call
started" instead of sleeping, and sees which calls were cancelled).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import uuid
from typing import Any

from mail.core.tools import AgentToolCall

_MESSAGE = re.compile(r'<from type="(\w+)">([^<]*)</from>.*?<body>(.*?)</body>', re.S)


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
        if item.get("role") == "user" and isinstance(content, str):
            match = _MESSAGE.search(content)
            if match:
                found.append((match.group(1), match.group(2), match.group(3)))
    return found


def _log(line: str) -> None:
    path = os.environ.get("MAIL_MULTITASK_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")


def factory(name: str, comm_targets: list[str], **_: Any):  # noqa: ANN201
    broken = os.environ.get("MAIL_MULTITASK_BROKEN_FACTORY")
    if broken:  # a swarm whose instances can no longer be made (a credential gone, ...)
        raise RuntimeError(broken)

    async def agent(history: list[dict[str, Any]], tool_choice: Any = "required"):  # noqa: ANN202
        incoming = _incoming(history)
        kind, sender, body = incoming[-1] if incoming else ("", "", "")
        _log(f"{name} start {body}")
        if name == "worker":
            slow = re.match(r"SLOW (\d+(?:\.\d+)?) (.*)", body, re.S)
            if slow:
                await asyncio.sleep(float(slow.group(1)))
                _log(f"worker end {body}")
                answer = f"worked: {slow.group(2)}"
            else:
                answer = f"worked: {body} (request {len(incoming)})"
            args = {"target": sender, "subject": "Re: work", "body": answer}
            return None, [_call("send_response", args)]
        if kind == "agent":
            return None, [_call("task_complete", {"finish_message": f"done: {body}"})]
        if body.startswith("ASK "):
            args = {"target": "worker", "subject": "work", "body": body[4:]}
            return None, [_call("send_request", args)]
        if body == "COUNT":
            callers = [b for k, _s, b in incoming if k in ("user", "admin")]
            return None, [
                _call("task_complete", {"finish_message": "callers: " + " | ".join(callers)})
            ]
        return None, [_call("task_complete", {"finish_message": f"echo: {body}"})]

    return agent


def swarms_json(name: str) -> list[dict[str, Any]]:
    ref = "python::tests.support.multitask_agents:factory"
    return [
        {
            "name": name,
            "version": "1.0.0",
            "entrypoint": "supervisor",
            "description": "a supervisor and a slow worker for multitask tests",
            "keywords": ["test"],
            "public": False,
            "agents": [
                {
                    "name": "supervisor",
                    "factory": ref,
                    "comm_targets": ["worker"],
                    "enable_entrypoint": True,
                    "can_complete_tasks": True,
                    "agent_params": {},
                },
                {
                    "name": "worker",
                    "factory": ref,
                    "comm_targets": ["supervisor"],
                    "agent_params": {},
                },
            ],
            "actions": [],
        }
    ]
