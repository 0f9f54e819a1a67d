"""While PostgreSQL is away, the webhook engine says so once with the reason, then reminds
every 30 s, and says when its rounds recover (docs/database.md: a warning when the first
attempt fails, a reminder every 30 s). It logged a warning with a full traceback at every
poll (poll_interval, 1 s by default), drowning the server log during an outage.
Real `mail server`, real PostgreSQL reached through a TCP proxy the test stops and starts.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from tests.support.outage_server import server_behind_proxy
from tests.support.pg_schema import BASE_URL, scratch_schema, with_search_path

from server_fixtures import ServerProcess

pytestmark = pytest.mark.timeout(180)

FAILED = "webhooks: a delivery round failed"


def wait_for(server: ServerProcess, text: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in server.logs():
        assert time.monotonic() < deadline, f"no {text!r} in:\n{server.logs()[-3000:]}"
        time.sleep(0.1)


def test_an_outage_is_one_warning_then_a_recovery_line(tmp_path: Path) -> None:
    extra = "[server.webhooks]\npoll_interval = 0.2\n"
    with (
        scratch_schema("mail_hook_outage", BASE_URL) as schema,
        server_behind_proxy(
            tmp_path, with_search_path(BASE_URL, schema), "hooks", extra=extra
        ) as outage,
    ):
        server, proxy = outage.server, outage.proxy
        proxy.stop()  # PostgreSQL unreachable from here on
        wait_for(server, FAILED)
        failed_at = time.monotonic()
        # Some 20 polls while the database stays away (rounds retry every 0.2 s).
        while time.monotonic() - failed_at < 4.0:
            time.sleep(0.2)
        logs = server.logs()
        assert logs.count(FAILED) == 1, logs[-3000:]
        lines = logs.splitlines()
        at = next(i for i, x in enumerate(lines) if FAILED in x)
        assert "Error" in lines[at], lines[at]  # the reason, on the line itself
        assert not lines[at + 1].startswith("Traceback"), lines[at : at + 3]  # no traceback
        proxy.start()
        wait_for(server, "webhooks: delivery rounds recovered after ")


def test_webhook_routes_answer_503_while_postgresql_is_away(tmp_path: Path) -> None:
    """A webhook's creation, listing and delivery log while PostgreSQL is away: 503 with
    Retry-After, as `GET /tasks` is (each was a 500 with asyncpg's traceback in the log);
    back to normal once it returns."""
    with (
        scratch_schema("mail_hook_routes", BASE_URL) as schema,
        server_behind_proxy(tmp_path, with_search_path(BASE_URL, schema), "hooks") as outage,
    ):
        headers = {"Authorization": f"Bearer {outage.key}"}
        made = httpx.post(
            f"{outage.url}/webhooks",
            json={"url": "https://8.8.8.8/hook", "events": ["*"]},
            headers=headers,
            timeout=60,
        )
        assert made.status_code == 201, made.text
        hook = made.json()["id"]
        calls = {
            "POST /webhooks": lambda: httpx.post(
                f"{outage.url}/webhooks",
                json={"url": "https://8.8.8.8/other", "events": ["*"]},
                headers=headers,
                timeout=60,
            ),
            "GET /webhooks": lambda: httpx.get(
                f"{outage.url}/webhooks", headers=headers, timeout=60
            ),
            "GET deliveries": lambda: httpx.get(
                f"{outage.url}/webhooks/{hook}/deliveries", headers=headers, timeout=60
            ),
        }
        outage.proxy.stop()  # PostgreSQL unreachable from here on
        answers = {what: call() for what, call in calls.items()}
        outage.proxy.start()
        back = {what: call().status_code for what, call in calls.items()}
        logs = outage.server.logs()
    for what, answer in answers.items():
        assert answer.status_code == 503, (what, answer.text)
        assert answer.headers["Retry-After"] == "5", what
        assert "cannot be reached" in answer.json()["detail"], answer.text
    assert back == {"POST /webhooks": 201, "GET /webhooks": 200, "GET deliveries": 200}, back
    assert "unhandled error" not in logs, logs[-3000:]
