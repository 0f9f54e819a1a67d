"""While PostgreSQL is away, the webhook engine says so once with the reason, then reminds
every 30 s, and says when its rounds recover (docs/database.md: a warning when the first
attempt fails, a reminder every 30 s). It logged a warning with a full traceback at every
poll (poll_interval, 1 s by default), drowning the server log during an outage.
Real `mail server`, real PostgreSQL reached through a TCP proxy the test stops and starts.
"""

from __future__ import annotations

import time
from pathlib import Path

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
