"""What the /interswarm routes mean, independent of HTTP parsing."""

from __future__ import annotations

import logging
import uuid
from typing import Any

from fastapi import HTTPException, Request
from starlette.responses import Response

from mail.core.message import (
    create_address,
    create_agent_address,
    make_broadcast,
    make_message,
    make_request,
    new_task_id,
    parse_agent_address,
    parse_task_contributor,
)
from mail.server import parked_answers
from mail.server.auth import Caller
from mail.server.bodies import positive_seconds, read_json_object
from mail.server.errors import BadRequest, type_name
from mail.server.idempotency import Ticket
from mail.server.instances import Instance, instance_kind
from mail.server.jsonio import JSONBody, excess
from mail.server.message_replay import KeyTask, shown_events, task_resolver
from mail.server.messaging import admit_incoming, check_subject
from mail.server.state import ServerState
from mail.utils.echo import echo

logger = logging.getLogger("mail.server")


async def connect_instance(state: ServerState, swarm: Any) -> None:
    """Give a freshly created instance the server's registry and router."""
    if not getattr(swarm, "enable_interswarm", False):
        return
    router = getattr(state, "router", None)
    if router is None or state.registry is None:
        return
    swarm.swarm_registry = state.registry
    swarm.runtime.swarm_registry = state.registry
    await swarm.start_interswarm(router)


def validate_envelope(data: dict[str, Any], settings: Any = None) -> dict[str, Any]:
    """The envelope of a POST /interswarm/forward or /back body, or 400. Its shape is bounded
    first (below) when ``settings`` are given."""
    from mail.schemas import SchemaValidationError, validate_interswarm

    if settings is not None:
        check_envelope(data, settings)
    envelope = data.get("message")
    if envelope is None:
        raise BadRequest("parameter 'message' is required")
    if not isinstance(envelope, dict):
        raise BadRequest(f"parameter 'message' must be an object, got {type(envelope).__name__}")
    try:
        validate_interswarm(envelope)
    except SchemaValidationError as exc:
        raise BadRequest(f"invalid interswarm message: {exc}") from exc
    return envelope


def _runner(state: ServerState, caller: Caller) -> str:
    return f"swarm:{caller.id}@{state.swarm_name}"


def _local_contributor(state: ServerState, envelope: dict[str, Any]) -> tuple[str, str, str]:
    """``(role, id, contributor)`` of the task's first contributor of this swarm, or 404."""
    for contributor in [envelope["task_owner"], *envelope["task_contributors"]]:
        try:
            role, ident, swarm = parse_task_contributor(contributor)
        except ValueError:
            continue
        if swarm != state.swarm_name:
            continue
        if role not in ("admin", "user", "swarm"):
            raise BadRequest(f"invalid role: {role}")
        return role, ident, contributor
    task_id = envelope["payload"]["task_id"]
    raise HTTPException(404, f"no mail instance found for task with id {echo(task_id)}")


async def _instance_for_back(state: ServerState, envelope: dict[str, Any]) -> Instance:
    """The loaded instance of the task's first local contributor, or 404."""
    role, ident, contributor = _local_contributor(state, envelope)
    inst = await state.instances.loaded(role, ident)
    if inst is None:
        raise HTTPException(404, f"no mail instance found for contributor: {echo(contributor)}")
    return inst


async def _instance_or_kept(
    state: ServerState, envelope: dict[str, Any], direction: str
) -> tuple[Instance | None, str | None]:
    """``(instance, None)``: `_instance_for_back`'s. When that instance is not loaded (after a
    restart, until its caller's next request), the envelope is kept in the store for it
    (`mail.server.parked_answers`): ``(None, task id)``, or ``(instance, task id)`` when it
    was loaded meanwhile (its caller came back while the envelope was being kept: handed to
    it here too, which it takes once, as an instance drops a message it already holds)."""
    role, ident, contributor = _local_contributor(state, envelope)
    inst = await state.instances.loaded(role, ident)
    if inst is not None:
        return inst, None
    key = state.finished.key(instance_kind(role), ident)
    kept = await parked_answers.park(state, key, contributor, envelope, direction)
    return await state.instances.loaded(role, ident), kept


def _check_caller(state: ServerState, caller: Caller, envelope: dict[str, Any]) -> None:
    from mail.net.trust import TrustError, check_caller

    source = envelope["source_swarm"]
    lookup = getattr(state.registry, "expected_caller_id", None)
    expected = lookup(source) if lookup is not None else None
    try:
        check_caller(
            local_swarm=state.swarm_name,
            source_swarm=source,
            caller_id=caller.id,
            bound_swarm=caller.swarm,
            expected_caller_id=expected,
        )
    except TrustError as exc:
        logger.warning("refused interswarm envelope from caller %s: %s", caller.id, exc)
        raise HTTPException(exc.status, str(exc)) from exc


