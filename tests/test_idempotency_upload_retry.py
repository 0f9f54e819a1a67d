"""A keyed ``POST /message`` with attachments whose server dies after storing the uploads and
before its task was stored: the retry (same Idempotency-Key, same body) takes over the
first attempt's work and stores the uploads under the ids kept with the key, replacing
them. They were stored a second time (new ids): duplicate bytes, counted twice against the
caller's quotas.

Real `mail server` on the real PostgreSQL. The crash point is made deterministic: the test
holds a lock on the `tasks` table from its own connection, so the task's first write waits
while the uploads (another table) are committed; the server is killed (kill -9) as soon as
the upload's row is there, and the lock let go.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import asyncpg
import httpx
import pytest

from server_fixtures import ServerProcess, auth
from support.abuse_harness import abuse_server
from support.pg_schema import BASE_URL, fetch_rows, scratch_schema, with_search_path

pytestmark = pytest.mark.timeout(240)

UPLOAD = {"filename": "notes.txt", "content": "n" * 200_000}


async def _attachments(url: str) -> list[tuple[str, int]]:
    rows = await fetch_rows(
        url,
        "SELECT attachment_id, octet_length(data) AS n FROM team_attachments"
        " WHERE caller_id = 'alice' ORDER BY attachment_id",
    )
    return [(r["attachment_id"], r["n"]) for r in rows]


# A per-caller byte bound the upload fits under once, not twice: the first attempt passes it;
# so must its retry, whose upload replaces the stored one (not counted on top of it).
TIGHT_BOUND = """
[server.store]
max_stored_bytes_per_caller = 300000
"""


def test_a_retry_after_a_crash_between_uploads_and_task_stores_them_once(
    tmp_path: Path,
) -> None:
    with scratch_schema("mail_upload_retry", BASE_URL) as schema:
        asyncio.run(_scenario(tmp_path, with_search_path(BASE_URL, schema)))


def test_the_retry_is_not_refused_by_a_byte_bound_counting_its_upload_twice(
    tmp_path: Path,
) -> None:
    """The retry's upload replaces the one the dead attempt stored: the per-caller byte
    bound counts it once (it counted the stored copy and the incoming one: 429 for a retry
    of a request that fitted), and so do the books afterwards (a small message next: 429)."""
    with scratch_schema("mail_upload_retry_bound", BASE_URL) as schema:
        asyncio.run(_scenario(tmp_path, with_search_path(BASE_URL, schema), TIGHT_BOUND))


async def _scenario(tmp_path: Path, url: str, extra: str = "") -> None:
    key = str(uuid.uuid4())
    body = {"body": "keep my notes", "attachments": [UPLOAD]}
    with abuse_server(tmp_path, env={"DATABASE_URL": url}, extra=extra) as first:
        headers = auth(first.keys["alice"])
        warm = httpx.post(f"{first.base_url}/message", json={"body": "hi"}, headers=headers)
        assert warm.status_code == 200, warm.text  # alice's instance and books are loaded
        holder = await asyncpg.connect(url, timeout=10)
        locked = holder.transaction()
        await locked.start()
        await holder.execute("LOCK TABLE tasks IN ACCESS EXCLUSIVE MODE")
        try:
            sending = asyncio.create_task(
                asyncio.to_thread(
                    httpx.post,
                    f"{first.base_url}/message",
                    json=body,
                    headers={**headers, "Idempotency-Key": key},
                    timeout=60,
                )
            )
            deadline = time.monotonic() + 60
            while not await _attachments(url):
                assert time.monotonic() < deadline, first.logs()[-3000:]
                await asyncio.sleep(0.02)
            assert first.proc is not None
            first.proc.kill()  # kill -9, the task's first write still waiting for the lock
            first.proc.wait(10)
        finally:
            await locked.rollback()
            await holder.close()
        try:
            await sending
        except httpx.HTTPError:
            pass  # the connection died with the server
        stored_once = await _attachments(url)
        assert len(stored_once) == 1, stored_once

        second = ServerProcess(first.directory, first.port, args=first.args, env=first.env)
        second.start()
        try:
            retry = httpx.post(
                f"{second.base_url}/message",
                json=body,
                headers={**headers, "Idempotency-Key": key},
                timeout=60,
            )
            assert retry.status_code == 200, retry.text
            assert await _attachments(url) == stored_once, "the uploads were stored again"
            task = httpx.get(
                f"{second.base_url}/task",
                params={"task_id": retry.json()["task_id"]},
                headers=headers,
                timeout=30,
            )
            assert task.status_code == 200, task.text
            after = httpx.post(
                f"{second.base_url}/message", json={"body": "hi"}, headers=headers, timeout=60
            )
            assert after.status_code == 200, after.text  # the books count the upload once
        finally:
            assert second.stop() == 0, second.logs()[-3000:]
