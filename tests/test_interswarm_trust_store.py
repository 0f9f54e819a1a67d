"""The record of where a task was forwarded survives a restore (memory and PostgreSQL stores).

Issue 12, item 1: `/interswarm/back` is accepted only from a swarm the task was forwarded to.
That record (`remote_swarms`) is written when the message leaves, so an instance rebuilt from
the store still accepts the peer's answer, and still refuses everyone else.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.interswarm_agents import swarm_json
from tests.support.pg_schema import scratch_schema, with_search_path
from tests.test_interswarm_bridge import FakeRemote

from mail import MAILSwarmTemplate
from mail.net import InterswarmRouter, SwarmRegistry
from mail.net.bridge import InterswarmReceiveError
from mail.store import InstanceKey, MemoryTaskStore, TaskStore
from mail.store.postgres import PostgresTaskStore

pytestmark = pytest.mark.timeout(60)

BASE_URL = os.environ.get("MAIL_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    with scratch_schema("mail_test", BASE_URL) as schema:
        yield with_search_path(BASE_URL, schema)


@pytest.fixture(params=["memory", "postgres"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[TaskStore]:
    if request.param == "memory":
        s: TaskStore = MemoryTaskStore()
    else:
        s = PostgresTaskStore(request.getfixturevalue("pg_url"), min_size=1, max_size=2)
    await s.start()
    yield s
    await s.close()


async def _swarm(tmp_path: Path, registry: SwarmRegistry, store: TaskStore, key: InstanceKey):  # noqa: ANN202
    template = MAILSwarmTemplate.from_swarms_json(swarm_json("local", "remote")[0])
    swarm = template.instantiate({}, user_id="alice", registry_file=str(tmp_path / "reg.json"))
    swarm.swarm_registry = registry
    await swarm.attach_store(store, key)
    router = InterswarmRouter(registry, "local", request_timeout=5)
    await router.start()
    await swarm.start_interswarm(router)
    return swarm, router


def _answer(envelope: dict[str, Any], source: str) -> dict[str, Any]:
    return {
        **envelope,
        "message_id": str(uuid.uuid4()),
        "source_swarm": source,
        "target_swarm": "local",
        "msg_type": "response",
        "payload": {
            **envelope["payload"],
            "request_id": str(uuid.uuid4()),
            "sender": {"address_type": "agent", "address": f"worker@{source}"},
            "recipient": {"address_type": "agent", "address": "supervisor@local"},
            "body": f"answer from {source}",
        },
    }


async def test_forwarded_to_survives_a_restore(tmp_path: Path, store: TaskStore) -> None:
    remote = FakeRemote("ok")
    url = await remote.start()
    registry = SwarmRegistry("local", "http://127.0.0.1:1", tmp_path / "reg.json")
    await registry.register_swarm("remote", url, auth_token="tok")
    key = InstanceKey("local", "user", f"alice-{uuid.uuid4().hex[:6]}")
    first, router = await _swarm(tmp_path, registry, store, key)
    task_id = str(uuid.uuid4())
    try:
        waiting = asyncio.create_task(
            first.post_message(body="hello remote", task_id=task_id, timeout=30)
        )
        async with asyncio.timeout(20):
            while not remote.forwarded:
                await asyncio.sleep(0.02)
        envelope = remote.forwarded[0]["message"]
        assert await first.flush_store(10)
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
    finally:
        await first.shutdown()
        await router.stop()

    second, router = await _swarm(tmp_path, registry, store, key)
    try:
        task = second.get_task_by_id(task_id)
        assert task is not None and task.remote_swarms == {"remote"}
        with pytest.raises(InterswarmReceiveError) as refused:
            second.accept_interswarm_message(_answer(envelope, "elsewhere"), "back")
        assert refused.value.status == 404
        events = len(task.events)
        assert second.accept_interswarm_message(_answer(envelope, "remote"), "back") == task_id
        assert len(task.events) > events
    finally:
        await second.shutdown()
        await router.stop()
        await registry.aclose()
        await remote.stop()
