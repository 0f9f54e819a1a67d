"""Requests that need PostgreSQL now, while it is away, are refused with 503 and
``Retry-After``, not 500.

A keyed request takes its Idempotency-Key in the database before its work starts (on the key
store's own pool); a message naming a task the instance does not hold (a finished task let
go of) reads it from the store first. With the database
unreachable, the driver's connection error left the route as an unhandled error: 500, which
clients (MAILClient among them: it sends a key with every call that starts work) do not
retry, where a new task without a key got 503 and ``Retry-After`` once the task store was
backed up. Real `mail server`, real PostgreSQL reached through a TCP proxy the test stops
and starts again.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import httpx
import pytest
from tests.support.outage_server import server_behind_proxy
from tests.support.pg_schema import BASE_URL, scratch_schema, with_search_path

from server_fixtures import auth

pytestmark = pytest.mark.timeout(240)


def test_requests_that_need_the_database_in_an_outage_are_503_and_their_retries_run(
    tmp_path: Path,
) -> None:
    with (
        scratch_schema("mail_key_outage", BASE_URL) as schema,
        server_behind_proxy(tmp_path, with_search_path(BASE_URL, schema), "keys") as outage,
    ):
        server, proxy, token = outage.server, outage.proxy, outage.key
        url = f"{outage.url}/message"

        def post(key: str) -> httpx.Response:
            headers = {**auth(token), "Idempotency-Key": key}
            return httpx.post(url, json={"body": "note"}, headers=headers, timeout=120)

        def continue_task(task_id: str) -> httpx.Response:
            body = {"body": "more", "task_id": task_id}
            return httpx.post(url, json=body, headers=auth(token), timeout=120)

        warm = post(str(uuid.uuid4()))  # the key store's pool is in use
        assert warm.status_code == 200, warm.text
        # A task id the instance does not hold (a finished task let go of, or one the
        # caller names): the message reads it from the store first.
        named = str(uuid.uuid4())
        proxy.stop()  # PostgreSQL unreachable from here on
        key = str(uuid.uuid4())
        refused = post(key)
        assert refused.status_code == 503, refused.text
        assert refused.headers.get("Retry-After"), refused.headers
        again = continue_task(named)
        assert again.status_code == 503, again.text
        assert again.headers.get("Retry-After"), again.headers
        proxy.start()  # back: the retry with the same key runs the request
        deadline = time.monotonic() + 60
        while (retry := post(key)).status_code == 503:
            assert time.monotonic() < deadline, retry.text
            time.sleep(0.5)
        assert retry.status_code == 200, retry.text
        assert continue_task(named).status_code == 200
    assert "unhandled error" not in server.logs(), server.logs()[-3000:]
