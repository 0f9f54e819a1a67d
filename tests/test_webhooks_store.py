"""The push delivery store (mail.store.webhooks): the same contract on memory, SQLite and
PostgreSQL, and the transactional outbox of the SQL task stores (an event and its outbox rows
commit together, in one batch)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.pg_schema import BASE_URL, scratch_schema, with_search_path

from mail.store.base import InstanceKey
from mail.store.sql_batch import SqlWrite, coalesce_writes
from mail.store.webhooks import (
    Bound,
    ClaimLimits,
    OverQuota,
    PendingLimits,
    new_delivery,
    new_id,
)
from mail.store.webhooks_sql import SqliteWebhookStore, WebhookStore
from mail.webhooks.service import new_subscription

SWARM = "hooks"
PENDING = PendingLimits(1000, 100000)


def subscription(owner: tuple[str, str], **fields: Any) -> dict[str, Any]:
    secret = "whsec_c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0"
    hook = new_subscription(
        SWARM, owner, "webhook", "http://receiver.test/hook", ["task.*"], secret=secret
    )
    return {**hook, **fields}


def event(caller: tuple[str, str], event_type: str = "task.completed", **fields: Any) -> dict:
    record = {
        "event_id": new_id("evt"),
        "swarm_name": SWARM,
        "caller_role": caller[0],
        "caller_id": caller[1],
        "task_id": "t-1",
        "event_type": event_type,
        "payload": json.dumps({"type": event_type}),
        "created_at": time.time(),
    }
    record.update(fields)
    return record


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[WebhookStore]:
    made: WebhookStore
    if request.param == "memory":
        made = SqliteWebhookStore()
    elif request.param == "sqlite":
        made = SqliteWebhookStore(tmp_path / "mail.db")
    else:
        from mail.store.webhooks_sql import PostgresWebhookStore

        with scratch_schema("webhooks") as schema:
            made = PostgresWebhookStore(with_search_path(BASE_URL, schema))
            await made.start()
            try:
                yield made
            finally:
                await made.close()
            return
    await made.start()
    try:
        yield made
    finally:
        await made.close()


ALICE = ("user", "alice")
BOB = ("user", "bob")
ADMIN = ("admin", "root")


async def test_fan_out_follows_ownership_scope_and_event_types(store: WebhookStore) -> None:
    mine = subscription(ALICE)
    bobs = subscription(BOB)
    everything = subscription(ADMIN, scope="all", events=["*"])
    only_failures = subscription(ALICE, events=["task.failed"])
    per_task = subscription(ALICE, kind="request", task_id="t-2", events=["*"])
    for sub in (mine, bobs, everything, only_failures, per_task):
        await store.add_subscription(sub)
    await store.add_events([event(ALICE), event(ALICE, task_id="t-2")])
    made = await store.fan_out(SWARM, time.time(), 100, PENDING)
    # alice's task t-1: mine + admin; t-2: mine + admin + per-task. Not bob's, not failures.
    assert made == 5
    assert await store.fan_out(SWARM, time.time(), 100, PENDING) == 0  # the events are gone
    assert len(await store.list_deliveries(bobs["subscription_id"])) == 0
    assert len(await store.list_deliveries(only_failures["subscription_id"])) == 0
    assert len(await store.list_deliveries(per_task["subscription_id"])) == 1
    assert len(await store.list_deliveries(everything["subscription_id"])) == 2
    assert await store.pending_count(SWARM) == 5


async def test_fan_out_sees_subscription_changes(store: WebhookStore) -> None:
    sub = subscription(ALICE, events=["task.failed"])
    await store.add_subscription(sub)
    await store.add_events([event(ALICE)])
    assert await store.fan_out(SWARM, time.time(), 100, PENDING) == 0  # completed: not asked for
    await store.update_subscription(sub["subscription_id"], {"events": ["task.completed"]})
    await store.add_events([event(ALICE)])
    assert await store.fan_out(SWARM, time.time(), 100, PENDING) == 1
    await store.update_subscription(sub["subscription_id"], {"active": False})
    await store.add_events([event(ALICE)])
    assert await store.fan_out(SWARM, time.time(), 100, PENDING) == 0
    other = subscription(ALICE)
    await store.add_subscription(other)
    await store.add_events([event(ALICE)])
    assert await store.fan_out(SWARM, time.time(), 100, PENDING) == 1


async def test_pending_quota_records_failed_deliveries(store: WebhookStore) -> None:
    sub = subscription(ALICE)
    await store.add_subscription(sub)
    await store.add_events([event(ALICE) for _ in range(3)])
    assert await store.fan_out(SWARM, time.time(), 100, PendingLimits(2, 100)) == 3
    rows = await store.list_deliveries(sub["subscription_id"])
    assert sorted(r["status"] for r in rows) == ["failed", "pending", "pending"]
    refused = next(r for r in rows if r["status"] == "failed")
    assert "max_pending_deliveries" in refused["last_error"]


async def test_bounds_hold_under_concurrent_adds(store: WebhookStore) -> None:
    """30 adds at once against a bound of 5 (one transaction each: counted, then stored):
    5 stored; an add equal in `same` keeps the stored one, refreshed, past the bound too;
    pending deliveries past their bound are refused or recorded failed."""
    bound = Bound(("owner_role", "owner_id", "kind", "task_id"), 5, "{count} already")

    async def add(n: int) -> str:
        sub = subscription(ALICE, kind="a2a", task_id="t-9", description=f"c{n}")
        try:
            await store.add_subscription(sub, bounds=[bound])
        except OverQuota as exc:
            return str(exc)
        return "stored"

    outcomes = await asyncio.gather(*(add(n) for n in range(30)))
    assert outcomes.count("stored") == 5 and set(outcomes) == {"stored", "5 already"}
    kept = await store.list_subscriptions(SWARM, kinds=["a2a"], task_id="t-9")
    again = subscription(ALICE, kind="a2a", task_id="t-9", description=kept[0]["description"])
    again["url"] = "http://elsewhere.test/"
    stored = await store.add_subscription(
        again,
        bounds=[bound],
        same=("owner_role", "owner_id", "kind", "task_id", "description"),
        refresh=("url",),
    )
    assert stored["subscription_id"] == kept[0]["subscription_id"]
    assert (await store.get_subscription(stored["subscription_id"]))["url"] == again["url"]  # type: ignore[index]
    # Pending bounds: per subscription (2), per owner across subscriptions (3).
    limits = PendingLimits(2, 3)
    first, second = kept[0], kept[1]
    ping = {"swarm_name": SWARM, "event_type": "webhook.ping", "payload": "{}"}
    for n in range(2):
        delivery = new_delivery(first, {**ping, "event_id": f"e{n}"}, time.time())
        await store.add_deliveries([delivery], limits, refuse=True)
    with pytest.raises(OverQuota, match="max_pending_deliveries"):
        await store.add_deliveries(
            [new_delivery(first, {**ping, "event_id": "e2"}, time.time())], limits, refuse=True
        )
    made = [new_delivery(second, {**ping, "event_id": f"f{n}"}, time.time()) for n in range(2)]
    await store.add_deliveries(made, limits)
    statuses = sorted(
        (d["status"], d["last_error"] or "")
        for d in await store.list_deliveries(second["subscription_id"])
    )
    assert [s for s, _ in statuses] == ["failed", "pending"]
    assert "max_pending_deliveries_per_caller" in statuses[0][1]


async def test_claim_leases_and_bounds_destinations(store: WebhookStore) -> None:
    slow = subscription(ALICE, destination="slow.test:80")
    fast = subscription(ALICE, destination="fast.test:80")
    for sub in (slow, fast):
        await store.add_subscription(sub)
    await store.add_events([event(ALICE) for _ in range(6)])
    await store.fan_out(SWARM, time.time(), 100, PENDING)
    now = time.time()
    limits = ClaimLimits(total=10, per_destination=2, in_flight={"slow.test:80": 1})
    claimed = await store.claim(SWARM, now, limits, "node-a", now + 30)
    by_destination: dict[str, int] = {}
    for row in claimed:
        by_destination[row["destination"]] = by_destination.get(row["destination"], 0) + 1
        assert row["url"] == "http://receiver.test/hook" and row["secret"].startswith("whsec_")
    assert by_destination == {"slow.test:80": 1, "fast.test:80": 2}
    # Leased: another node gets none of these until the lease runs out.
    again = await store.claim(SWARM, now, ClaimLimits(100, 100, {}), "node-b", now + 30)
    assert {r["delivery_id"] for r in again}.isdisjoint({r["delivery_id"] for r in claimed})
    later = await store.claim(SWARM, now + 31, ClaimLimits(100, 100, {}), "node-b", now + 60)
    assert {r["delivery_id"] for r in claimed} <= {r["delivery_id"] for r in later}


async def test_claims_take_turns_across_owners(store: WebhookStore) -> None:
    """Alice's 30 deliveries fell due before Bob's 3 and Carol's 1. Claiming as the engine
    does (again at once while a claim saturated someone), each owner gets its share of 2 and
    nobody waits behind Alice's backlog; among owners the one with the fewest under way
    goes first."""
    carol = ("user", "carol")
    subs = {who: subscription(who, destination=f"{who[1]}.test:80") for who in (ALICE, BOB, carol)}
    for sub in subs.values():
        await store.add_subscription(sub)
    for who, count in ((ALICE, 30), (BOB, 3), (carol, 1)):
        await store.add_events([event(who) for _ in range(count)])
        await store.fan_out(SWARM, time.time(), 100, PENDING)
    now = time.time()
    under_way: dict[tuple[str, str], int] = {}
    for claims in range(1, 10):
        limits = ClaimLimits(8 - sum(under_way.values()), 100, {}, 2, dict(under_way))
        rows = await store.claim(SWARM, now, limits, f"n{claims}", now + 30)
        if not rows:
            break
        for row in rows:
            owner = (row["owner_role"], row["owner_id"])
            under_way[owner] = under_way.get(owner, 0) + 1
    assert under_way == {ALICE: 2, BOB: 2, carol: 1}, under_way
    assert claims <= 4  # one claim per owner saturated, at most, and one that finds nothing


async def test_a_claim_takes_turns_among_its_candidates(store: WebhookStore) -> None:
    """One slot: Carol (none under way) goes before Bob (one), whose deliveries fell due
    after Alice's (one under way too, and due first)."""
    carol = ("user", "carol")
    for who in (ALICE, BOB, carol):
        await store.add_subscription(subscription(who, destination=f"{who[1]}.test:80"))
        await store.add_events([event(who) for _ in range(3)])
        await store.fan_out(SWARM, time.time(), 100, PENDING)
    now = time.time()
    limits = ClaimLimits(1, 100, {}, 2, {ALICE: 1, BOB: 1})
    assert [r["owner_id"] for r in await store.claim(SWARM, now, limits, "n", now + 30)] == [
        "carol"
    ]
    limits = ClaimLimits(2, 100, {}, 2, {ALICE: 1, BOB: 1, carol: 2})
    got = await store.claim(SWARM, now, limits, "n", now + 30)
    assert sorted(r["owner_id"] for r in got) == ["alice", "bob"]  # one each, not two of hers


