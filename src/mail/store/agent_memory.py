"""Agent memory (what `acknowledge_broadcast` writes), on top of LangGraph's store API."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import uuid
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)

from mail.store.retrying import RetryingWrites

logger = logging.getLogger("mail.store.agent_memory")

MemoryWrite = Callable[[], Awaitable[None]]

ACK_MARKER = "<acknowledged broadcast/>"
_TOKEN = re.compile(r"\w+")
# How many entries one search looks at, at most (memories are small, per agent).
_MAX_SCAN = 10_000
_PAGE = 500


# -- lexical matching -----------------------------------------------------------------------


def query_tokens(query: str | None) -> list[str]:
    """Distinct lower-case words of a query, in order."""
    seen: dict[str, None] = {}
    for token in _TOKEN.findall((query or "").lower()):
        seen.setdefault(token, None)
    return list(seen)


def value_text(value: Any) -> str:
    """All string leaves of a JSON value, lower-cased and space-joined."""
    parts: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, str):
            parts.append(node)
        elif isinstance(node, dict):
            for child in node.values():
                walk(child)
        elif isinstance(node, list | tuple):
            for child in node:
                walk(child)

    walk(value)
    return " ".join(parts).lower()


def lexical_score(value: Any, query: str | None) -> float:
    """Share of query words found in the value, plus 0.5 if the whole phrase occurs."""
    tokens = query_tokens(query)
    if not tokens:
        return 0.0
    text = value_text(value)
    hits = sum(1 for token in tokens if token in text)
    if not hits:
        return 0.0
    phrase = " ".join((query or "").lower().split())
    return hits / len(tokens) + (0.5 if phrase and phrase in text else 0.0)


def _matches_filter(value: dict[str, Any], conditions: dict[str, Any] | None) -> bool:
    ops: dict[str, Callable[[Any, Any], bool]] = {
        "$eq": lambda a, b: a == b,
        "$ne": lambda a, b: a != b,
        "$gt": lambda a, b: a is not None and a > b,
        "$gte": lambda a, b: a is not None and a >= b,
        "$lt": lambda a, b: a is not None and a < b,
        "$lte": lambda a, b: a is not None and a <= b,
    }
    for field_name, expected in (conditions or {}).items():
        actual = value.get(field_name)
        if isinstance(expected, dict) and expected and all(k.startswith("$") for k in expected):
            try:
                if not all(ops[op](actual, operand) for op, operand in expected.items()):
                    return False
            except (KeyError, TypeError):
                return False
        elif actual != expected:
            return False
    return True


# -- LangGraph store on asyncpg ---------------------------------------------------------------


class PostgresMemoryStore(BaseStore):
    """A LangGraph `BaseStore` kept in the `agent_memories` table (asyncpg, no embeddings)."""

    def __init__(
        self,
        database_url: str,
        *,
        min_size: int = 1,
        max_size: int = 5,
        command_timeout: float = 60.0,
        connect_timeout: float = 10.0,
        application_name: str = "mail-server",
    ) -> None:
        from mail.store.postgres_schema import normalize_dsn

        self._dsn = normalize_dsn(database_url)
        self._pool_options = {
            "min_size": min_size,
            "max_size": max_size,
            "command_timeout": command_timeout,
            "timeout": connect_timeout,
            "server_settings": {"application_name": application_name},
        }
        self._pool: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def setup(self) -> None:
        import asyncpg

        from mail.store.postgres_schema import create_unless_forbidden
        from mail.store.schema import BY_NAME

        if self._pool is not None:
            return
        self._pool = await asyncpg.create_pool(self._dsn, **self._pool_options)
        self._loop = asyncio.get_running_loop()
        try:
            async with self._pool.acquire() as conn:
                await create_unless_forbidden(conn, (BY_NAME["agent_memories"],))
        except BaseException:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        # Sync access is only possible from another thread than the store's loop.
        if self._loop is None:
            raise RuntimeError("PostgresMemoryStore is not set up; await setup() first")
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            raise RuntimeError("use the async methods (aget/aput/asearch) inside the event loop")
        return asyncio.run_coroutine_threadsafe(self.abatch(ops), self._loop).result()

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        if self._pool is None:
            raise RuntimeError("PostgresMemoryStore is not set up; await setup() first")
        results: list[Result] = []
        async with self._pool.acquire() as conn:
            for op in ops:
                if isinstance(op, GetOp):
                    results.append(await self._get(conn, op))
                elif isinstance(op, PutOp):
                    await self._put(conn, op)
                    results.append(None)
                elif isinstance(op, SearchOp):
                    results.append(await self._search(conn, op))
                elif isinstance(op, ListNamespacesOp):
                    results.append(await self._list_namespaces(conn, op))
                else:
                    raise TypeError(f"unsupported store operation: {type(op).__name__}")
        return results

    @staticmethod
    def _ns(namespace: tuple[str, ...]) -> str:
        for label in namespace:
            if not isinstance(label, str) or not label or "." in label:
                raise ValueError(f"invalid namespace label {label!r} in {namespace!r}")
        return ".".join(namespace)

    async def _get(self, conn: Any, op: GetOp) -> Item | None:
        row = await conn.fetchrow(
            "SELECT namespace, key, value, created_at, updated_at FROM agent_memories"
            " WHERE namespace = $1 AND key = $2",
            self._ns(op.namespace),
            op.key,
        )
        return None if row is None else _item(row)

    async def _put(self, conn: Any, op: PutOp) -> None:
        ns = self._ns(op.namespace)
        if op.value is None:
            await conn.execute(
                "DELETE FROM agent_memories WHERE namespace = $1 AND key = $2", ns, op.key
            )
            return
        await conn.execute(
            "INSERT INTO agent_memories (namespace, key, value) VALUES ($1, $2, $3::jsonb)"
            " ON CONFLICT (namespace, key) DO UPDATE SET value = EXCLUDED.value,"
            " updated_at = NOW()",
            ns,
            op.key,
            json.dumps(dict(op.value), default=str),
        )

    async def _search(self, conn: Any, op: SearchOp) -> list[SearchItem]:
        prefix = self._ns(op.namespace_prefix) if op.namespace_prefix else ""
        tokens = query_tokens(op.query)
        phrase = " ".join((op.query or "").lower().split())
        # Filters are applied here in Python, so SQL paging is only safe without one.
        paged = not op.filter
        rows = await conn.fetch(
            """
            WITH scoped AS (
                SELECT namespace, key, value, created_at, updated_at,
                       lower(COALESCE((SELECT string_agg(t.v #>> '{}', ' ')
                                       FROM jsonb_path_query(
                                           value, 'strict $.** ? (@.type() == "string")'
                                       ) AS t(v)), '')) AS doc
                FROM agent_memories
                WHERE $1 = '' OR namespace = $1 OR left(namespace, length($1) + 1) = $1 || '.'
            ), scored AS (
                SELECT *, (SELECT count(*) FROM unnest($2::text[]) AS q(tok)
                           WHERE strpos(doc, q.tok) > 0) AS hits
                FROM scoped
            )
            SELECT namespace, key, value, created_at, updated_at,
                   CASE WHEN cardinality($2::text[]) = 0 THEN NULL
                        ELSE hits::float8 / cardinality($2::text[])
                             + CASE WHEN $3 <> '' AND strpos(doc, $3) > 0 THEN 0.5 ELSE 0 END
                   END AS score
            FROM scored
            WHERE cardinality($2::text[]) = 0 OR hits > 0
            ORDER BY score DESC NULLS LAST, updated_at DESC, key
            LIMIT CASE WHEN $4 THEN $5::bigint END OFFSET CASE WHEN $4 THEN $6::bigint ELSE 0 END
            """,
            prefix,
            tokens,
            phrase,
            paged,
            op.limit,
            op.offset,
        )
        items = [_item(row, score=row["score"], search=True) for row in rows]
        if not paged:
            items = [item for item in items if _matches_filter(item.value, op.filter)]
            items = items[op.offset : op.offset + op.limit]
        return items  # type: ignore[return-value]

    async def _list_namespaces(self, conn: Any, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        rows = await conn.fetch("SELECT DISTINCT namespace FROM agent_memories")
        found: set[tuple[str, ...]] = set()
        for row in rows:
            namespace = tuple(row["namespace"].split("."))
            if all(_namespace_matches(namespace, c) for c in op.match_conditions or ()):
                found.add(namespace[: op.max_depth] if op.max_depth else namespace)
        return sorted(found)[op.offset : op.offset + op.limit]


def _namespace_matches(namespace: tuple[str, ...], condition: Any) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    candidate = (
        namespace[: len(path)] if condition.match_type == "prefix" else namespace[-len(path) :]
    )
    return all(p == "*" or p == n for p, n in zip(path, candidate, strict=True))


def _item(row: Any, *, score: float | None = None, search: bool = False) -> Item:
    fields = {
        "namespace": tuple(row["namespace"].split(".")),
        "key": row["key"],
        "value": json.loads(row["value"]),
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
    }
    return SearchItem(score=score, **fields) if search else Item(**fields)


# -- the memory the runtime uses (`mail.core.memory.AgentMemory`) --------------------------------


class LangGraphAgentMemory:
    """Per-agent memory (`mail.core.memory.AgentMemory`) over a LangGraph store
    (InMemoryStore, PostgresMemoryStore, ...): put entries, search them back.

    With `writes`, puts go through that retrying path (a database store): while the
    database fails they stay queued and land once it is back (see `mail.store.retrying`).
    """

    def __init__(
        self,
        store: BaseStore,
        *,
        on_close: Callable[[], Awaitable[None]] | None = None,
        writes: RetryingWrites[MemoryWrite] | None = None,
    ) -> None:
        self.store = store
        self._on_close = on_close
        self.writes = writes

    @staticmethod
    def namespace(agent_name: str) -> tuple[str, ...]:
        # LangGraph namespace labels cannot contain "."; agent names normally don't.
        return (f"{agent_name.replace('.', '_')}_memory",)

    async def put(self, agent_name: str, key: str, value: dict[str, Any]) -> None:
        namespace, entry = self.namespace(agent_name), dict(value)
        if self.writes is None:
            await self.store.aput(namespace, key, entry, index=False)
            return
        store = self.store
        await self.writes.write(lambda: store.aput(namespace, key, entry, index=False))

    def status(self) -> dict[str, Any]:
        """Whether writes are failing (and why), for the server's health reporting."""
        if self.writes is None:
            return {"degraded": False, "last_error": None, "pending_writes": 0}
        return self.writes.status()

    async def search(self, agent_name: str, query: str, limit: int = 5) -> list[dict[str, Any]]:
        """Best matches first: dicts with namespace, key, value, created_at, updated_at, score."""
        namespace = self.namespace(agent_name)
        candidates: list[SearchItem] = []
        # Stores without embeddings ignore the query or only pre-filter; rank here, so
        # every backend gives the same order.
        while len(candidates) < _MAX_SCAN:
            page = await self.store.asearch(
                namespace, query=query or None, limit=_PAGE, offset=len(candidates)
            )
            candidates.extend(page)
            if len(page) < _PAGE:
                break
        has_query = bool(query_tokens(query))
        ranked: list[tuple[float, SearchItem]] = []
        for item in candidates:
            score = lexical_score(item.value, query)
            if has_query and score <= 0:
                continue
            ranked.append((score, item))
        ranked.sort(key=lambda pair: (pair[0], pair[1].updated_at), reverse=True)
        results = []
        for score, item in ranked[: max(limit, 0)]:
            entry = item.dict()
            entry["score"] = score if has_query else None
            results.append(entry)
        return results

    async def close(self) -> None:
        if self.writes is not None and self.writes.running:
            await self.writes.close()
        if self._on_close is not None:
            on_close, self._on_close = self._on_close, None
            await on_close()


async def open_langgraph_store(
    database_url: str | None, *, fallback: bool
) -> tuple[BaseStore, Callable[[], Awaitable[None]] | None]:
    """A LangGraph store and how to close it (None: nothing to close).

    A PostgresMemoryStore, set up, when `database_url` names a database; an InMemoryStore
    for None/""/"none" and, with `fallback`, when the database cannot be reached (logged;
    without `fallback` the connection error is raised).
    """
    from langgraph.store.memory import InMemoryStore

    from mail.store import database_enabled

    if database_url is None or not database_enabled(database_url):
        return InMemoryStore(), None
    store = PostgresMemoryStore(database_url)
    try:
        await store.setup()
    except Exception as exc:
        if not fallback:
            raise
        logger.warning("agent memory: PostgreSQL unavailable (%s); using an in-memory store", exc)
        return InMemoryStore(), None
    return store, store.aclose


async def create_agent_memory(
    database_url: str | None, *, fallback: bool = False
) -> LangGraphAgentMemory:
    """Postgres-backed memory for a URL, in-memory for None/""/"none" (see
    `open_langgraph_store` for `fallback`)."""
    store, close = await open_langgraph_store(database_url, fallback=fallback)
    writes: RetryingWrites[MemoryWrite] | None = None
    if isinstance(store, PostgresMemoryStore):
        from mail.store.postgres import is_transient_error

        writes = RetryingWrites(
            _run_writes, is_transient=is_transient_error, name="mail.store.agent_memory"
        )
        writes.start()
    return LangGraphAgentMemory(store, on_close=close, writes=writes)


async def _run_writes(writes: list[MemoryWrite]) -> None:
    # Puts are upserts: replaying the earlier ones of a batch that failed half-way is harmless.
    for write in writes:
        await write()


async def store_acknowledged_broadcast(
    memory: LangGraphAgentMemory, agent_name: str, incoming_xml: str, note: str | None = None
) -> list[str]:
    """Record an acknowledged broadcast: the broadcast as the agent saw it, then the ack.

    Writes a "user" entry holding the incoming broadcast's XML and an "assistant" entry
    holding `<acknowledged broadcast/>` followed by the note, if any. Returns both keys.
    """
    ack_id = uuid.uuid4().hex
    stored_at = datetime.now(UTC).isoformat()
    content = ACK_MARKER if not note else f"{ACK_MARKER}\n{note}"
    entries: list[tuple[str, dict[str, Any]]] = [
        (f"{ack_id}-broadcast", {"role": "user", "content": incoming_xml}),
        (f"{ack_id}-ack", {"role": "assistant", "content": content, "note": note}),
    ]
    for key, value in entries:
        value.update({"kind": "acknowledged_broadcast", "ack_id": ack_id, "stored_at": stored_at})
        await memory.put(agent_name, key, value)
    return [key for key, _ in entries]
