"""Parsing and validation of request bodies, with errors that name the field."""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request

from mail.server.errors import BadRequest, type_name
from mail.server.jsonio import PARSED_BODY, loads
from mail.utils.echo import echo

MESSAGE_TYPES: tuple[str, ...] = (
    "request",
    "response",
    "broadcast",
    "interrupt",
    "broadcast_complete",
)
# Types a client may post; the others are produced by the runtime only.
POSTABLE_MESSAGE_TYPES: tuple[str, ...] = ("request", "broadcast")
RESUME_FROM_VALUES: tuple[str, ...] = ("user_response", "breakpoint_tool_call", "action_review")
# What a message to a task that is still running does (mail.core.runtime_multitask).
MULTITASK_STRATEGIES: tuple[str, ...] = ("reject", "enqueue", "interrupt", "rollback")

MESSAGE_FIELDS: tuple[str, ...] = (
    "body",
    "message",
    "subject",
    "msg_type",
    "entrypoint",
    "task_id",
    "resume_from",
    "kwargs",
    "show_events",
    "stream",
    "attachments",
    "webhook",
    "background",
    "multitask_strategy",
)
# kwargs entries that would collide with the explicit parameters of post_message.
_RESERVED_KWARGS = frozenset(MESSAGE_FIELDS) - {"message", "kwargs", "stream"}
HEALTH_FIELDS: tuple[str, ...] = ("status",)
REGISTER_SWARM_FIELDS: tuple[str, ...] = (
    "name",
    "base_url",
    "auth_token",
    "volatile",
    "metadata",
    "caller_id",
)
LOAD_SWARM_FIELDS: tuple[str, ...] = ("json",)
TASK_FIELDS: tuple[str, ...] = ("task_id",)


async def read_json_object(request: Request, *, required: bool = True) -> dict[str, Any]:
    """The body as a JSON object; an empty body is ``{}`` unless ``required``."""
    parsed: dict[str, Any] | None = request.scope.pop(PARSED_BODY, None)
    if parsed is not None:  # parsed already (`PARSED_BODY`): the same bytes, read once
        return parsed
    raw = await request.body()
    if not raw.strip():
        if required:
            raise BadRequest("error parsing request: the body must be a JSON object")
        return {}
    try:
        data = loads(raw)
    except ValueError as exc:
        raise BadRequest(f"error parsing request: invalid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise BadRequest(
            f"error parsing request: the body must be a JSON object, got {type_name(data)}"
        )
    return data


def _opt_str(data: dict[str, Any], name: str) -> str | None:
    value = data.get(name)
    if value is None or isinstance(value, str):
        return value
    raise BadRequest(f"parameter '{name}' must be a string, got {type_name(value)}")


def _opt_bool(data: dict[str, Any], name: str, default: bool) -> bool:
    value = data.get(name)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    raise BadRequest(f"parameter '{name}' must be a boolean, got {type_name(value)}")


@dataclass(slots=True)
class MessageRequest:
    body: str
    subject: str = "New Message"
    msg_type: str = "request"
    entrypoint: str | None = None
    task_id: str | None = None
    resume_from: str | None = None
    show_events: bool = False
    stream: bool = False
    timeout: float | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    # Files sent with the message (validated against the size cap in mail.server.team).
    attachments: Any = None
    # A webhook for this one task (validated in mail.server.webhooks): {url, events, secret}.
    webhook: Any = None
    # Answer 202 once the message is stored, without waiting for the task (`"background":
    # true`, or the header `Prefer: respond-async`: `prefer_async`).
    background: bool = False
    # Asked for by that header (answered with Preference-Applied).
    preferred: bool = False
    # What the message does to a task that is still running; None: the server's default.
    multitask_strategy: str | None = None
    # Bytes of uploads a keyed retry replaces (its dead first attempt stored them under the
    # same ids): stored already, so the quota does not count them a second time.
    replaced_bytes: int = 0

    def upload_bytes(self) -> int:
        """The bytes the uploads will store (`content` text, or `content_base64` decoded:
        three bytes per four characters)."""
        uploads = self.attachments if isinstance(self.attachments, list) else []
        size = 0
        for upload in uploads:
            if isinstance(upload, dict):
                text, encoded = upload.get("content"), upload.get("content_base64")
                if isinstance(text, str):
                    size += len(text.encode("utf-8", "surrogatepass"))
                elif isinstance(encoded, str):
                    size += len(encoded) * 3 // 4
        return size


async def parse_message(request: Request) -> MessageRequest:
    """``POST /message``'s body, and its header ``Prefer: respond-async`` (RFC 7240)."""
    req = parse_message_request(await read_json_object(request))
    req.preferred = prefer_async(request.headers.get("prefer"))
    return req