async def test_a_freed_slot_reaches_past_a_backlog_wider_than_the_window(
    store: WebhookStore,
) -> None:
    """Every slot is held (Alice 7 of her 8: she just freed one) and Alice's backlog, due
    first, is wider than a claim's window: the one free slot goes to Bob, whose delivery
    fell due behind it, not back to Alice."""
    for who, count in ((ALICE, 200), (BOB, 1)):
        await store.add_subscription(subscription(who, destination=f"{who[1]}.test:80"))
        await store.add_events([event(who) for _ in range(count)])
        await store.fan_out(SWARM, time.time(), 1000, PENDING)
    now = time.time()
    limits = ClaimLimits(1, 100, {}, 8, {ALICE: 7, ("user", "mallory"): 8})
    assert limits.window < 200
    got = await store.claim(SWARM, now, limits, "n", now + 30)
    assert [r["owner_id"] for r in got] == ["bob"]


async def test_the_reserved_slots_go_only_to_owners_with_nothing_under_way(
    store: WebhookStore,
) -> None:
    """4 slots free, 2 of them reserved: Bob (nothing under way) gets one, then Alice (one
    under way, a backlog wider than the window, due first) the last one outside the
    reserve, and neither a second. With only reserved slots free, owners with attempts
    under way get none and Carol (nothing under way, due last) gets one."""
    for who, count in ((ALICE, 200), (BOB, 3)):
        await store.add_subscription(subscription(who, destination=f"{who[1]}.test:80"))
        await store.add_events([event(who) for _ in range(count)])
        await store.fan_out(SWARM, time.time(), 1000, PENDING)
    now = time.time()
    limits = ClaimLimits(4, 100, {}, 8, {ALICE: 1}, reserved=2)
    got = await store.claim(SWARM, now, limits, "n", now + 30)
    assert sorted(r["owner_id"] for r in got) == ["alice", "bob"]
    assert limits.window < 200
    limits = ClaimLimits(2, 100, {}, 8, {ALICE: 3, BOB: 1, ("user", "mallory"): 8}, reserved=2)
    assert await store.claim(SWARM, now, limits, "n", now + 30) == []
    carol = ("user", "carol")
    await store.add_subscription(subscription(carol, destination="carol.test:80"))
    await store.add_events([event(carol) for _ in range(3)])
    await store.fan_out(SWARM, time.time(), 1000, PENDING)
    got = await store.claim(SWARM, now + 1, limits, "n", now + 30)
    assert [r["owner_id"] for r in got] == ["carol"]


