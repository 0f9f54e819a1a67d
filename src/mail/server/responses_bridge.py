"""Debug-only ``POST /responses``: the swarm behind an OpenAI Responses-shaped endpoint."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from starlette.responses import Response

from mail.server import messaging
from mail.server.auth import Caller, authenticate_request
from mail.server.bodies import MessageRequest, check_task_id, read_json_object
from mail.server.errors import BadRequest, type_name
from mail.server.handlers import get_state
from mail.server.idempotency import Ticket, current_ticket, idempotent
from mail.server.jsonio import JSONBody
from mail.server.message_replay import KeyTask, task_resolver
from mail.server.state import ServerState
from mail.utils.echo import echo

router = APIRouter()

RESPONSES_FIELDS: tuple[str, ...] = (
    "input",
    "tools",
    "instructions",
    "previous_response_id",
    "tool_choice",
    "parallel_tool_calls",
    "kwargs",
)
_TYPES: dict[str, tuple[type, ...]] = {
    "input": (list,),
    "tools": (list,),
    "instructions": (str,),
    "previous_response_id": (str,),
    "tool_choice": (str, dict),
    "parallel_tool_calls": (bool,),
    "kwargs": (dict,),
}
_TYPE_WORDS = {list: "list", str: "str", dict: "dict", bool: "bool"}


def _validate(data: dict[str, Any]) -> None:
    for name in ("input", "tools"):
        if name not in data:
            raise BadRequest(f"parameter '{name}' is required")
    for name, types in _TYPES.items():
        value = data.get(name)
        if value is None and name not in ("input", "tools"):
            continue
        if not isinstance(value, types):
            want = " or ".join(_TYPE_WORDS[t] for t in types)
            raise BadRequest(f"parameter '{name}' must be a {want}, got {type_name(value)}")
    for index, tool in enumerate(data["tools"]):
        if not isinstance(tool, dict) or not isinstance(tool.get("type"), str):
            raise BadRequest(
                f"parameter 'tools[{index}]' must be a tool object with a string 'type', "
                f"got {type_name(tool)}"
            )
    previous = data.get("previous_response_id")
    if previous is not None:
        check_task_id(previous, "previous_response_id")


def _text_of(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            p.get("text", "")
            for p in content
            if isinstance(p, dict) and isinstance(p.get("text"), str)
        ]
        return "\n".join(p for p in parts if p)
    return ""


def _trailing(items: list[Any]) -> list[dict[str, Any]]:
    tail: list[dict[str, Any]] = []
    for item in reversed(items):
        if not isinstance(item, dict):
            raise BadRequest("parameter 'input' must be a list of objects")
        if item.get("role") == "assistant" or item.get("type") == "function_call":
            break
        tail.append(item)
    tail.reverse()
    return tail


def build_message_request(data: dict[str, Any]) -> MessageRequest:
    tail = _trailing(data["input"])
    task_id = data.get("previous_response_id") or None
    outputs = [i for i in tail if i.get("type") == "function_call_output"]
    if tail and tail[-1].get("type") == "function_call_output":
        if task_id is None:
            raise BadRequest(
                "parameter 'previous_response_id' is required to send function_call_output items"
            )
        result = [
            {"call_id": o.get("call_id"), "content": str(o.get("output", ""))} for o in outputs
        ]
        return MessageRequest(
            body="",
            task_id=task_id,
            resume_from="breakpoint_tool_call",
            kwargs={**(data.get("kwargs") or {}), "breakpoint_tool_call_result": result},
        )
    text = "\n\n".join(t for t in (_text_of(i) for i in tail) if t)
    if data.get("instructions"):
        text = f"{data['instructions']}\n\n{text}" if text else data["instructions"]
    if not text:
        raise BadRequest("parameter 'input' has no user content after the last assistant item")
    return MessageRequest(body=text, task_id=task_id, kwargs=dict(data.get("kwargs") or {}))


def _output_items(subject: str, body: str) -> list[dict[str, Any]]:
    if subject == "::breakpoint_tool_call::":
        try:
            calls = json.loads(body)
        except ValueError:
            calls = None
        if isinstance(calls, list):
            items = []
            for call in calls:
                if not isinstance(call, dict):
                    continue
                call_id = str(call.get("call_id") or call.get("id") or uuid.uuid4().hex)
                arguments = call.get("arguments", "{}")
                items.append(
                    {
                        "type": "function_call",
                        "id": str(call.get("id") or f"fc_{call_id}"),
                        "call_id": call_id,
                        "name": str(call.get("name", "")),
                        "arguments": arguments
                        if isinstance(arguments, str)
                        else json.dumps(arguments),
                        "status": str(call.get("status") or "completed"),
                    }
                )
            return items
    return [
        {
            "type": "message",
            "id": f"msg_{uuid.uuid4().hex}",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": body, "annotations": []}],
        }
    ]


@router.post("/responses")
async def responses(request: Request) -> Response:
    if not get_state(request).config.debug:
        raise HTTPException(404, "Not found")  # (before any auth check, or a key's)
    return await _respond(request)  # type: ignore[no-any-return]


async def _resolve(
    request: Request, found: KeyTask, body: str, message: dict[str, Any] | None
) -> Response:
    """A keyed repeat's answer rebuilt from the task its first attempt started (one that
    died before storing its outcome): the Responses object of the task's answer."""
    data = await read_json_object(request)
    subject = str(message["message"].get("subject", "")) if message else "::task_complete::"
    return _response_object(found.state, data, found.task_id, subject, body)