def parse_message_request(data: dict[str, Any]) -> MessageRequest:
    """Validate a ``POST /message`` body (``body`` or its alias ``message``)."""
    msg_type = data.get("msg_type", "request")
    if msg_type is None:
        msg_type = "request"
    if not isinstance(msg_type, str):
        raise BadRequest(f"msg_type must be a string, got {type_name(msg_type)}")
    if msg_type not in MESSAGE_TYPES:
        raise BadRequest(f"invalid message type: {echo(msg_type)}")
    if msg_type not in POSTABLE_MESSAGE_TYPES:
        raise BadRequest(
            f"msg_type '{msg_type}' cannot be posted; use one of: {', '.join(POSTABLE_MESSAGE_TYPES)}"
        )

    body = _opt_str(data, "body") or _opt_str(data, "message") or ""
    resume_from = _opt_str(data, "resume_from") or None
    if resume_from is not None and resume_from not in RESUME_FROM_VALUES:
        raise BadRequest(
            f"parameter 'resume_from' must be one of {', '.join(RESUME_FROM_VALUES)} or null, got '{echo(resume_from)}'"
        )
    if not body and resume_from not in ("breakpoint_tool_call", "action_review"):
        raise BadRequest("no message provided")

    subject = _opt_str(data, "subject")
    entrypoint = _opt_str(data, "entrypoint")
    entrypoint = entrypoint.strip() if entrypoint and entrypoint.strip() else None
    task_id = _opt_str(data, "task_id")
    task_id = task_id.strip() if task_id and task_id.strip() else None
    if task_id is not None:
        task_id = check_task_id(task_id)

    kwargs = data.get("kwargs")
    if kwargs is None:
        kwargs = {}
    elif not isinstance(kwargs, dict):
        raise BadRequest(f"parameter 'kwargs' must be an object, got {type_name(kwargs)}")
    else:
        kwargs = dict(kwargs)
    clashes = sorted(k for k in kwargs if k in _RESERVED_KWARGS)
    if clashes:
        raise BadRequest(
            f"parameter 'kwargs.{clashes[0]}' duplicates a top-level field; set it there instead"
        )

    timeout = kwargs.pop("timeout", None)
    if timeout is not None:
        timeout = positive_seconds(timeout, "kwargs.timeout")
    if "max_steps" in kwargs:
        kwargs["max_steps"] = _max_steps(kwargs["max_steps"])
    if resume_from == "breakpoint_tool_call":
        if "breakpoint_tool_call_result" not in kwargs:
            raise BadRequest(
                "parameter 'kwargs.breakpoint_tool_call_result' is required when resume_from is 'breakpoint_tool_call'"
            )
        result = kwargs["breakpoint_tool_call_result"]
        if not isinstance(result, str | dict | list):
            raise BadRequest(
                f"parameter 'kwargs.breakpoint_tool_call_result' must be a string, object or list, got {type_name(result)}"
            )
        caller = kwargs.get("breakpoint_tool_caller")
        if caller is not None and not isinstance(caller, str):
            raise BadRequest(
                f"parameter 'kwargs.breakpoint_tool_caller' must be a string, got {type_name(caller)}"
            )

    if resume_from == "action_review" and "decisions" not in kwargs:
        raise BadRequest(
            "parameter 'kwargs.decisions' is required when resume_from is 'action_review'"
        )
    strategy = _opt_str(data, "multitask_strategy")
    if strategy is not None and strategy not in MULTITASK_STRATEGIES:
        raise BadRequest(
            f"parameter 'multitask_strategy' must be one of {', '.join(MULTITASK_STRATEGIES)}, "
            f"got '{echo(strategy)}'"
        )
    stream = _opt_bool(data, "stream", False)
    background = _opt_bool(data, "background", False)
    if background and stream:
        raise BadRequest(
            "parameters 'background' and 'stream' exclude each other: a background message "
            "is answered 202 at once; follow its task with GET /task/events"
        )

    return MessageRequest(
        body=body,
        subject=subject if subject is not None else "New Message",
        msg_type=msg_type,
        entrypoint=entrypoint,
        task_id=task_id,
        resume_from=resume_from,
        show_events=_opt_bool(data, "show_events", False),
        stream=stream,
        timeout=timeout,
        kwargs=kwargs,
        attachments=data.get("attachments"),
        webhook=data.get("webhook"),
        background=background,
        multitask_strategy=strategy,
    )