async def test_finish_retry_and_delete(store: WebhookStore) -> None:
    sub = subscription(ALICE)
    await store.add_subscription(sub)
    await store.add_events([event(ALICE)])
    await store.fan_out(SWARM, time.time(), 100, PENDING)
    now = time.time()
    (row,) = await store.claim(SWARM, now, ClaimLimits(10, 10, {}), "me", now + 30)
    attempt = {
        "delivery_id": row["delivery_id"],
        "attempt": 1,
        "started_at": now,
        "status_code": 500,
        "latency_ms": 3.5,
        "response_excerpt": "oops",
        "error": None,
        "outcome": "retry",
    }
    await store.finish(
        attempt,
        {
            "delivery_id": row["delivery_id"],
            "attempts": 1,
            "retry_index": 1,
            "next_attempt_at": now + 100,
            "last_status": 500,
            "updated_at": now,
        },
        {"subscription_id": sub["subscription_id"], "failing_since": now},
    )
    found = await store.get_delivery(row["delivery_id"])
    assert found is not None
    assert found["status"] == "pending" and found["lease_owner"] is None
    assert found["attempts_log"][0]["response_excerpt"] == "oops"
    assert (await store.get_subscription(sub["subscription_id"]))["failing_since"] == now  # type: ignore[index]
    # Not due yet; a manual retry makes it due now with the schedule from the start.
    assert await store.claim(SWARM, now + 1, ClaimLimits(10, 10, {}), "me", now + 30) == []
    retried = await store.retry(row["delivery_id"], now + 1, PENDING)
    assert retried is not None and retried["retry_index"] == 0
    assert len(await store.claim(SWARM, now + 1, ClaimLimits(10, 10, {}), "me", now + 30)) == 1
    # Disabled subscriptions are not claimed; deleting forgets deliveries and attempts.
    await store.update_subscription(sub["subscription_id"], {"active": False})
    await store.retry(row["delivery_id"], now + 2, PENDING)
    assert await store.claim(SWARM, now + 2, ClaimLimits(10, 10, {}), "me", now + 30) == []
    assert await store.delete_subscription(sub["subscription_id"])
    assert await store.get_delivery(row["delivery_id"]) is None
    assert not await store.delete_subscription(sub["subscription_id"])


