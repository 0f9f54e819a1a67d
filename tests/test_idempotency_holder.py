"""Two front ends on one key store that share host name and process id (containers on the
host's network each run `mail` as process 1) are still two holders: a key one of them is
working on is "under way" for the other (409), never its own dead attempt to take over."""

from __future__ import annotations

import asyncio

from mail.server.auth import Caller
from mail.server.idempotency import IdempotencyGuard, KeyHeld, default_resolve
from mail.store.idempotency import MemoryIdempotencyStore

ALICE = Caller(role="user", id="alice", api_key="k")


def _front_end(store: MemoryIdempotencyStore) -> IdempotencyGuard:
    return IdempotencyGuard(store, swarm_name="s", ttl=600.0, max_keys=100, max_length=255)


def test_two_guards_of_one_process_hold_keys_apart() -> None:
    async def scenario() -> None:
        shared = MemoryIdempotencyStore()
        first, second = _front_end(shared), _front_end(shared)  # same host, same pid
        assert first.holder != second.holder

        working = first.open(ALICE, "key-1", "same-request")
        await working.take("task-1")  # under way on the first front end, not finished

        retry = second.open(ALICE, "key-1", "same-request")
        try:
            await retry.take("task-2")
        except KeyHeld as held:
            retry.found(held.record)
        else:
            raise AssertionError("the second front end took a key the first one holds")
        assert retry.record is not None and retry.record.holder == first.holder
        answer = await default_resolve(None, ALICE, retry)  # type: ignore[arg-type]
        # None would mean "its first attempt died here: run it again" (a second run).
        assert answer is not None and answer.status_code == 409
        assert answer.headers["retry-after"] == "1"

    asyncio.run(scenario())
