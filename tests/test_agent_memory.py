"""Agent memory (acknowledge_broadcast) on LangGraph's in-memory store and on PostgreSQL."""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import AsyncIterator, Iterator

import asyncpg
import pytest
from langgraph.store.memory import InMemoryStore
from tests.support.pg_schema import scratch_schema, with_search_path

from mail.store.agent_memory import (
    ACK_MARKER,
    LangGraphAgentMemory,
    PostgresMemoryStore,
    create_agent_memory,
    lexical_score,
    store_acknowledged_broadcast,
)
from mail.utils.store import get_langmem_store

BASE_URL = os.environ.get("MAIL_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")

BROADCAST_XML = (
    "<incoming_message>\n<from>supervisor</from>\n<to>['analyst']</to>\n"
    "<subject>Roadmap</subject>\n<body>The Q3 roadmap is published in the wiki.</body>\n"
    "</incoming_message>"
)


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    with scratch_schema("mail_memory", BASE_URL) as schema:
        yield with_search_path(BASE_URL, schema)


@pytest.fixture(params=["memory", "postgres"])
async def memory(request: pytest.FixtureRequest) -> AsyncIterator[LangGraphAgentMemory]:
    url = None if request.param == "memory" else request.getfixturevalue("pg_url")
    mem = await create_agent_memory(url)
    yield mem
    await mem.close()


def agent() -> str:
    return f"analyst{uuid.uuid4().hex[:8]}"


async def test_acknowledged_broadcast_is_stored_and_found(memory: LangGraphAgentMemory) -> None:
    name = agent()
    keys = await store_acknowledged_broadcast(memory, name, BROADCAST_XML, "FYI: roadmap saved")
    assert len(keys) == 2

    hits = await memory.search(name, "roadmap wiki")
    assert {h["key"] for h in hits} == set(keys)
    by_role = {h["value"]["role"]: h for h in hits}
    assert by_role["user"]["value"]["content"] == BROADCAST_XML
    assert by_role["assistant"]["value"]["content"] == f"{ACK_MARKER}\nFYI: roadmap saved"
    assert all(h["namespace"] == [f"{name}_memory"] for h in hits)
    # The broadcast matches both words, the note only one: the broadcast ranks first.
    assert hits[0]["value"]["role"] == "user" and hits[0]["score"] > hits[1]["score"]

    assert await memory.search(name, "kubernetes") == []
    assert await memory.search(agent(), "roadmap") == []  # another agent's namespace


async def test_ack_without_note_stores_only_the_marker(memory: LangGraphAgentMemory) -> None:
    name = agent()
    await store_acknowledged_broadcast(memory, name, BROADCAST_XML, None)
    everything = await memory.search(name, "", limit=10)
    assert sorted(h["value"]["content"] for h in everything) == sorted([BROADCAST_XML, ACK_MARKER])


async def test_put_search_limit_and_replace(memory: LangGraphAgentMemory) -> None:
    name = agent()
    for i in range(8):
        await memory.put(name, f"k{i}", {"content": f"weather report number {i}"})
    await memory.put(name, "other", {"content": "unrelated"})
    assert len(await memory.search(name, "weather", limit=5)) == 5
    await memory.put(name, "k3", {"content": "sunny forecast"})  # same key replaces
    hits = await memory.search(name, "sunny", limit=5)
    assert [h["key"] for h in hits] == ["k3"]
    assert len(await memory.search(name, "weather", limit=50)) == 7


async def test_postgres_memory_survives_reopening(pg_url: str) -> None:
    name = agent()
    first = await create_agent_memory(pg_url)
    await store_acknowledged_broadcast(first, name, BROADCAST_XML, "keep this")
    await first.close()

    second = await create_agent_memory(pg_url)
    try:
        hits = await second.search(name, "keep this")
        assert [h["value"]["note"] for h in hits if h["value"]["role"] == "assistant"] == [
            "keep this"
        ]
    finally:
        await second.close()
    conn = await asyncpg.connect(pg_url, timeout=5)
    try:
        count = await conn.fetchval(
            "SELECT count(*) FROM agent_memories WHERE namespace = $1", f"{name}_memory"
        )
    finally:
        await conn.close()
    assert count == 2


async def test_get_langmem_store_in_memory(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    async with get_langmem_store() as store:
        assert isinstance(store, InMemoryStore)
        await store.aput(("a_memory",), "k", {"content": "hello"})
        assert (await store.aget(("a_memory",), "k")).value == {"content": "hello"}


async def test_get_langmem_store_postgres_speaks_the_langgraph_api(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", pg_url)
    ns = (f"ns{uuid.uuid4().hex[:8]}", "sub")
    async with get_langmem_store() as store:
        assert isinstance(store, PostgresMemoryStore)
        await store.aput(ns, "a", {"content": "the quick brown fox", "n": 1})
        await store.aput(ns, "b", {"content": "a lazy dog", "n": 2})
        item = await store.aget(ns, "a")
        assert item is not None and item.value["n"] == 1 and item.namespace == ns
        found = await store.asearch(ns[:1], query="brown fox")
        assert [i.key for i in found] == ["a"] and found[0].score == pytest.approx(1.5)
        assert [i.key for i in await store.asearch(ns, filter={"n": {"$gte": 2}})] == ["b"]
        assert len(await store.asearch(ns, limit=1)) == 1
        assert ns in await store.alist_namespaces(prefix=ns[:1])
        await store.adelete(ns, "a")
        assert await store.aget(ns, "a") is None

        # LangGraphAgentMemory works on the very store the context manager yields.
        mem = LangGraphAgentMemory(store)
        await store_acknowledged_broadcast(mem, "scout", BROADCAST_XML, None)
        hits = await mem.search("scout", "roadmap")
        assert [h["value"]["role"] for h in hits] == ["user"]  # the ack has no note here


async def test_get_langmem_store_falls_back_when_postgres_is_down(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    async with get_langmem_store("postgresql://postgres@127.0.0.1:1/test") as store:
        assert isinstance(store, InMemoryStore)
    assert any("in-memory" in r.getMessage() for r in caplog.records)
    with pytest.raises(OSError):
        async with get_langmem_store("postgresql://postgres@127.0.0.1:1/test", fallback=False):
            pass


def test_lexical_score() -> None:
    value = {"role": "user", "content": "Deploy the API gateway", "meta": {"tags": ["infra"]}}
    assert lexical_score(value, "api gateway") == pytest.approx(1.5)  # both words + phrase
    assert lexical_score(value, "gateway outage") == pytest.approx(0.5)
    assert lexical_score(value, "infra") == pytest.approx(1.5)  # nested strings count
    assert lexical_score(value, "role") == 0  # keys are not content
    assert lexical_score(value, "") == 0