async def test_cleanup_forgets_old_deliveries_and_expired_subscriptions(
    store: WebhookStore,
) -> None:
    sub = subscription(ALICE)
    short = subscription(ALICE, kind="request", task_id="t-1", expires_at=time.time() - 1)
    await store.add_subscription(sub)
    await store.add_subscription(short)
    await store.add_events([event(ALICE)])
    await store.fan_out(SWARM, time.time(), 100, PENDING)
    (row,) = await store.list_deliveries(sub["subscription_id"])
    old = time.time() - 1000
    await store.finish(
        {
            "delivery_id": row["delivery_id"],
            "attempt": 1,
            "started_at": old,
            "status_code": 200,
            "latency_ms": 1.0,
            "response_excerpt": "",
            "error": None,
            "outcome": "delivered",
        },
        {"delivery_id": row["delivery_id"], "status": "delivered", "finished_at": old},
    )
    assert await store.cleanup(time.time(), retention=100) >= 2
    assert await store.get_subscription(short["subscription_id"]) is None
    assert await store.list_deliveries(sub["subscription_id"]) == []


async def test_concurrent_claims_never_share_a_delivery(store: WebhookStore) -> None:
    sub = subscription(ALICE)
    await store.add_subscription(sub)
    await store.add_events([event(ALICE) for _ in range(20)])
    await store.fan_out(SWARM, time.time(), 100, PENDING)
    now = time.time()
    results = await asyncio.gather(
        *(store.claim(SWARM, now, ClaimLimits(5, 100, {}), f"n{i}", now + 30) for i in range(4))
    )
    ids = [r["delivery_id"] for claimed in results for r in claimed]
    assert len(ids) == len(set(ids))
    # Rows another claim held locked were skipped, not waited for: a later claim gets them.
    rest = await store.claim(SWARM, now, ClaimLimits(100, 100, {}), "late", now + 30)
    assert len(set(ids) | {r["delivery_id"] for r in rest}) == 20
    assert set(ids).isdisjoint(r["delivery_id"] for r in rest)


# -- the transactional outbox of the SQL task stores --------------------------------------


