"""Which events some subscription could want (``mail.webhooks.interest``): the in-memory
mirror a server alone on its database keeps so that tasks nobody subscribed to write no
outbox row. The mirror may over-cover (rows fan-out drops), never under-cover from the moment
a change is answered. The server end to end: tests/test_webhooks_outbox_skip.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

from mail.store.base import InstanceKey
from mail.store.webhooks import subscription_matches
from mail.store.webhooks_sql import SqliteWebhookStore
from mail.webhook_settings import WebhooksConfig
from mail.webhooks import events as ev
from mail.webhooks.interest import SubscriptionInterest
from mail.webhooks.outbox import InstanceOutbox
from mail.webhooks.service import WebhookService

ALICE = ("user", "alice")
BOB = ("user", "bob")
ROOT = ("admin", "root")
URL = "http://127.0.0.1:9/hook"
DONE = {"message": {"subject": "::task_complete::", "body": "done"}}


def _sub(sub_id: str, owner: tuple[str, str], **fields: Any) -> dict[str, Any]:
    record = {
        "subscription_id": sub_id,
        "swarm_name": "swarm",
        "owner_role": owner[0],
        "owner_id": owner[1],
        "kind": "webhook",
        "scope": "own",
        "task_id": None,
        "events": ["*"],
        "active": True,
        "expires_at": None,
    }
    record.update(fields)
    return record


def test_the_mirror_covers_owner_task_and_everyone() -> None:
    interest = SubscriptionInterest("swarm")
    assert not interest.watches(ALICE, "t1") and not interest.wants(ALICE, "t1", ev.TASK_FAILED)
    interest.put(_sub("a", ALICE, events=["task.failed"]))
    assert interest.wants(ALICE, "t1", ev.TASK_FAILED)
    assert not interest.wants(ALICE, "t1", ev.TASK_COMPLETED)
    assert not interest.watches(BOB, "t1")
    interest.put(_sub("r", BOB, kind="request", task_id="t2", expires_at=100.0))
    assert interest.wants(BOB, "t2", ev.TASK_COMPLETED)
    assert not interest.watches(BOB, "t3") and not interest.watches(("user", "judy"), "t2")
    interest.put(_sub("all", ROOT, scope="all", events=["task.*"]))
    assert interest.wants(BOB, "t3", ev.TASK_COMPLETED)
    assert not interest.wants(BOB, "t3", ev.PEER_UNREACHABLE)
    interest.remove("all")
    assert not interest.watches(BOB, "t3")
    # Other swarms' subscriptions and A2A push configs are not fan-out's.
    interest.put(_sub("x", ("user", "dave"), swarm_name="elsewhere"))
    interest.put(_sub("p", ("user", "erin"), kind="a2a", task_id="t9"))
    assert not interest.watches(("user", "dave"), "t9")
    assert not interest.watches(("user", "erin"), "t9")
    # Changed: the new record replaces the old one (a disabled one wants nothing).
    interest.put(_sub("a", ALICE, events=["task.failed"], active=False))
    assert not interest.watches(ALICE, "t1")
    interest.put(_sub("a", ALICE, events=["*"]))
    assert interest.wants(ALICE, "t1", ev.TASK_COMPLETED)


def test_cleanup_forgets_only_what_it_saw_expire() -> None:
    interest = SubscriptionInterest("swarm")
    interest.put(_sub("old", BOB, kind="request", task_id="t1", expires_at=10.0))
    mark = interest.mark()
    # Stored after the cleanup began: the cleanup may not have deleted it, so it stays.
    interest.put(_sub("late", BOB, kind="request", task_id="t2", expires_at=10.0))
    interest.put(_sub("fresh", BOB, kind="request", task_id="t3", expires_at=50.0))
    interest.forget_expired(20.0, mark)
    assert not interest.watches(BOB, "t1")
    assert interest.watches(BOB, "t2") and interest.watches(BOB, "t3")
    assert len(interest) == 2


async def _service(store: Any, *, single_server: bool = True) -> WebhookService:
    cfg = WebhooksConfig(allowed_hosts=["127.0.0.1"], poll=False)
    service = WebhookService(cfg, store, "swarm", single_server=single_server)
    await service.start()
    return service


def _outbox(service: WebhookService, owner: tuple[str, str]) -> InstanceOutbox:
    return InstanceOutbox(
        InstanceKey("swarm", owner[0], owner[1]), 200, service.engine, service.interest
    )


async def test_the_service_mirrors_each_change_before_answering() -> None:
    store = SqliteWebhookStore()
    await store.start()
    # Made by an earlier run: loaded at start.
    await store.add_subscription(
        {
            **_sub("wh_before", BOB, events=["task.completed"]),
            "url": URL,
            "destination": "127.0.0.1:9",
            "description": "",
            **{
                k: None
                for k in (
                    "disabled_reason",
                    "secret",
                    "previous_secret",
                    "previous_secret_until",
                    "push_token",
                    "push_auth",
                    "failing_since",
                )
            },
            "created_at": 1.0,
            "updated_at": 1.0,
        }
    )
    service = await _service(store)
    try:
        alice, bob = _outbox(service, ALICE), _outbox(service, BOB)
        assert len(bob.rows_for_answer("t1", None, DONE)) == 1
        assert alice.rows_for_answer("t1", None, DONE) == []
        made = await service.create(ALICE, {"url": URL, "events": ["task.failed"]})
        assert alice.rows_for_answer("t1", None, DONE) == []  # not a type it asked for
        await service.update(ALICE, made["id"], {"events": ["task.completed"]})
        assert len(alice.rows_for_answer("t1", None, DONE)) == 1
        await service.update(ALICE, made["id"], {"active": False})
        assert alice.rows_for_answer("t1", None, DONE) == []
        await service.update(ALICE, made["id"], {"active": True})
        assert len(alice.rows_for_answer("t1", None, DONE)) == 1
        await service.delete(ALICE, made["id"])
        assert alice.rows_for_answer("t1", None, DONE) == []
        await service.request_webhook(ALICE, "t7", {"url": URL})
        assert len(alice.rows_for_answer("t7", None, DONE)) == 1
        assert alice.rows_for_answer("t8", None, DONE) == []
        # Every row the mirror lets through would find its subscription at fan-out.
        stored = await store.list_subscriptions("swarm")
        for outbox, task_id in ((alice, "t7"), (bob, "t1")):
            (row,) = outbox.rows_for_answer(task_id, None, DONE)
            event = outbox.as_record(row)
            assert any(subscription_matches(s, event) for s in stored)
    finally:
        await service.close()


async def test_servers_sharing_a_database_write_every_row() -> None:
    service = await _service(SqliteWebhookStore(), single_server=False)
    try:
        assert service.interest is None
        assert len(_outbox(service, ALICE).rows_for_answer("t1", None, DONE)) == 1
    finally:
        await service.close()


class _SlowAnswers(SqliteWebhookStore):
    """A store whose updates apply at once but answer later, the first one last (as a pool
    of connections may): only one change at a time per owner keeps the mirror in step."""

    def __init__(self) -> None:
        super().__init__()
        self.delay = 0.0

    async def update_subscription(self, subscription_id: str, changes: Any) -> Any:
        found = await super().update_subscription(subscription_id, changes)
        self.delay = max(0.0, self.delay - 0.01)
        await asyncio.sleep(self.delay)
        return found


async def test_concurrent_updates_leave_the_mirror_as_the_store() -> None:
    store = _SlowAnswers()
    service = await _service(store)
    try:
        assert service.interest is not None
        made = await service.create(ALICE, {"url": URL, "events": ["task.completed"]})
        choices = [[t] for t in ev.EVENT_TYPES]
        store.delay = 0.01 * (len(choices) + 1)
        await asyncio.gather(
            *(service.update(ALICE, made["id"], {"events": events}) for events in choices)
        )
        stored = await store.get_subscription(made["id"])
        assert stored is not None
        for event_type in ev.EVENT_TYPES:
            assert service.interest.wants(ALICE, "t", event_type) == (
                event_type in stored["events"]
            ), (event_type, stored["events"])
    finally:
        await service.close()


class _CancelledAfterWriting(SqliteWebhookStore):
    """A store whose writes land but whose caller is cancelled before hearing so (a client
    that went away mid-request)."""

    cancel = False

    async def add_subscription(self, sub: Any, **kwargs: Any) -> Any:
        stored = await super().add_subscription(sub, **kwargs)
        if self.cancel:
            raise asyncio.CancelledError
        return stored

    async def update_subscription(self, subscription_id: str, changes: Any) -> Any:
        found = await super().update_subscription(subscription_id, changes)
        if self.cancel:
            raise asyncio.CancelledError
        return found


async def test_a_change_that_lands_unanswered_is_covered() -> None:
    store = _CancelledAfterWriting()
    service = await _service(store)
    try:
        assert service.interest is not None
        made = await service.create(ALICE, {"url": URL, "events": ["task.failed"]})
        store.cancel = True
        try:
            await service.update(ALICE, made["id"], {"events": ["task.completed"]})
        except asyncio.CancelledError:
            pass
        try:
            await service.create(BOB, {"url": URL, "events": ["*"]})
        except asyncio.CancelledError:
            pass
        try:
            await service.request_webhook(("user", "carol"), "t5", {"url": URL})
        except asyncio.CancelledError:
            pass
        assert len(await store.list_subscriptions("swarm")) == 3  # all three landed
        assert service.interest.wants(ALICE, "t", ev.TASK_COMPLETED)
        assert service.interest.wants(BOB, "t", ev.TASK_COMPLETED)
        assert service.interest.wants(("user", "carol"), "t5", ev.TASK_COMPLETED)
    finally:
        await service.close()
