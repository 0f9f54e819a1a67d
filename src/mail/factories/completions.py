"""Chat Completions path (`litellm.acompletion`, or the offline demo model), including Claude models."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mail.core.tools import AgentToolCall
from mail.factories import model_calls
from mail.factories.assembly import (
    ModelRequest,
    PendingCall,
    StreamPrinter,
    TurnAssembler,
    TurnRequest,
    to_plain,
)
from mail.telemetry.usage import field_of

INTERLEAVED_THINKING_BETA = "interleaved-thinking-2025-05-14"
DEFAULT_ANTHROPIC_MAX_TOKENS = 8192


def completions_tool_choice(
    tool_choice: str | dict[str, Any] | None,
) -> str | dict[str, Any] | None:
    """Chat Completions shape of a tool choice (the runtime may send the Responses shape)."""
    if isinstance(tool_choice, dict) and "function" not in tool_choice and "name" in tool_choice:
        return {"type": "function", "function": {"name": tool_choice["name"]}}
    return tool_choice


def with_assistant_content(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`messages` with `content: ""` on assistant messages that have none: the OpenAI API
    allows it, and chat templates of local servers (llama-cpp-python's) fail without it
    (LiteLLM drops a None content from the request)."""
    if all(m.get("role") != "assistant" or m.get("content") is not None for m in messages):
        return messages
    return [
        {**m, "content": ""} if m.get("role") == "assistant" and m.get("content") is None else m
        for m in messages
    ]


def build_request(
    turn: TurnRequest, *, thinking_budget: int | None, anthropic: bool
) -> ModelRequest:
    messages = turn.messages if anthropic else with_assistant_content(turn.messages)
    kwargs: dict[str, Any] = {"model": turn.model, "messages": messages, **turn.options}
    choice = completions_tool_choice(turn.tool_choice) if turn.tools else None
    stream = turn.stream
    if turn.tools:
        kwargs["tools"] = turn.tools
    if anthropic:
        headers = dict(kwargs.get("extra_headers") or {})
        if thinking_budget:
            kwargs["thinking"] = {"type": "enabled", "budget_tokens": thinking_budget}
            headers["anthropic-beta"] = INTERLEAVED_THINKING_BETA
            # Anthropic refuses forced tool use while thinking; fall back to "auto".
            if choice == "required" or isinstance(choice, dict):
                choice = "auto"
        if headers:
            kwargs["extra_headers"] = headers
        kwargs["max_tokens"] = turn.max_tokens or DEFAULT_ANTHROPIC_MAX_TOKENS
        stream = True
    else:
        if thinking_budget:
            kwargs["thinking"] = {"type": "enabled", "budget_tokens": thinking_budget}
        if turn.reasoning_effort:
            kwargs["reasoning_effort"] = turn.reasoning_effort
        if turn.max_tokens:
            kwargs["max_tokens"] = turn.max_tokens
        if stream:
            # Without it an OpenAI-compatible stream carries no usage and tokens are estimated.
            kwargs["stream_options"] = {"include_usage": True}
    if choice is not None:
        kwargs["tool_choice"] = choice
    kwargs["stream"] = stream
    return ModelRequest(kwargs=kwargs, stream=stream, printer=turn.printer)


async def run(request: ModelRequest) -> tuple[str | None, list[AgentToolCall]]:
    response = await model_calls.acompletion(**request.kwargs)
    if request.stream:
        return await _consume_stream(response, request.printer)
    return _parse_message(field_of(field_of(response, "choices")[0], "message"))


# ------------------------------------------------------------------------------------------
# Non-streamed


def _reasoning_blocks(message: Any) -> list[str]:
    blocks = field_of(message, "thinking_blocks") or []
    texts = [
        "[redacted thinking]"
        if field_of(block, "type") == "redacted_thinking"
        else field_of(block, "thinking") or ""
        for block in blocks
    ]
    texts = [t for t in texts if t and t.strip()]
    if texts:
        return texts
    reasoning = field_of(message, "reasoning_content")
    return [reasoning] if isinstance(reasoning, str) and reasoning.strip() else []


