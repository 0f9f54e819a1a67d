"""HTTP routes of the A2A bridge, installed by ``mail.server.app_factory`` (``server/app_factory.py``)."""

from __future__ import annotations

import contextlib
import functools
import gc
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import APIRouter, FastAPI, HTTPException, Request
from starlette.responses import Response
from starlette.routing import Route, Router

from mail.a2a.stream import bounded_stream, rest_endings, rpc_endings
from mail.server.auth import caller_admin_or_user
from mail.server.bodies import parse_task_id, read_json_object
from mail.server.errors import error_body
from mail.server.handlers import get_state
from mail.server.idempotency import current_ticket, idempotent
from mail.server.jsonio import JSONBody, loads
from mail.utils.echo import echo

logger = logging.getLogger("mail.a2a")


@contextlib.asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    state = getattr(app.state, "mail", None)
    if state is not None and state.config.settings.a2a_card_signing_key:
        app.state.a2a_card_signer = _card_signer(app, state.config.settings)
    if state is not None and state.router is not None:
        from mail.a2a.peer import A2APeers
        from mail.a2a.peer_updates import UpdateLimits

        settings = state.config.settings
        limits = UpdateLimits(settings.max_a2a_peer_updates, settings.max_a2a_peer_update_chars)
        state.router.a2a_peers = A2APeers(
            functools.partial(_deliver_answer, state), functools.partial(_report, state), limits
        )
    try:
        yield
    finally:
        bridge = getattr(app.state, "a2a_bridge", None)
        if bridge is not None:
            try:
                await bridge.aclose()
            except Exception:  # noqa: BLE001 - shutdown goes on
                logger.warning("closing the A2A bridge failed", exc_info=True)


async def _deliver_answer(state: Any, envelope: dict[str, Any]) -> None:
    """An A2A peer's answer, handed to the MAIL instance whose task asked, as
    ``/interswarm/back`` does for a MAIL peer's (same trust checks: only a peer the task was
    sent to may answer)."""
    from mail.server.interswarm import _instance_for_back

    inst = await _instance_for_back(state, envelope)
    async with state.instances.lease(inst):
        inst.swarm.accept_interswarm_message(envelope, "back")


async def _report(
    state: Any, envelope: dict[str, Any], description: str, extra: dict[str, Any]
) -> None:
    """One update of the peer an envelope went to, as a progress event of the sending task
    (its instance found as for the answer; the runtime checks the task was sent there and
    still runs)."""
    from mail.server.interswarm import _instance_for_back

    inst = await _instance_for_back(state, envelope)
    inst.swarm.receive_interswarm_progress(
        envelope["payload"]["task_id"], envelope["target_swarm"], description, extra
    )


router = APIRouter(lifespan=_lifespan)


def _card_signer(app: FastAPI, settings: Any) -> Any:
    from mail.a2a.signing import SigningKeyError, card_signer
    from mail.server.state import StartupError

    try:
        return card_signer(
            settings.a2a_card_signing_key,
            settings.a2a_card_signing_kid,
            settings.a2a_card_signing_jku,
        )
    except SigningKeyError as exc:
        error = StartupError(f"[server.settings] a2a_card_signing_key: {exc}")
        app.state.startup_error = error  # reported as this one line (server/errors.py)
        raise error from None


def _bridge(app: Any) -> Any:
    bridge = getattr(app.state, "a2a_bridge", None)
    if bridge is None:
        from mail.a2a.bridge import build_bridge

        bridge = build_bridge(app.state.mail, getattr(app.state, "a2a_card_signer", None))
        app.state.a2a_bridge = bridge
    return bridge


async def agent_card(request: Request) -> Response:
    from a2a.server.request_handlers.response_helpers import agent_card_to_dict

    return JSONBody(agent_card_to_dict(_bridge(request.app).card))


# How deep a request may nest. The SDK's protobuf conversion stops at 100 levels of its own,
# two for each level of a data part or metadata (deeper than about 48 fails): the 1.0 methods
# answer that as invalid params, the 0.3 ones as an internal error with a long traceback.
MAX_A2A_JSON_DEPTH = 40


