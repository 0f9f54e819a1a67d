"""No SQLite connection is ever touched by two threads: a stress run of the webhook routes
against a real `mail server` (SQLite, the default) whose connections are watched.

The server is started as docs/webhooks.md says, with ``tests/support/sqlite_guard`` first on
its ``PYTHONPATH``: its ``sitecustomize`` makes every connection record a call made while
another thread is inside one, and a cursor let go of on another thread than the one that made
it (which resets the cursor's statement there, maybe while the database thread runs the next
job: ``sqlite3.InterfaceError: bad parameter or other API misuse``, a 500, 8 times in 10,000
concurrent ``POST /webhooks/{id}/test`` before the fix). Two callers send tests (with and
without an ``Idempotency-Key``), read their delivery logs and send messages at once, while
the engine delivers to a real receiver; every answer must be 2xx and the guard's log empty.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.support.webhook_receiver import ReceiverProcess

from server_fixtures import REPO_ROOT, ServerProcess, auth, free_port, keyed_stub_server

pytestmark = pytest.mark.timeout(300)

GUARD = REPO_ROOT / "tests" / "support" / "sqlite_guard"
WEBHOOKS = """
[server.webhooks]
allowed_hosts = ["127.0.0.1"]
max_pending_deliveries = 100000
max_pending_deliveries_per_caller = 100000
"""
USERS = {"ann": ("user", "ann"), "ben": ("user", "ben")}
REQUESTS = 1600
AT_ONCE = 32


@pytest.fixture(scope="module")
def watched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Path]]:
    root = tmp_path_factory.mktemp("sqlite_threads")
    log = root / "sqlite-guard.log"
    path = os.pathsep.join(filter(None, [str(GUARD), str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    env = {"PYTHONPATH": path, "MAIL_SQLITE_GUARD_LOG": str(log)}
    with keyed_stub_server(root, USERS, extra=WEBHOOKS, env=env) as server:
        yield server, log


async def test_concurrent_webhook_requests_never_share_a_connection_between_threads(
    watched: tuple[ServerProcess, Path], tmp_path: Path
) -> None:
    server, log = watched
    receiver = ReceiverProcess(free_port(), tmp_path).start()
    try:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=120) as http:
            hooks = {}
            for user in USERS:
                r = await http.post(
                    "/webhooks",
                    json={"url": receiver.url(f"/{user}"), "events": ["*"]},
                    headers=auth(server.keys[user]),
                )
                assert r.status_code == 201, r.text
                hooks[user] = r.json()["id"]
            statuses: dict[int, int] = {}
            failures: list[str] = []
            gate = asyncio.Semaphore(AT_ONCE)

            async def one(n: int) -> None:
                user = ("ann", "ben")[n % 2]
                headers = auth(server.keys[user])
                hook = hooks[user]
                async with gate:
                    if n % 50 == 0:
                        r = await http.post("/message", json={"body": f"hi {n}"}, headers=headers)
                    elif n % 5 == 0:
                        r = await http.get(f"/webhooks/{hook}/deliveries", headers=headers)
                    else:
                        if n % 3 == 0:
                            headers["Idempotency-Key"] = f'"{uuid.uuid4()}"'
                        r = await http.post(f"/webhooks/{hook}/test", headers=headers)
                statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
                if r.status_code >= 300:
                    failures.append(f"{r.status_code} {r.text[:300]}")

            await asyncio.gather(*(one(n) for n in range(REQUESTS)))
        assert not failures, (statuses, failures[:5])
        assert sum(statuses.values()) == REQUESTS
        # The engine was delivering all along (the receiver got the tests).
        assert len(receiver.received()) > 0
    finally:
        receiver.stop()
    watched = Path(f"{log}.watched").read_text()
    assert str(server.directory / "data" / "mail.db") in watched.splitlines(), watched  # guard on
    breaches = log.read_text() if log.exists() else ""
    assert breaches == "", breaches[:4000]
    assert "InterfaceError" not in server.logs()