def refuse_if_interswarm_off(state: ServerState) -> None:
    """409 when the hosted swarm does not enable interswarm: configuration, not an outage,
    so no 503 (which tells callers, and peers' routers, to try again)."""
    if getattr(state.template, "enable_interswarm", False):
        return
    raise HTTPException(
        409,
        f"interswarm is off for swarm '{state.swarm_name}': set \"enable_interswarm\": true "
        "on the swarm in its swarms.json (and on the agents that write to other swarms), "
        "then restart the server; see docs/interswarm.md",
    )


async def receive(
    state: ServerState, caller: Caller, envelope: dict[str, Any], direction: str
) -> dict[str, Any]:
    refuse_if_interswarm_off(state)

    if envelope["target_swarm"] != state.swarm_name:
        raise BadRequest(
            f"received interswarm message for wrong swarm: '{envelope['target_swarm']}'"
        )
    _check_caller(state, caller, envelope)
    owner_swarm = envelope["task_owner"].rpartition("@")[2]
    kept, admitted = None, None
    if direction == "forward" and owner_swarm != state.swarm_name:
        inst = await state.instances.get(caller.role, caller.id, caller.api_key)
        # The peer's task here is the caller's: the per-caller bounds of a new task.
        payload = envelope["payload"]
        admitted = await admit_incoming(state, inst, payload["task_id"], len(str(payload["body"])))
    else:
        # /back, or a task we own coming back through /forward: the owner's instance (in
        # cluster mode the front end sends such envelopes to that instance's host).
        loaded, kept = await _instance_or_kept(state, envelope, direction)
        if loaded is None:  # kept for the owner's instance, which is not loaded
            return _delivered(state, caller, kept)
        inst = loaded
        # A task that left memory (it ended, or a restart stopped it while it waited for
        # this answer) is in the store: the answer continues it, as a message naming it
        # does (`bring_back`), instead of a 404 that loses the peer's answer.
        await state.finished.bring_back(inst, envelope["payload"]["task_id"])
    try:
        if not await inst.swarm.is_interswarm_running():
            raise HTTPException(503, "interswarm is not enabled for this swarm")
        async with state.instances.lease(inst):
            task_id = _accept(inst, envelope, direction)
            if admitted is not None:  # in the instance: its own state counts from here
                admitted.release()
            # Acknowledged means stored: the peer's router takes this answer as the
            # delivery done, so the task and the message are committed before it leaves.
            await inst.swarm.flush_before_answer()
    finally:
        if admitted is not None:
            admitted.release()
    if kept is not None:  # handed over here: its kept copy is not needed any more
        parked_answers.forget(inst.swarm, kept)
    return _delivered(state, caller, task_id)


def _delivered(state: ServerState, caller: Caller, task_id: Any) -> dict[str, Any]:
    return {
        "swarm": state.swarm_name,
        "task_id": task_id,
        "status": "success",
        "local_runner": _runner(state, caller),
    }


def _accept(inst: Instance, envelope: dict[str, Any], direction: str) -> Any:
    """The envelope into the instance (`accept_interswarm_message`), its task id."""
    from mail.net.bridge import InterswarmReceiveError

    try:
        return inst.swarm.accept_interswarm_message(envelope, direction)
    except InterswarmReceiveError as exc:
        raise HTTPException(exc.status, str(exc)) from exc
    except HTTPException:
        raise
    except Exception as exc:  # noqa: BLE001 - reported as the documented 500
        logger.exception("interswarm %s failed", direction)
        raise HTTPException(
            500, f"server failed to receive interswarm {direction} message: {exc}"
        ) from exc


