"""`MAILClient`: an asyncio client (aiohttp) for every route of a MAIL server.

Error contract, the same for every method:

- the server answered with a status >= 400 → `MAILClientError` (a RuntimeError) carrying the
  status and the server's `detail` (also a 409 "still working" the last attempt ran out of
  time on, the timeout chained as its cause);
- the request never got an answer (refused connection, DNS, timeout, dropped stream) →
  RuntimeError, with the aiohttp/timeout exception chained as its cause;
- the server answered 2xx but not with JSON → ValueError naming the content type and showing
  the start of the body.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

from mail.a2a.client import A2AClientMethods
from mail.client_config import ClientConfig
from mail.client_http import MAILClientError, MAILHTTPConnection
from mail.client_sse import MAILEventStream, preview

__all__ = ["ClientConfig", "MAILClient", "MAILClientError", "MAILEventStream"]


# What a message to a task that is still running does (docs/api-http.md).
MultitaskStrategy = Literal["reject", "enqueue", "interrupt", "rollback"]


def _drop_none(values: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None}


class MAILClient(MAILHTTPConnection, A2AClientMethods):
    """Async client for a MAIL server; use `async with MAILClient(url, api_key) as client:`."""

    # ----------------------------------------------------------------- service and identity

    async def ping(self) -> dict[str, Any]:
        """GET / — server name, protocol version, swarm info, uptime."""
        return await self._request_json("GET", "/")  # type: ignore[no-any-return]

    async def get_health(self) -> dict[str, Any]:
        """GET /health — `{status, swarm_name, timestamp}`; public."""
        return await self._request_json("GET", "/health")  # type: ignore[no-any-return]

    async def update_health(self, status: str) -> dict[str, Any]:
        """POST /health (admin) — set the status other swarms see."""
        return await self._request_json("POST", "/health", payload={"status": status})  # type: ignore[no-any-return]

    async def get_whoami(self) -> dict[str, Any]:
        """GET /whoami — the caller's `{id, role}` (some servers say `username` for `id`)."""
        return await self._request_json("GET", "/whoami")  # type: ignore[no-any-return]

    async def get_status(self) -> dict[str, Any]:
        """GET /status — swarm readiness and whether the caller's instance is running."""
        return await self._request_json("GET", "/status")  # type: ignore[no-any-return]

    async def login(self, api_key: str) -> dict[str, Any]:
        """Use `api_key` from now on and check it with GET /whoami; remembers role and id.

        On failure the key is forgotten (the previous identity too) and RuntimeError is raised.
        """
        self.api_key = api_key
        try:
            identity = await self._register_user_info()
        except (RuntimeError, ValueError) as exc:
            self.logout()
            raise RuntimeError(f"MAIL client login failed: {exc}") from exc
        return identity

    def logout(self) -> None:
        """Forget the API key and identity (local only: API keys have no server session)."""
        self.api_key = None
        self.user_role = None
        self.user_id = None

    async def _register_user_info(self) -> dict[str, Any]:
        identity = await self.get_whoami()
        if not isinstance(identity, dict):
            raise ValueError(f"GET /whoami returned {type(identity).__name__}, not an object")
        self.user_role = identity.get("role")
        user_id = identity.get("id", identity.get("username"))
        self.user_id = None if user_id is None else str(user_id)
        return identity

    # ----------------------------------------------------------------- messaging

    @staticmethod
    def _message_payload(args: Mapping[str, Any]) -> dict[str, Any]:
        """The body of POST /message from a posting method's parameters (its `locals()`)."""
        payload: dict[str, Any] = {key: args[key] for key in ("subject", "body", "msg_type")}
        optional = ("entrypoint", "task_id", "resume_from", "multitask_strategy")
        payload.update(_drop_none({key: args.get(key) for key in optional}))
        if args.get("kwargs"):
            payload["kwargs"] = args["kwargs"]
        if args.get("attachments"):
            payload["attachments"] = list(args["attachments"])
        if args.get("webhook") is not None:
            payload["webhook"] = dict(args["webhook"])
        return payload

    async def post_message(
        self,
        body: str,
        subject: str = "New Message",
        msg_type: Literal["request", "response", "broadcast", "interrupt"] = "request",
        *,
        entrypoint: str | None = None,
        show_events: bool = False,
        task_id: str | None = None,
        resume_from: Literal["user_response", "breakpoint_tool_call", "action_review"]
        | None = None,
        attachments: list[dict[str, Any]] | None = None,
        webhook: dict[str, Any] | None = None,
        background: bool = False,
        multitask_strategy: MultitaskStrategy | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """POST /message and wait for the task's answer: `{"response": ..., "events": ...}`.

        Extra keyword arguments (e.g. `breakpoint_tool_call_result`, `max_steps`) travel in the
        body's `kwargs` object. `attachments` are files for agents with team file tools, each
        `{"filename", "content_base64" | "content", "description"?}` (see `attachment_from_file`).
        `webhook` (`{"url", "events"?, "secret"?}`) has this task's events POSTed to a URL
        (docs/webhooks.md); the answer's `webhook` names it.

        With `background=True` the answer comes as soon as the task is stored (202):
        `{"task_id", "state", "status_url", "events_url", "webhook"?}`; follow the task with
        `get_task`, `resubscribe_task` or the webhook. `multitask_strategy` says what the
        message does when `task_id` names a task that is still running: "reject" (409, the
        server's usual default), "enqueue", "interrupt" or "rollback".
        """
        payload = self._message_payload(locals())
        if background:
            payload["background"] = True
        payload["show_events"] = show_events
        return await self._request_json("POST", "/message", payload=payload, starts_work=True)  # type: ignore[no-any-return]

    def post_message_stream(
        self,
        body: str,
        subject: str = "New Message",
        msg_type: Literal["request", "response", "broadcast", "interrupt"] = "request",
        *,
        entrypoint: str | None = None,
        task_id: str | None = None,
        resume_from: Literal["user_response", "breakpoint_tool_call", "action_review"]
        | None = None,
        attachments: list[dict[str, Any]] | None = None,
        webhook: dict[str, Any] | None = None,
        multitask_strategy: MultitaskStrategy | None = None,
        **kwargs: Any,
    ) -> MAILEventStream:
        """POST /message with `stream: true`; iterate the result for ServerSentEvent objects.

        Both `stream = await client.post_message_stream(...)` (the request is sent, and HTTP
        errors raised, by the await) and `async for event in client.post_message_stream(...)`
        work. Leaving the loop early closes the connection; the server keeps running the task.
        `attachments`, `webhook` and `multitask_strategy` mean what they mean for
        `post_message`; the stream's `webhook` property names the webhook (`{"id",
        "secret"}`) once the stream is open.
        """
        payload = self._message_payload(locals())
        payload["stream"] = True
        return MAILEventStream(
            lambda: self._open_work(
                "POST", "/message", payload=payload, accept="text/event-stream"
            ),
            "POST /message",
        )

    async def review_actions(
        self,
        task_id: str,
        decisions: list[Mapping[str, Any]],
        *,
        show_events: bool = False,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """Decide the action calls a task is holding for review, and wait for its answer.

        `decisions` is one `{"tool_call_id", "type", "args"?, "message"?}` per held call
        (`type`: accept, edit, ignore or respond). The server answers 400 (raised as
        `MAILClientError`) when a decision does not fit the held calls; the task is unchanged.
        """
        payload = self._message_payload(
            {
                "body": "",
                "subject": "New Message",
                "msg_type": "request",
                "task_id": task_id,
                "resume_from": "action_review",
                "kwargs": {**kwargs, "decisions": [dict(d) for d in decisions]},
            }
        )
        payload["show_events"] = show_events
        return await self._request_json("POST", "/message", payload=payload, starts_work=True)  # type: ignore[no-any-return]

    async def get_pending_reviews(self, task_id: str) -> list[dict[str, Any]]:
        """The calls `task_id` holds for review (empty when nothing waits)."""
        record = await self.get_task(task_id)
        return list(record.get("pending_reviews") or [])

    def resubscribe_task(
        self, task_id: str, last_event_id: str | int | None = None
    ) -> MAILEventStream:
        """GET /task/events — (re)attach to a task's event stream, running or finished.

        Yields every stored event after `last_event_id` (all of them when None), then live
        events until the task ends, then a closing `task_complete` (or `task_error`). After a
        dropped stream, pass the dropped stream's `last_event_id` to continue without a gap
        or a duplicate; an `event: resubscribe` (the server's answer to a reader that fell
        too far behind) carries `last_event_id` in its data for the same purpose.
        """
        params = {"task_id": task_id}
        if last_event_id is not None:
            params["after"] = str(last_event_id)
        return MAILEventStream(
            lambda: self._open("GET", "/task/events", params=params, accept="text/event-stream"),
            "GET /task/events",
        )

    async def get_tasks(self) -> dict[str, Any]:
        """GET /tasks — every task of the caller, keyed by task id."""
        return await self._request_json("GET", "/tasks")  # type: ignore[no-any-return]

    async def get_task(self, task_id: str) -> dict[str, Any]:
        """GET /task — one task record.

        The id goes both in a JSON body (the documented form) and in `?task_id=` (which
        proxies that drop GET bodies still forward).
        """
        return await self._request_json(  # type: ignore[no-any-return]
            "GET", "/task", payload={"task_id": task_id}, params={"task_id": task_id}
        )

    # ----------------------------------------------------------------- team messaging

    @staticmethod
    def attachment_from_file(path: str | os.PathLike[str], description: str = "") -> dict[str, Any]:
        """An `attachments` entry for `post_message` holding the bytes of a local file."""
        file = Path(path)
        entry: dict[str, Any] = {
            "filename": file.name,
            "content_base64": base64.b64encode(file.read_bytes()).decode("ascii"),
        }
        if description:
            entry["description"] = description
        return entry

    async def get_threads(self) -> dict[str, Any]:
        """GET /threads — the caller's team threads (`{"threads": [...]}`)."""
        return await self._request_json("GET", "/threads")  # type: ignore[no-any-return]

    async def get_thread(self, thread_id: str) -> dict[str, Any]:
        """GET /threads/{id} — a thread with its posts and per-agent unread counts."""
        return await self._request_json("GET", f"/threads/{quote(thread_id, safe='')}")  # type: ignore[no-any-return]

    async def get_attachment(self, attachment_id: str) -> bytes:
        """GET /attachments/{id} — the bytes of an attachment of the caller's instance."""
        path = f"/attachments/{quote(attachment_id, safe='')}"
        response = await self._open("GET", path, accept="application/octet-stream")
        return await self._read_body(response, "GET", path)

    # ----------------------------------------------------------------- swarm registry

    async def get_swarms(self) -> dict[str, Any]:
        """GET /swarms — the public swarms the server knows."""
        return await self._request_json("GET", "/swarms")  # type: ignore[no-any-return]

    async def register_swarm(
        self,
        name: str,
        base_url: str,
        *,
        auth_token: str | None = None,
        volatile: bool = True,
        metadata: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """POST /swarms (admin) — add a remote swarm to the server's registry."""
        payload = _drop_none(
            {
                "name": name,
                "base_url": base_url,
                "auth_token": auth_token,
                "volatile": volatile,
                "metadata": metadata,
            }
        )
        return await self._request_json("POST", "/swarms", payload=payload, starts_work=True)  # type: ignore[no-any-return]

    async def dump_swarm(self) -> dict[str, Any]:
        """GET /swarms/dump (admin) — have the server log its swarm template."""
        return await self._request_json("GET", "/swarms/dump")  # type: ignore[no-any-return]

    async def load_swarm_from_json(self, swarm_json: str) -> dict[str, Any]:
        """POST /swarms/load (admin) — replace the template with ONE swarm object (JSON text)."""
        return await self._request_json(  # type: ignore[no-any-return]
            "POST", "/swarms/load", payload={"json": swarm_json}, starts_work=True
        )

    # ----------------------------------------------------------------- interswarm

    async def send_interswarm_message(
        self,
        body: str,
        user_token: str,
        subject: str | None = None,
        targets: list[str] | None = None,
        msg_type: Literal["request", "broadcast"] | None = None,
        task_id: str | None = None,
        routing_info: dict[str, Any] | None = None,
        stream: bool | None = None,
        ignore_stream_pings: bool | None = None,
    ) -> dict[str, Any]:
        """POST /interswarm/message — have the caller's instance message agents of other swarms."""
        if isinstance(targets, str):
            raise TypeError("targets must be a list of 'agent@swarm' strings, not one string")
        payload = _drop_none(
            {
                "body": body,
                "user_token": user_token,
                "subject": subject,
                "targets": targets,
                "msg_type": msg_type,
                "task_id": task_id,
                "routing_info": routing_info,
                "stream": stream,
                "ignore_stream_pings": ignore_stream_pings,
            }
        )
        return await self._request_json(  # type: ignore[no-any-return]
            "POST", "/interswarm/message", payload=payload, starts_work=True
        )

    async def post_interswarm_message(self, message: Mapping[str, Any]) -> dict[str, Any]:
        """Deliver interswarm traffic.

        A `MAILInterswarmMessage` envelope (it has `payload` and `source_swarm`) is what one
        swarm sends another: it goes to POST /interswarm/forward as `{"message": envelope}`
        (agent role). Any other dict is taken to be a POST /interswarm/message body
        (`user_token`, `body`, `targets`, ...) and posted as is.
        """
        if _is_interswarm_envelope(message):
            return await self._request_json(  # type: ignore[no-any-return]
                "POST", "/interswarm/forward", payload={"message": dict(message)}, starts_work=True
            )
        return await self._request_json(  # type: ignore[no-any-return]
            "POST", "/interswarm/message", payload=dict(message), starts_work=True
        )

    async def post_interswarm_response(self, message: Mapping[str, Any]) -> dict[str, Any]:
        """POST /interswarm/back (agent role) — return an envelope to the swarm owning its task."""
        if not _is_interswarm_envelope(message):
            raise ValueError(
                "post_interswarm_response expects a MAILInterswarmMessage envelope "
                "(with message_id, source_swarm, target_swarm, payload, ...)"
            )
        return await self._request_json(  # type: ignore[no-any-return]
            "POST", "/interswarm/back", payload={"message": dict(message)}, starts_work=True
        )

    # ------------------------------------------------- crons and webhooks: the shared calls
    async def _create(self, kind: str, **fields: Any) -> dict[str, Any]:
        """POST /{kind} with the fields given (None: left out)."""
        return await self._request_json(  # type: ignore[no-any-return]
            "POST", f"/{kind}", payload=_drop_none(fields), starts_work=True
        )

    async def _listed(self, kind: str) -> list[dict[str, Any]]:
        """GET /{kind}: the list under the key of that name."""
        return list((await self._request_json("GET", f"/{kind}"))[kind])

    async def _change(self, path: str, changes: dict[str, Any]) -> dict[str, Any]:
        return await self._request_json(  # type: ignore[no-any-return]
            "PATCH", path, payload=changes, starts_work=True
        )

    async def _delete(self, path: str) -> None:
        response = await self._open_work("DELETE", path)
        response.release()

    # ----------------------------------------------------------------- crons
    # docs/crons.md. Changes carry a fresh Idempotency-Key, as the webhook calls below do.

    async def create_cron(
        self,
        schedule: str,
        message: dict[str, Any],
        *,
        timezone: str | None = None,
        webhook: str | dict[str, Any] | None = None,
        description: str | None = None,
        paused: bool | None = None,
    ) -> dict[str, Any]:
        """POST /crons — send `message` (a POST /message body: `body`, `subject`,
        `entrypoint`, ...) on `schedule` (a cron expression, read in `timezone`, UTC by
        default). A `webhook`'s generated secret is in the answer this once."""
        optional = dict(timezone=timezone, webhook=webhook, description=description, paused=paused)
        return await self._create("crons", schedule=schedule, message=dict(message), **optional)

    async def list_crons(self) -> list[dict[str, Any]]:
        """GET /crons — your scheduled tasks."""
        return await self._listed("crons")

    async def get_cron(self, cron_id: str) -> dict[str, Any]:
        """GET /crons/{id}."""
        return await self._request_json("GET", _cron_path(cron_id))  # type: ignore[no-any-return]

    async def update_cron(self, cron_id: str, **changes: Any) -> dict[str, Any]:
        """PATCH /crons/{id} — `schedule`, `timezone`, `message`, `webhook`, `description`,
        `paused` (true pauses, false resumes from the next scheduled time)."""
        return await self._change(_cron_path(cron_id), changes)

    async def delete_cron(self, cron_id: str) -> None:
        """DELETE /crons/{id} — its runs already started go on."""
        await self._delete(_cron_path(cron_id))

    # ----------------------------------------------------------------- webhooks
    # docs/webhooks.md. The calls that change something (create, change, delete, rotate, test,
    # retry a delivery) carry a fresh Idempotency-Key and are retried with it after a
    # transient failure, like `post_message`: a create whose answer was lost must not leave a
    # second webhook with a secret nobody saw.

    async def create_webhook(
        self,
        url: str,
        events: list[str] | None = None,
        *,
        description: str | None = None,
        scope: str | None = None,
        secret: str | None = None,
    ) -> dict[str, Any]:
        """POST /webhooks — subscribe `url` to your tasks' events (default: every event).
        The answer's `secret` (`whsec_...`) is shown this once."""
        optional = dict(description=description, scope=scope, secret=secret)
        return await self._create("webhooks", url=url, events=events or ["*"], **optional)

    async def list_webhooks(self) -> list[dict[str, Any]]:
        """GET /webhooks — your webhooks (never their secrets)."""
        return await self._listed("webhooks")

    async def get_webhook(self, webhook_id: str) -> dict[str, Any]:
        """GET /webhooks/{id}."""
        return await self._request_json("GET", _webhook_path(webhook_id))  # type: ignore[no-any-return]

    async def update_webhook(self, webhook_id: str, **changes: Any) -> dict[str, Any]:
        """PATCH /webhooks/{id} — `url`, `events`, `description`, `active`."""
        return await self._change(_webhook_path(webhook_id), changes)

    async def delete_webhook(self, webhook_id: str) -> None:
        """DELETE /webhooks/{id} — with its delivery log."""
        await self._delete(_webhook_path(webhook_id))

    async def test_webhook(self, webhook_id: str) -> dict[str, Any]:
        """POST /webhooks/{id}/test — queue a `webhook.ping` delivery."""
        return await self._request_json(  # type: ignore[no-any-return]
            "POST", _webhook_path(webhook_id, "/test"), starts_work=True
        )

    async def rotate_webhook_secret(
        self, webhook_id: str, overlap_seconds: float = 86400
    ) -> dict[str, Any]:
        """POST /webhooks/{id}/rotate-secret — a new secret (shown once); the old one keeps
        signing for `overlap_seconds`."""
        return await self._request_json(  # type: ignore[no-any-return]
            "POST",
            _webhook_path(webhook_id, "/rotate-secret"),
            payload={"overlap_seconds": overlap_seconds},
            starts_work=True,
        )

    async def webhook_deliveries(
        self, webhook_id: str, *, status: str | None = None, limit: int = 50
    ) -> list[dict[str, Any]]:
        """GET /webhooks/{id}/deliveries — newest first, each with its attempts."""
        params = {"limit": str(limit)}
        if status:
            params["status"] = status
        found = await self._request_json(
            "GET", _webhook_path(webhook_id, "/deliveries"), params=params
        )
        return list(found["deliveries"])

    async def retry_webhook_delivery(self, webhook_id: str, delivery_id: str) -> dict[str, Any]:
        """POST /webhooks/{id}/deliveries/{delivery_id}/retry — send it again now."""
        path = _webhook_path(webhook_id, f"/deliveries/{quote(delivery_id, safe='')}/retry")
        return await self._request_json("POST", path, starts_work=True)  # type: ignore[no-any-return]

    # ----------------------------------------------------------------- debug

    async def debug_post_responses(
        self,
        input: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        instructions: str | None = None,
        previous_response_id: str | None = None,
        tool_choice: str | dict[str, Any] | None = None,
        parallel_tool_calls: bool | None = None,
        **kwargs: Any,
    ) -> Any:
        """POST /responses (server in debug mode) — returns an `openai...Response`.

        It starts (or continues) a task, so it carries an Idempotency-Key and is retried
        after a transient failure, as `post_message` is (docs/client.md#retries)."""
        payload: dict[str, Any] = {"input": input, "tools": tools}
        payload.update(
            _drop_none(
                {
                    "instructions": instructions,
                    "previous_response_id": previous_response_id,
                    "tool_choice": tool_choice,
                    "parallel_tool_calls": parallel_tool_calls,
                }
            )
        )
        if kwargs:
            payload["kwargs"] = kwargs
        result = await self._request_json("POST", "/responses", payload=payload, starts_work=True)
        if isinstance(result, str):
            # Servers that return `Response.model_dump_json()` send a JSON-encoded string.
            try:
                result = json.loads(result)
            except ValueError as exc:
                raise ValueError(
                    f"POST /responses returned a non-JSON string: {preview(result)}"
                ) from exc
        return _as_openai_response(result)


def _cron_path(cron_id: str) -> str:
    return f"/crons/{quote(cron_id, safe='')}"


def _webhook_path(webhook_id: str, rest: str = "") -> str:
    return f"/webhooks/{quote(webhook_id, safe='')}{rest}"


def _as_openai_response(data: Any) -> Any:
    try:
        from openai.types.responses import Response
    except ImportError:  # openai is optional for the client; hand back the plain dict
        return data
    from pydantic import ValidationError

    try:
        return Response.model_validate(data)
    except ValidationError as exc:
        raise ValueError(f"POST /responses did not return an OpenAI Response: {exc}") from exc


def _is_interswarm_envelope(message: Mapping[str, Any]) -> bool:
    return isinstance(message, Mapping) and "payload" in message and "source_swarm" in message
