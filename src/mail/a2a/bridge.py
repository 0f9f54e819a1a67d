"""The SDK objects of the inbound bridge, built once per server on first use."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections import OrderedDict
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import Any

from a2a.auth.user import User
from a2a.server.agent_execution.active_task import TERMINAL_TASK_STATES
from a2a.server.context import ServerCallContext
from a2a.server.owner_resolver import resolve_user_scope
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import ServerCallContextBuilder
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.server.routes.rest_routes import create_rest_routes
from a2a.server.tasks import (
    InMemoryTaskStore,
    PushNotificationConfigStore,
    PushNotificationSender,
    TaskStore,
)
from a2a.server.tasks.push_notification_config_store import normalize_push_notification_config
from a2a.server.tasks.push_notification_sender import PushNotificationEvent
from a2a.types import a2a_pb2
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    AuthenticationInfo,
    GetTaskRequest,
    HTTPAuthSecurityScheme,
    Message,
    SecurityRequirement,
    SecurityScheme,
    SendMessageRequest,
    StringList,
    SubscribeToTaskRequest,
    Task,
    TaskArtifactUpdateEvent,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatusUpdateEvent,
)
from a2a.utils.constants import PROTOCOL_VERSION_1_0, TransportProtocol
from a2a.utils.errors import InvalidParamsError
from a2a.utils.proto_utils import to_stream_response
from google.protobuf.json_format import MessageToDict
from starlette.requests import Request
from starlette.routing import Route

from mail.a2a.handler import MAILRequestHandler
from mail.server.instances import instance_kind
from mail.server.swarm_description import describe_swarm
from mail.utils.echo import echo
from mail.webhooks.service import WebhookService
from mail.webhooks.views import WebhookError

A2A_PATH = "/a2a"
BEARER = "mailApiKey"
MODES = ["text/plain", "application/json"]


# A malformed request is the client's mistake (it gets a JSON-RPC error saying so), not a
# server failure: the SDK logs a traceback for it, which is kept out of the server's log.
_CLIENT_MISTAKES = ("Failed to validate base JSON-RPC request", "Failed to parse request params")


# The longest id a caller may choose (``messageId``, ``contextId``, ``taskId``, a push config's
# ``id``): the bridge remembers these (up to ``max_a2a_tasks_per_caller`` messageIds per
# caller, push configs in the store), so each is bounded; a UUID is 36 characters.
MAX_A2A_ID_CHARS = 1024  # docs/a2a.md and docs/security.md, limits


def check_id(name: str, value: str) -> None:
    """InvalidParams for a caller's id longer than ``MAX_A2A_ID_CHARS``."""
    if len(value) > MAX_A2A_ID_CHARS:
        raise InvalidParamsError(
            message=f"{name} is {len(value)} characters; the limit is {MAX_A2A_ID_CHARS}"
        )


