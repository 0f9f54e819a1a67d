"""The delivery engine: outbox -> deliveries -> attempts, retries, leases, retention."""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import logging
import os
import random
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from mail.store.webhooks import ClaimLimits, Finished, Owner, PendingLimits, Record
from mail.store.webhooks_sql import WebhookStore
from mail.telemetry import metrics, tracing
from mail.utils.background import finish
from mail.webhook_settings import WebhooksConfig
from mail.webhooks import signing
from mail.webhooks.events import iso_time
from mail.webhooks.interest import SubscriptionInterest
from mail.webhooks.transport import WebhookTransport

logger = logging.getLogger("mail.webhooks")

FAN_OUT_BATCH = 500
_FLUSH_WAIT = 5.0
_CLEANUP_EVERY = 600.0
_CLOSE_WAIT = 5.0

Flush = Callable[[float], Awaitable[Any]]


def node_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def _release(counts: dict[Any, int], key: Any) -> None:
    """One attempt fewer under way for `key`."""
    left = counts.get(key, 1) - 1
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)


class DeliveryEngine:
    def __init__(
        self,
        store: WebhookStore,
        cfg: WebhooksConfig,
        swarm_name: str,
        transport: WebhookTransport,
        *,
        flush: Flush | None = None,
        single_server: bool = True,
    ) -> None:
        self.store = store
        self.cfg = cfg
        self.swarm_name = swarm_name
        self.transport = transport
        self.flush = flush
        self.single_server = single_server
        self.node = node_name()
        self.schedule = Schedule(cfg.retry_schedule, cfg.retry_jitter)
        self.pending = 0  # deliveries waiting (the /metrics gauge), as last counted
        self._wake = asyncio.Event()
        self._flush_due = False
        self._claim_due = True
        self._events: list[Record] = []  # outbox rows recorded here (no task store)
        self._attempts: set[asyncio.Task[None]] = set()
        self._in_flight: dict[str, int] = {}  # destination -> attempts under way
        self._owners: dict[Owner, int] = {}  # owner -> attempts under way
        self.pending_limits = PendingLimits(
            cfg.max_pending_deliveries, cfg.max_pending_deliveries_per_caller
        )
        self._runner: asyncio.Task[None] | None = None
        self._closing = False
        self._last_cleanup = 0.0
        self._last_count = 0.0
        self._next_due: float | None = None  # the soonest retry this process scheduled
        # When delivery rounds started failing, and when that was last logged (monotonic).
        self._failing_since: float | None = None
        self._failure_logged: float | None = None
        # Attempts whose outcome is not written yet: written together each round (one
        # transaction). Until then the delivery's lease keeps it from being sent again.
        self._finished: list[Finished] = []
        # The service's mirror of the subscriptions (None: not kept); cleanup prunes it.
        self.interest: SubscriptionInterest | None = None

    # -- what the rest of the server calls ----------------------------------------------
    def kick(self, *, flush: bool = False) -> None:
        """Look at the outbox now. `flush`: new outbox rows were queued in the task store
        (wait for its commit, fan them out; claim only if that made deliveries); otherwise
        deliveries may be due (claim)."""
        if flush:
            self._flush_due = True
        else:
            self._claim_due = True
        self._wake.set()

    def record_events(self, events: list[Record]) -> None:
        """Outbox rows of a server without a task store (kept in the webhook store)."""
        self._events.extend(events)
        self._wake.set()

    @property
    def in_flight(self) -> int:
        return len(self._attempts)

    async def catch_up(self) -> None:
        """Fan out what the outbox holds now, waiting for a round doing so elsewhere: once
        this returns, every event recorded before it (an answer already out) has its
        deliveries stored, for a read of the delivery log (the rounds do this a moment
        later; on PostgreSQL a read could come first)."""
        await self._store_events()
        now = time.time()
        if await self.store.fan_out(
            self.swarm_name, now, FAN_OUT_BATCH, self.pending_limits, wait=True
        ):
            self.kick()

    async def _store_events(self) -> None:
        """Move the events `record_events` kept into the store (kept again if that fails)."""
        if self._events:
            events, self._events = self._events, []
            try:
                await self.store.add_events(events)
            except BaseException:
                self._events[:0] = events
                raise

    async def start(self) -> None:
        if self.single_server:
            # Nobody else can hold a lease here: the ones left by our previous run go now.
            released = await self.store.release_leases(self.swarm_name)
            if released:
                logger.info("webhooks: %d delivery lease(s) of a previous run released", released)
        self._runner = asyncio.create_task(self._run(), name="mail-webhooks")
        self.kick()  # what a previous run left pending goes out now

    def close_deadline(self) -> float:
        """When attempts under way must be done, counted from now (the loop's clock): the
        server takes this at the start of its shutdown, so the wait overlaps the agents'
        grace period instead of following it."""
        return asyncio.get_running_loop().time() + _CLOSE_WAIT

    async def close(self, deadline: float | None = None) -> None:
        """Stop; attempts under way get until `deadline` (default: `_CLOSE_WAIT` from now),
        the rest keep their lease and are sent again later."""
        loop = asyncio.get_running_loop()
        wait = _CLOSE_WAIT if deadline is None else max(0.0, deadline - loop.time())
        self._closing = True
        self._wake.set()
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._runner
            self._runner = None
        # Attempts under way get a moment; the rest keep their lease (sent again later).
        await finish(self._attempts, wait)
        if self._events:
            with contextlib.suppress(Exception):
                await self.store.add_events(self._events)
            self._events = []
        with contextlib.suppress(Exception):
            await self._record_finished()
        await self.transport.aclose()

    # -- the loop -----------------------------------------------------------------------
    async def _run(self) -> None:
        while not self._closing:
            try:
                async with asyncio.timeout(self._sleep()):
                    await self._wake.wait()
            except TimeoutError:
                self._claim_due = True  # a poll: retries may be due, other servers' work
            self._wake.clear()
            if self._closing:
                return
            try:
                await self._round()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the database may be away: try again later
                self._round_failed(exc)
                await asyncio.sleep(min(self.cfg.poll_interval, 5.0))
            else:
                if self._failing_since is not None:
                    logger.info(
                        "webhooks: delivery rounds recovered after %.1fs",
                        time.monotonic() - self._failing_since,
                    )
                    self._failing_since = self._failure_logged = None

    def _round_failed(self, exc: Exception) -> None:
        """One warning with the reason when rounds start failing (the traceback at DEBUG),
        then a reminder every 30 s: a database outage made a warning with a traceback at
        every poll (every second by default)."""
        now = time.monotonic()
        if self._failing_since is None:
            self._failing_since = now
        elif self._failure_logged is not None and now - self._failure_logged < 30.0:
            logger.debug("webhooks: a delivery round failed", exc_info=True)
            return
        first = self._failure_logged is None
        self._failure_logged = now
        logger.warning(
            "webhooks: %s (%s: %s); retried every poll",
            "a delivery round failed"
            if first
            else f"delivery rounds still failing after {now - self._failing_since:.0f}s",
            type(exc).__name__,
            exc,
        )
        logger.debug("webhooks: the failed round", exc_info=True)

    def _sleep(self) -> float | None:
        """Seconds until the next look: the poll interval, or sooner for a retry this
        process scheduled (it need not wait for the next poll)."""
        wait = self.cfg.poll_interval if self.cfg.poll else None
        if self._next_due is not None:
            until = max(0.0, self._next_due - time.time())
            wait = until if wait is None else min(wait, until)
        return wait

    async def _record_finished(self) -> None:
        if not self._finished:
            return
        finished, self._finished = self._finished, []
        try:
            await self.store.finish_many(finished)
        except BaseException:
            self._finished[:0] = finished
            raise
        for _, _delivery, subscription in finished:
            if subscription is not None and subscription.get("active") is False:
                logger.warning(
                    "webhooks: subscription %s disabled: %s",
                    subscription["subscription_id"],
                    subscription["disabled_reason"],
                )

    async def _round(self) -> None:
        await self._record_finished()
        if self._flush_due and self.flush is not None:
            self._flush_due = False
            await self.flush(_FLUSH_WAIT)
        await self._store_events()
        now = time.time()
        if self._next_due is not None and self._next_due <= now:
            self._next_due = None
            self._claim_due = True
        if await self.store.fan_out(self.swarm_name, now, FAN_OUT_BATCH, self.pending_limits):
            self._claim_due = True
            self._wake.set()  # maybe more events behind these
        if self._claim_due:
            # Rounds woken only by new outbox rows that matched nothing claim nothing: most
            # tasks of a busy server have no webhook.
            self._claim_due = False
            await self._claim(now)
        if now - self._last_count >= self.cfg.poll_interval:
            self._last_count = now
            self.pending = await self.store.pending_count(self.swarm_name)
        if now - self._last_cleanup >= _CLEANUP_EVERY:
            self._last_cleanup = now
            interest = self.interest
            mark = interest.mark() if interest is not None else 0
            removed = await self.store.cleanup(now, self.cfg.retention)
            if interest is not None:
                interest.forget_expired(now, mark)
            if removed:
                logger.info(
                    "webhooks: %d finished delivery record(s) past retention removed", removed
                )

    async def _claim(self, now: float) -> None:
        free = self.cfg.max_in_flight - len(self._attempts)
        if free <= 0:
            return
        limits = ClaimLimits(
            free,
            self.cfg.max_in_flight_per_destination,
            dict(self._in_flight),
            self.cfg.max_in_flight_per_owner,
            dict(self._owners),
            self.cfg.reserved_in_flight,
        )
        rows = await self.store.claim(
            self.swarm_name, now, limits, self.node, now + self.cfg.lease_seconds
        )
        capped = False
        for row in rows:
            destination, owner = row["destination"], (row["owner_role"], row["owner_id"])
            self._in_flight[destination] = self._in_flight.get(destination, 0) + 1
            self._owners[owner] = self._owners.get(owner, 0) + 1
            capped = capped or (
                self._in_flight[destination] >= limits.per_destination
                or self._owners[owner] >= limits.per_owner
            )
            task = asyncio.create_task(
                self._attempt(row), name=f"mail-webhook-{row['delivery_id']}"
            )
            self._attempts.add(task)
        # Into the reserved slots: the next claim looks past every owner with one under way.
        capped = capped or (bool(rows) and free - len(rows) <= limits.reserved < free)
        if len(rows) >= free or capped:
            # There may be more due: beyond this claim's candidates, or behind a destination
            # or an owner it saturated (the next claim looks past them).
            self._claim_due = True
            self._wake.set()

    async def _attempt(self, row: Record) -> None:
        destination, owner = row["destination"], (row["owner_role"], row["owner_id"])
        try:
            await self._send(row)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - the lease runs out and the delivery is retried
            logger.warning(
                "webhooks: delivery %s could not be recorded", row["delivery_id"], exc_info=True
            )
        finally:
            _release(self._in_flight, destination)
            _release(self._owners, owner)
            current = asyncio.current_task()
            if current is not None:
                self._attempts.discard(current)  # type: ignore[arg-type]
            self._claim_due = True  # a slot is free
            self._wake.set()

    # -- one attempt --------------------------------------------------------------------
    def _headers(self, row: Record, now: float) -> dict[str, str]:
        timestamp = int(now)
        found = {"Content-Type": "application/json"}
        if row["kind"] == "a2a":
            # A2A 1.0: the config's token and authentication; the id to deduplicate on.
            found.update(signing.headers(row["delivery_id"], timestamp, row["payload"], []))
            if row.get("push_token"):
                found["X-A2A-Notification-Token"] = row["push_token"]
            auth = row.get("push_auth") or {}
            if auth.get("scheme") and auth.get("credentials"):
                found["Authorization"] = f"{auth['scheme']} {auth['credentials']}"
            return found
        secrets = signing.signing_secrets(row, now)
        found.update(signing.headers(row["delivery_id"], timestamp, row["payload"], secrets))
        return found

    async def _send(self, row: Record) -> None:
        started = time.time()
        number = int(row["attempts"]) + 1
        with delivery_attempt(
            row["delivery_id"],
            row["subscription_id"],
            row["event_type"],
            row["destination"],
            number,
        ) as record:
            answer = await self.transport.post(
                row["url"], row["payload"].encode(), self._headers(row, started)
            )
            verdict = classify(answer.status, refused=answer.refused)
            ended = time.time()
            delivery, subscription, outcome = self._outcome(row, answer, verdict, ended)
            record.outcome, record.seconds, record.status = (
                outcome,
                answer.latency_ms / 1000,
                answer.status,
            )
        attempt = {
            "delivery_id": row["delivery_id"],
            "attempt": number,
            "started_at": started,
            "status_code": answer.status,
            "latency_ms": answer.latency_ms,
            "response_excerpt": answer.excerpt,
            "error": answer.error,
            "outcome": outcome,
        }
        self._finished.append((attempt, delivery, subscription))

    def _outcome(
        self, row: Record, answer: Any, verdict: str, ended: float
    ) -> tuple[Record, Record | None, str]:
        """(delivery changes, subscription changes or None, outcome for the log)."""
        why = (
            f"HTTP {answer.status}" if answer.status is not None else (answer.error or "no answer")
        )
        delivery: Record = {
            "delivery_id": row["delivery_id"],
            "attempts": int(row["attempts"]) + 1,
            "last_status": answer.status,
            "last_error": None if verdict == DELIVERED else why,
            "updated_at": ended,
        }
        sub_id = row["subscription_id"]
        if verdict == DELIVERED:
            delivery.update(status="delivered", finished_at=ended)
            cleared = {"subscription_id": sub_id, "failing_since": None, "updated_at": ended}
            return delivery, cleared if row["failing_since"] is not None else None, "delivered"
        outcome = "failed"
        if verdict == RETRY:
            asked = retry_after(answer.retry_after, ended, self.cfg.max_retry_after)
            delay = self.schedule.next_delay(int(row["retry_index"]), asked)
            if delay is not None:
                delivery.update(
                    status="pending",
                    next_attempt_at=ended + delay,
                    retry_index=int(row["retry_index"]) + 1,
                )
                due = ended + delay
                self._next_due = due if self._next_due is None else min(self._next_due, due)
                outcome = "retry"
            else:
                delivery.update(
                    status="failed",
                    finished_at=ended,
                    last_error=f"gave up after {delivery['attempts']} attempts; last: {why}",
                )
        else:
            delivery.update(status="failed", finished_at=ended)
        since = row["failing_since"] if row["failing_since"] is not None else ended
        changes: Record = {"subscription_id": sub_id, "failing_since": since, "updated_at": ended}
        if verdict == GONE:
            outcome = "gone"
            changes.update(
                active=False,
                disabled_reason=f"disabled at {iso_time(ended)}: the receiver answered 410 Gone",
            )
        elif ended - since >= self.cfg.disable_after:
            changes.update(
                active=False,
                disabled_reason=(
                    f"disabled at {iso_time(ended)}: no delivery succeeded since "
                    f"{iso_time(since)} ([server.webhooks] disable_after = "
                    f"{self.cfg.disable_after:g} s); last: {why}"
                ),
            )
        subscription = None if len(changes) == 3 and row["failing_since"] is not None else changes
        return delivery, subscription, outcome