def test_an_outbox_item_unpacks_in_order_and_keeps_the_generation() -> None:
    from mail.store.sql_batch import outbox_item

    key = InstanceKey(SWARM, "user", "alice")
    cause = SqlWrite("event", (SWARM, "user", "alice", "t-1", "x", "{}", "1"), generation=7)
    item = outbox_item(cause, key, [("evt_1", "t-1", "task.completed", "{}", 1.0)])
    before = SqlWrite("task", (SWARM, "user", "alice", "t-1"))
    writes = coalesce_writes([before, item])
    assert [w.kind for w in writes] == ["task", "event", "webhook_event"]
    assert writes[2].generation == 7 and writes[2].args[:4] == (SWARM, "user", "alice", "evt_1")


@pytest.fixture(params=["sqlite", "postgres"])
async def task_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    if request.param == "sqlite":
        from mail.store.sqlite import SqliteTaskStore

        made = SqliteTaskStore(tmp_path / "mail.db", max_batch=2)
        await made.start()
        try:
            yield made
        finally:
            await made.close()
        return
    from mail.store.postgres import PostgresTaskStore

    with scratch_schema("outbox") as schema:
        made = PostgresTaskStore(with_search_path(BASE_URL, schema), max_batch=2, min_size=1)
        await made.start()
        try:
            yield made
        finally:
            await made.close()


async def test_the_outbox_commits_with_its_event_even_past_a_batch_boundary(
    task_store: Any, tmp_path: Path
) -> None:
    key = InstanceKey(SWARM, "user", "alice")
    # max_batch = 2: the outbox item (an event and two rows) must not be cut in two.
    task_store.write_nowait(key, "upsert_task", {"task_id": "t-1"})
    rows = [
        ("evt_a", "t-1", "task.completed", '{"n":1}', 1.0),
        ("evt_b", "t-1", "task.failed", '{"n":2}', 2.0),
    ]
    event = {"event": "task_complete", "data": "{}", "id": "1"}
    assert task_store.write_nowait(key, "outbox_write", "append_event", (("t-1", event)), rows)
    await task_store.outbox_write(key, "save_response", ("t-1", {"x": 1}), [rows[0]])
    assert await task_store.flush(10)
    if task_store.backend == "sqlite":
        hooks: WebhookStore = SqliteWebhookStore(tmp_path / "mail.db")
    else:
        from mail.store.webhooks_sql import PostgresWebhookStore

        hooks = PostgresWebhookStore(task_store._dsn)
    await hooks.start()
    try:
        sub = subscription(("user", "alice"), events=["*"])
        await hooks.add_subscription(sub)
        # evt_a once (the second copy is ignored), evt_b once.
        assert await hooks.fan_out(SWARM, time.time(), 100, PENDING) == 2
    finally:
        await hooks.close()
    snapshot = await task_store.load_instance(key)
    assert [e["event"] for e in snapshot.events["t-1"]] == ["task_complete"]
    assert snapshot.responses["t-1"] == {"x": 1}


async def test_an_outbox_row_the_database_refuses_takes_its_event_with_it(
    task_store: Any, tmp_path: Path
) -> None:
    """One transaction: when the outbox row cannot be written, neither is its event (had they
    been two writes, the event would be stored and its deliveries lost)."""
    key = InstanceKey(SWARM, "user", "alice")
    refuse = {
        "sqlite": [
            "CREATE TRIGGER refuse_poison BEFORE INSERT ON webhook_events"
            " WHEN NEW.event_id = 'evt_poison' BEGIN SELECT RAISE(ABORT, 'poison'); END"
        ],
        "postgres": [
            "CREATE FUNCTION refuse_poison() RETURNS trigger AS $$ BEGIN"
            " IF NEW.event_id = 'evt_poison' THEN RAISE EXCEPTION 'poison'; END IF;"
            " RETURN NEW; END $$ LANGUAGE plpgsql",
            "CREATE TRIGGER refuse_poison BEFORE INSERT ON webhook_events"
            " FOR EACH ROW EXECUTE FUNCTION refuse_poison()",
        ],
    }[task_store.backend]
    if task_store.backend == "sqlite":
        await task_store.db.run(lambda conn: [conn.execute(sql) for sql in refuse])
    else:
        async with task_store._pool.acquire() as conn:
            for sql in refuse:
                await conn.execute(sql)
    poison = {"event": "bad", "data": "{}", "id": "1"}
    fine = {"event": "good", "data": "{}", "id": "2"}
    await task_store.outbox_write(
        key, "append_event", ("t-1", poison), [("evt_poison", "t-1", "task.failed", "{}", 1.0)]
    )
    await task_store.outbox_write(
        key, "append_event", ("t-1", fine), [("evt_fine", "t-1", "task.failed", "{}", 2.0)]
    )
    assert await task_store.flush(10)
    snapshot = await task_store.load_instance(key)
    assert [e["event"] for e in snapshot.events["t-1"]] == ["good"]