# The key is taken with the task it starts or continues (`run_message`, before the task
# gets the message); a repeat is answered from that task (409 while it runs, then its
# answer), never by a second task, even after a kill -9 and `idempotency_takeover_after`.
@idempotent(task_resolver(_resolve), deferred=True)
async def _respond(request: Request) -> JSONBody:
    state = get_state(request)
    caller = await authenticate_request(request)
    if caller.role not in ("admin", "user"):
        raise HTTPException(403, "invalid role")
    data = await read_json_object(request)
    _validate(data)
    return await run_response(state, caller, data, current_ticket(request))


async def run_response(
    state: ServerState, caller: Caller, data: dict[str, Any], ticket: Ticket | None
) -> JSONBody:
    """Run the request's task (the caller's own instance) and answer its Responses object."""
    req = build_message_request(data)
    inst = await state.instances.get(caller.role, caller.id, caller.api_key)
    if req.task_id is not None and inst.swarm.get_task_by_id(req.task_id) is None:
        # A task that ended is in the store, not the instance: put it back before
        # deciding it is unknown (its continuation, or the keyed repeat of one, which
        # gets its stored answer from the key's take in `run_message`, not this 404).
        await state.finished.bring_back(inst, req.task_id)
        archived = state.instances.archived_tasks(caller.role, caller.id)
        if inst.swarm.get_task_by_id(req.task_id) is None and req.task_id not in archived:
            # Never start a fresh task under an id the caller believes is a past response.
            raise HTTPException(404, f"previous response '{echo(req.task_id)}' not found")
    if req.resume_from is None and req.task_id is not None:
        req.resume_from = "user_response"
    response, _events = await messaging.run_message(state, caller, req, ticket)
    message = response.get("message", {}) if isinstance(response, dict) else {}
    return _response_object(
        state,
        data,
        message.get("task_id") or req.task_id,
        str(message.get("subject", "")),
        str(message.get("body", "")),
    )


def _response_object(
    state: ServerState, data: dict[str, Any], task_id: Any, subject: str, body: str
) -> JSONBody:
    return JSONBody(
        {
            "id": task_id,
            "object": "response",
            "created_at": int(time.time()),
            "model": f"mail/{state.swarm_name}",
            "status": "completed",
            "output": _output_items(subject, body),
            "instructions": data.get("instructions"),
            "previous_response_id": data.get("previous_response_id"),
            "tools": data["tools"],
            "tool_choice": data.get("tool_choice") or "auto",
            "parallel_tool_calls": bool(data.get("parallel_tool_calls", True)),
            "error": None,
            "incomplete_details": None,
            "metadata": {},
            "temperature": None,
            "top_p": None,
            "usage": None,
        }
    )
