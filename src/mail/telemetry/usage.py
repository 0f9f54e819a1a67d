"""Tokens and cost of model calls: read from a reply, and added up per agent and per task."""

from __future__ import annotations

import json
import math
import weakref
from dataclasses import dataclass, field
from typing import Any

MODEL_CALL_EVENT = "model_call"


@dataclass(slots=True)
class ModelCall:
    """What one model call cost."""

    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    duration_ms: float = 0.0
    finish_reason: str | None = None
    # True when the provider reported no usage and the tokens were counted here
    estimated: bool = False
    error: str | None = None

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def event_data(self, agent: str) -> dict[str, Any]:
        data: dict[str, Any] = {
            "agent": agent,
            "model": self.model,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost": self.cost,
            "duration_ms": round(self.duration_ms, 3),
            "finish_reason": self.finish_reason,
        }
        if self.estimated:
            data["estimated"] = True
        if self.error:
            data["error"] = self.error
        return data


def field_of(value: Any, name: str) -> Any:
    if isinstance(value, dict):
        return value.get(name)
    return getattr(value, name, None)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def reported_tokens(usage: Any) -> tuple[int, int] | None:
    """(input, output) tokens of a usage object (Chat Completions or Responses names)."""
    if usage is None:
        return None
    tokens_in = field_of(usage, "prompt_tokens")
    if tokens_in is None:
        tokens_in = field_of(usage, "input_tokens")
    tokens_out = field_of(usage, "completion_tokens")
    if tokens_out is None:
        tokens_out = field_of(usage, "output_tokens")
    if tokens_in is None and tokens_out is None:
        return None
    return _int(tokens_in), _int(tokens_out)


def count_tokens(text: str) -> int:
    """A model-independent token count: about four characters a token (what the demo model
    reports, and what a streamed reply without usage is charged)."""
    return math.ceil(len(text) / 4) if text else 0


def finish_reason_of(response: Any) -> str | None:
    choices = field_of(response, "choices")
    if isinstance(choices, list) and choices:
        reason = field_of(choices[0], "finish_reason")
        return str(reason) if reason else None
    status = field_of(response, "status")  # Responses API
    return str(status) if status else None


def cost_of(response: Any, model: str, tokens: tuple[int, int]) -> float:
    """The price LiteLLM knows for this call; 0.0 for models it has no price for."""
    hidden = getattr(response, "_hidden_params", None)
    if isinstance(hidden, dict):
        reported = hidden.get("response_cost")
        if isinstance(reported, int | float) and not isinstance(reported, bool):
            return float(reported)
    if not any(tokens):
        return 0.0
    try:
        import litellm  # already imported by whoever made a LiteLLM call

        prompt, completion = litellm.cost_per_token(
            model=model, prompt_tokens=tokens[0], completion_tokens=tokens[1]
        )
    except Exception:  # noqa: BLE001 - an unpriced model (scripted, local) costs nothing known
        return 0.0
    return float(prompt) + float(completion)


# ------------------------------------------------------------------------------------------
# Totals


@dataclass(slots=True)
class Totals:
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    duration_ms: float = 0.0

    def add(self, data: dict[str, Any]) -> None:
        self.calls += 1
        self.input_tokens += _int(data.get("input_tokens"))
        self.output_tokens += _int(data.get("output_tokens"))
        cost = data.get("cost")
        if isinstance(cost, int | float) and not isinstance(cost, bool):
            self.cost += float(cost)
        duration = data.get("duration_ms")
        if isinstance(duration, int | float) and not isinstance(duration, bool):
            self.duration_ms += float(duration)

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def as_dict(self) -> dict[str, Any]:
        return {
            "model_calls": self.calls,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "total_tokens": self.total_tokens,
            "cost": round(self.cost, 8),
            "model_ms": round(self.duration_ms, 3),
        }


@dataclass(slots=True)
class TaskUsage:
    """A task's totals and the same per agent and per model."""

    seen: int = 0
    total: Totals = field(default_factory=Totals)
    by_agent: dict[str, Totals] = field(default_factory=dict)
    by_model: dict[str, Totals] = field(default_factory=dict)

    def add(self, data: dict[str, Any]) -> None:
        self.total.add(data)
        self.by_agent.setdefault(str(data.get("agent") or "?"), Totals()).add(data)
        self.by_model.setdefault(str(data.get("model") or "?"), Totals()).add(data)

    def as_dict(self) -> dict[str, Any]:
        out = self.total.as_dict()
        out["by_agent"] = {name: t.as_dict() for name, t in sorted(self.by_agent.items())}
        out["by_model"] = {name: t.as_dict() for name, t in sorted(self.by_model.items())}
        return out


_USAGE: weakref.WeakKeyDictionary[Any, TaskUsage] = weakref.WeakKeyDictionary()


def task_usage(task: Any) -> TaskUsage:
    """The usage of a task (a `MAILTask`), from its ``model_call`` events."""
    usage = _USAGE.get(task)
    if usage is None:
        usage = _USAGE[task] = TaskUsage()
    events = task.events
    if usage.seen > len(events):  # the log was replaced (reloaded): count again
        usage = _USAGE[task] = TaskUsage()
    for event in events[usage.seen :]:
        if event.event == MODEL_CALL_EVENT:
            usage.add(event.extra_data)
    usage.seen = len(events)
    return usage


# ------------------------------------------------------------------------------------------
# Counted usage (the offline demo model, streams without a usage record)


def _text_size(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list):
        return sum(_text_size(v) for v in value)
    if isinstance(value, dict):
        return sum(_text_size(v) for k, v in value.items() if k not in ("id", "call_id", "type"))
    return 0


# What a chat template adds around each message (role markers, separators), in tokens.
_PER_MESSAGE = 4


def counted_input(kwargs: dict[str, Any]) -> int:
    """Tokens of a request, counted like `count_tokens`: its messages (or Responses input and
    instructions), the tool schemas it offers (as the JSON the server renders into the
    prompt) and a few tokens per message for the chat template."""
    messages = kwargs.get("messages") or kwargs.get("input") or []
    size = _text_size(messages) + _text_size(kwargs.get("instructions"))
    tools = kwargs.get("tools")
    if tools:
        size += len(json.dumps(tools, separators=(",", ":"), default=str))
    count = len(messages) if isinstance(messages, list) else 1
    return math.ceil(size / 4) + _PER_MESSAGE * count


def counted_output(response: Any) -> int:
    """Tokens of a reply's text and tool-call arguments, counted like `count_tokens`."""
    choices = field_of(response, "choices")
    if isinstance(choices, list) and choices:
        return math.ceil(_text_size(field_of(choices[0], "message")) / 4)
    return math.ceil(_text_size(field_of(response, "output") or []) / 4)


def usage_text(usage: Any) -> str:
    """One line for people (the REPL): tokens, cost and model calls of a usage record."""
    if not isinstance(usage, dict):
        return "-"
    return (
        f"{_int(usage.get('total_tokens'))} tokens ({_int(usage.get('input_tokens'))} in, "
        f"{_int(usage.get('output_tokens'))} out), cost {float(usage.get('cost') or 0):.4f}, "
        f"{_int(usage.get('model_calls'))} model calls"
    )