# A2A ``SendMessage`` is idempotent by ``messageId``: a message sent again is not run again.
@dataclass
class _Sent:
    """One caller's message: the task it started (once known) and the first call's result."""

    task_id: asyncio.Future[str | None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    result: asyncio.Future[Any] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    fingerprint: bytes = b""  # of the message (`_fingerprint`): a repeat must match it

    def started(self, task_id: str | None) -> None:
        if not self.task_id.done():
            self.task_id.set_result(task_id)

    def ended(self, result: Any) -> None:
        self.started(result.id if isinstance(result, Task) else None)
        if not self.result.done():
            self.result.set_result(_slim(result))

    def failed(self, exc: BaseException) -> None:
        for future in (self.task_id, self.result):
            if not future.done():
                future.set_exception(exc)
                future.exception()  # retrieved: nobody may be waiting


def _as_error(exc: BaseException) -> Exception:
    if isinstance(exc, Exception):
        return exc
    return RuntimeError("the first request with this messageId ended before it started a task")


def _slim(result: Any) -> Any:
    """What a repeat falls back on once the task record is gone: the task's id, context and
    last status, not its history and artifacts (up to ``max_messages`` of these are kept per
    caller, so a whole copy of each task would double what a task costs)."""
    if not isinstance(result, Task):
        return result
    slim = Task(id=result.id, context_id=result.context_id)
    slim.status.CopyFrom(result.status)
    return slim


def _fingerprint(message: Message) -> bytes:
    """What makes two messages with one id the same message: everything but the metadata
    and extensions (which a client may set anew on a retry), serialized deterministically."""
    content = Message()
    content.CopyFrom(message)
    content.ClearField("metadata")
    del content.extensions[:]
    return hashlib.sha256(content.SerializeToString(deterministic=True)).digest()


def _task_id_of(event: Any) -> str | None:
    if isinstance(event, Task):
        return event.id or None
    return getattr(event, "task_id", None) or None


class MessageIdDedupingHandler(DefaultRequestHandler):
    """The SDK's request handler, with sends deduplicated per caller by ``messageId``."""

    def __init__(self, *args: Any, max_messages: int = 1000, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._max_messages = max_messages  # per caller; 0 = no bound
        self._sent: dict[str, OrderedDict[str, _Sent]] = {}

    def _claim(self, params: SendMessageRequest, context: ServerCallContext) -> tuple[_Sent, bool]:
        """(the message's record, whether this call is the first with its id)."""
        message_id = params.message.message_id
        check_id("messageId", message_id)
        check_id("contextId", params.message.context_id)
        check_id("taskId", params.message.task_id)
        if not message_id:
            return _Sent(), True
        owner = resolve_user_scope(context)
        sent = self._sent.setdefault(owner, OrderedDict())
        found = sent.get(message_id)
        fingerprint = _fingerprint(params.message)
        if found is not None:
            if found.fingerprint != fingerprint:
                raise InvalidParamsError(
                    message=f"messageId '{echo(message_id)}' was already used for a different "
                    "message; send each new message with a new messageId (a repeat with the "
                    "same id is only for resending the same message)"
                )
            return found, False
        record = sent[message_id] = _Sent(fingerprint=fingerprint)
        while self._max_messages and len(sent) > self._max_messages:
            sent.popitem(last=False)
        return record, True

    def _forget(self, params: SendMessageRequest, context: ServerCallContext) -> None:
        owner = resolve_user_scope(context)
        self._sent.get(owner, OrderedDict()).pop(params.message.message_id, None)

    async def _current(self, task_id: str, context: ServerCallContext, fallback: Any) -> Any:
        try:
            task = await self.on_get_task(GetTaskRequest(id=task_id), context)
        except Exception:  # noqa: BLE001 - the record was forgotten: the first call's result
            return fallback
        return task if task is not None else fallback

    async def on_message_send(  # type: ignore[override]
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> Any:
        sent, first = self._claim(params, context)
        if not first:
            result = await asyncio.shield(sent.result)
            task_id = sent.task_id.result()
            return await self._current(task_id, context, result) if task_id else result
        try:
            result = await super().on_message_send(params, context)
        except BaseException as exc:
            self._forget(params, context)  # it did not run: a retry may
            sent.failed(_as_error(exc))
            raise
        sent.ended(result)
        return result

    async def on_message_send_stream(  # type: ignore[override]
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Any, None]:
        sent, first = self._claim(params, context)
        if not first:
            async for event in self._follow(sent, context):
                yield event
            return
        last: Any = None
        try:
            async for event in super().on_message_send_stream(params, context):
                sent.started(_task_id_of(event))
                last = event
                yield event
        except BaseException as exc:
            if sent.task_id.done():  # the task runs on (a client that left, say)
                sent.ended(last)
            else:
                self._forget(params, context)  # it did not start: a retry may
                sent.failed(_as_error(exc))
            raise
        sent.ended(last)

    async def _follow(self, sent: _Sent, context: ServerCallContext) -> AsyncGenerator[Any, None]:
        """A streamed repeat: the first message's task, live while it runs."""
        task_id = await asyncio.shield(sent.task_id)
        if task_id is None:  # the first call answered with a message, not a task
            yield await asyncio.shield(sent.result)
            return
        task = await self._current(task_id, context, None)
        if task is None or task.status.state in TERMINAL_TASK_STATES:
            yield task if task is not None else await asyncio.shield(sent.result)
            return
        async for event in self.on_subscribe_to_task(SubscribeToTaskRequest(id=task_id), context):
            yield event


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


def build_agent_card(state: Any) -> AgentCard:
    """The swarm's Agent Card (``GET /.well-known/agent-card.json``), built from its template."""
    info = state.swarm_info()
    described = describe_swarm(state.template, name=info["name"])
    entrypoint = info["entrypoint"]
    tags = [str(k) for k in info.get("keywords") or []] or ["mail"]
    skills = [
        AgentSkill(
            id=f"swarm:{info['name']}",
            name=info["name"],
            description=info["description"] or f"The MAIL swarm '{info['name']}' ({entrypoint})",
            tags=tags,
        )
    ]
    for agent in described["agents"]:
        if agent["enable_entrypoint"] and agent["name"] != entrypoint:
            skills.append(
                AgentSkill(
                    id=f"agent:{agent['name']}",
                    name=agent["name"],
                    description=(
                        f"Entrypoint agent '{agent['name']}' of swarm '{info['name']}' (send a "
                        f'data part {{"entrypoint": "{agent["name"]}"}} with the message)'
                    ),
                    tags=tags,
                )
            )
    base = str(state.config.base_url).rstrip("/")
    return AgentCard(
        name=info["name"],
        description=info["description"] or f"MAIL swarm '{info['name']}'",
        version=info["version"] or "0",
        supported_interfaces=[
            AgentInterface(
                url=base + A2A_PATH, protocol_binding=binding, protocol_version=PROTOCOL_VERSION_1_0
            )
            for binding in (TransportProtocol.JSONRPC.value, TransportProtocol.HTTP_JSON.value)
        ],
        capabilities=AgentCapabilities(
            streaming=True, push_notifications=getattr(state, "webhooks", None) is not None
        ),
        security_schemes={
            BEARER: SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(
                    scheme="bearer", description="A MAIL API key (`mail keys create`)"
                )
            )
        },
        security_requirements=[SecurityRequirement(schemes={BEARER: StringList(list=[])})],
        default_input_modes=MODES,
        default_output_modes=MODES,
        skills=skills,
    )


class BoundedTaskStore(TaskStore):
    """The A2A task records (history, status, artifacts): the SDK's in-memory store, scoped
    per caller (``role:id``) by the SDK's owner resolver and bounded per caller. Each caller
    keeps at most ``[server.settings] max_a2a_tasks_per_caller`` records and
    ``max_a2a_task_bytes_per_caller`` bytes of them (serialized size); past either bound the
    records updated longest ago are forgotten (their ``GetTask`` is then "task not found"; the
    MAIL tasks themselves are untouched). The record being saved is always kept."""

    def __init__(self, max_tasks: int, max_bytes: int) -> None:
        self._inner = InMemoryTaskStore()
        self._max_tasks = max_tasks
        self._max_bytes = max_bytes
        # owner -> task id -> serialized size, least recently saved first.
        self._sizes: dict[str, OrderedDict[str, int]] = {}
        self._bytes: dict[str, int] = {}

    def _over(self, owner: str) -> bool:
        count = len(self._sizes[owner])
        if count <= 1:
            return False
        return (0 < self._max_tasks < count) or (0 < self._max_bytes < self._bytes[owner])

    async def save(self, task: Task, context: ServerCallContext) -> None:
        await self._inner.save(task, context)
        owner = resolve_user_scope(context)
        sizes = self._sizes.setdefault(owner, OrderedDict())
        self._bytes[owner] = self._bytes.get(owner, 0) - sizes.pop(task.id, 0) + task.ByteSize()
        sizes[task.id] = task.ByteSize()
        while self._over(owner):
            oldest = next(iter(sizes))
            await self.delete(oldest, context)

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        return await self._inner.get(task_id, context)

    async def list(
        self, params: a2a_pb2.ListTasksRequest, context: ServerCallContext
    ) -> a2a_pb2.ListTasksResponse:
        return await self._inner.list(params, context)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        await self._inner.delete(task_id, context)
        owner = resolve_user_scope(context)
        sizes = self._sizes.get(owner)
        if sizes is None or task_id not in sizes:
            return
        self._bytes[owner] -= sizes.pop(task_id)
        if not sizes:
            del self._sizes[owner], self._bytes[owner]


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


ServiceGetter = Callable[[], WebhookService]


def _owner(context: ServerCallContext) -> tuple[str, str]:
    caller = context.state.get("mail_caller")
    if caller is None:  # the bridge's routes always authenticate first
        raise InvalidParamsError(message="push notification configs need an authenticated caller")
    return (instance_kind(caller.role), caller.id)


def _config(sub: dict[str, Any]) -> TaskPushNotificationConfig:
    config = TaskPushNotificationConfig(
        id=sub["description"], task_id=sub["task_id"], url=sub["url"], token=sub["push_token"] or ""
    )
    auth = sub.get("push_auth")
    if auth:
        config.authentication.CopyFrom(
            AuthenticationInfo(
                scheme=auth.get("scheme", ""), credentials=auth.get("credentials", "")
            )
        )
    return config


# A2A push notifications on the bridge, through the server's push delivery (``mail.webhooks``).
class PushConfigs(PushNotificationConfigStore):
    def __init__(self, service: ServiceGetter) -> None:
        self._service = service

    async def set_info(
        self,
        task_id: str,
        notification_config: TaskPushNotificationConfig,
        context: ServerCallContext,
    ) -> TaskPushNotificationConfig:
        stored = normalize_push_notification_config(task_id, notification_config)
        check_id("the push config's id", stored.id)  # (a store row per config)
        auth = None
        if stored.HasField("authentication"):
            auth = {
                "scheme": stored.authentication.scheme,
                "credentials": stored.authentication.credentials,
            }
        try:
            await self._service().set_push_config(
                _owner(context), task_id, stored.id, stored.url, stored.token or None, auth
            )
        except WebhookError as exc:
            raise InvalidParamsError(message=exc.detail) from None
        return stored

    async def get_info(
        self, task_id: str, context: ServerCallContext
    ) -> list[TaskPushNotificationConfig]:
        subs = await self._service().push_configs(task_id, _owner(context))
        return [_config(s) for s in subs]

    async def get_info_for_dispatch(self, task_id: str) -> list[TaskPushNotificationConfig]:
        return [_config(s) for s in await self._service().push_configs(task_id)]

    async def delete_info(
        self, task_id: str, context: ServerCallContext, config_id: str | None = None
    ) -> None:
        await self._service().delete_push_config(_owner(context), task_id, config_id)


def _significant(event: PushNotificationEvent) -> str | None:
    """The delivery's event type, or None for an update not worth a push (the ``working``
    update that carries one MAIL event)."""
    if isinstance(event, Task):
        return "a2a.task"
    if isinstance(event, TaskArtifactUpdateEvent):
        return "a2a.artifact"
    if isinstance(event, TaskStatusUpdateEvent):
        state = event.status.state
        if state == TaskState.TASK_STATE_WORKING and "mail_event" in event.metadata:
            return None
        name = TaskState.Name(state).removeprefix("TASK_STATE_").lower()
        return f"a2a.status.{name}"
    return None


class PushSender(PushNotificationSender):
    def __init__(self, service: ServiceGetter) -> None:
        self._service = service

    async def send_notification(self, task_id: str, event: PushNotificationEvent) -> None:
        event_type = _significant(event)
        if event_type is None:
            return
        service = self._service()
        subs = await service.push_configs(task_id)
        if not subs:
            return
        body = json.dumps(MessageToDict(to_stream_response(event)), separators=(",", ":"))
        await service.push(subs, event_type, body, task_id)