def _assistant_message(
    content: str | None, calls: list[PendingCall], thinking_blocks: list[dict[str, Any]]
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {
                "id": call.call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": _arguments_text(call.arguments)},
            }
            for call in calls
        ]
    if thinking_blocks:
        # Sent back on the next turn; Anthropic requires signed thinking before tool results.
        message["thinking_blocks"] = thinking_blocks
    return message


def _arguments_text(arguments: Any) -> str:
    if isinstance(arguments, str):
        return arguments
    import json

    return json.dumps(arguments)


def _parse_message(message: Any) -> tuple[str | None, list[AgentToolCall]]:
    assembler = TurnAssembler()
    for block in _reasoning_blocks(message):
        assembler.add_reasoning(block)
    content = field_of(message, "content")
    if isinstance(content, str):
        assembler.add_text(content)
    for tool_call in field_of(message, "tool_calls") or []:
        function = field_of(tool_call, "function")
        assembler.add_call(
            field_of(function, "name") or "",
            field_of(tool_call, "id") or "",
            field_of(function, "arguments"),
        )
    thinking = [to_plain(b) for b in field_of(message, "thinking_blocks") or []]
    completion = _assistant_message(
        content if isinstance(content, str) else None, assembler.calls, thinking
    )
    calls = assembler.build(completion=completion, text_output=assembler.text)
    return assembler.text, calls


# ------------------------------------------------------------------------------------------
# Streamed


@dataclass
class _StreamState:
    assembler: TurnAssembler = field(default_factory=TurnAssembler)
    by_index: dict[int, PendingCall] = field(default_factory=dict)
    reasoning: list[str] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    thinking_blocks: list[dict[str, Any]] = field(default_factory=list)
    _block: dict[str, Any] | None = None

    def flush_reasoning(self) -> None:
        if self.reasoning:
            self.assembler.add_reasoning("".join(self.reasoning))
            self.reasoning.clear()

    def flush_text(self) -> None:
        if self.text:
            self.assembler.add_text("".join(self.text))
            self.text.clear()

    def thinking_delta(self, block: Any) -> None:
        kind = field_of(block, "type")
        if kind == "redacted_thinking":
            self.flush_reasoning()
            self.assembler.add_reasoning("[redacted thinking]")
            self.thinking_blocks.append(to_plain(block))
            return
        if self._block is None:
            self._block = {"type": "thinking", "thinking": ""}
        self._block["thinking"] += field_of(block, "thinking") or ""
        signature = field_of(block, "signature")
        if signature:
            # A signature closes the block: the next thinking delta starts a new one.
            self._block["signature"] = signature
            self.thinking_blocks.append(self._block)
            self._block = None
            self.flush_reasoning()


async def _consume_stream(
    stream: Any, printer: StreamPrinter
) -> tuple[str | None, list[AgentToolCall]]:
    state = _StreamState()
    async for chunk in stream:
        choices = field_of(chunk, "choices") or []
        if not choices:
            continue
        delta = field_of(choices[0], "delta")
        if delta is None:
            continue
        reasoning = field_of(delta, "reasoning_content")
        if reasoning:
            state.flush_text()
            state.reasoning.append(reasoning)
            printer.reasoning(reasoning)
        for block in field_of(delta, "thinking_blocks") or []:
            state.thinking_delta(block)
        content = field_of(delta, "content")
        if content:
            state.flush_reasoning()
            state.text.append(content)
            printer.text(content)
        for tool_delta in field_of(delta, "tool_calls") or []:
            _tool_delta(state, tool_delta, printer)
    printer.end()
    state.flush_reasoning()
    state.flush_text()
    assembler = state.assembler
    text = assembler.text
    completion = _assistant_message(text, assembler.calls, state.thinking_blocks)
    return text, assembler.build(completion=completion, text_output=text)


def _tool_delta(state: _StreamState, tool_delta: Any, printer: StreamPrinter) -> None:
    index = field_of(tool_delta, "index") or 0
    function = field_of(tool_delta, "function")
    name = field_of(function, "name")
    arguments = field_of(function, "arguments") or ""
    call = state.by_index.get(index)
    if call is None:
        state.flush_reasoning()
        state.flush_text()
        call = state.assembler.add_call(name or "", field_of(tool_delta, "id") or "", "")
        state.by_index[index] = call
        printer.tool(name or "")
    elif name and not call.name:
        call.name = name
    call.arguments += arguments
