"""Agent functions that call the official OpenAI SDK directly (no LiteLLM)."""

from __future__ import annotations

import json
import os
import uuid
from typing import Any

import openai

from mail.core.tools import AgentToolCall
from mail.factories.assembly import to_plain
from mail.factories.base import (
    AgentResult,
    MAILAgentFunction,
    ToolChoice,
    ToolFormat,
    wiring_of,
)
from mail.factories.completions import completions_tool_choice
from mail.factories.responses import responses_tool_choice
from mail.factories.supervisor import SupervisorFunction

__all__ = [
    "OpenAIChatCompletionsAgentFunction",
    "OpenAIChatCompletionsSupervisorFunction",
    "OpenAIResponsesAgentFunction",
    "OpenAIResponsesSupervisorFunction",
]

# Keys of a Chat Completions message the API accepts back in `messages`.
_CHAT_KEYS = ("role", "content", "name", "tool_calls", "tool_call_id")


def _tool_parts(tool: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """(name, description, parameters) of a tool dict in either shape."""
    inner = tool.get("function") if isinstance(tool.get("function"), dict) else tool
    assert isinstance(inner, dict)
    return (
        str(inner.get("name", "")),
        str(inner.get("description", "") or ""),
        inner.get("parameters") or {"type": "object", "properties": {}},
    )


def chat_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A tool in the Chat Completions shape (``{"type": "function", "function": {...}}``)."""
    name, description, parameters = _tool_parts(tool)
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


def responses_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A tool in the Responses shape (``{"type": "function", "name": ..., ...}``)."""
    if tool.get("type") not in (None, "function"):
        return tool  # a built-in tool such as web_search is passed through
    name, description, parameters = _tool_parts(tool)
    return {"type": "function", "name": name, "description": description, "parameters": parameters}


def _arguments(raw: Any) -> dict[str, Any]:
    """Tool arguments as a dict; text that is not a JSON object is kept under ``raw``."""
    if isinstance(raw, dict):
        return raw
    if raw is None or raw == "":
        return {}
    try:
        value = json.loads(raw)
    except (TypeError, ValueError):
        return {"raw": raw}
    return value if isinstance(value, dict) else {"raw": raw}


class _OpenAIAgentBase(MAILAgentFunction):
    """Wiring shared by the two agent classes.

    `tool_format` is accepted for compatibility; each API always takes its own shape
    (`api_style`).
    """

    api_style: ToolFormat
    calls_model = True

    def __init__(
        self,
        name: str,
        comm_targets: list[str],
        model: str,
        tools: list[dict[str, Any]],
        enable_entrypoint: bool = False,
        enable_interswarm: bool = False,
        can_complete_tasks: bool = False,
        tool_format: ToolFormat = "responses",
        exclude_tools: list[str] | None = None,
        system: str = "",
        api_key: str | None = None,
        base_url: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**wiring_of(locals(), tool_format=self.api_style), **kwargs)
        self.model = model
        self.system = system or ""
        self.api_key = api_key
        self.base_url = base_url
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = openai.AsyncOpenAI(
                api_key=self.api_key or os.getenv("OPENAI_API_KEY"), base_url=self.base_url
            )
        return self._client

    def all_tools(self) -> list[dict[str, Any]]:
        """MAIL tools (when the agent has someone to talk to), then its own tools."""
        return self.mail_then_own_tools()

    def _with_system(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        first = messages[0] if messages else None
        if not self.system or (isinstance(first, dict) and first.get("role") == "system"):
            return list(messages)
        return [{"role": "system", "content": self.system}, *messages]


class OpenAIChatCompletionsAgentFunction(_OpenAIAgentBase):
    """An agent on the Chat Completions API (``client.chat.completions.create``)."""

    api_style: ToolFormat = "completions"

    async def __call__(
        self, messages: list[dict[str, Any]], tool_choice: ToolChoice = "required"
    ) -> AgentResult:
        request: dict[str, Any] = {
            "model": self.model,
            "messages": [
                {k: m[k] for k in _CHAT_KEYS if k in m and m[k] is not None}
                for m in self._with_system(messages)
            ],
        }
        tools = [chat_tool(t) for t in self.all_tools()]
        if tools:
            request["tools"] = tools
            request["tool_choice"] = completions_tool_choice(tool_choice)
        response = await self.client.chat.completions.create(**request)
        message = response.choices[0].message
        content = message.content or None
        pending: list[tuple[str, str, dict[str, Any]]] = []
        for call in message.tool_calls or []:
            function = getattr(call, "function", None)
            custom = getattr(call, "custom", None)
            name = getattr(function or custom, "name", None)
            if not name:
                continue
            raw = function.arguments if function is not None else getattr(custom, "input", "")
            pending.append((name, call.id or f"call_{uuid.uuid4().hex}", _arguments(raw)))
        completion = {
            "role": "assistant",
            "content": content,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args)},
                }
                for name, call_id, args in pending
            ],
        }
        if not pending:
            completion.pop("tool_calls")
        calls = [
            AgentToolCall(
                tool_name=name, tool_args=args, tool_call_id=call_id, completion=completion
            )
            for name, call_id, args in pending
        ]
        return content, calls


