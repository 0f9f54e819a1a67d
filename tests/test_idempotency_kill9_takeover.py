"""Keyed requests on the short routes whose server dies after their work was stored and
before their key's outcome was: the retry gets the first attempt's work, not a second one.

The key is taken (committed) before the route runs, the work is stored, then the outcome. A
kill -9 between the last two leaves the key unfinished; once `idempotency_takeover_after` (3 s here) has passed the
retry takes the key over and ran the route again:

- ``POST /webhooks`` subscribed a second time, the first subscription's secret (in the
  answer the client never got) lost for good, though it stayed subscribed;
- ``rotate-secret`` rotated twice: the first attempt's secret became the "previous" one and
  the caller's original secret stopped signing at once instead of after the overlap;
- ``POST /task/cancel`` answered ``"cancelled": false`` (the task was cancelled already, by
  the first attempt), and ``DELETE /swarms/{name}`` a 404, where the first attempt's answer
  was "cancelled" / "removed".

The create and the rotation now name their work when the key is taken (the subscription id,
the new secret; kept with the key) and a takeover finds it; the cancel and the removal answer
as their first attempt would have. Deterministic on PostgreSQL (`support.held_outcome`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.support.fake_peer import fake_peer
from tests.support.held_outcome import cut_by_kill_9, retry, rows
from tests.support.pg_schema import BASE_URL, scratch_schema, with_search_path

from server_fixtures import (
    ServerProcess,
    auth,
    create_key,
    free_port,
    write_config,
    write_stub_swarms,
)

pytestmark = pytest.mark.timeout(300)

# A dead attempt's key is taken over after 3 s, not the default 60 s (the window is waited out).
WEBHOOKS = '\nidempotency_takeover_after = 3\n[server.webhooks]\nallowed_hosts = ["127.0.0.1"]\n'
SUBSCRIPTIONS = "SELECT subscription_id, secret, previous_secret FROM webhook_subscriptions"


class Servers:
    """A server on its own PostgreSQL schema, started again after a kill -9."""

    def __init__(self, directory: Path, url: str) -> None:
        write_stub_swarms(directory)
        keys = directory / "registries" / "keys.json"
        self.keys = {
            "wanda": create_key(keys, "user", "wanda"),
            "root": create_key(keys, "admin", "root"),
        }
        self.directory, self.url = directory, url
        self.server = self.start()

    def start(self) -> ServerProcess:
        port = free_port()
        config = write_config(self.directory, port=port, extra=WEBHOOKS)
        env = {"DATABASE_URL": self.url}
        return ServerProcess(self.directory, port, args=["--config", str(config)], env=env).start()

    def call(self, who: str, method: str, path: str, body: Any = None) -> httpx.Response:
        return httpx.request(
            method,
            f"{self.server.base_url}{path}",
            json=body,
            headers=auth(self.keys[who]),
            timeout=60,
        )

    def cut_and_retry(
        self, who: str, method: str, path: str, body: Any
    ) -> tuple[httpx.Response, dict[str, str]]:
        """The keyed request cut by a kill -9, the server started again, the retry."""
        headers = {**auth(self.keys[who]), "Idempotency-Key": f'"{uuid.uuid4()}"'}
        cut_by_kill_9(self.server, self.url, method, path, body, headers)
        self.server = self.start()
        return retry(self.server, method, path, body, headers), headers


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[Servers]:
    with scratch_schema("mail_idem_takeover", BASE_URL) as schema:
        made = Servers(tmp_path, with_search_path(BASE_URL, schema))
        try:
            yield made
        finally:
            made.server.stop()


def _replayed(
    servers: Servers, method: str, path: str, body: Any, headers: dict[str, str]
) -> bytes:
    again = httpx.request(
        method, f"{servers.server.base_url}{path}", json=body, headers=headers, timeout=60
    )
    assert again.headers.get("idempotent-replayed") == "true", again.text
    return again.content


@pytest.mark.parametrize("route", ["create", "rotate-secret"])
def test_a_webhook_change_cut_by_a_kill_9_is_not_made_twice(servers: Servers, route: str) -> None:
    spec = {"url": "http://127.0.0.1:9/hook", "events": ["*"]}
    path, body, original = "/webhooks", spec, None
    if route == "rotate-secret":
        made = servers.call("wanda", "POST", "/webhooks", spec).json()
        path, body, original = f"/webhooks/{made['id']}/rotate-secret", {}, made["secret"]
    answer, headers = servers.cut_and_retry("wanda", "POST", path, body)
    stored = rows(servers.url, SUBSCRIPTIONS)
    assert len(stored) == 1, stored  # one subscription
    if original is not None:  # rotated once: the caller's own secret is the previous one
        assert stored[0]["previous_secret"] == original
    assert answer.status_code < 300, answer.text
    got = json.loads(answer.content)
    assert (got["id"], got["secret"]) == (stored[0]["subscription_id"], stored[0]["secret"])
    assert _replayed(servers, "POST", path, body, headers) == answer.content


def test_a_cancel_cut_by_a_kill_9_answers_as_its_first_attempt(servers: Servers) -> None:
    task_id = str(uuid.uuid4())
    with httpx.stream(
        "POST",
        f"{servers.server.base_url}/message",
        json={"body": "SLEEP 60 long", "task_id": task_id, "stream": True},
        headers=auth(servers.keys["wanda"]),
        timeout=60,
    ) as response:
        assert response.status_code == 200
        next(response.iter_lines())  # the task runs
        body = {"task_id": task_id}
        answer, headers = servers.cut_and_retry("wanda", "POST", "/task/cancel", body)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"task_id": task_id, "cancelled": True, "state": "completed"}
    assert _replayed(servers, "POST", "/task/cancel", body, headers) == answer.content
    # Without a key (another request) the task was cancelled already.
    assert servers.call("wanda", "POST", "/task/cancel", body).json()["cancelled"] is False


def test_a_webhook_removal_cut_by_a_kill_9_answers_as_its_first_attempt(servers: Servers) -> None:
    # Found by an attack round: the retry of a keyed DELETE /webhooks/{id} whose first attempt
    # removed the subscription (its server killed before the 204 was recorded) ran the removal
    # again, and answered 404 "not found" where the first attempt's answer was 204.
    made = servers.call(
        "wanda", "POST", "/webhooks", {"url": "http://127.0.0.1:9/hook", "events": ["*"]}
    )
    assert made.status_code == 201, made.text
    path = f"/webhooks/{made.json()['id']}"
    answer, headers = servers.cut_and_retry("wanda", "DELETE", path, None)
    assert rows(servers.url, SUBSCRIPTIONS) == []  # removed, by the first attempt
    assert answer.status_code == 204, answer.text
    again = httpx.request("DELETE", f"{servers.server.base_url}{path}", headers=headers, timeout=60)
    assert again.status_code == 204, again.text
    assert again.headers.get("idempotent-replayed") == "true"
    # Without a key (another request) it is gone already.
    assert servers.call("wanda", "DELETE", path).status_code == 404


def test_a_swarm_removal_cut_by_a_kill_9_answers_as_its_first_attempt(servers: Servers) -> None:
    with fake_peer("peer-one") as peer_url:
        made = servers.call("root", "POST", "/swarms", {"name": "peer-one", "base_url": peer_url})
        assert made.status_code == 200, made.text
        answer, headers = servers.cut_and_retry("root", "DELETE", "/swarms/peer-one", None)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"status": "removed", "swarm_name": "peer-one"}
    assert _replayed(servers, "DELETE", "/swarms/peer-one", None, headers) == answer.content
    assert servers.call("root", "DELETE", "/swarms/peer-one").status_code == 404
