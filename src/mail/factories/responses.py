"""OpenAI Responses path (`litellm.aresponses`, or the offline demo model)."""

from __future__ import annotations

from typing import Any

from mail.core.tools import AgentToolCall
from mail.factories import model_calls
from mail.factories._litellm import supports_reasoning
from mail.factories.assembly import (
    ModelRequest,
    StreamPrinter,
    TurnAssembler,
    TurnRequest,
    to_plain,
)
from mail.telemetry.usage import field_of


def responses_tool_choice(tool_choice: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
    """Responses shape of a tool choice (callers may send the Chat Completions shape)."""
    if isinstance(tool_choice, dict) and isinstance(tool_choice.get("function"), dict):
        return {"type": "function", "name": tool_choice["function"].get("name")}
    return tool_choice


def build_request(turn: TurnRequest) -> ModelRequest:
    kwargs: dict[str, Any] = {"model": turn.model, "input": turn.messages, **turn.options}
    include = ["code_interpreter_call.outputs"]
    if supports_reasoning(turn.model):
        include.append("reasoning.encrypted_content")
        kwargs["reasoning"] = {"effort": turn.reasoning_effort or "medium", "summary": "auto"}
    kwargs["include"] = include
    if turn.tools:
        kwargs["tools"] = turn.tools
        kwargs["tool_choice"] = responses_tool_choice(turn.tool_choice)
    if turn.max_tokens:
        kwargs["max_output_tokens"] = turn.max_tokens
    kwargs["stream"] = turn.stream
    return ModelRequest(kwargs=kwargs, stream=turn.stream, printer=turn.printer)


async def run(request: ModelRequest) -> tuple[str | None, list[AgentToolCall]]:
    result = await model_calls.aresponses(**request.kwargs)
    if request.stream:
        output, streamed_reasoning = await _consume_stream(result, request.printer)
    else:
        output, streamed_reasoning = (
            [to_plain(item) for item in field_of(result, "output") or []],
            {},
        )
    return parse_output(output, streamed_reasoning)


def _summary_texts(item: dict[str, Any]) -> list[str]:
    texts = [part.get("text", "") for part in item.get("summary") or [] if isinstance(part, dict)]
    if not any(t.strip() for t in texts):
        # Open-weight reasoning models put raw reasoning in `content` instead of a summary.
        texts = [p.get("text", "") for p in item.get("content") or [] if isinstance(p, dict)]
    return [t for t in texts if t and t.strip()]


def _message_text(item: dict[str, Any]) -> str:
    parts = item.get("content") or []
    if isinstance(parts, str):
        return parts
    return "".join(
        part.get("text", "")
        for part in parts
        if isinstance(part, dict) and part.get("type") in ("output_text", "text")
    )


def parse_output(
    output: list[dict[str, Any]], streamed_reasoning: dict[str, str] | None = None
) -> tuple[str | None, list[AgentToolCall]]:
    """Calls (in output order) from Responses output items, with reasoning and preamble."""
    streamed_reasoning = streamed_reasoning or {}
    assembler = TurnAssembler()
    first_text: str | None = None
    for item in output:
        kind = item.get("type")
        if kind == "reasoning":
            texts = _summary_texts(item) or [streamed_reasoning.get(item.get("id", ""), "")]
            for text in texts:
                assembler.add_reasoning(text)
        elif kind == "message":
            text = _message_text(item)
            if text and first_text is None:
                first_text = text
            assembler.add_text(text)
        elif kind == "function_call":
            assembler.add_call(
                item.get("name", ""),
                item.get("call_id") or item.get("id", ""),
                item.get("arguments"),
            )
        elif kind == "web_search_call":
            action = item.get("action") or {}
            args = {
                "query": action.get("query", ""),
                "search_type": action.get("type", "search"),
                "status": item.get("status", "completed"),
            }
            assembler.add_call("web_search_call", item.get("id", ""), args)
        elif kind == "code_interpreter_call":
            args = {
                "code": item.get("code", ""),
                "outputs": item.get("outputs") or [],
                "status": item.get("status", "completed"),
            }
            assembler.add_call("code_interpreter_call", item.get("id", ""), args)
    calls = assembler.build(responses=output, text_output=first_text)
    return assembler.text, calls


async def _consume_stream(
    stream: Any, printer: StreamPrinter
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Collect the output items of a streamed response, in output order."""
    items: dict[int, dict[str, Any]] = {}
    reasoning: dict[str, list[str]] = {}
    final: list[dict[str, Any]] = []
    async for event in stream:
        kind = str(field_of(event, "type") or "")
        kind = getattr(field_of(event, "type"), "value", kind)
        if kind == "response.reasoning_summary_text.delta":
            delta = field_of(event, "delta") or ""
            reasoning.setdefault(field_of(event, "item_id") or "", []).append(delta)
            printer.reasoning(delta)
        elif kind == "response.output_text.delta":
            printer.text(field_of(event, "delta") or "")
        elif kind in ("response.output_item.added", "response.output_item.done"):
            item = to_plain(field_of(event, "item"))
            index = field_of(event, "output_index")
            if isinstance(item, dict) and isinstance(index, int):
                items[index] = item
                if kind.endswith("added") and item.get("type") == "function_call":
                    printer.tool(item.get("name", ""))
        elif kind == "response.completed":
            response = field_of(event, "response")
            final = [to_plain(item) for item in field_of(response, "output") or []]
    printer.end()
    streamed = {item_id: "".join(parts) for item_id, parts in reasoning.items()}
    output = [items[i] for i in sorted(items)] or final
    for item in output:
        if item.get("type") == "reasoning" and not _summary_texts(item):
            text = streamed.get(item.get("id", ""), "")
            if text:
                item["summary"] = [{"type": "summary_text", "text": text}]
    return output, streamed