class OpenAIResponsesAgentFunction(_OpenAIAgentBase):
    """An agent on the Responses API (``client.responses.create``)."""

    api_style: ToolFormat = "responses"

    async def __call__(
        self, messages: list[dict[str, Any]], tool_choice: ToolChoice = "required"
    ) -> AgentResult:
        # History items (function_call, function_call_output, reasoning, messages) are sent
        # back as they are: dropping their type and ids broke the original's second turn.
        request: dict[str, Any] = {"model": self.model, "input": self._with_system(messages)}
        tools = [responses_tool(t) for t in self.all_tools()]
        if tools:
            request["tools"] = tools
            request["tool_choice"] = responses_tool_choice(tool_choice)
        response = await self.client.responses.create(**request)
        output = [to_plain(item) for item in response.output or []]
        texts: list[str] = []
        pending: list[tuple[str, str, dict[str, Any]]] = []
        for item in output:
            kind = item.get("type")
            if kind == "message":
                for part in item.get("content") or []:
                    if isinstance(part, dict) and part.get("type") in ("output_text", "text"):
                        texts.append(part.get("text", ""))
            elif kind in ("function_call", "custom_tool_call", "tool_call"):
                name = (
                    item.get("name")
                    or (item.get("tool") or {}).get("name")
                    or (item.get("function") or {}).get("name")
                )
                if not name:
                    continue
                call_id = item.get("call_id") or item.get("id") or f"call_{uuid.uuid4().hex}"
                raw = next(
                    (item[k] for k in ("input", "tool_input", "arguments") if k in item), None
                )
                pending.append((name, call_id, _arguments(raw)))
        text = "\n".join(t for t in texts if t) or None
        calls = [
            AgentToolCall(tool_name=name, tool_args=args, tool_call_id=call_id, responses=output)
            for name, call_id, args in pending
        ]
        return text, calls


class _OpenAISupervisorBase(SupervisorFunction):
    """A supervisor: its tools plus the supervisor tools, run by an inner agent function."""

    inner_class: type[_OpenAIAgentBase]
    style: ToolFormat

    def __init__(
        self,
        name: str,
        comm_targets: list[str],
        model: str,
        tools: list[Any],
        can_complete_tasks: bool = True,
        enable_entrypoint: bool = False,
        enable_interswarm: bool = False,
        tool_format: ToolFormat = "responses",
        exclude_tools: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        # v1.3's positional order: `can_complete_tasks` right after `tools` (as SupervisorFunction).
        super().__init__(**wiring_of(locals(), can_complete_tasks=True, tool_format=self.style))
        self.add_supervisor_tools()
        self.supervisor_fn = self.inner_class(model=model, **self.wiring(), **kwargs)
        self.model = model

    async def __call__(
        self, messages: list[dict[str, Any]], tool_choice: ToolChoice = "required"
    ) -> AgentResult:
        return await self.supervisor_fn(messages, tool_choice)


class OpenAIChatCompletionsSupervisorFunction(_OpenAISupervisorBase):
    """A supervisor on the Chat Completions API."""

    inner_class = OpenAIChatCompletionsAgentFunction
    style = "completions"


class OpenAIResponsesSupervisorFunction(_OpenAISupervisorBase):
    """A supervisor on the Responses API."""

    inner_class = OpenAIResponsesAgentFunction
    style = "responses"