class _Refused(Exception):
    """A request refused before the SDK reads it: its body is not JSON the SDK can hold
    (``parse``), or it is too big in shape (``_shape_refusal``)."""

    def __init__(self, reason: str, *, parse: bool, body: Any = None) -> None:
        super().__init__(reason)
        self.reason, self.parse, self.body = reason, parse, body


def _parsed(raw: bytes) -> Any:
    """A request's JSON body, or ``_Refused``: the server's parser, as POST /message's, which
    refuses a lone surrogate ("\\ud800") the SDK could not hold in a message, and a body that
    is not UTF-8 or nested deeper than the parser's recursion limit (the SDK would answer an
    internal error, with a traceback, for each)."""
    try:
        return loads(raw)
    except RecursionError:
        raise _Refused("the JSON body is nested too deeply", parse=True) from None
    except UnicodeDecodeError:
        raise _Refused("the body is not UTF-8 text", parse=True) from None
    except ValueError as exc:
        if "depth limit" in str(exc):
            raise _Refused("the JSON body is nested too deeply", parse=True) from None
        raise _Refused(f"the body is not JSON ({exc})", parse=True) from None


def _check(method: Any, params: Any, body: Any, settings: Any) -> None:
    """Refuse (``_Refused``) a request the SDK should not read: ``params`` are ``method``'s
    (JSON-RPC's ``params``; on the HTTP+JSON binding the body, or the query of a GET), ``body``
    the whole request. Both bindings go through here."""
    refusal = _shape_refusal(params, body, settings) or _filter_refusal(method, params)
    if refusal is not None:
        raise _Refused(refusal, parse=False, body=body)


def _shape_refusal(params: Any, body: Any, settings: Any) -> str | None:
    """Why a request is too big in shape for the SDK to read (None when it is not): more
    parts in its message than ``max_a2a_message_parts``, more JSON values in all than
    ``max_a2a_json_values``. Counted before the SDK turns the request into protobuf objects,
    which costs per value (a 4 MiB list of zeros took seconds and 80 MB there)."""
    from mail.server.jsonio import excess

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


def _filter_refusal(method: Any, params: Any) -> str | None:
    """Why a ``ListTasks`` ``status`` filter is refused (None when it is a task state). The
    SDK reads a state name it does not know as no filter at all (protobuf drops unknown enum
    values), which would answer every task instead of the ones asked for."""
    if method != "ListTasks" or not isinstance(params, dict) or "status" not in params:
        return None
    from a2a.types.a2a_pb2 import TaskState

    status = params["status"]
    if status is None or isinstance(status, str) and status in TaskState.keys():
        return None
    if isinstance(status, str) and status.isdigit():  # a number as text (a query parameter):
        status = int(status)  # protobuf's JSON reads it as that state
    if isinstance(status, int) and not isinstance(status, bool) and status in TaskState.values():
        return None
    shown = f"'{echo(status)}'" if isinstance(status, str) else echo(repr(status))
    return f"status {shown} is not a task state (one of {', '.join(TaskState.keys())})"


# The methods answered with an event stream (1.0 names and 0.3 ones): each takes one of the
# caller's stream slots ([server.settings] max_event_streams_per_caller), as SSE routes do.
_STREAMING = frozenset(
    {"SendStreamingMessage", "SubscribeToTask", "message/stream", "tasks/resubscribe"}
)


# A request the SDK refuses stays in memory until a full collection: the SDK's tracing wrapper
# keeps the error in a local of a frame its traceback holds, a cycle through every frame's
# locals (the request, its body, the parsed message). Full collections are rare here
# (``tune_gc``): 20 refused 3 MB requests held 240 MB. So after a request of this size the
# youngest generation, where that cycle still is, is collected (at most 20 000 objects).
BIG_REQUEST = 64 * 1024


