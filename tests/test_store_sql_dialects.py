"""`mail.store.sql`: one statement text and one operation mean the same on SQLite and
PostgreSQL, in the three places the translation could tell them apart: a bare ``?`` after
numbered ones or in a literal, a write that begins with ``WITH``, a transaction inside a
transaction, and ``ANY`` of a tuple, an empty or a long list."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest
from tests.support.pg_schema import BASE_URL, scratch_schema, with_search_path

from mail.store.sql import PostgresSql, Sql, SqlConn, SqliteSql
from mail.store.sqlite_schema import open_database


class Boom(Exception):
    pass


@pytest.fixture(params=["sqlite", "postgres"])
async def sql(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Sql]:
    if request.param == "sqlite":
        db = open_database(tmp_path / "mail.db")
        await db.acquire()
        lite = SqliteSql(db)
        await lite.run(lambda c: c.execute("CREATE TABLE notes (n INTEGER)"))
        yield lite
        await db.release()
        return
    with scratch_schema("sql_dialects") as schema:
        pool = await asyncpg.create_pool(with_search_path(BASE_URL, schema), min_size=1, max_size=2)
        pg = PostgresSql(lambda: pool)
        await pg.run(lambda c: c.execute("CREATE TABLE notes (n INTEGER)"))
        try:
            yield pg
        finally:
            await pool.close()


async def _notes(sql: Sql) -> list[int]:
    return [r[0] for r in await sql.run(lambda c: c.fetch("SELECT n FROM notes ORDER BY n"))]


async def test_a_bare_mark_after_numbered_ones_takes_the_next_number(sql: Sql) -> None:
    # SQLite's rule: a bare ? is one more than the largest number assigned before it.
    row = await sql.run(lambda c: c.fetchrow("SELECT CAST(?1 AS TEXT), ?1 || ?, ?2", "a", "b"))
    assert tuple(row) == ("a", "ab", "b")


async def test_a_mark_in_a_literal_is_text(sql: Sql) -> None:
    row = await sql.run(lambda c: c.fetchrow("SELECT 'why?', CAST(? AS TEXT), 'it''s ?2'", "a"))
    assert tuple(row) == ("why?", "a", "it's ?2")


async def test_a_write_that_begins_with_with_is_inside_the_transaction(sql: Sql) -> None:
    async def op(c: SqlConn) -> None:
        async with c.transaction():
            await c.execute("WITH v (n) AS (SELECT 1) INSERT INTO notes SELECT n FROM v")
            raise Boom

    with pytest.raises(Boom):
        await sql.run(op)
    assert await _notes(sql) == []


async def test_a_nested_transaction_is_a_savepoint(sql: Sql) -> None:
    async def op(c: SqlConn) -> None:
        async with c.transaction():
            await c.execute("INSERT INTO notes VALUES (1)")
            async with c.transaction():
                await c.execute("INSERT INTO notes VALUES (2)")
            with pytest.raises(Boom):  # an inner one that fails takes back its own writes
                async with c.transaction():
                    await c.execute("INSERT INTO notes VALUES (3)")
                    raise Boom
            await c.execute("INSERT INTO notes VALUES (4)")
            raise Boom  # and the outer one takes back everything

    with pytest.raises(Boom):
        await sql.run(op)
    assert await _notes(sql) == []

    async def kept(c: SqlConn) -> None:
        async with c.transaction():
            async with c.transaction():
                await c.execute("INSERT INTO notes VALUES (5)")
            with pytest.raises(Boom):
                async with c.transaction():
                    await c.execute("INSERT INTO notes VALUES (6)")
                    raise Boom

    await sql.run(kept)
    assert await _notes(sql) == [5]


async def test_any_takes_a_list_or_a_tuple_empty_or_long(sql: Sql) -> None:
    await sql.run(lambda c: c.executemany("INSERT INTO notes VALUES (?)", [(n,) for n in range(5)]))
    query = "SELECT count(*) FROM notes WHERE n = ANY(?)"
    for values, count in (([], 0), ((), 0), ((1, 3), 2), (list(range(-5000, 5000)), 5)):
        assert await sql.run(lambda c, v=values: c.fetchval(query, v)) == count
