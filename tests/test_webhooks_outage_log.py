"""While PostgreSQL is away, the webhook engine says so once with the reason, then reminds
every 30 s, and says when its rounds recover (docs/database.md: a warning when the first
attempt fails, a reminder every 30 s). It logged a warning with a full traceback at every
poll (poll_interval, 1 s by default), drowning the server log during an outage.
Real `mail server`, real PostgreSQL reached through a TCP proxy the test stops and starts.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest
from tests.support.pg_schema import BASE_URL, scratch_schema, with_search_path
from tests.support.stub_agents import stub_swarms_json
from tests.support.tcp_proxy import via_proxy
from tests.test_store_outage_refusal import ThreadedProxy

from server_fixtures import ServerProcess, create_key, free_port, write_config

pytestmark = pytest.mark.timeout(180)

FAILED = "webhooks: a delivery round failed"


def wait_for(server: ServerProcess, text: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in server.logs():
        assert time.monotonic() < deadline, f"no {text!r} in:\n{server.logs()[-3000:]}"
        time.sleep(0.1)


def test_an_outage_is_one_warning_then_a_recovery_line(tmp_path: Path) -> None:
    with scratch_schema("mail_hook_outage", BASE_URL) as schema:
        database = with_search_path(BASE_URL, schema)
        swarm = f"hooks-{uuid.uuid4().hex[:8]}"
        (tmp_path / "swarms.json").write_text(json.dumps(stub_swarms_json(swarm)), "utf-8")
        create_key(tmp_path / "registries" / "keys.json", "user", "alice")
        proxy = ThreadedProxy(database)
        proxy.start()
        port = free_port()
        extra = "[server.webhooks]\npoll_interval = 0.2\n"
        config = write_config(tmp_path, port=port, swarm=swarm, extra=extra)
        server = ServerProcess(
            tmp_path,
            port,
            args=["--config", str(config)],
            env={"DATABASE_URL": via_proxy(database, proxy.proxy.port)},
        )
        server.start()
        try:
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
        finally:
            if not proxy.up:
                proxy.start()
            assert server.stop() == 0, server.logs()[-3000:]
            proxy.stop()
            proxy.close()
