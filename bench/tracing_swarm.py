"""Agent factories for `bench/tracing.py`'s `mail server` (copied into its scratch folder).

The same stub swarm as `bench/http.py`: a supervisor that hands each user message to one of
three workers in turn and completes the task when the worker answers; agents answer at once
(no model), so what a request costs is MAIL's own work, and tracing's share of it is at its
largest.
"""

from __future__ import annotations

import itertools
from typing import Any

from mail import AgentToolCall

_COMPLETION = {"role": "assistant", "content": None}
_turn = itertools.count()


def _call(name: str, **args: Any) -> AgentToolCall:
    return AgentToolCall(tool_name=name, tool_args=args, tool_call_id="c", completion=_COMPLETION)


def supervisor(comm_targets: list[str], **_: Any) -> Any:
    async def agent(history: list[dict[str, Any]], tool_choice: Any = "required") -> Any:
        if 'type="user"' in (history[-1].get("content") or ""):
            worker = comm_targets[next(_turn) % len(comm_targets)]
            return None, [_call("send_request", target=worker, subject="job", body="do")]
        return None, [_call("task_complete", finish_message="done")]

    return agent


def worker(**_: Any) -> Any:
    async def agent(history: list[dict[str, Any]], tool_choice: Any = "required") -> Any:
        return None, [_call("send_response", target="supervisor", subject="re", body="r")]

    return agent
