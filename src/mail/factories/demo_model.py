"""`mail/demo`: an offline, deterministic demo model that needs no model library."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from mail.factories.demo_brain import DemoTurn, decide

PROVIDER = "mail"
MODELS = ("demo",)
PREFIX = f"{PROVIDER}/"


def is_offline_model(model: Any) -> bool:
    """Whether ``model`` names this module's offline model family (``mail/...``)."""
    return isinstance(model, str) and model.startswith(PREFIX)


def offline_model_problem(model: Any) -> str | None:
    """Why ``model`` cannot be served offline (an unknown ``mail/...`` name), else None."""
    if not is_offline_model(model):
        return None
    name = model.split("/", 1)[-1]
    if name in MODELS:
        return None
    return (
        f"unknown offline model '{model}'; the only one is 'mail/demo' "
        "(use a real LiteLLM model name such as 'openai/gpt-5-mini' otherwise)"
    )


def _turn_for(
    model: str,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    tool_choice: Any,
) -> DemoTurn:
    name = model.split("/", 1)[-1]
    if name not in MODELS:
        raise ValueError(
            f"unknown offline model 'mail/{name}'; the only one is 'mail/demo' "
            "(use a real LiteLLM model name such as 'openai/gpt-5-mini' otherwise)"
        )
    return decide(messages, tools or [], tool_choice)


def _new_id(prefix: str, size: int = 24) -> str:
    return f"{prefix}{uuid.uuid4().hex[:size]}"


# ------------------------------------------------------------------------------------------
# Chat Completions


async def acompletion(
    *,
    model: str,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    tool_choice: Any = None,
    stream: bool = False,
    **_options: Any,
) -> Any:
    """A chat completion (a dict), or an async iterator of its chunks when ``stream``."""
    turn = _turn_for(model, messages, tools, tool_choice)
    if stream:
        return _completion_chunks(turn)
    calls = [
        {
            "id": _new_id("call_"),
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)},
        }
        for name, args in turn.calls
    ]
    message: dict[str, Any] = {"role": "assistant", "content": turn.text}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": _new_id("demo-", 12),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": f"{PROVIDER}/{model.split('/', 1)[-1]}",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if calls else "stop",
            }
        ],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }


def _chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    return {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }


async def _completion_chunks(turn: DemoTurn) -> AsyncIterator[dict[str, Any]]:
    if turn.text:
        yield _chunk({"role": "assistant", "content": turn.text})
    for position, (name, args) in enumerate(turn.calls):
        tool_delta = {
            "index": position,
            "id": _new_id("call_"),
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)},
        }
        yield _chunk({"tool_calls": [tool_delta]})
    yield _chunk({}, "tool_calls" if turn.calls else "stop")


# ------------------------------------------------------------------------------------------
# Responses


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part.get("text", "") for part in content if isinstance(part, dict) and "text" in part
        )
    return ""


def chat_messages(items: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The chat-message form of a Responses ``input`` (what the demo brain reads).

    Role messages keep their role and text; consecutive ``function_call`` items become one
    assistant message's ``tool_calls``; each ``function_call_output`` becomes a tool message.
    Reasoning items carry nothing the demo uses and are skipped.
    """
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    messages: list[dict[str, Any]] = []
    for item in items:
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "function_call":
            call = {
                "id": item.get("call_id") or item.get("id", ""),
                "type": "function",
                "function": {"name": item.get("name", ""), "arguments": item.get("arguments")},
            }
            last = messages[-1] if messages else None
            if last is not None and last.get("role") == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": item.get("call_id", ""),
                    "content": _text_of(item.get("output")),
                }
            )
        elif "role" in item and kind in (None, "message"):
            messages.append({"role": item["role"], "content": _text_of(item.get("content"))})
    return messages


def _output_items(turn: DemoTurn) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if turn.text:
        items.append(
            {
                "type": "message",
                "id": _new_id("msg_"),
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": turn.text, "annotations": []}],
            }
        )
    for name, args in turn.calls:
        items.append(
            {
                "type": "function_call",
                "id": _new_id("fc_"),
                "call_id": _new_id("call_"),
                "name": name,
                "arguments": json.dumps(args),
                "status": "completed",
            }
        )
    return items


async def aresponses(
    *,
    model: str,
    input: str | list[dict[str, Any]],  # noqa: A002 - the Responses API's own parameter name
    tools: list[dict[str, Any]] | None = None,
    tool_choice: Any = None,
    stream: bool = False,
    **_options: Any,
) -> Any:
    """A response (a dict), or an async iterator of its stream events when ``stream``."""
    turn = _turn_for(model, chat_messages(input), tools, tool_choice)
    response = {
        "id": _new_id("resp_"),
        "object": "response",
        "created_at": int(time.time()),
        "model": f"{PROVIDER}/{model.split('/', 1)[-1]}",
        "status": "completed",
        "output": _output_items(turn),
    }
    if stream:
        return _response_events(response)
    return response


async def _response_events(response: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    for index, item in enumerate(response["output"]):
        yield {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {**item, "status": "in_progress"},
        }
        if item["type"] == "message":
            yield {
                "type": "response.output_text.delta",
                "item_id": item["id"],
                "output_index": index,
                "content_index": 0,
                "delta": item["content"][0]["text"],
            }
        yield {"type": "response.output_item.done", "output_index": index, "item": item}
    yield {"type": "response.completed", "response": response}