async def _answer(
    request: Request, call: Callable[[], Awaitable[Response]], endings: tuple[bytes, bytes]
) -> Response:
    """The SDK's answer to ``request`` (``call``); a streaming method's stream holds one of
    the caller's stream slots while it is open (429 when none is free), and is bounded for a
    slow reader (``mail.a2a.stream``), ending with one of ``endings``."""
    big = len(await request.body()) >= BIG_REQUEST  # (read already, kept by the request)
    if request.state.a2a_method not in _STREAMING:
        try:
            return await call()
        finally:
            if big:
                gc.collect(0)  # see BIG_REQUEST
    state = get_state(request)
    caller = request.state.mail_caller
    slot = state.stream_slots.acquire(caller.role, caller.id)  # 429 when full
    try:
        response = await call()
        streamed = bounded_stream(response, endings, state, slot)
    except BaseException:
        slot.release()
        raise
    if streamed is None:  # the SDK answered an error instead of a stream
        slot.release()
        if big:
            gc.collect(0)
        return response
    return streamed


def _rpc_error(request_id: Any, code: int, message: str) -> JSONBody:
    if not isinstance(request_id, str | int) or isinstance(request_id, bool):
        request_id = None
    return JSONBody(
        {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}
    )


async def a2a_jsonrpc(request: Request) -> Response:
    request.state.mail_caller = await caller_admin_or_user(request)
    settings = get_state(request).config.settings
    try:
        body = _parsed(await request.body())
        if isinstance(body, dict):
            _check(body.get("method"), body.get("params"), body, settings)
    except _Refused as refused:
        if refused.parse:  # JSON-RPC 2.0's parse error
            return _rpc_error(None, -32700, f"Parse error: {refused.reason}")
        return _rpc_error(refused.body.get("id"), -32602, f"Invalid params: {refused.reason}")
    request._json = body  # parsed once: Starlette's request.json() gives it to the SDK
    # (The executor skips per-event updates nobody can see on a blocking send.)
    request.state.a2a_method = body.get("method") if isinstance(body, dict) else None
    request_id = body.get("id") if isinstance(body, dict) else None
    dispatcher = _bridge(request.app).dispatcher
    return await _answer(
        request, lambda: dispatcher.handle_requests(request), rpc_endings(request_id, settings)
    )


# The HTTP+JSON binding's paths (the SDK's route table, under /a2a) whose method matters here:
# the executor's (a blocking send), `_answer`'s (a stream) and `_check`'s (a list's filter).
_REST_METHODS = {
    "/tasks": "ListTasks",
    "/message:send": "SendMessage",
    "/message:stream": "SendStreamingMessage",
    "/tasks/{id}:subscribe": "SubscribeToTask",
}


def _rest_route(route: Route) -> Route:
    """One of the SDK's HTTP+JSON routes behind the same doors as ``POST /a2a``: the bearer
    key, the body's checks (refused as that binding's 400), and the stream bound."""
    from a2a.utils.error_handlers import build_rest_error_payload
    from a2a.utils.errors import InvalidParamsError, InvalidRequestError

    endpoint = route.endpoint
    method = _REST_METHODS.get(route.path)

    async def guarded(request: Request) -> Response:
        try:
            request.state.mail_caller = await caller_admin_or_user(request)
            raw = await request.body()  # kept by the request: the SDK reads it again
        except HTTPException as exc:  # a missing key, a body over the limit: this binding's shape
            refusal = error_body(request.url.path, exc.status_code, str(exc.detail))
            return JSONBody(refusal, status_code=exc.status_code, headers=exc.headers)
        settings = get_state(request).config.settings
        try:
            body = _parsed(raw) if raw else None
            params = dict(request.query_params) if body is None else body
            _check(method, params, body, settings)
        except _Refused as refused:
            kind = InvalidRequestError if refused.parse else InvalidParamsError
            return JSONBody(build_rest_error_payload(kind(message=refused.reason)), status_code=400)
        request.state.a2a_method = method
        return await _answer(request, lambda: endpoint(request), rest_endings(settings))

    return Route(route.path, guarded, methods=list(route.methods or ()))


async def _rest_binding(scope: Any, receive: Any, send: Any) -> None:
    """``/a2a/...``: the A2A HTTP+JSON binding, the SDK's routes over the bridge's request
    handler (built with the bridge, on the first request)."""
    app = scope["app"]
    router = getattr(app.state, "a2a_rest", None)
    if router is None:
        routes = [_rest_route(route) for route in _bridge(app).rest_routes]
        router = app.state.a2a_rest = Router(routes)
    await router(scope, receive, send)


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
    app.mount("/a2a", _rest_binding)  # after POST /a2a, which it does not match
