"""A stub agent that makes the tool calls a test (or bench/abuse.py) spells out, with no LLM.

The user's message body is ``STEPS <json list>``; each step is
``{"tool": name, "args": {...}, "repeat": n}``. The agent takes one step per turn: it makes
``repeat`` (default 1) identical calls of ``tool`` in one turn, and when it is re-prompted with
their results it takes the next step. After the last step it completes the task with a short
JSON summary of the last step's results: ``{"calls", "errors", "first_error", "last"}``
(texts cut to 300 characters, so a huge result never reaches the task's events).

In ``args``, ``{"$big": n}`` becomes a string of ``n`` ``x`` characters (large inputs without a
large HTTP request), ``"$TH"`` the last thread id (``th_...``) and ``"$ATT"`` the last
attachment id (``att_...``) seen in a tool result.

Referenced as ``python::tests.support.abuse_agents:abuse_factory``; `abuse_swarms_json` builds
a swarm whose entrypoint ``supervisor`` has the stdlib http and mcp actions, the breakpoint
``human_review`` and every team tool group, and a ``worker`` that takes part in threads.
"""

from __future__ import annotations

import html
import json
import re
import uuid
from typing import Any

from mail.core.tools import AgentToolCall

_BODY = re.compile(r"<body>(.*?)</body>", re.S)
_THREAD = re.compile(r"th_[0-9a-f]{16}")
_ATTACHMENT = re.compile(r"att_[0-9a-f]{16}")
CUT = 300


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


def _merged(calls: list[AgentToolCall]) -> list[AgentToolCall]:
    """Several calls of one turn share one assistant message listing all of them."""
    merged = {
        "role": "assistant",
        "content": "",
        "tool_calls": [c.completion["tool_calls"][0] for c in calls],
    }
    for call in calls:
        call.completion = merged
    return calls


def _expand(value: Any, found: dict[str, str]) -> Any:
    if isinstance(value, dict):
        if set(value) == {"$big"}:
            return "x" * int(value["$big"])
        return {k: _expand(v, found) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, found) for v in value]
    if value == "$TH":
        return found.get("thread", "th_missing")
    if value == "$ATT":
        return found.get("attachment", "att_missing")
    return value


def _is_result(item: dict[str, Any]) -> bool:
    return item.get("role") == "tool" or item.get("type") == "function_call_output"


def _result_text(item: dict[str, Any]) -> str:
    return str(item.get("content", item.get("output", "")))


def _since_last_message(history: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """(body of the newest ``STEPS`` message, history items after it); system notices such
    as ``::action_complete::`` arrive as messages too and are skipped."""
    for index in range(len(history) - 1, -1, -1):
        content = history[index].get("content")
        if (
            history[index].get("role") == "user"
            and isinstance(content, str)
            and "<incoming_message>" in content
        ):
            body = _BODY.search(content)
            text = html.unescape(body.group(1)) if body else ""
            if text.startswith("STEPS "):
                return text, history[index + 1 :]
    return "", []


def _summary(results: list[str]) -> str:
    # Tool results read "SUCCESS: Error: ..." (an action's own error text) or "ERROR: ...".
    errors = [r for r in results if "error" in r[:20].lower()]
    return json.dumps(
        {
            "calls": len(results),
            "errors": len(errors),
            "first_error": errors[0][:CUT] if errors else None,
            "last": results[-1][:CUT] if results else None,
        }
    )


def abuse_factory(name: str, comm_targets: list[str], **_: Any):  # noqa: ANN201
    async def agent(history: list[dict[str, Any]], tool_choice: Any = "required"):  # noqa: ANN202
        body, after = _since_last_message(history)
        if isinstance(tool_choice, dict) and tool_choice.get("name") == "task_complete":
            return None, [_call("task_complete", {"finish_message": "stopped"})]
        if not body.startswith("STEPS "):
            if name != "supervisor":
                return None, []
            return None, [_call("task_complete", {"finish_message": f"echo: {body[:CUT]}"})]
        steps = json.loads(body[len("STEPS ") :])
        done = sum(1 for item in after if item.get("role") == "assistant")
        results = [_result_text(item) for item in after if _is_result(item)]
        found: dict[str, str] = {}
        for text in results:
            if thread := _THREAD.findall(text):
                found["thread"] = thread[-1]
            if attachment := _ATTACHMENT.findall(text):
                found["attachment"] = attachment[-1]
        if done >= len(steps):
            last_step = steps[-1].get("repeat", 1) if steps else 0
            return None, [
                _call("task_complete", {"finish_message": _summary(results[-last_step:])})
            ]
        step = steps[done]
        args = _expand(step.get("args", {}), found)
        return None, _merged([_call(step["tool"], args) for _ in range(int(step.get("repeat", 1)))])

    return agent


TEAM = ["threads", "inbox", "files"]


def abuse_swarms_json(name: str = "abuse") -> list[dict[str, Any]]:
    factory = "python::tests.support.abuse_agents:abuse_factory"
    return [
        {
            "name": name,
            "version": "1.0.0",
            "entrypoint": "supervisor",
            "description": "agents that make the calls a test spells out",
            "breakpoint_tools": ["human_review"],
            "agents": [
                {
                    "name": "supervisor",
                    "factory": factory,
                    "comm_targets": ["worker"],
                    "enable_entrypoint": True,
                    "can_complete_tasks": True,
                    "actions": ["http_get", "mcp_list_tools", "human_review"],
                    "team_tools": TEAM,
                    "agent_params": {},
                },
                {
                    "name": "worker",
                    "factory": factory,
                    "comm_targets": ["supervisor"],
                    "team_tools": TEAM,
                    "agent_params": {},
                },
            ],
            "actions": [
                {
                    "name": "human_review",
                    "description": "Ask a human (a breakpoint: the task pauses).",
                    "parameters": {
                        "type": "object",
                        "properties": {"question": {"type": "string"}},
                        "required": ["question"],
                    },
                    "function": "python::tests.support.stub_agents:human_review",
                }
            ],
            "action_imports": [
                "python::mail.stdlib.http.actions:http_get",
                "python::mail.stdlib.mcp.actions:mcp_list_tools",
            ],
        }
    ]
