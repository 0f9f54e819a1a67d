"""Deterministic agents for end-to-end server tests (no LLM).

Referenced from test swarms.json files as ``python::tests.support.stub_agents:stub_factory``,
so the server subprocess needs the repository root on ``PYTHONPATH``.

The agent reads the newest entry of its history and acts on the user's message body:

* ``SLEEP <seconds> ...`` waits first, then carries on with the rest of the body;
* ``BREAKPOINT`` calls the breakpoint tool ``human_review`` once; ``BREAKPOINT2`` twice in one
  turn (for list resumes). When re-prompted after a resume, it completes the task with
  ``reviewed: <results joined by ' | '>``;
* ``COUNT`` completes with ``turn <n>`` where n is the number of user messages in its history
  (multi-turn tasks keep the history);
* ``FAIL`` raises, which the runtime turns into an error response (never an HTTP 500);
* ``ENV <NAME>`` completes with ``<NAME>=<value of that environment variable>``;
* ``LOOP`` makes the supervisor and the worker pass messages back and forth forever; only the
  runtime's step limit ends it (the agent obeys a forced ``task_complete`` tool choice);
* ``CHATTY <rounds> <size>`` makes the supervisor and the worker exchange ``rounds`` requests
  and answers padded to ``size`` characters, then complete with ``chatted <rounds>`` (a task
  that produces many large events quickly; run it with ``task_message_limit = 0``);
* ``DELEGATE <text>`` asks the ``worker`` agent, which answers ``worked: <text>``, and then
  completes with ``delegated: <worker's answer>``;
* anything else completes with ``echo[<sender id>]: <body>``.

``MAIL_STUB_LATENCY_MS`` in the server's environment makes every turn of every agent wait that
many milliseconds first, like a model that takes time to answer.
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
_CHATTY = re.compile(r"CHATTY (\d+) (\d+)(?: left (\d+))?")


def _chatty_request(rounds: int, size: int, left: int) -> AgentToolCall:
    body = f"CHATTY {rounds} {size} left {left} " + "x" * size
    return _call("send_request", {"target": "worker", "subject": "chat", "body": body})


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


def _complete(text: str) -> tuple[str | None, list[AgentToolCall]]:
    return None, [_call("task_complete", {"finish_message": text})]


def _last_incoming(history: list[dict[str, Any]]) -> tuple[str, str, str]:
    """(sender type, sender id, body) of the newest MAIL message in the history."""
    for item in reversed(history):
        content = item.get("content")
        if (
            item.get("role") == "user"
            and isinstance(content, str)
            and "<incoming_message>" in content
        ):
            body = _BODY.search(content)
            sender = _FROM.search(content)
            return (
                sender.group(1) if sender else "",
                sender.group(2) if sender else "",
                body.group(1) if body else "",
            )
    return "", "", ""


def _tool_results_since_last_call(history: list[dict[str, Any]]) -> list[str]:
    results: list[str] = []
    for item in reversed(history):
        if item.get("role") == "tool":
            results.append(str(item.get("content", "")))
        elif item.get("type") == "function_call_output":
            results.append(str(item.get("output", "")))
        else:
            break
    results.reverse()
    return results


def _count_caller_messages(history: list[dict[str, Any]]) -> int:
    marks = ('<from type="user">', '<from type="admin">')
    return sum(
        1
        for item in history
        if item.get("role") == "user" and any(m in str(item.get("content", "")) for m in marks)
    )


def stub_factory(name: str, comm_targets: list[str], **_: Any):  # noqa: ANN201
    """The factory named in test swarms.json files (accepts any agent_params)."""

    latency = float(os.environ.get("MAIL_STUB_LATENCY_MS") or 0) / 1000

    async def agent(history: list[dict[str, Any]], tool_choice: Any = "required"):  # noqa: ANN202
        if latency:
            await asyncio.sleep(latency)
        if isinstance(tool_choice, dict) and tool_choice.get("name") == "task_complete":
            return _complete("stopped: step limit")
        last = history[-1] if history else {}
        if last.get("role") == "tool" or last.get("type") == "function_call_output":
            # Re-prompted without a new message: the results of a breakpoint resume.
            return _complete("reviewed: " + " | ".join(_tool_results_since_last_call(history)))

        sender_type, sender_id, body = _last_incoming(history)
        if name == "worker":
            return None, [
                _call(
                    "send_response",
                    {"target": sender_id, "subject": "Re: work", "body": f"worked: {body}"},
                )
            ]
        if sender_type == "agent" and (chat := _CHATTY.search(body)) and chat.group(3):
            rounds, size, left = (int(g) for g in chat.groups())
            if left <= 1:
                return _complete(f"chatted {rounds}")
            return None, [_chatty_request(rounds, size, left - 1)]
        if sender_type == "agent":  # the worker's answer to a DELEGATE or a LOOP
            if "LOOP" in body:
                return None, [
                    _call("send_request", {"target": "worker", "subject": "again", "body": "LOOP"})
                ]
            return _complete(f"delegated: {body}")

        sleep = re.match(r"SLEEP (\d+(?:\.\d+)?)\s*", body)
        if sleep:
            await asyncio.sleep(float(sleep.group(1)))
            body = body[sleep.end() :]
        if body.startswith("BREAKPOINT2"):
            return None, [
                _call("human_review", {"question": "first"}),
                _call("human_review", {"question": "second"}),
            ]
        if body.startswith("BREAKPOINT"):
            return None, [_call("human_review", {"question": body})]
        if body.startswith("COUNT"):
            return _complete(f"turn {_count_caller_messages(history)}")
        if body.startswith("ENV "):
            var = body[4:].strip()
            return _complete(f"{var}={os.environ.get(var)}")
        if body.startswith("FAIL"):
            raise RuntimeError("stub agent failure requested by the test")
        if body.startswith("LOOP") and "worker" in comm_targets:
            return None, [
                _call("send_request", {"target": "worker", "subject": "loop", "body": "LOOP"})
            ]
        if (chat := _CHATTY.match(body)) and "worker" in comm_targets:
            rounds, size = int(chat.group(1)), int(chat.group(2))
            return None, [_chatty_request(rounds, size, rounds)]
        if body.startswith("DELEGATE") and "worker" in comm_targets:
            return None, [
                _call("send_request", {"target": "worker", "subject": "work", "body": body[9:]})
            ]
        return _complete(f"echo[{sender_id}]: {body}")

    return agent


async def human_review(args: dict[str, Any]) -> str:
    """Body of the ``human_review`` action; never runs because the tool is a breakpoint."""
    return f"auto-approved: {args.get('question')}"


def stub_swarms_json(name: str = "stub", *, public: bool = False) -> list[dict[str, Any]]:
    """A swarms.json document using the stub agents (supervisor + worker, one breakpoint)."""
    factory = "python::tests.support.stub_agents:stub_factory"
    return [
        {
            "name": name,
            "version": "1.0.0",
            "entrypoint": "supervisor",
            "description": "stub swarm for server tests",
            "keywords": ["test"],
            "public": public,
            "breakpoint_tools": ["human_review"],
            "agents": [
                {
                    "name": "supervisor",
                    "factory": factory,
                    "comm_targets": ["worker"],
                    "enable_entrypoint": True,
                    "can_complete_tasks": True,
                    "actions": ["human_review"],
                    "agent_params": {},
                },
                {
                    "name": "worker",
                    "factory": factory,
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
                    "function": "python::tests.support.stub_agents:human_review",
                }
            ],
        }
    ]


def stub_template():  # noqa: ANN201
    """The stub swarm as a MAILSwarmTemplate (for MAIL_SERVER_TEMPLATE)."""
    from mail.api import MAILSwarmTemplate

    return MAILSwarmTemplate.from_swarms_json(stub_swarms_json("injected")[0])