def prefer_async(header: str | None) -> bool:
    """Whether a ``Prefer`` header (RFC 7240) asks for ``respond-async``: preferences are
    comma-separated, each a token with optional ``=value`` and ``;parameters``; the token is
    case-insensitive."""
    if not header:
        return False
    for preference in header.split(","):
        token = preference.split(";", 1)[0].split("=", 1)[0].strip().lower()
        if token == "respond-async":
            return True
    return False


def positive_seconds(value: Any, name: str) -> float:
    """A duration in seconds: a finite number > 0 (a bool is not one), else 400."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise BadRequest(f"parameter '{name}' must be a positive number of seconds")
    return float(value)


MAX_STEPS_LIMIT = 2**63 - 1


def _max_steps(value: Any) -> int | None:
    """Same meaning as ``task_message_limit``: a non-negative integer, 0 or null = unlimited."""
    if value is None:
        return None
    huge = (
        isinstance(value, int | float) and not isinstance(value, bool) and value > MAX_STEPS_LIMIT
    )
    if huge:
        # The JSON parser reads integers past 64 bits as floats: say what is wrong with the
        # number instead of naming a type the caller never wrote.
        raise BadRequest(
            f"parameter 'kwargs.max_steps' is too large: at most {MAX_STEPS_LIMIT} "
            "(0 or null means unlimited)"
        )
    if isinstance(value, bool) or not isinstance(value, int):
        got = repr(value) if isinstance(value, float) else type_name(value)
    elif value < 0:
        got = str(value)
    else:
        return value or None
    raise BadRequest(
        "parameter 'kwargs.max_steps' is invalid: max_steps must be an int or null "
        f"(a non-negative integer; 0 or null means unlimited), got {got}"
    )


def check_task_id(value: str, name: str = "task_id") -> str:
    """Task ids are UUIDs (canonical 8-4-4-4-12 hex form); anything else is a 400."""
    if len(value) == 36:
        try:
            uuid.UUID(value)
        except ValueError:
            pass
        else:
            return value
    shown = value if len(value) <= 60 else value[:60] + "..."
    raise BadRequest(
        f"parameter '{name}' must be a UUID such as '{uuid.UUID(int=0)}', got '{shown}'"
    )


def parse_task_id(data: dict[str, Any], query_value: str | None) -> str:
    """``GET /task``: ``task_id`` from the JSON body, or from ``?task_id=``."""
    if "task_id" in data:
        task_id = data["task_id"]
    elif query_value is not None:
        task_id = query_value
    else:
        raise BadRequest("task_id is required")
    if not isinstance(task_id, str):
        raise BadRequest("task_id must be a string")
    if not task_id:
        raise BadRequest("task_id is required")
    return check_task_id(task_id)


def parse_health_update(data: dict[str, Any]) -> str:
    status = data.get("status")
    if not status:
        raise BadRequest("status is required")
    if not isinstance(status, str):
        raise BadRequest(f"parameter 'status' must be a string, got {type_name(status)}")
    return status


@dataclass(slots=True)
class RegisterSwarmRequest:
    name: str
    base_url: str
    auth_token: str | None
    volatile: bool
    metadata: dict[str, Any] | None
    caller_id: str | None = None


# A peer's address (POST /swarms): longer is no URL a peer answers at.
MAX_BASE_URL_CHARS = 2048


def parse_register_swarm(data: dict[str, Any]) -> RegisterSwarmRequest:
    name, base_url = data.get("name"), data.get("base_url")
    if not name or not base_url:
        raise BadRequest("name and base_url are required")
    if not isinstance(name, str):
        raise BadRequest(f"parameter 'name' must be a string, got {type_name(name)}")
    if not isinstance(base_url, str):
        raise BadRequest(f"parameter 'base_url' must be a string, got {type_name(base_url)}")
    if not base_url.startswith(("http://", "https://")):
        raise BadRequest("parameter 'base_url' must be an http:// or https:// URL")
    if len(base_url) > MAX_BASE_URL_CHARS:
        raise BadRequest(
            f"parameter 'base_url' is {len(base_url)} characters; the limit is {MAX_BASE_URL_CHARS}"
        )
    metadata = data.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise BadRequest(f"parameter 'metadata' must be an object, got {type_name(metadata)}")
    return RegisterSwarmRequest(
        name=name,
        base_url=base_url.rstrip("/"),
        auth_token=_opt_str(data, "auth_token"),
        volatile=_opt_bool(data, "volatile", True),
        metadata=metadata,
        caller_id=_opt_str(data, "caller_id"),
    )


def parse_load_swarm(data: dict[str, Any]) -> str:
    value = data.get("json")
    if value is None:
        raise BadRequest("parameter 'json' is required")
    if not isinstance(value, str):
        raise BadRequest(f"parameter 'json' must be a string, got {type_name(value)}")
    return value
