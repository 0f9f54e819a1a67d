"""Subscriptions as callers see them: create, list, get, update, delete, rotate, test,
deliveries and retries; per-request webhooks of ``POST /message``; A2A push configs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from mail.store.base import InstanceKey
from mail.store.webhooks import (
    FAN_OUT_KINDS,
    Bound,
    OverQuota,
    Record,
    new_delivery,
    new_id,
)
from mail.store.webhooks_sql import WebhookStore
from mail.utils.echo import echo
from mail.webhook_settings import WebhooksConfig
from mail.webhooks import events as ev
from mail.webhooks import signing
from mail.webhooks.engine import DeliveryEngine, Flush
from mail.webhooks.interest import SubscriptionInterest
from mail.webhooks.outbox import InstanceOutbox, OutboxObserver
from mail.webhooks.transport import UrlRefused, WebhookTransport, destination_of
from mail.webhooks.views import (
    WebhookError,
    check_description,
    check_fields,
    delivery_cursor,
    delivery_view,
    parse_delivery_cursor,
    subscription_view,
)

logger = logging.getLogger("mail.webhooks")

Owner = tuple[str, str]

SUBSCRIPTION_FIELDS: tuple[str, ...] = ("url", "events", "description", "scope", "secret")
UPDATE_FIELDS: tuple[str, ...] = ("url", "events", "description", "active")
REQUEST_WEBHOOK_FIELDS: tuple[str, ...] = ("url", "events", "secret")
DELIVERY_STATUSES: tuple[str, ...] = ("pending", "delivered", "failed")
MAX_PAGE = 100


def new_subscription(
    swarm_name: str, owner: Owner, kind: str, url: str, events: list[str], **fields: Any
) -> Record:
    """A stored subscription of `owner` (a webhook, a request's, an A2A push config, a cron),
    `fields` replacing the defaults."""
    now = time.time()
    record: Record = {
        "subscription_id": new_id("push" if kind == "a2a" else "wh"),
        "swarm_name": swarm_name,
        "owner_role": owner[0],
        "owner_id": owner[1],
        "kind": kind,
        "scope": "own",
        "task_id": None,
        "url": url,
        "destination": destination_of(url),
        "events": events,
        "description": "",
        "active": True,
        "disabled_reason": None,
        "secret": None,
        "previous_secret": None,
        "previous_secret_until": None,
        "push_token": None,
        "push_auth": None,
        "failing_since": None,
        "created_at": now,
        "updated_at": now,
        "expires_at": None,
    }
    record.update(fields)
    return record


MAX_HEADER_VALUE_CHARS = 8192  # a push config value sent as a header (a usual header bound)


def _check_header_values(*fields: tuple[str, Any]) -> None:
    """A 400 for a push config value that goes out in a delivery's headers (the token, the
    authentication) longer than a header takes, or holding a control character (CR, LF,
    ...): no delivery could send it."""
    for name, value in fields:
        if isinstance(value, str) and len(value) > MAX_HEADER_VALUE_CHARS:
            raise WebhookError(
                400,
                f"parameter '{name}' is {len(value)} characters; the limit is "
                f"{MAX_HEADER_VALUE_CHARS} (it is sent as a header)",
            )
        if isinstance(value, str) and any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
            raise WebhookError(
                400,
                f"parameter '{name}' contains control characters (such as CR or LF), which an "
                "HTTP header cannot carry",
            )


class WebhookService:
    def __init__(
        self,
        cfg: WebhooksConfig,
        store: WebhookStore,
        swarm_name: str,
        *,
        flush: Flush | None = None,
        single_server: bool = True,
        transport: WebhookTransport | None = None,
    ) -> None:
        self.cfg = cfg
        self.store = store
        self.swarm_name = swarm_name
        self.transport = transport or WebhookTransport(cfg)
        self.engine = DeliveryEngine(
            store, cfg, swarm_name, self.transport, flush=flush, single_server=single_server
        )
        self._warming: asyncio.Future[None] | None = None
        # Changes to one owner's subscriptions run one at a time (a create's quota count;
        # the mirror below sees them in the store's order).
        self._owner_locks = tuple(asyncio.Lock() for _ in range(64))
        # What this server's subscriptions could want, so that other tasks write no outbox
        # row. Only a server alone on its database sees every change (None: rows always).
        self.interest = SubscriptionInterest(swarm_name) if single_server else None
        self.engine.interest = self.interest

    def _lock(self, owner: Owner) -> asyncio.Lock:
        return self._owner_locks[hash(owner) % len(self._owner_locks)]

    async def start(self) -> None:
        await self.store.start()
        if self.interest is not None:  # before any instance can record an event
            self.interest.load(
                await self.store.list_subscriptions(self.swarm_name, kinds=list(FAN_OUT_KINDS))
            )
        # The guard and the TLS context (the CA bundle) load once, off the event loop and
        # without delaying the start, before an attempt needs them.
        self._warming = asyncio.ensure_future(asyncio.to_thread(self.transport.warm))
        await self.engine.start()

    def close_deadline(self) -> float:
        return self.engine.close_deadline()

    async def close(self, deadline: float | None = None) -> None:
        if self._warming is not None:
            with contextlib.suppress(Exception):
                await self._warming
        await self.engine.close(deadline)
        await self.store.close()

    # -- instances ------------------------------------------------------------------------
    def attach_instance(self, swarm: Any, key: InstanceKey) -> None:
        """Record this instance's webhook events: through its StoreObserver (in the same
        write as their cause) or, without a store, an observer of its own."""
        outbox = InstanceOutbox(key, self.cfg.summary_chars, self.engine, self.interest)
        observer = getattr(swarm, "_store_observer", None)
        if observer is not None:
            observer.outbox = outbox
            return
        runtime = swarm.runtime
        if type(runtime.observer).__name__ == "RuntimeObserver":
            runtime.observer = OutboxObserver(outbox, runtime)
        else:  # pragma: no cover - every server instance has one of the two
            logger.warning("webhooks: instance %s has an unknown observer; events not pushed", key)

    # -- checks ---------------------------------------------------------------------------
    def _events(self, value: Any, default: Sequence[str] | None = None) -> list[str]:
        if value is None and default is not None:
            return list(default)
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            raise WebhookError(400, "parameter 'events' must be a non-empty list of event types")
        if len(value) > 32:
            raise WebhookError(400, "parameter 'events' names at most 32 event types")
        unknown = [v for v in value if not ev.valid_pattern(v)]
        if unknown:
            raise WebhookError(
                400,
                f"parameter 'events': unknown event type '{echo(unknown[0])}'; known: "
                f"{', '.join(ev.EVENT_TYPES)} (or '*', or a prefix such as 'task.*')",
            )
        return list(dict.fromkeys(value))

    def _description(self, value: Any) -> str:
        return check_description(value, self.cfg.max_description_chars, "webhooks")

    def _secret(self, value: Any) -> str:
        if value is None:
            return signing.new_secret()
        why = signing.check_secret(value)
        if why is not None:
            raise WebhookError(400, f"parameter 'secret' {why}")
        return str(value)

    async def _url(self, value: Any) -> str:
        try:
            return await self.transport.check_url(value)
        except UrlRefused as exc:
            raise WebhookError(400, str(exc)) from None

    async def _add(self, sub: Record, *bounds: Bound, **upsert: Any) -> Record:
        """`store.add_subscription`, a bound passed as a 429."""
        try:
            return await self.store.add_subscription(sub, bounds=bounds, **upsert)
        except OverQuota as exc:
            raise WebhookError(429, str(exc)) from None

    def _bound(self, columns: tuple[str, ...], setting: str, message: str, advice: str) -> Bound:
        """A bound of the owner's subscriptions of one kind (and `columns`): `message`
        (``{count}`` in it) then the setting, then `advice`."""
        limit = getattr(self.cfg, setting)
        return Bound(
            ("owner_role", "owner_id", "kind", *columns),
            limit,
            f"{message} ([server.webhooks] {setting} = {limit}); {advice}",
        )

    async def _owned(self, owner: Owner, subscription_id: str, kinds: Sequence[str] = ()) -> Record:
        sub = await self.store.get_subscription(subscription_id)
        if (
            sub is None
            or sub["swarm_name"] != self.swarm_name
            or (sub["owner_role"], sub["owner_id"]) != owner
            or (kinds and sub["kind"] not in kinds)
        ):
            raise WebhookError(404, f"webhook '{echo(subscription_id)}' not found")
        return sub

    # -- subscriptions --------------------------------------------------------------------
    async def create(
        self, owner: Owner, body: Mapping[str, Any], subscription_id: str | None = None
    ) -> Record:
        """A standing subscription (its id `subscription_id` when given: a keyed create's);
        the answer shows its secret (the only time)."""
        check_fields(body, SUBSCRIPTION_FIELDS)
        scope = body.get("scope", "own")
        if scope not in ("own", "all"):
            raise WebhookError(400, "parameter 'scope' must be 'own' or 'all'")
        if scope == "all" and owner[0] != "admin":
            raise WebhookError(
                403, "only admins may subscribe to every caller's tasks (scope 'all')"
            )
        events = self._events(body.get("events"))
        description = self._description(body.get("description"))
        secret = self._secret(body.get("secret"))
        url = await self._url(body.get("url"))
        sub = new_subscription(
            self.swarm_name,
            owner,
            "webhook",
            url,
            events,
            scope=scope,
            description=description,
            secret=secret,
        )
        sub["subscription_id"] = subscription_id or sub["subscription_id"]
        # Counted and added in one transaction (a burst of creates cannot pass the quota),
        # under one lock per caller (the mirror sees one caller's changes in the store's order).
        async with self._lock(owner):
            # Mirrored first: a write that lands (even one whose caller went away meanwhile)
            # is never missing there; one that fails leaves an entry that only costs rows.
            self._mirror(sub)
            await self._add(
                sub,
                self._bound(
                    (),
                    "max_subscriptions_per_caller",
                    "you already have {count} webhooks, the most one caller may have",
                    "delete one first",
                ),
            )
        logger.info(
            "webhooks: %s:%s subscribed %s to %s",
            owner[0],
            owner[1],
            sub["subscription_id"],
            sub["destination"],
        )
        return {**subscription_view(sub), "secret": secret}

    async def list_for(self, owner: Owner) -> list[Record]:
        subs = await self.store.list_subscriptions(
            self.swarm_name, owner=owner, kinds=["webhook", "request"]
        )
        now = time.time()
        return [subscription_view(s, now) for s in subs]

    async def get(self, owner: Owner, subscription_id: str) -> Record:
        return subscription_view(await self._owned(owner, subscription_id, ("webhook", "request")))

    async def update(self, owner: Owner, subscription_id: str, body: Mapping[str, Any]) -> Record:
        check_fields(body, UPDATE_FIELDS)
        current = await self._owned(owner, subscription_id, ("webhook", "request"))
        changes: Record = {}
        if "events" in body:
            changes["events"] = self._events(body["events"])
        if "description" in body:
            changes["description"] = self._description(body["description"])
        if "active" in body:
            if not isinstance(body["active"], bool):
                raise WebhookError(400, "parameter 'active' must be a boolean")
            changes["active"] = body["active"]
            if body["active"]:  # a re-enabled subscription starts with a clean record
                changes.update(disabled_reason=None, failing_since=None)
        if "url" in body:
            changes["url"] = await self._url(body["url"])
            changes["destination"] = destination_of(changes["url"])
        async with self._lock(owner):
            changes["updated_at"] = time.time()
            if self.interest is not None:  # old or new until the write's outcome is known
                self.interest.widen({**current, **changes})
            updated = await self.store.update_subscription(subscription_id, changes)
            if updated is not None:
                self._mirror(updated)
        if updated is None:
            raise WebhookError(404, f"webhook '{echo(subscription_id)}' not found")
        if changes.get("active"):
            self.engine.kick()  # its waiting deliveries go out now
        return subscription_view(updated)

    async def delete(self, owner: Owner, subscription_id: str) -> None:
        await self._owned(owner, subscription_id, ("webhook", "request"))
        async with self._lock(owner):
            await self.store.delete_subscription(subscription_id)
            if self.interest is not None:
                self.interest.remove(subscription_id)

    async def rotate(
        self, owner: Owner, subscription_id: str, body: Mapping[str, Any], new: str | None = None
    ) -> Record:
        """A new secret (the body's, else `new`, else a fresh one; shown once); the old one
        keeps signing for `overlap_seconds`."""
        check_fields(body, ("overlap_seconds", "secret"))
        sub = await self._owned(owner, subscription_id, ("webhook", "request"))
        overlap = body.get("overlap_seconds", 86400)
        if isinstance(overlap, bool) or not isinstance(overlap, int | float) or overlap < 0:
            raise WebhookError(400, "parameter 'overlap_seconds' must be a number >= 0")
        if overlap > self.cfg.max_secret_overlap:
            raise WebhookError(
                400,
                f"parameter 'overlap_seconds' is over the limit of {self.cfg.max_secret_overlap:g} "
                "([server.webhooks] max_secret_overlap)",
            )
        secret = self._secret(new if body.get("secret") is None else body["secret"])
        now = time.time()
        updated = await self.store.update_subscription(
            subscription_id,
            {
                "secret": secret,
                "previous_secret": sub["secret"] if overlap else None,
                "previous_secret_until": now + float(overlap) if overlap else None,
                "updated_at": now,
            },
        )
        assert updated is not None
        return {**subscription_view(updated, now), "secret": secret}

    async def test(self, owner: Owner, subscription_id: str) -> Record:
        """Queue a ``webhook.ping`` delivery (through the engine like any other)."""
        sub = await self._owned(owner, subscription_id, ("webhook", "request"))
        now = time.time()
        event_id = new_id("evt")
        body = ev.payload(
            ev.PING,
            event_id=event_id,
            occurred_at=now,
            task_id=None,
            caller=owner,
            swarm=self.swarm_name,
            summary="This is a test delivery of your MAIL webhook.",
            summary_chars=self.cfg.summary_chars,
            detail={"webhook_id": subscription_id},
        )
        delivery = new_delivery(
            sub,
            {
                "event_id": event_id,
                "swarm_name": self.swarm_name,
                "event_type": ev.PING,
                "payload": body,
            },
            now,
        )
        try:
            await self.store.add_deliveries([delivery], self.engine.pending_limits, refuse=True)
        except OverQuota as exc:
            raise WebhookError(429, str(exc)) from None
        self.engine.kick()
        return delivery_view(delivery)

    # -- deliveries -----------------------------------------------------------------------
    async def deliveries(
        self,
        owner: Owner,
        subscription_id: str,
        *,
        status: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> tuple[list[Record], str | None]:
        await self._owned(owner, subscription_id, ("webhook", "request"))
        if status is not None and status not in DELIVERY_STATUSES:
            raise WebhookError(
                400, f"parameter 'status' must be one of {', '.join(DELIVERY_STATUSES)}"
            )
        limit = max(1, min(limit, MAX_PAGE))
        # What an answer already out recorded is listed: its deliveries are made first.
        await self.engine.catch_up()
        rows = await self.store.list_deliveries(
            subscription_id, status=status, limit=limit, before=parse_delivery_cursor(cursor)
        )
        following = delivery_cursor(rows[-1]) if len(rows) == limit else None
        return [delivery_view(r) for r in rows], following

    async def retry(self, owner: Owner, subscription_id: str, delivery_id: str) -> Record:
        sub = await self._owned(owner, subscription_id, ("webhook", "request"))
        row = await self.store.get_delivery(delivery_id)
        if row is None or row["subscription_id"] != subscription_id:
            raise WebhookError(404, f"delivery '{echo(delivery_id)}' not found")
        if row["status"] == "pending" and row["lease_owner"] is not None:
            raise WebhookError(409, f"delivery '{echo(delivery_id)}' is being sent right now")
        if not sub["active"]:
            raise WebhookError(
                409,
                f"webhook '{echo(subscription_id)}' is disabled; enable it (active: true) first",
            )
        try:
            updated = await self.store.retry(delivery_id, time.time(), self.engine.pending_limits)
        except OverQuota as exc:
            raise WebhookError(429, str(exc)) from None
        if updated is None:
            raise WebhookError(404, f"delivery '{echo(delivery_id)}' not found")
        self.engine.kick()
        return delivery_view({**updated, "attempts_log": row.get("attempts_log", [])})

    # -- per-request webhooks (POST /message) ----------------------------------------------
    async def request_webhook(
        self, owner: Owner, task_id: str, spec: Any, subscription_id: str | None = None
    ) -> Record:
        """The subscription of one ``POST /message``: its task's events go to `url`.
        Returns ``{"id", "secret"}`` (the secret; None when the caller gave one).
        `subscription_id`: its id, chosen by a keyed message (recorded with its key).
        """
        given = isinstance(spec, dict) and spec.get("secret") is not None
        url, events, secret = await self.check_request_webhook(spec)
        sub = new_subscription(
            self.swarm_name,
            owner,
            "request",
            url,
            events,
            task_id=task_id,
            secret=secret,
            expires_at=time.time() + self.cfg.retention,
            **({"subscription_id": subscription_id} if subscription_id else {}),
        )
        async with self._lock(owner):
            self._mirror(sub)  # first, as in `create`; the task runs after
            stored = await self._add(
                sub,
                self._bound(
                    (),
                    "max_request_webhooks_per_caller",
                    "you already have {count} per-request webhooks, the most one caller may have",
                    "each goes `retention` after its message, or delete one",
                ),
                self._bound(
                    ("task_id",),
                    "max_request_webhooks_per_task",
                    "this task's messages already name {count} webhook URLs, the most one task "
                    "may have",
                    "name a URL it already has (a message naming the same URL uses its webhook)",
                ),
                same=("owner_role", "owner_id", "kind", "task_id", "url"),
                refresh=("events", "expires_at", *(("secret",) if given else ())),
            )
            if stored["subscription_id"] != sub["subscription_id"] and self.interest is not None:
                self.interest.remove(sub["subscription_id"])
            self._mirror(stored)  # as stored, as a cleanup that starts later will see
        # A secret the caller chose is not sent back; the server's is shown to its owner.
        return {"id": stored["subscription_id"], "secret": None if given else stored["secret"]}

    async def check_request_webhook(self, spec: Any) -> tuple[str, list[str], str]:
        """A per-request webhook's `spec` (``{url, events, secret}``) checked: its URL, its
        event types (all by default) and its secret (a new one when it names none)."""
        if not isinstance(spec, dict):
            raise WebhookError(400, "parameter 'webhook' must be an object with a 'url'")
        check_fields(spec, REQUEST_WEBHOOK_FIELDS, "webhook.")
        try:
            events = self._events(spec.get("events"), default=["*"])
            secret = self._secret(spec.get("secret"))
            url = await self._url(spec.get("url"))
        except WebhookError as exc:
            raise WebhookError(
                exc.status, exc.detail.replace("parameter '", "parameter 'webhook.", 1)
            ) from None
        return url, events, secret

    async def request_webhook_of(
        self, owner: Owner, task_id: str, spec: Any, subscription_id: str | None = None
    ) -> Record | None:
        """What `request_webhook` answered for `task_id`'s message (``{"id", "secret"}``),
        read back from the store: a keyed message replayed from its task after a restart.
        `subscription_id`: the id the message's key chose (kept unless an earlier message
        of the task named the same URL: then that one's); without it (a key of an older
        version) the task's first."""
        subs = await self.store.list_subscriptions(
            self.swarm_name, owner=owner, kinds=["request"], task_id=task_id
        )
        if subscription_id is not None:
            url = spec.get("url") if isinstance(spec, dict) else None
            subs = [s for s in subs if s["subscription_id"] == subscription_id] or [
                s for s in subs if isinstance(url, str) and s["url"] == url.strip()
            ]
        if not subs:
            return None
        given = isinstance(spec, dict) and spec.get("secret") is not None
        return {"id": subs[0]["subscription_id"], "secret": None if given else subs[0]["secret"]}

    def _mirror(self, sub: Record) -> None:
        """A subscription the store now holds (new or changed), into the mirror."""
        if self.interest is not None:
            self.interest.put(sub)

    # -- A2A push notification configs ----------------------------------------------------
    async def set_push_config(
        self,
        owner: Owner,
        task_id: str,
        config_id: str,
        url: Any,
        token: str | None,
        auth: Record | None,
    ) -> Record:
        """Create or replace the owner's push config `config_id` of A2A task `task_id`
        (checked against the bounds, per task and per caller, and stored in one
        transaction)."""
        scheme_and_credentials = " ".join(str(v) for v in (auth or {}).values() if v)
        _check_header_values(
            ("token", token),
            *((f"authentication.{k}", v) for k, v in (auth or {}).items()),
            ("authentication", scheme_and_credentials),  # one Authorization header
        )
        checked = await self._url(url)
        # For A2A configs `description` holds the config id and `events` is unused.
        sub = new_subscription(
            self.swarm_name,
            owner,
            "a2a",
            checked,
            ["*"],
            task_id=task_id,
            description=config_id,
            push_token=token,
            push_auth=auth,
            expires_at=time.time() + self.cfg.retention,
        )
        return await self._add(
            sub,
            self._bound(
                (),
                "max_push_configs_per_caller",
                "you already have {count} A2A push configs, the most one caller may have",
                "each goes `retention` after it was set, or delete one",
            ),
            self._bound(
                ("task_id",),
                "max_push_configs_per_task",
                f"task '{echo(task_id)}' already has {{count}} push configs, the most one task "
                "may have",
                "delete one first",
            ),
            same=("owner_role", "owner_id", "kind", "task_id", "description"),
            refresh=("url", "destination", "push_token", "push_auth", "expires_at"),
        )

    async def push_configs(self, task_id: str, owner: Owner | None = None) -> list[Record]:
        return await self.store.list_subscriptions(
            self.swarm_name, owner=owner, kinds=["a2a"], task_id=task_id
        )

    async def delete_push_config(self, owner: Owner, task_id: str, config_id: str | None) -> None:
        for sub in await self.push_configs(task_id, owner):
            if config_id is None or sub["description"] == config_id:
                await self.store.delete_subscription(sub["subscription_id"])

    async def push(self, subs: Sequence[Record], event_type: str, body: str, task_id: str) -> None:
        """Queue one A2A push notification (`body`, JSON) to each of `subs`."""
        now = time.time()
        event = {
            "event_id": new_id("evt"),
            "swarm_name": self.swarm_name,
            "event_type": event_type,
            "task_id": task_id,
            "payload": body,
        }
        deliveries = [new_delivery(sub, event, now) for sub in subs if sub["active"]]
        if deliveries:
            await self.store.add_deliveries(deliveries, self.engine.pending_limits)
            self.engine.kick()