# What an attempt's answer means, and when to try again (pure).
DELIVERED = "delivered"
RETRY = "retry"
FAILED = "failed"
GONE = "gone"


def classify(status: int | None, *, refused: bool = False) -> str:
    """``delivered``, ``retry``, ``failed`` or ``gone`` for an answer's status (None: no
    answer: a timeout or a connection error; `refused`: the address guard refused it)."""
    if refused:
        return FAILED
    if status is None:
        return RETRY
    if 200 <= status < 300:
        return DELIVERED
    if status == 410:
        return GONE
    if status in (408, 429) or status >= 500:
        return RETRY
    return FAILED


def retry_after(value: str | None, now: float, cap: float) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait (None when absent or unreadable)."""
    if not value:
        return None
    text = value.strip()
    if text.isascii() and text.isdigit():  # (isdigit alone also takes "²", which float refuses)
        return min(float(text), cap)
    try:
        moment = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if moment is None:
        return None
    return max(0.0, min(moment.timestamp() - now, cap))


@dataclass(frozen=True)
class Schedule:
    delays: Sequence[float]
    jitter: float = 0.2

    @property
    def attempts(self) -> int:
        """Attempts in all: the first one and one per delay."""
        return len(self.delays) + 1

    def next_delay(
        self, retry_index: int, asked: float | None = None, rng: random.Random | None = None
    ) -> float | None:
        """Seconds until retry number `retry_index` + 1 (None: the schedule is used up);
        never sooner than `asked` (a Retry-After)."""
        if retry_index >= len(self.delays):
            return None
        base = float(self.delays[retry_index])
        spread = (rng or random).uniform(-self.jitter, self.jitter) if self.jitter else 0.0
        delay = max(0.0, base * (1.0 + spread))
        return max(delay, asked) if asked is not None else delay


# One push delivery attempt: a CLIENT span (when tracing is on) and the metrics by outcome.
class AttemptRecord:
    """Filled in by the caller: the outcome and latency the span and metrics report."""

    __slots__ = ("outcome", "seconds", "status")

    def __init__(self) -> None:
        self.outcome = "error"
        self.seconds = 0.0
        self.status: int | None = None


@contextmanager
def delivery_attempt(
    delivery_id: str, subscription_id: str, event_type: str, destination: str, attempt: int
) -> Iterator[AttemptRecord]:
    record = AttemptRecord()
    span = tracing.start_span(
        "mail.webhook.attempt",
        kind="CLIENT",
        attributes={
            "mail.webhook.delivery_id": delivery_id,
            "mail.webhook.subscription_id": subscription_id,
            "mail.webhook.event_type": event_type,
            "mail.webhook.attempt": attempt,
            "server.address": destination,
        },
    )
    token: Any = tracing.attach(span) if span is not None else None
    try:
        yield record
    finally:
        metrics.webhook_attempt(record.outcome, record.seconds)
        if span is not None:
            if span.is_recording():
                span.set_attribute("mail.webhook.outcome", record.outcome)
                if record.status is not None:
                    span.set_attribute("http.response.status_code", record.status)
            tracing.detach(token)
            tracing.end_span(span, None if record.outcome == "delivered" else record.outcome)
