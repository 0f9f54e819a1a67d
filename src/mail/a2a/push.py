"""A2A push notifications on the bridge, through the server's push delivery (``mail.webhooks``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.tasks import PushNotificationConfigStore, PushNotificationSender
from a2a.server.tasks.push_notification_config_store import normalize_push_notification_config
from a2a.server.tasks.push_notification_sender import PushNotificationEvent
from a2a.types.a2a_pb2 import (
    AuthenticationInfo,
    Task,
    TaskArtifactUpdateEvent,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import InvalidParamsError
from a2a.utils.proto_utils import to_stream_response
from google.protobuf.json_format import MessageToDict

from mail.server.instances import instance_kind
from mail.webhooks.service import WebhookService
from mail.webhooks.views import WebhookError

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