def _interswarm_user_message(
    inst: Instance, caller: Caller, data: dict[str, Any]
) -> tuple[Any, float]:
    targets = data.get("targets")
    body = data.get("body")
    if isinstance(targets, str):
        targets = [t.strip() for t in targets.split(",") if t.strip()]
    if not targets or not isinstance(targets, list) or body in (None, ""):
        raise BadRequest("'targets' and 'body' are required")
    if not all(isinstance(t, str) and t for t in targets):
        raise BadRequest("parameter 'targets' must be a list of agent@swarm strings")
    msg_type = data.get("msg_type") or "request"
    if msg_type not in ("request", "broadcast"):
        raise BadRequest(f"msg_type '{msg_type}' is not supported for interswarm send")
    if msg_type == "request" and len(targets) != 1:
        raise BadRequest("'request' messages require exactly one target")
    if not isinstance(body, str):
        raise BadRequest(f"parameter 'body' must be a string, got {type_name(body)}")
    subject = data.get("subject")
    if subject is None or subject == "":
        subject = "Interswarm Message"
    elif not isinstance(subject, str):
        raise BadRequest(f"parameter 'subject' must be a string, got {type_name(subject)}")
    task_id = data.get("task_id") or new_task_id()
    if not isinstance(task_id, str):
        raise BadRequest("parameter 'task_id' must be a string")
    if not _is_uuid(task_id):  # task ids travel in MAIL messages, where they are UUIDs
        raise BadRequest(f"parameter 'task_id' must be a UUID, got '{task_id[:60]}'")
    raw_routing = data.get("routing_info")
    if raw_routing is not None and not isinstance(raw_routing, dict):
        raise BadRequest(
            f"parameter 'routing_info' must be an object, got {type_name(raw_routing)}"
        )
    routing = dict(raw_routing or {})
    if data.get("stream"):
        routing["stream"] = True
    if data.get("ignore_stream_pings"):
        routing["ignore_stream_pings"] = True
    swarm_name = inst.swarm.name
    sender = create_address(caller.id, "admin" if caller.role == "admin" else "user")
    qualified = []
    for target in targets:
        name, swarm = parse_agent_address(target)
        qualified.append(f"{name}@{swarm}" if swarm else name)
    if msg_type == "request":
        _, target_swarm = parse_agent_address(qualified[0])
        payload: Any = make_request(
            task_id,
            sender,
            create_agent_address(qualified[0]),
            subject,
            body,
            sender_swarm=swarm_name,
            recipient_swarm=target_swarm or swarm_name,
            routing_info=routing,
        )
    else:
        swarms = sorted({s for _, s in map(parse_agent_address, qualified) if s})
        payload = make_broadcast(
            task_id,
            sender,
            [create_agent_address(t) for t in qualified],
            subject,
            body,
            sender_swarm=swarm_name,
            recipient_swarms=swarms or None,
            routing_info=routing,
        )
    return make_message(payload, msg_type), _timeout(data.get("timeout"))


def _timeout(value: Any) -> float:
    return 3600.0 if value is None else positive_seconds(value, "timeout")


async def post_user_message(
    state: ServerState, caller: Caller, data: dict[str, Any], ticket: Ticket | None = None
) -> dict[str, Any]:
    """Send a user/admin message to agents of other swarms and wait for the task's answer."""
    check_user_message(data, state.config.settings)
    refuse_if_interswarm_off(state)
    user_token = data.get("user_token") or caller.api_key
    if not user_token:
        raise HTTPException(401, "user token is required")
    inst = await state.instances.get(caller.role, caller.id, caller.api_key)
    given = data.get("task_id")
    if ticket is not None and ticket.takeover and ticket.subject and not given:
        data = {**data, "task_id": ticket.subject}  # one task, not two
    message, timeout = _interswarm_user_message(inst, caller, data)
    check_subject(message["message"]["subject"], state.config.settings.max_subject_chars)
    if not await inst.swarm.is_interswarm_running():
        raise HTTPException(503, "interswarm router not available")
    # A task of the caller's like any other: the same bounds as POST /message.
    task_id = message["message"]["task_id"]
    if ticket is not None:
        await ticket.take_task(state, inst, task_id, message, new=not data.get("task_id"))
    # Refused: nothing ran, the key is free again.
    admitted = await admit_incoming(state, inst, task_id, len(message["message"]["body"]), ticket)
    show = bool(data.get("stream") or data.get("show_events"))
    try:
        async with state.instances.lease(inst):
            response, events = await inst.swarm.submit_message_task_events(
                message, timeout=timeout, show_events=show
            )
    finally:
        admitted.release()
    return _user_answer(response, [e.to_record(parsed=True) for e in events] if show else None)


def _user_answer(response: Any, events: list[dict[str, Any]] | None) -> dict[str, Any]:
    """``POST /interswarm/message``'s answer: the task's answer (400 when the remote
    refused the message), with the events when asked for."""
    refusal = _peer_refusal(response)
    if refusal is not None:
        raise BadRequest(refusal)
    return {"response": response, "events": events}


async def _rebuilt_answer(
    request: Request, found: KeyTask, body: str, message: dict[str, Any] | None
) -> Response:
    """A keyed repeat's answer rebuilt from the task its first attempt started (one that
    died before storing its outcome)."""
    data = await read_json_object(request, required=False)
    if message is None:  # (a later message's answer is the task's now: this one's text)
        message = {"message": {"task_id": found.task_id, "subject": "::task_complete::"}}
        message["message"]["body"] = body
    show = bool(data.get("stream") or data.get("show_events"))
    events = shown_events(found.events[found.after :]) if show else None
    return JSONBody(_user_answer(message, events))


