"""`mail/demo`: an offline, deterministic demo model registered with LiteLLM.

This is a demonstration aid, not a language model. It lets a fresh machine run a whole MAIL
swarm (server, tools, actions, task completion) with no API key: agents configured with
``"llm": "mail/demo"`` go through exactly the same LiteLLM agent functions as real models,
and LiteLLM routes the call here through its custom-provider mechanism. The decisions come
from `mail.factories.demo_brain`.

The provider is registered only when an agent's `llm` starts with ``mail/``; it never stands
in for a configured real model.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

from mail.factories._litellm import load_litellm
from mail.factories.demo_brain import DemoTurn, decide

logger = logging.getLogger("mail.factories.demo")

PROVIDER = "mail"
MODELS = ("demo",)

_lock = threading.Lock()
_handler: Any = None


def _turn_for(
    model: str, messages: list[dict[str, Any]], optional_params: dict[str, Any]
) -> DemoTurn:
    name = model.split("/", 1)[-1]
    if name not in MODELS:
        raise ValueError(
            f"unknown offline model 'mail/{name}'; the only one is 'mail/demo' "
            "(use a real LiteLLM model name such as 'openai/gpt-5-mini' otherwise)"
        )
    return decide(messages, optional_params.get("tools") or [], optional_params.get("tool_choice"))


def _model_response(model: str, turn: DemoTurn) -> Any:
    litellm = load_litellm()
    from litellm.types.utils import ChatCompletionMessageToolCall, Choices, Function, Message

    tool_calls = [
        ChatCompletionMessageToolCall(
            id=f"call_{uuid.uuid4().hex[:24]}",
            type="function",
            function=Function(name=name, arguments=json.dumps(args)),
        )
        for name, args in turn.calls
    ]
    message = Message(role="assistant", content=turn.text, tool_calls=tool_calls or None)
    return litellm.ModelResponse(
        id=f"demo-{uuid.uuid4().hex[:12]}",
        created=int(time.time()),
        model=f"{PROVIDER}/{model.split('/', 1)[-1]}",
        choices=[
            Choices(index=0, message=message, finish_reason="tool_calls" if tool_calls else "stop")
        ],
    )


def _stream_chunks(turn: DemoTurn) -> list[dict[str, Any]]:
    chunks: list[dict[str, Any]] = []
    if turn.text:
        chunks.append(
            {
                "text": turn.text,
                "tool_use": None,
                "is_finished": False,
                "finish_reason": "",
                "usage": None,
                "index": 0,
            }
        )
    for position, (name, args) in enumerate(turn.calls):
        tool_use = {
            "id": f"call_{uuid.uuid4().hex[:24]}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)},
            "index": position,
        }
        chunks.append(
            {
                "text": "",
                "tool_use": tool_use,
                "is_finished": False,
                "finish_reason": "",
                "usage": None,
                "index": 0,
            }
        )
    chunks.append(
        {
            "text": "",
            "tool_use": None,
            "is_finished": True,
            "finish_reason": "tool_calls" if turn.calls else "stop",
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
            "index": 0,
        }
    )
    return chunks


def _make_handler() -> Any:
    litellm = load_litellm()

    class DemoLLM(litellm.CustomLLM):  # type: ignore[misc, name-defined]
        """LiteLLM custom provider serving `mail/demo`."""

        def completion(self, model: str, messages: list, *args: Any, **kwargs: Any) -> Any:
            return _model_response(
                model, _turn_for(model, messages, kwargs.get("optional_params") or {})
            )

        async def acompletion(self, model: str, messages: list, *args: Any, **kwargs: Any) -> Any:
            return self.completion(model, messages, *args, **kwargs)

        def streaming(self, model: str, messages: list, *args: Any, **kwargs: Any) -> Iterator[Any]:
            turn = _turn_for(model, messages, kwargs.get("optional_params") or {})
            yield from _stream_chunks(turn)

        async def astreaming(
            self, model: str, messages: list, *args: Any, **kwargs: Any
        ) -> AsyncIterator[Any]:
            turn = _turn_for(model, messages, kwargs.get("optional_params") or {})
            for chunk in _stream_chunks(turn):
                yield chunk

    return DemoLLM()


def register_demo_provider() -> None:
    """Register the `mail/` provider with LiteLLM (idempotent, thread-safe)."""
    global _handler
    with _lock:
        litellm = load_litellm()
        current = list(getattr(litellm, "custom_provider_map", None) or [])
        if any(entry.get("provider") == PROVIDER for entry in current):
            return
        if _handler is None:
            _handler = _make_handler()
        litellm.custom_provider_map = [*current, {"provider": PROVIDER, "custom_handler": _handler}]
        setup = getattr(litellm.utils, "custom_llm_setup", None)
        if callable(setup):
            setup()
        logger.info("registered the offline demo model provider 'mail/' with LiteLLM")
