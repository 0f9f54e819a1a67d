"""Push delivery in the server: starting it with the task store, and what /webhooks means."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Mapping
from typing import Any, TypeVar

from fastapi import HTTPException

from mail.config import ServerConfig, cluster_enabled
from mail.server.auth import Caller
from mail.server.instances import instance_kind
from mail.webhooks import events as ev
from mail.webhooks.service import WebhookService
from mail.webhooks.views import WebhookError, subscription_view

logger = logging.getLogger("mail.server")

T = TypeVar("T")


async def start_webhooks(config: ServerConfig, store: Any, instances: Any) -> WebhookService | None:
    """The started webhook service of a server (None when [server.webhooks] enabled = false)."""
    cfg = config.webhooks
    if not cfg.enabled:
        return None
    backend = getattr(store, "backend", "memory") if store is not None else "memory"
    hooks = subscription_store(store)
    flush = getattr(store, "flush", None)
    service = WebhookService(
        cfg,
        hooks,
        config.swarm.name,
        flush=flush,
        # One server on its own database may drop every lease of its previous run at start;
        # servers sharing PostgreSQL wait for a dead one's leases to run out instead.
        single_server=backend != "postgres" and not cluster_enabled(config),
    )
    await service.start()
    instances.attach_outbox = service.attach_instance
    logger.info("webhooks: push delivery on (%s)", backend)
    return service


def subscription_store(store: Any) -> Any:
    """A (not yet started) store of subscriptions beside the task store `store`: the same
    SQLite file, the same PostgreSQL database, or memory."""
    backend = getattr(store, "backend", "memory") if store is not None else "memory"
    if backend == "postgres":
        from mail.store import database_url_from_env
        from mail.store.webhooks_sql import PostgresWebhookStore

        url = database_url_from_env()
        assert url is not None
        return PostgresWebhookStore(url)
    from mail.store.sqlite_schema import SqliteDatabase
    from mail.store.webhooks_sql import SqliteWebhookStore

    # The task store's database (its file, or a MemoryTaskStore's: the outbox rows its
    # batches write are the ones fanned out), or with no task store a private in-memory one.
    db = getattr(store, "db", None)
    return SqliteWebhookStore(db) if isinstance(db, SqliteDatabase) else SqliteWebhookStore()


def owner_of(caller: Caller) -> tuple[str, str]:
    return (instance_kind(caller.role), caller.id)


def service_of(state: Any) -> WebhookService:
    service = getattr(state, "webhooks", None)
    if service is None:
        raise HTTPException(404, "webhooks are off on this server ([server.webhooks] enabled)")
    return service  # type: ignore[no-any-return]


async def _call(work: Awaitable[T]) -> T:
    try:
        return await work
    except WebhookError as exc:
        raise HTTPException(exc.status, exc.detail) from None


def event_types() -> dict[str, Any]:
    return {"event_types": list(ev.EVENT_TYPES), "test_event_type": ev.PING}


async def create(
    state: Any,
    caller: Caller,
    body: Mapping[str, Any],
    subscription_id: str | None = None,
    *,
    takeover: bool = False,
) -> dict[str, Any]:
    """``POST /webhooks``. `subscription_id`: the id a keyed create chose with its key; with
    `takeover` (its first attempt died after the take), the subscription that attempt stored
    under it, if it did, is the answer (with its secret), not a second subscription."""
    service, owner = service_of(state), owner_of(caller)
    if takeover and subscription_id is not None:
        earlier = await _own_subscription(service, owner, subscription_id, ("webhook",))
        if earlier is not None:
            return {**subscription_view(earlier), "secret": earlier["secret"]}
    return await _call(service.create(owner, body, subscription_id))


async def _own_subscription(
    service: WebhookService, owner: tuple[str, str], subscription_id: str, kinds: tuple[str, ...]
) -> dict[str, Any] | None:
    """The caller's subscription `subscription_id` as stored (with its secret), or None."""
    sub: dict[str, Any] | None = await _call(service.store.get_subscription(subscription_id))
    if (
        sub is None
        or sub["swarm_name"] != service.swarm_name
        or (sub["owner_role"], sub["owner_id"]) != owner
        or sub["kind"] not in kinds
    ):
        return None
    return sub


async def list_webhooks(state: Any, caller: Caller) -> dict[str, Any]:
    return {"webhooks": await _call(service_of(state).list_for(owner_of(caller)))}


async def get(state: Any, caller: Caller, webhook_id: str) -> dict[str, Any]:
    return await _call(service_of(state).get(owner_of(caller), webhook_id))


async def update(
    state: Any, caller: Caller, webhook_id: str, body: Mapping[str, Any]
) -> dict[str, Any]:
    return await _call(service_of(state).update(owner_of(caller), webhook_id, body))


async def delete(state: Any, caller: Caller, webhook_id: str, *, takeover: bool = False) -> None:
    """``DELETE /webhooks/{id}``. With `takeover` (a keyed removal whose first attempt died
    after the take), a subscription that is gone was removed by that attempt: the answer is
    the one it would have had (204), not a 404."""
    service, owner = service_of(state), owner_of(caller)
    if (
        takeover
        and await _own_subscription(service, owner, webhook_id, ("webhook", "request")) is None
    ):
        return
    await _call(service.delete(owner, webhook_id))


async def rotate(
    state: Any,
    caller: Caller,
    webhook_id: str,
    body: Mapping[str, Any],
    secret: str | None = None,
    *,
    takeover: bool = False,
) -> dict[str, Any]:
    """``POST /webhooks/{id}/rotate-secret``. `secret`: the new secret a keyed rotation chose
    with its key (used unless the body names one); with `takeover` (its first attempt died
    after the take), a subscription signing with it already was rotated by that attempt:
    that is the answer, not a second rotation (which would retire the first one's secret)."""
    service, owner = service_of(state), owner_of(caller)
    new = secret if body.get("secret") is None else body["secret"]
    if takeover and new is not None:
        sub = await _own_subscription(service, owner, webhook_id, ("webhook", "request"))
        if sub is not None and sub["secret"] == new:
            return {**subscription_view(sub), "secret": new}
    return await _call(service.rotate(owner, webhook_id, body, secret))


async def test(state: Any, caller: Caller, webhook_id: str) -> dict[str, Any]:
    return await _call(service_of(state).test(owner_of(caller), webhook_id))


async def deliveries(
    state: Any, caller: Caller, webhook_id: str, query: Mapping[str, str]
) -> tuple[dict[str, Any], str | None]:
    raw_limit = query.get("limit", "50")
    try:
        limit = int(raw_limit)
    except ValueError:
        raise HTTPException(400, "parameter 'limit' must be a whole number") from None
    found, following = await _call(
        service_of(state).deliveries(
            owner_of(caller),
            webhook_id,
            status=query.get("status") or None,
            limit=limit,
            cursor=query.get("cursor") or None,
        )
    )
    return {"deliveries": found}, following


async def retry(state: Any, caller: Caller, webhook_id: str, delivery_id: str) -> dict[str, Any]:
    return await _call(service_of(state).retry(owner_of(caller), webhook_id, delivery_id))


async def request_webhook(
    state: Any, caller: Caller, task_id: str, spec: Any, hook_id: str | None = None
) -> dict[str, Any]:
    """``POST /message``'s ``webhook``: a subscription for that one task (`hook_id`: its id,
    recorded with the message's Idempotency-Key)."""
    service, owner = service_of(state), owner_of(caller)
    return await _call(service.request_webhook(owner, task_id, spec, hook_id))