# What a repeat of a keyed ``POST /interswarm/message`` gets whose first request is under
# way or died: 409 while its task runs, then its answer; run again (the same task id) only
# when the task never got the message.
resolve_user_message = task_resolver(_rebuilt_answer)


def _peer_refusal(response: Any) -> str | None:
    """The text of an answer saying the remote refused the caller's message with a 400."""
    payload = response.get("message") if isinstance(response, dict) else None
    if not isinstance(payload, dict) or payload.get("subject") != "::interswarm_error::":
        return None
    routing = payload.get("routing_info")
    if isinstance(routing, dict) and routing.get("peer_status") == 400:
        return str(payload.get("body") or "")
    return None


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


# Envelope and payload fields holding one address or swarm name, and those holding a list.
_ENVELOPE_ADDRESSES = ("source_swarm", "target_swarm", "task_owner")
_ENVELOPE_LISTS = ("task_contributors",)
_PAYLOAD_ADDRESSES = ("sender", "recipient", "sender_swarm", "recipient_swarm")
_PAYLOAD_LISTS = ("recipients", "recipient_swarms")


def check_body_shape(data: Any, settings: Any) -> None:
    """400 when the whole body holds too many JSON values or nests too deep."""
    values = settings.max_interswarm_json_values
    depth = settings.max_interswarm_json_depth
    found = excess(data, values, depth)
    if found == "values":
        raise BadRequest(
            f"the body holds more than {values} JSON values (array items and object members, "
            "at any depth) ([server.settings] max_interswarm_json_values)"
        )
    if found == "depth":
        raise BadRequest(
            f"the body nests arrays and objects more than {depth} deep "
            "([server.settings] max_interswarm_json_depth)"
        )


def check_address(field: str, value: Any, settings: Any) -> None:
    """``value``: a string, or a MAIL address object (its ``address``)."""
    if isinstance(value, dict):
        field, value = f"{field}.address", value.get("address")
    limit = settings.max_address_chars
    if limit and isinstance(value, str) and len(value) > limit:
        raise BadRequest(
            f"parameter '{field}' is {len(value)} characters; the limit is {limit} "
            "([server.settings] max_address_chars)"
        )


def check_address_list(field: str, value: Any, settings: Any) -> None:
    if not isinstance(value, list):
        return
    limit = settings.max_interswarm_addresses
    if limit and len(value) > limit:
        raise BadRequest(
            f"parameter '{field}' has {len(value)} entries; the limit is {limit} "
            "([server.settings] max_interswarm_addresses)"
        )
    for i, item in enumerate(value):
        check_address(f"{field}[{i}]", item, settings)


def check_envelope(data: dict[str, Any], settings: Any) -> None:
    """The bounds of a POST /interswarm/forward or /back body (``{"message": envelope}``):
    the address fields first (their errors say more), then the shape of the whole body."""
    envelope = data.get("message")
    if isinstance(envelope, dict):
        _check_envelope_addresses(envelope, settings)
    check_body_shape(data, settings)


def _check_envelope_addresses(envelope: dict[str, Any], settings: Any) -> None:
    for name in _ENVELOPE_ADDRESSES:
        check_address(f"message.{name}", envelope.get(name), settings)
    for name in _ENVELOPE_LISTS:
        check_address_list(f"message.{name}", envelope.get(name), settings)
    payload = envelope.get("payload")
    if not isinstance(payload, dict):
        return
    for name in _PAYLOAD_ADDRESSES:
        check_address(f"message.payload.{name}", payload.get(name), settings)
    for name in _PAYLOAD_LISTS:
        check_address_list(f"message.payload.{name}", payload.get(name), settings)


def check_user_message(data: dict[str, Any], settings: Any) -> None:
    """The bounds of a caller's POST /interswarm/message body."""
    targets = data.get("targets")
    limit = settings.max_interswarm_addresses
    if isinstance(targets, str):
        # Counted before it is split: a 4 MiB "a,a,a,..." would be two million strings.
        if limit and targets.count(",") >= limit:
            count = targets.count(",") + 1
            raise BadRequest(
                f"parameter 'targets' has {count} entries; the limit is {limit} "
                "([server.settings] max_interswarm_addresses)"
            )
        targets = [t.strip() for t in targets.split(",") if t.strip()]
    check_address_list("targets", targets, settings)
    check_body_shape(data, settings)
