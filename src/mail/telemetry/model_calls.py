"""Measure one model call: duration, tokens, cost, and a GenAI span when tracing is on."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from mail.telemetry import tracing
from mail.telemetry.meter import CURRENT_TURN, Turn
from mail.telemetry.usage import (
    ModelCall,
    cost_of,
    count_tokens,
    counted_input,
    counted_output,
    field_of,
    finish_reason_of,
    reported_tokens,
)

if TYPE_CHECKING:
    from opentelemetry.trace import Span

OFFLINE_PREFIX = "mail/"


def provider_of(model: str) -> str:
    if model.startswith(OFFLINE_PREFIX):
        return "mail"
    return model.split("/", 1)[0] if "/" in model else "openai"


class ModelCallCut(Exception):
    """The model call was stopped because its task ended (a caller's timeout)."""


class ModelCallRefused(Exception):
    """The model request was not made: it would pass the task's step limit (``max_steps``).
    Not retried; ``kind`` names the limit for programs."""

    kind = "max_steps"


class _Probe:
    __slots__ = (
        "turn",
        "model",
        "started",
        "span",
        "call",
        "offline_input",
        "kwargs",
        "scope",
        "closed",
    )

    def __init__(self, turn: Turn | None, kind: str, kwargs: dict[str, Any]) -> None:
        self.turn = turn
        self.scope: asyncio.Timeout | None = None  # cancels the call when it is cut
        self.closed = False
        self.model = str(kwargs.get("model") or "")
        self.started = time.perf_counter()
        self.call = ModelCall(self.model)
        self.kwargs = kwargs
        # The demo model reports no usage: its tokens are counted (and cost nothing).
        offline = self.model.startswith(OFFLINE_PREFIX)
        self.offline_input = counted_input(kwargs) if offline else None
        self.span: Span | None = None
        if tracing.tracer() is not None:
            provider = provider_of(self.model)
            attributes: dict[str, Any] = {
                "gen_ai.operation.name": "chat",
                "mail.model_api": kind,
                "gen_ai.system": provider,
                "gen_ai.provider.name": provider,
                "gen_ai.request.model": self.model,
            }
            if turn is not None:
                attributes["gen_ai.agent.name"] = turn.agent
            if tracing.capture_content():
                attributes["gen_ai.input.messages"] = str(
                    kwargs.get("messages") or kwargs.get("input") or ""
                )
            self.span = tracing.start_span(
                f"chat {self.model}", kind="CLIENT", attributes=attributes
            )
        if turn is not None:
            turn.call_started(self)

    def cut(self, reason: str) -> None:
        """Record the call as cut now and cancel it where it waits."""
        if self.closed:
            return
        self.call.duration_ms = (time.perf_counter() - self.started) * 1000.0
        self.call.error = f"cut: {reason}"
        self.call.estimated = True
        self.call.input_tokens = self.offline_input or counted_input(self.kwargs)
        self._close()
        if self.scope is not None:
            self.scope.reschedule(asyncio.get_running_loop().time())

    @contextlib.asynccontextmanager
    async def watching(self) -> AsyncIterator[None]:
        """Run the call (or read its stream) where `cut` can cancel it: an exception that
        ends it is recorded, and once the call was cut it becomes `ModelCallCut`."""
        try:
            async with asyncio.timeout(None) as self.scope:
                yield
        except BaseException as exc:
            if self.call.error and self.call.error.startswith("cut: "):
                raise ModelCallCut(
                    f"the model call was cut short ({self.call.error[5:]})"
                ) from None
            self.failed(exc)
            raise
        finally:
            self.scope = None

    def finish(self, response: Any, tokens: tuple[int, int] | None, text: str = "") -> None:
        if self.closed:
            return
        call = self.call
        call.duration_ms = (time.perf_counter() - self.started) * 1000.0
        if self.offline_input is not None:
            output = count_tokens(text) if response is None else counted_output(response)
            tokens = (self.offline_input, output)
        elif tokens is None:
            # No usage reported (some OpenAI-compatible servers, streams without
            # include_usage): counted, both ways, so a budget still sees the call.
            call.estimated = True
            output = count_tokens(text) if response is None else counted_output(response)
            tokens = (counted_input(self.kwargs), output)
        call.input_tokens, call.output_tokens = tokens
        call.finish_reason = call.finish_reason or finish_reason_of(response)
        if self.offline_input is not None:
            call.cost = 0.0
        else:
            call.cost = cost_of(response, self.model, tokens)
        self._close()

    def failed(self, exc: BaseException) -> None:
        if self.closed:
            return
        self.call.duration_ms = (time.perf_counter() - self.started) * 1000.0
        self.call.error = type(exc).__name__
        if _unanswered(exc):  # the server had the whole prompt, and may still be working on it
            self.call.estimated = True
            self.call.input_tokens = self.offline_input or counted_input(self.kwargs)
        self._close()

    def _close(self) -> None:
        self.closed = True
        call = self.call
        if self.turn is not None:
            self.turn.call_ended(self)
            self.turn.record(call)
        span = self.span
        if span is not None:
            if span.is_recording():
                attributes: dict[str, Any] = {
                    "gen_ai.usage.input_tokens": call.input_tokens,
                    "gen_ai.usage.output_tokens": call.output_tokens,
                    "mail.cost": call.cost,
                }
                if call.finish_reason:
                    attributes["gen_ai.response.finish_reasons"] = [call.finish_reason]
                span.set_attributes(attributes)
            tracing.end_span(span, call.error)


def _unanswered(exc: BaseException | None) -> bool:
    """True when `exc` (or what caused it) ended a request that was waiting for its answer:
    a timeout, or a cancellation (the agent's request_timeout, a task stopped)."""
    for _ in range(8):
        if exc is None:
            return False
        if (
            isinstance(exc, TimeoutError | asyncio.CancelledError)
            or "Timeout" in type(exc).__name__
        ):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


async def observed(kind: str, call: Callable[..., Awaitable[Any]], kwargs: dict[str, Any]) -> Any:
    """``await call(**kwargs)``, measured (``kind``: ``chat`` or ``responses``)."""
    turn = CURRENT_TURN.get()
    if turn is None:
        if tracing.tracer() is None:
            return await call(**kwargs)
    else:
        turn.admit()  # every request counts toward max_steps as it goes out
    probe = _Probe(turn, kind, kwargs)
    async with probe.watching():
        response = await call(**kwargs)
    if kwargs.get("stream"):
        return _measured_stream(response, probe)
    probe.finish(response, reported_tokens(field_of(response, "usage")))
    return response


async def _measured_stream(stream: Any, probe: _Probe) -> AsyncIterator[Any]:
    tokens: tuple[int, int] | None = None
    final: Any = None
    text: list[str] = []
    async with probe.watching():
        if probe.closed:  # cut before the first chunk was asked for
            raise TimeoutError
        async for item in stream:
            usage = field_of(item, "usage")
            if usage is not None:
                tokens = reported_tokens(usage) or tokens
            choices = field_of(item, "choices")
            if isinstance(choices, list) and choices:
                reason = field_of(choices[0], "finish_reason")
                if reason:
                    probe.call.finish_reason = str(reason)
                delta = field_of(choices[0], "delta")
                content = field_of(delta, "content") if delta is not None else None
                if isinstance(content, str):
                    text.append(content)
                tools = (field_of(delta, "tool_calls") or []) if delta is not None else []
                for tool in tools:
                    arguments = field_of(field_of(tool, "function"), "arguments")
                    if isinstance(arguments, str):
                        text.append(arguments)
            elif getattr(kind := field_of(item, "type"), "value", kind) == "response.completed":
                final = field_of(item, "response")
                tokens = reported_tokens(field_of(final, "usage")) or tokens
            yield item
    if final is None and tokens is not None and not _server_counted(stream):
        tokens = None  # LiteLLM's own count, which leaves the tools out: ours is closer
    probe.finish(final, tokens, "".join(text))


def _server_counted(stream: Any) -> bool:
    """Whether a Chat Completions stream's usage came from the server. Asked for usage
    (``stream_options.include_usage``) by a server that sends none, LiteLLM counts the
    prompt's messages itself and reports that; its stream wrapper keeps the chunks it
    received (``chunks``), and only a server's own count is among them."""
    chunks = getattr(stream, "chunks", None)
    if not isinstance(chunks, list):
        return True  # not LiteLLM's wrapper (the demo model): its usage is its own
    return any(field_of(chunk, "usage") is not None for chunk in chunks)
