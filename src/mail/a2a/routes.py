"""HTTP routes of the A2A bridge, installed by ``mail.server.app_factory`` (``server/front_doors.py``).

* ``GET /.well-known/agent-card.json`` — the swarm's Agent Card (public, like ``GET /``);
* ``POST /a2a`` — the A2A JSON-RPC binding (bearer API key, as ``/message``; a streaming
  method takes one of the caller's event stream slots, as ``POST /message`` with a stream,
  and its stream is bounded for a slow reader, ``mail.a2a.stream``);
* ``POST /task/cancel`` — cancel one of your MAIL tasks (``{"task_id": ...}``).

The SDK is imported and its objects built on the first A2A request (a server nobody reaches
over A2A never loads it, and its shutdown never waits for it); they are closed at shutdown.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from starlette.responses import Response

from mail.a2a.stream import bounded_stream
from mail.server.auth import caller_admin_or_user
from mail.server.bodies import parse_task_id, read_json_object
from mail.server.handlers import get_state
from mail.server.idempotency import current_ticket, idempotent
from mail.server.jsonio import JSONBody, loads

logger = logging.getLogger("mail.a2a")


@contextlib.asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    state = getattr(app.state, "mail", None)
    if state is not None and state.router is not None:
        from mail.a2a.delivery import deliverer, reporter
        from mail.a2a.peer import A2APeers
        from mail.a2a.peer_updates import UpdateLimits

        settings = state.config.settings
        limits = UpdateLimits(settings.max_a2a_peer_updates, settings.max_a2a_peer_update_chars)
        state.router.a2a_peers = A2APeers(deliverer(state), reporter(state), limits)
    try:
        yield
    finally:
        bridge = getattr(app.state, "a2a_bridge", None)
        if bridge is not None:
            try:
                await bridge.aclose()
            except Exception:  # noqa: BLE001 - shutdown goes on
                logger.warning("closing the A2A bridge failed", exc_info=True)


router = APIRouter(lifespan=_lifespan)


def _bridge(request: Request) -> Any:
    bridge = getattr(request.app.state, "a2a_bridge", None)
    if bridge is None:
        from mail.a2a.bridge import build_bridge

        bridge = build_bridge(get_state(request))
        request.app.state.a2a_bridge = bridge
    return bridge


async def agent_card(request: Request) -> Response:
    from a2a.server.request_handlers.response_helpers import agent_card_to_dict

    return JSONBody(agent_card_to_dict(_bridge(request).card))


def _parse_error(reason: str) -> JSONBody:
    """JSON-RPC 2.0's parse error. A body that is not UTF-8, or nested deeper than the parser's
    recursion limit, is one too (the SDK would answer an internal error, with a traceback in
    the server's log)."""
    error = {"code": -32700, "message": f"Parse error: {reason}"}
    return JSONBody({"jsonrpc": "2.0", "id": None, "error": error})


def _invalid_params(request_id: Any, reason: str) -> JSONBody:
    error = {"code": -32602, "message": f"Invalid params: {reason}"}
    return JSONBody({"jsonrpc": "2.0", "id": request_id, "error": error})


# How deep a request may nest. The SDK's protobuf conversion stops at 100 levels of its own,
# two for each level of a data part or metadata (deeper than about 48 fails): the 1.0 methods
# answer that as invalid params, the 0.3 ones as an internal error with a long traceback.
MAX_A2A_JSON_DEPTH = 40


def _shape_refusal(body: Any, settings: Any) -> str | None:
    """Why a request is too big in shape for the SDK to read (None when it is not): more
    parts in its message than ``max_a2a_message_parts``, more JSON values in all than
    ``max_a2a_json_values``. Counted before the SDK turns the request into protobuf objects,
    which costs per value (a 4 MiB list of zeros took seconds and 80 MB there)."""
    from mail.server.json_bounds import excess

    params = body.get("params")
    message = params.get("message") if isinstance(params, dict) else None
    parts = message.get("parts") if isinstance(message, dict) else None
    limit = settings.max_a2a_message_parts
    if limit and isinstance(parts, list) and len(parts) > limit:
        return (
            f"the message has {len(parts)} parts; the limit is {limit} "
            "([server.settings] max_a2a_message_parts)"
        )
    limit = settings.max_a2a_json_values
    over = excess(body, limit, MAX_A2A_JSON_DEPTH)
    if over == "values":
        return (
            f"the request holds more than {limit} JSON values (array items and object "
            "members, at any depth) ([server.settings] max_a2a_json_values)"
        )
    if over == "depth":
        return f"the request nests arrays and objects more than {MAX_A2A_JSON_DEPTH} levels deep"
    return None


def _filter_refusal(body: Any) -> str | None:
    """Why a ``ListTasks`` ``status`` filter is refused (None when it is a task state). The
    SDK reads a state name it does not know as no filter at all (protobuf drops unknown enum
    values), which would answer every task instead of the ones asked for."""
    params = body.get("params")
    if body.get("method") != "ListTasks" or not isinstance(params, dict) or "status" not in params:
        return None
    from a2a.types.a2a_pb2 import TaskState

    status = params["status"]
    if status is None or isinstance(status, str) and status in TaskState.keys():
        return None
    if isinstance(status, int) and not isinstance(status, bool) and status in TaskState.values():
        return None
    shown = repr(status) if len(repr(status)) <= 60 else repr(status)[:57] + "..."
    return f"status {shown} is not a task state (one of {', '.join(TaskState.keys())})"


# The methods answered with an event stream (1.0 names and 0.3 ones): each takes one of the
# caller's stream slots ([server.settings] max_event_streams_per_caller), as SSE routes do.
_STREAMING = frozenset(
    {"SendStreamingMessage", "SubscribeToTask", "message/stream", "tasks/resubscribe"}
)


async def a2a_jsonrpc(request: Request) -> Response:
    caller = request.state.mail_caller = await caller_admin_or_user(request)
    raw = await request.body()
    try:
        # The server's parser, as POST /message's: it refuses a lone surrogate ("\ud800"),
        # which the SDK could not hold in a message (an internal error, with a traceback).
        body = loads(raw)
    except RecursionError:
        return _parse_error("the JSON body is nested too deeply")
    except UnicodeDecodeError:
        return _parse_error("the body is not UTF-8 text")
    except ValueError as exc:
        if "depth limit" in str(exc):
            return _parse_error("the JSON body is nested too deeply")
        return _parse_error(f"the body is not JSON ({exc})")
    request._json = body  # parsed once: Starlette's request.json() gives it to the SDK
    method = body.get("method") if isinstance(body, dict) else None
    if isinstance(body, dict):
        refusal = _shape_refusal(body, get_state(request).config.settings) or _filter_refusal(body)
        if refusal is not None:
            request_id = body.get("id")
            if not isinstance(request_id, str | int) or isinstance(request_id, bool):
                request_id = None
            return _invalid_params(request_id, refusal)
    request.state.a2a_method = method  # the executor skips per-event updates nobody can see
    if method not in _STREAMING:
        return await _bridge(request).dispatcher.handle_requests(request)  # type: ignore[no-any-return]
    state = get_state(request)
    slot = state.stream_slots.acquire(caller.role, caller.id)  # 429 when full
    try:
        response: Response = await _bridge(request).dispatcher.handle_requests(request)
        streamed = bounded_stream(response, body.get("id"), state, slot)
    except BaseException:
        slot.release()
        raise
    if streamed is None:  # the SDK answered an error instead of a stream
        slot.release()
        return response
    return streamed


@idempotent()  # Idempotency-Key (server/idempotency.py)
async def cancel_task(request: Request) -> Response:
    caller = await caller_admin_or_user(request)
    task_id = parse_task_id(await read_json_object(request), None)
    from mail.a2a.cancel import cancel_caller_task

    ticket = current_ticket(request)  # a retry after its first attempt's server died: `retried`
    retried = ticket is not None and ticket.takeover
    return JSONBody(await cancel_caller_task(get_state(request), caller, task_id, retried=retried))


router.add_api_route("/.well-known/agent-card.json", agent_card, methods=["GET"])
router.add_route("/a2a", a2a_jsonrpc, methods=["POST"])
router.add_route("/task/cancel", cancel_task, methods=["POST"])


def install(app: FastAPI, config: object) -> None:
    """Add the bridge's routes (and its lifespan) to ``app``."""
    app.include_router(router)
