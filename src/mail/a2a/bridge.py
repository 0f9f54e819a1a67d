"""The SDK objects of the inbound bridge, built once per server on first use.

The SDK's request handler (tasks, streaming, get, cancel, resubscribe), with MAIL's rules on
top (``mail.a2a.handler``), runs our ``MAILAgentExecutor``; the SDK's two HTTP bindings
(its JSON-RPC dispatcher, its HTTP+JSON routes) are adapters over that one handler; its in-memory task store is scoped
per MAIL caller (``role:id``), so one caller's A2A tasks are invisible to another, like their
MAIL tasks are, and bounded per caller (``mail.a2a.store``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from a2a.auth.user import User
from a2a.server.context import ServerCallContext
from a2a.server.routes import ServerCallContextBuilder
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.server.routes.rest_routes import create_rest_routes
from a2a.types.a2a_pb2 import AgentCard
from starlette.requests import Request
from starlette.routing import Route

from mail.a2a.card import build_agent_card
from mail.a2a.dedupe import MessageIdDedupingHandler
from mail.a2a.handler import MAILRequestHandler
from mail.a2a.store import BoundedTaskStore

# A malformed request is the client's mistake (it gets a JSON-RPC error saying so), not a
# server failure: the SDK logs a traceback for it, which is kept out of the server's log.
_CLIENT_MISTAKES = ("Failed to validate base JSON-RPC request", "Failed to parse request params")


class _ClientMistakeFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg in _CLIENT_MISTAKES:
            record.exc_info = None
            record.exc_text = None
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


logging.getLogger("a2a.server.routes.jsonrpc_dispatcher").addFilter(_ClientMistakeFilter())


class MAILCallerUser(User):
    def __init__(self, caller: Any) -> None:
        self.caller = caller

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def user_name(self) -> str:
        return f"{self.caller.role}:{self.caller.id}"


class CallerContextBuilder(ServerCallContextBuilder):
    """The call context of a request the route has authenticated (``request.state``)."""

    def build(self, request: Request) -> ServerCallContext:
        caller = request.state.mail_caller
        state = {
            "mail_caller": caller,
            "headers": dict(request.headers),
            "a2a_method": getattr(request.state, "a2a_method", None),
        }
        return ServerCallContext(user=MAILCallerUser(caller), state=state)


@dataclass
class InboundBridge:
    card: AgentCard
    handler: MAILRequestHandler
    dispatcher: JsonRpcDispatcher
    rest_routes: list[Route]  # the HTTP+JSON binding's, relative to /a2a

    async def aclose(self) -> None:
        await self.handler.aclose()


class _Handler(MessageIdDedupingHandler, MAILRequestHandler):
    """A repeated messageId is answered first (with its task), then the checks of a new
    message (role, one message at a time per task) and the SDK's handling."""


def build_bridge(state: Any, sign: Callable[[AgentCard], AgentCard] | None) -> InboundBridge:
    """The bridge of ``state``'s server; ``sign`` adds the card's signature (when a key is set)."""
    card = build_agent_card(state)
    if sign is not None:
        card = sign(card)
    settings = state.config.settings
    push: dict[str, Any] = {}
    if state.webhooks is not None:  # push notifications ride the server's push delivery
        from mail.a2a.push import PushConfigs, PushSender

        push = {
            "push_config_store": PushConfigs(lambda: state.webhooks),
            "push_sender": PushSender(lambda: state.webhooks),
        }
    handler = _Handler(
        lambda: state,
        BoundedTaskStore(settings.max_a2a_tasks_per_caller, settings.max_a2a_task_bytes_per_caller),
        card,
        max_messages=settings.max_a2a_tasks_per_caller,
        interrupted_task_timeout=settings.a2a_interrupted_task_timeout,
        **push,
    )
    # v0.3 compatibility: clients (and curl) that send no A2A-Version header speak 0.3.
    context = CallerContextBuilder()
    dispatcher = JsonRpcDispatcher(
        request_handler=handler, context_builder=context, enable_v0_3_compat=True
    )
    # The 1.0 paths only (`A2A-Version: 1.0`); not the SDK's `/{tenant}/...` copies of them.
    rest = [r for r in create_rest_routes(handler, context) if isinstance(r, Route)]
    return InboundBridge(card=card, handler=handler, dispatcher=dispatcher, rest_routes=rest)
