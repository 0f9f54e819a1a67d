"""On PostgreSQL the delivery log lists a task's deliveries once its answer is out: a real
`mail server` with ``DATABASE_URL`` (docs/database.md), in a schema of its own.

The answer of ``POST /message`` comes once the task's events and their outbox rows are
committed; their deliveries are made from the outbox a moment later, by the delivery
engine. ``GET /webhooks/{id}/deliveries`` right after the answer missed that task's delivery
5 to 10 times in 10 (it appeared 0-70 ms later); the read now makes them first.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from tests.support.pg_schema import BASE_URL, scratch_schema, with_search_path

from server_fixtures import ServerProcess, auth, free_port, keyed_stub_server

pytestmark = pytest.mark.timeout(240)

WEBHOOKS = '\n[server.webhooks]\nallowed_hosts = ["127.0.0.1"]\nretry_schedule = [600]\n'


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("webhooks_pg_reads")
    with scratch_schema("webhooks_reads") as schema:
        env = {"DATABASE_URL": with_search_path(BASE_URL, schema)}
        keys = {"alice": ("user", "alice")}
        with keyed_stub_server(root, keys, extra=WEBHOOKS, env=env) as running:
            yield running


def test_the_delivery_log_lists_a_task_as_soon_as_its_answer_is_out(server: ServerProcess) -> None:
    headers = auth(server.keys["alice"])
    with httpx.Client(base_url=server.base_url, headers=headers, timeout=60) as http:
        url = f"http://127.0.0.1:{free_port()}/hook"  # nothing listens: it stays pending
        r = http.post("/webhooks", json={"url": url, "events": ["task.completed"]})
        assert r.status_code == 201, r.text
        hook = r.json()["id"]
        missing = []
        for n in range(10):
            r = http.post("/message", json={"body": f"task {n}"})
            assert r.status_code == 200, r.text
            task_id = r.json()["task_id"]
            listed = http.get(f"/webhooks/{hook}/deliveries").json()["deliveries"]
            if task_id not in {d["task_id"] for d in listed}:
                missing.append(n)
        assert missing == [], f"not listed right after the answer: messages {missing}"
        assert len(http.get(f"/webhooks/{hook}/deliveries").json()["deliveries"]) == 10
