"""v1.3's ``mail.utils.serialize_mail_value`` and ``export``: plain JSON data from MAIL objects;
``extract_task_body`` and ``dump_mail_result``: a task's answer (and its events) as text.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Iterable, Mapping
from typing import Any

from mail.version import __version__


def serialize_mail_value(
    value: Any, *, exclude_keys: frozenset[str] | set[str] | None = None
) -> Any:
    """`value` as JSON-ready data: mappings and sequences recursively (leaving out
    `exclude_keys`), dataclasses and pydantic models as their fields, other objects as their
    public attributes, anything else as its ``str()``."""
    excluded = frozenset(exclude_keys or ())

    def convert(item: Any) -> Any:
        if item is None or isinstance(item, str | int | float | bool):
            return item
        if isinstance(item, bytes):
            return item.decode("utf-8", errors="replace")
        if isinstance(item, Mapping):
            return {k: convert(v) for k, v in item.items() if k not in excluded}
        if isinstance(item, list | tuple | set | frozenset):
            return [convert(v) for v in item]
        if dataclasses.is_dataclass(item) and not isinstance(item, type):
            return convert(dataclasses.asdict(item))
        if callable(getattr(item, "model_dump", None)):
            return convert(item.model_dump())
        if hasattr(item, "__dict__"):
            return {k: convert(v) for k, v in vars(item).items() if not k.startswith("_")}
        return str(item)

    return convert(value)


def _reference(target: Any) -> str | None:
    """A ``python::module:name`` string for a callable (strings are kept as they are)."""
    if target is None or isinstance(target, str):
        return target
    module = getattr(target, "__module__", "")
    name = getattr(target, "__qualname__", getattr(target, "__name__", ""))
    if module and name:
        return f"python::{module}:{name}"
    return name or None


def _agent(agent: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": getattr(agent, "name", ""),
        "comm_targets": list(getattr(agent, "comm_targets", [])),
        "enable_entrypoint": bool(getattr(agent, "enable_entrypoint", False)),
        "enable_interswarm": bool(getattr(agent, "enable_interswarm", False)),
        "can_complete_tasks": bool(getattr(agent, "can_complete_tasks", False)),
        "tool_format": getattr(agent, "tool_format", "responses"),
        "agent_params": serialize_mail_value(getattr(agent, "agent_params", {})),
    }
    factory = _reference(getattr(agent, "factory", None))
    if factory:
        data["factory"] = factory
    actions = getattr(agent, "actions", None) or []
    if actions:
        data["actions"] = [getattr(a, "name", serialize_mail_value(a)) for a in actions]
    return data


def _action(action: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": getattr(action, "name", ""),
        "description": getattr(action, "description", ""),
        "parameters": serialize_mail_value(getattr(action, "parameters", {})),
    }
    function = _reference(
        getattr(action, "function_ref", None) or getattr(action, "function", None)
    )
    if function:
        data["function"] = function
    return data


def _listed(value: Any) -> list[Any]:
    if isinstance(value, Mapping):
        return list(value.values())
    return list(value) if isinstance(value, Iterable) else []


def export(swarms: list[Any]) -> str:
    """Swarms (``MAILSwarm`` or ``MAILSwarmTemplate``) as the JSON text
    ``{"swarms": [...], "n": <count>}``: each with its name, version, entrypoint, interswarm
    flag, agents, breakpoint tools, actions and (for instances) user id."""
    payloads: list[dict[str, Any]] = []
    for swarm in swarms:
        payload: dict[str, Any] = {
            "name": getattr(swarm, "name", ""),
            "version": __version__,
            "entrypoint": getattr(swarm, "entrypoint", ""),
            "enable_interswarm": bool(getattr(swarm, "enable_interswarm", False)),
            "agents": [_agent(a) for a in _listed(getattr(swarm, "agents", []))],
        }
        breakpoints = getattr(swarm, "breakpoint_tools", None)
        if breakpoints is not None:
            payload["breakpoint_tools"] = list(breakpoints)
        actions = [_action(a) for a in _listed(getattr(swarm, "actions", []))]
        if actions:
            payload["actions"] = actions
        user_id = getattr(swarm, "user_id", None)
        if user_id is not None:
            payload["user_id"] = user_id
        payloads.append(payload)
    return json.dumps({"swarms": payloads, "n": len(payloads)})


# Identifiers left out of `dump_mail_result`'s text: they mean nothing to a model reading it.
_ID_KEYS = frozenset({"id", "task_id", "request_id", "broadcast_id", "interrupt_id"})


def extract_task_body(raw_result: Any, serialized_result: Any | None = None) -> Any:
    """The ``body`` of a MAIL result: a message dict (``result["message"]["body"]``), a
    payload dict (``result["body"]``) or an object with such attributes; `serialized_result`
    is tried when `raw_result` has none. None when neither has a body."""
    for candidate in (raw_result, serialized_result):
        if candidate is None:
            continue
        for holder in (candidate, _field(candidate, "message")):
            body = _field(holder, "body")
            if body is not None:
                return body
    return None


def _field(holder: Any, name: str) -> Any:
    if isinstance(holder, Mapping):
        return holder.get(name)
    return getattr(holder, name, None) if holder is not None else None


def _event_line(event: Any) -> str | None:
    """``name: description`` of one event (a ServerSentEvent or a TaskEvent)."""
    data = getattr(event, "data", None)
    if isinstance(data, str):
        with contextlib.suppress(ValueError):
            data = json.loads(data)
    description = data.get("description", "") if isinstance(data, Mapping) else data
    if "::action_complete_broadcast::" in str(description):
        return None  # the action's result is shown by its own action_complete event
    name = str(getattr(event, "event", "") or "event")
    return f"{name}: {description}" if description else name


def dump_mail_result(result: Any, events: Iterable[Any], verbose: bool = False) -> str:
    """A finished task as text for a model to read: the answer's body, and with `verbose`
    the task's events (one numbered ``name: description`` line each) before it."""
    body = str(extract_task_body(serialize_mail_value(result, exclude_keys=_ID_KEYS)))
    if not verbose:
        return body
    lines = [line for line in (_event_line(e) for e in events) if line is not None]
    listed = "\n".join(f"{n}. {line}" for n, line in enumerate(lines, start=1))
    return f"Events of the task:\n{listed or '(none)'}\n\nFinal answer:\n{body}"
