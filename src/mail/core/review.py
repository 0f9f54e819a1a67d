"""Human review of actions: the pure part (no I/O, no event loop)."""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

REVIEW_DECISIONS: tuple[str, ...] = ("accept", "edit", "ignore", "respond")
RESUME_FROM_ACTION_REVIEW = "action_review"
ACTION_REVIEW_SUBJECT = "::action_review::"


class ReviewDecisionError(ValueError):
    """Submitted decisions do not fit the held calls (the HTTP layer answers 400)."""


def _did_you_mean(value: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(value, list(choices), n=1, cutoff=0.6)
    return f" Did you mean '{close[0]}'?" if close else ""


def normalize_review(value: Any, where: str) -> list[str] | None:
    """Validate a declared list of allowed decisions; None means "not reviewed".

    An empty list is kept (it switches review off where an override is allowed).
    """
    if value is None:
        return None
    if not isinstance(value, list | tuple):
        raise ValueError(
            f"{where}: 'review' must be a list of decisions "
            f"({', '.join(REVIEW_DECISIONS)}), got {type(value).__name__}"
        )
    decisions: list[str] = []
    for item in value:
        if not isinstance(item, str) or item not in REVIEW_DECISIONS:
            raise ValueError(
                f"{where}: unknown review decision {item!r}; allowed: "
                f"{', '.join(REVIEW_DECISIONS)}." + _did_you_mean(str(item), REVIEW_DECISIONS)
            )
        if item not in decisions:
            decisions.append(item)
    return decisions


@dataclass(frozen=True, slots=True)
class ReviewPolicy:
    """Which actions each agent must have reviewed, and what happens after `ignore`."""

    reviewed: Mapping[str, Mapping[str, tuple[str, ...]]] = field(default_factory=dict)
    memory_agents: frozenset[str] = frozenset()
    ignore_ends_task: bool = True
    descriptions: Mapping[str, str] = field(default_factory=dict)
    # Each action's parameters JSON schema: an `edit` decision's arguments must fit it.
    parameters: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def allowed(self, agent: str, action: str) -> tuple[str, ...] | None:
        """The decisions allowed for `agent` calling `action`, or None if not reviewed."""
        decisions = self.reviewed.get(agent, {}).get(action)
        return decisions or None

    @property
    def active(self) -> bool:
        return any(self.reviewed.values())


def build_policy(
    action_defaults: Mapping[str, Sequence[str] | None],
    agent_actions: Mapping[str, Sequence[str]],
    agent_overrides: Mapping[str, Mapping[str, Sequence[str]]],
    memory_agents: Iterable[str] = (),
    ignore_ends_task: bool = True,
    descriptions: Mapping[str, str] | None = None,
    parameters: Mapping[str, Mapping[str, Any]] | None = None,
) -> ReviewPolicy:
    """Combine the actions' own `review` with per-agent `review_actions` overrides."""
    reviewed: dict[str, dict[str, tuple[str, ...]]] = {}
    for agent, actions in agent_actions.items():
        overrides = agent_overrides.get(agent, {})
        table: dict[str, tuple[str, ...]] = {}
        for name in actions:
            decisions = overrides[name] if name in overrides else action_defaults.get(name)
            if decisions:
                table[name] = tuple(decisions)
        if table:
            reviewed[agent] = table
    return ReviewPolicy(
        reviewed,
        frozenset(memory_agents),
        ignore_ends_task,
        dict(descriptions or {}),
        dict(parameters or {}),
    )


def check_review_overrides(
    agent: str, overrides: Any, agent_actions: Sequence[str]
) -> dict[str, list[str]]:
    """Validate an agent's `review_actions` ({action: [decisions]}) against its actions."""
    if overrides is None:
        return {}
    if not isinstance(overrides, Mapping):
        raise ValueError(
            f"agent '{agent}': 'review_actions' must be an object mapping action names to "
            f"lists of decisions, got {type(overrides).__name__}"
        )
    checked: dict[str, list[str]] = {}
    for name, decisions in overrides.items():
        if name not in agent_actions:
            raise ValueError(
                f"agent '{agent}': 'review_actions' names unknown action '{name}' "
                f"(the agent's actions: {', '.join(agent_actions) or 'none'})."
                + _did_you_mean(str(name), agent_actions)
            )
        normalized = normalize_review(decisions, f"agent '{agent}' review_actions['{name}']")
        checked[name] = normalized or []
    return checked


# ---------------------------------------------------------------------------- held calls
@dataclass(slots=True)
class HeldCall:
    """A reviewed call waiting for a decision (what the event and the answer show)."""

    tool_call_id: str
    caller: str
    action: str
    args: dict[str, Any]
    allowed_decisions: list[str]
    description: str

    def to_public(self) -> dict[str, Any]:
        return {
            "tool_call_id": self.tool_call_id,
            "caller": self.caller,
            "action": self.action,
            "args": self.args,
            "allowed_decisions": list(self.allowed_decisions),
            "description": self.description,
        }

    @classmethod
    def from_public(cls, data: Mapping[str, Any]) -> HeldCall:
        return cls(
            str(data["tool_call_id"]),
            str(data["caller"]),
            str(data["action"]),
            dict(data.get("args") or {}),
            list(data.get("allowed_decisions") or []),
            str(data.get("description") or ""),
        )


def describe_call(action: str, description: str, args: Mapping[str, Any]) -> str:
    """What the reviewer reads: the action, what it does, and the arguments."""
    lines = [f"Agent wants to call '{action}'."]
    if description:
        lines.append(description.strip())
    lines.append("Arguments:")
    lines.extend(f"  {key}: {_short(value)}" for key, value in args.items())
    return "\n".join(lines)


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= 2000 else text[:1997] + "..."


def review_answer_body(held: Sequence[HeldCall]) -> str:
    """Body of the `::action_review::` answer: a JSON list of the held calls."""
    return json.dumps([h.to_public() for h in held], separators=(",", ":"))


# ---------------------------------------------------------------------------- decisions
@dataclass(frozen=True, slots=True)
class Decision:
    tool_call_id: str
    type: str
    args: dict[str, Any] | None = None
    message: str | None = None


def edit_args_problem(schema: Mapping[str, Any] | None, args: Mapping[str, Any]) -> str | None:
    """Why edited `args` do not fit the action's parameters `schema` (None when they do).

    The text starts with the offending field's path (``to``, ``items[2]``), so the reviewer
    knows what to fix. Fields the schema does not declare are refused too (unless it sets
    `additionalProperties`): the model was never told of them and the action would not expect
    them.
    """
    if not schema:
        return None
    properties = schema.get("properties")
    if isinstance(properties, Mapping) and properties and "additionalProperties" not in schema:
        unknown = [key for key in args if key not in properties]
        if unknown:
            return (
                f"'{unknown[0]}' is not a parameter of this action (its parameters: "
                f"{', '.join(properties)})." + _did_you_mean(unknown[0], properties)
            )
    # An empty registry: a `$ref` to a URL is never fetched (jsonschema's default would fetch
    # it with a blocking, unbounded request on the server's event loop). Imported on first
    # use: jsonschema costs every server's and cluster instance host's start-up ~0.1-0.5 s,
    # and only swarms with reviewed actions get here.
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError, UnknownType, best_match
    from referencing import Registry
    from referencing.exceptions import Unresolvable

    validator = Draft202012Validator(dict(schema), registry=Registry())
    try:
        error = best_match(validator.iter_errors(dict(args)))
    except (Unresolvable, SchemaError, UnknownType) as exc:
        return (
            f"the action's parameters schema cannot be checked here ({str(exc)[:200]}); "
            "only local $refs (#/$defs/...) are followed"
        )
    if error is None:
        return None
    path = "".join(
        f"[{part}]" if isinstance(part, int) else f".{part}" for part in error.absolute_path
    ).lstrip(".")
    if error.validator == "required" and isinstance(error.instance, dict):
        missing = [
            name
            for name in error.validator_value
            if isinstance(name, str) and name not in error.instance
        ]
        if missing:
            where = f"{path}.{missing[0]}" if path else missing[0]
            return f"'{where}' is required"
    if not path:
        return error.message
    return f"'{path}': {error.message}"


def parse_decisions(
    raw: Any,
    held: Sequence[HeldCall],
    decided_ids: Iterable[str] = (),
    parameters: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[Decision]:
    """Check `kwargs.decisions` against the held calls; one Decision per held call, in order.

    An `edit` decision's `args` must fit the action's schema in `parameters` (by action name).

    Raises ReviewDecisionError naming the offending field and call ids; nothing is changed.
    """
    decided = set(decided_ids)
    if raw is None:
        raise ReviewDecisionError(
            "parameter 'kwargs.decisions' is required when resume_from is 'action_review'"
        )
    if not isinstance(raw, list) or not raw:
        raise ReviewDecisionError(
            "parameter 'kwargs.decisions' must be a non-empty list of "
            '{"tool_call_id", "type", "args"?, "message"?} objects'
        )
    if not held:
        already = [
            str(d.get("tool_call_id")) for d in raw if isinstance(d, dict)
        ]  # best effort: say which ones were decided before
        repeated = [i for i in already if i in decided]
        if repeated:
            raise ReviewDecisionError(
                "parameter 'kwargs.decisions': the review of call(s) "
                f"{', '.join(repeated)} was already decided; nothing is waiting for review"
            )
        raise ReviewDecisionError("parameter 'resume_from': no action review is pending")
    by_id = {h.tool_call_id: h for h in held}
    seen: dict[str, Decision] = {}
    for index, item in enumerate(raw):
        where = f"kwargs.decisions[{index}]"
        if not isinstance(item, dict):
            raise ReviewDecisionError(f"parameter '{where}' must be an object")
        call_id = item.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            raise ReviewDecisionError(
                f"parameter '{where}.tool_call_id' must be a non-empty string"
            )
        call = by_id.get(call_id)
        if call is None:
            if call_id in decided:
                raise ReviewDecisionError(
                    f"parameter '{where}.tool_call_id': call {call_id} was already decided"
                )
            raise ReviewDecisionError(
                f"parameter '{where}.tool_call_id': call {call_id} is not waiting for review "
                f"(held: {', '.join(by_id)})"
            )
        if call_id in seen:
            raise ReviewDecisionError(
                f"parameter '{where}.tool_call_id': call {call_id} has more than one decision"
            )
        kind = item.get("type")
        if kind not in REVIEW_DECISIONS:
            raise ReviewDecisionError(
                f"parameter '{where}.type' must be one of {', '.join(REVIEW_DECISIONS)} "
                f"(call {call_id}), got {kind!r}." + _did_you_mean(str(kind), REVIEW_DECISIONS)
            )
        if kind not in call.allowed_decisions:
            raise ReviewDecisionError(
                f"parameter '{where}.type': '{kind}' is not allowed for call {call_id} "
                f"({call.action}); allowed: {', '.join(call.allowed_decisions)}"
            )
        args = item.get("args")
        message = item.get("message")
        if kind == "edit" and not isinstance(args, dict):
            raise ReviewDecisionError(
                f"parameter '{where}.args' must be an object of the edited arguments "
                f"(call {call_id})"
            )
        if kind == "edit" and isinstance(args, dict):
            problem = edit_args_problem((parameters or {}).get(call.action), args)
            if problem is not None:
                raise ReviewDecisionError(
                    f"parameter '{where}.args' does not fit the parameters of {call.action} "
                    f"(call {call_id}): {problem}"
                )
        if kind == "respond" and (not isinstance(message, str) or not message.strip()):
            raise ReviewDecisionError(
                f"parameter '{where}.message' must be a non-empty string (call {call_id})"
            )
        if message is not None and not isinstance(message, str):
            raise ReviewDecisionError(f"parameter '{where}.message' must be a string")
        edited = dict(args) if kind == "edit" and isinstance(args, dict) else None
        seen[call_id] = Decision(call_id, str(kind), edited, message)
    missing = [i for i in by_id if i not in seen]
    if missing:
        raise ReviewDecisionError(
            f"parameter 'kwargs.decisions' has no decision for held call(s) {', '.join(missing)}"
        )
    return [seen[h.tool_call_id] for h in held]


# ---------------------------------------------------------------------------- texts
REJECTED_PREFIX = "The person reviewing this call rejected it"


def ignored_result(message: str | None) -> str:
    text = f"{REJECTED_PREFIX}; it was not run."
    return f"{text} Their note: {message}" if message else text


def ignored_task_body(ignored: Sequence[HeldCall]) -> str:
    calls = ", ".join(f"{h.action} (call {h.tool_call_id}, agent {h.caller})" for h in ignored)
    return f"The task ended because the reviewer ignored: {calls}."


def edit_note(action: str, original: Mapping[str, Any], edited: Mapping[str, Any]) -> str:
    return (
        f"When I called {action}, the person reviewing it edited my arguments before it ran. "
        f"I proposed: {json.dumps(original, sort_keys=True)}. "
        f"They changed it to: {json.dumps(edited, sort_keys=True)}. "
        "Prefer their version in similar cases."
    )


def respond_note(action: str, args: Mapping[str, Any], message: str) -> str:
    return (
        f"When I called {action} with {json.dumps(args, sort_keys=True)}, the person reviewing "
        f"it did not let it run and replied: {message}"
    )


def edit_history_entry(entry: Any, call_id: str, args: Mapping[str, Any]) -> Any:
    """A copy of one history entry with `call_id`'s arguments replaced, or the entry itself.

    Covers the Chat Completions assistant message (`tool_calls[].function.arguments`), the
    Responses API item (`function_call` with `call_id`) and Anthropic-style `tool_use` blocks.
    """
    if not isinstance(entry, dict):
        return entry
    encoded = json.dumps(dict(args))
    if entry.get("type") == "function_call" and entry.get("call_id") == call_id:
        return {**entry, "arguments": encoded}
    changed = False
    new_entry = dict(entry)
    tool_calls = entry.get("tool_calls")
    if isinstance(tool_calls, list):
        new_calls = []
        for call in tool_calls:
            if isinstance(call, dict) and call.get("id") == call_id:
                function = dict(call.get("function") or {})
                function["arguments"] = encoded
                call = {**call, "function": function}
                changed = True
            new_calls.append(call)
        new_entry["tool_calls"] = new_calls
    content = entry.get("content")
    if isinstance(content, list):
        new_content = []
        for block in content:
            if (
                isinstance(block, dict)
                and block.get("type") == "tool_use"
                and block.get("id") == call_id
            ):
                block = {**block, "input": dict(args)}
                changed = True
            new_content.append(block)
        new_entry["content"] = new_content
    return new_entry if changed else entry
