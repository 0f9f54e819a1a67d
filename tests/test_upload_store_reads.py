"""`store_uploads` reads earlier attachments only when a keyed retry replaces them.

A keyed POST /message with attachments stores them under ids kept with its key; only a
takeover (a retry after its first attempt died) can find rows already stored under them.
Looking them up on every keyed request cost one store read per attachment (a round trip
on PostgreSQL), under the instance's attachment quota lock, which every upload and every
agent's file send waits for. The replace itself is covered end to end in
tests/test_idempotency_upload_retry.py (real server, real PostgreSQL).
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from mail.core.team import TeamService
from mail.server.auth import Caller
from mail.server.team import store_uploads
from mail.store.base import InstanceKey
from mail.store.team_base import SqliteTeamStore
from support.scripted_agents import AgentSpec, make_runtime, task_complete


class CountingTeamStore(SqliteTeamStore):
    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    async def get_attachment(self, *args: Any, **kwargs: Any) -> Any:
        self.reads += 1
        return await super().get_attachment(*args, **kwargs)


def _swarm() -> tuple[Any, CountingTeamStore]:
    rt = make_runtime({"supervisor": AgentSpec(lambda h, _: [task_complete("ok")], [], True)})
    store = CountingTeamStore()
    rt.team = TeamService(rt, store, InstanceKey("testswarm", "user", "u1"))
    return SimpleNamespace(team=rt.team), store


def test_a_first_attempt_stores_its_uploads_without_reading_them_first() -> None:
    async def scenario() -> None:
        swarm, store = _swarm()
        caller = Caller(role="user", id="u1", api_key="k")
        uploads = [("a.txt", "", b"a" * 10), ("b.txt", "", b"b" * 20)]
        ids = ["att_first", "att_second"]
        stored = await store_uploads(swarm, caller, "t1", uploads, ids)
        assert [s["id"] for s in stored] == ids
        assert store.reads == 0  # new ids: nothing to replace, nothing read
        again = await store_uploads(swarm, caller, "t1", uploads, ids, replacing=True)
        assert [s["id"] for s in again] == ids
        assert store.reads == 2  # a takeover looks for what it replaces
        assert await store.attachment_bytes(swarm.team.key) == 30  # replaced, not added

    asyncio.run(scenario())
