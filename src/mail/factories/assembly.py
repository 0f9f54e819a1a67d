"""Turning a model's ordered output into `AgentToolCall`s."""

from __future__ import annotations

import json
import sys
import uuid
from dataclasses import dataclass, field
from typing import Any, TextIO

from mail.core.tools import AgentToolCall
from mail.factories.errors import MalformedToolCallError
from mail.utils.text import valid_str, valid_text

TEXT_OUTPUT = "text_output"


def to_plain(obj: Any) -> Any:
    """A JSON-able copy of a provider object (pydantic models, dicts, lists)."""
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json", exclude_none=True)
    if isinstance(obj, dict):
        return {k: to_plain(v) for k, v in obj.items() if v is not None}
    if isinstance(obj, list):
        return [to_plain(v) for v in obj]
    return obj


def parse_arguments(tool_name: str, raw: Any) -> dict[str, Any]:
    """Decode tool arguments; anything but a JSON object is a `MalformedToolCallError`."""
    if isinstance(raw, dict):
        return valid_text(raw)
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}
    if not isinstance(raw, str):
        raise MalformedToolCallError(tool_name, repr(raw), f"unexpected type {type(raw).__name__}")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise MalformedToolCallError(tool_name, raw, f"invalid JSON: {exc.msg}") from None
    if not isinstance(value, dict):
        raise MalformedToolCallError(tool_name, raw, f"decoded to {type(value).__name__}")
    # JSON may spell a lone surrogate ("\\ud800"), which no answer or row can hold.
    return valid_text(value) if "\\u" in raw else value


@dataclass
class PendingCall:
    name: str
    call_id: str
    arguments: Any = ""
    reasoning: list[str] | None = None
    preamble: str | None = None


@dataclass
class TurnAssembler:
    """Collects reasoning blocks, text and calls in the order the model produced them."""

    calls: list[PendingCall] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    _reasoning: list[str] = field(default_factory=list)
    _preamble: list[str] = field(default_factory=list)

    def add_reasoning(self, block: str) -> None:
        if block and block.strip():
            self._reasoning.append(block)

    def add_text(self, text: str) -> None:
        if text:
            self._preamble.append(text)
            self.texts.append(text)

    def add_call(self, name: str, call_id: str, arguments: Any = "") -> PendingCall:
        preamble = "".join(self._preamble).strip()
        call = PendingCall(
            name=name,
            call_id=call_id or f"call_{uuid.uuid4().hex}",
            arguments=arguments,
            reasoning=list(self._reasoning) or None,
            preamble=preamble or None,
        )
        self._reasoning.clear()
        self._preamble.clear()
        self.calls.append(call)
        return call

    @property
    def leftover_reasoning(self) -> list[str] | None:
        return list(self._reasoning) or None

    @property
    def text(self) -> str | None:
        joined = "".join(self.texts)
        return joined if joined.strip() else None

    def build(
        self,
        *,
        completion: dict[str, Any] | None = None,
        responses: list[dict[str, Any]] | None = None,
        text_output: str | None = None,
    ) -> list[AgentToolCall]:
        """Build the calls; with no calls, a `text_output` call carrying `text_output`."""
        completion = completion or {}
        responses = responses or []
        if self.calls:
            return [
                AgentToolCall(
                    tool_name=call.name,
                    tool_args=parse_arguments(call.name, call.arguments),
                    tool_call_id=call.call_id,
                    reasoning=call.reasoning,
                    preamble=call.preamble,
                    completion=completion,
                    responses=responses,
                )
                for call in self.calls
            ]
        if text_output is None or not text_output.strip():
            return []
        return [
            AgentToolCall(
                tool_name=TEXT_OUTPUT,
                tool_args={"content": valid_str(text_output)},
                tool_call_id=str(uuid.uuid4()),
                reasoning=self.leftover_reasoning,
                preamble=None,
                completion=completion,
                responses=responses,
            )
        ]


class StreamPrinter:
    """Echoes streamed tokens to the console when `print_llm_streams` is on."""

    def __init__(self, agent_name: str, enabled: bool, out: TextIO | None = None) -> None:
        self.agent_name = agent_name
        self.enabled = enabled
        self.out = out or sys.stdout
        self._mode: str | None = None

    def _switch(self, mode: str, label: str) -> None:
        if self._mode != mode:
            self.out.write(f"\n[{self.agent_name}] {label}: ")
            self._mode = mode

    def reasoning(self, delta: str) -> None:
        if self.enabled and delta:
            self._switch("reasoning", "reasoning")
            self.out.write(delta)
            self.out.flush()

    def text(self, delta: str) -> None:
        if self.enabled and delta:
            self._switch("text", "text")
            self.out.write(delta)
            self.out.flush()

    def tool(self, name: str) -> None:
        if self.enabled and name:
            self.out.write(f"\n[{self.agent_name}] tool call: {name}")
            self._mode = None
            self.out.flush()

    def end(self) -> None:
        if self.enabled and self._mode is not None:
            self.out.write("\n")
            self.out.flush()
            self._mode = None


@dataclass(frozen=True)
class TurnRequest:
    """What one agent turn asks of the model, before `completions.build_request` or
    `responses.build_request` shapes it for its API."""

    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    tool_choice: str | dict[str, Any] | None
    options: dict[str, Any]  # provider options (api_base, api_key, timeout, ...)
    reasoning_effort: str | None
    max_tokens: int | None
    stream: bool
    printer: StreamPrinter


@dataclass
class ModelRequest:
    """A provider call ready to send: its keyword arguments, whether the reply streams, and
    where streamed tokens are echoed."""

    kwargs: dict[str, Any]
    stream: bool
    printer: StreamPrinter
