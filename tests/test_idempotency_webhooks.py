"""``Idempotency-Key`` on the webhook routes of a real `mail server` (stub agents), and a keyed ``POST /message`` whose own ``webhook`` is
refused: its key is free again, as for any request refused before it did anything.

A retried ``POST /webhooks`` must not create a second subscription (the client would never
learn the first one's secret), and a retried rotate-secret must not rotate twice (the secret
the first answer carried, and the client lost, would already be gone).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from server_fixtures import ServerProcess, auth, keyed_stub_server

pytestmark = pytest.mark.timeout(300)

WEBHOOKS = '\n[server.webhooks]\nallowed_hosts = ["127.0.0.1"]\n'
USERS = {name: ("user", name) for name in ("wanda", "walt", "wes")}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with keyed_stub_server(
        tmp_path_factory.mktemp("idem_webhooks"),
        USERS,
        extra=WEBHOOKS,
    ) as srv:
        yield srv


def call(
    server: ServerProcess, who: str, method: str, path: str, body: Any, key: str | None
) -> httpx.Response:
    headers = auth(server.keys[who])
    if key is not None:
        headers["Idempotency-Key"] = key
    return httpx.request(method, f"{server.base_url}{path}", json=body, headers=headers, timeout=30)


def new_key() -> str:
    return f'"{uuid.uuid4()}"'


def webhooks_of(server: ServerProcess, who: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = call(server, who, "GET", "/webhooks", None, None).json()[
        "webhooks"
    ]
    return found


def test_a_retried_webhook_create_returns_the_first_subscription(server: ServerProcess) -> None:
    key = new_key()
    spec = {"url": "http://127.0.0.1:9/hook", "events": ["*"]}
    first = call(server, "wanda", "POST", "/webhooks", spec, key)
    assert first.status_code == 201, first.text
    again = call(server, "wanda", "POST", "/webhooks", spec, key)
    assert again.status_code == 201, again.text
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json() == first.json()  # the same id and the same secret, shown again
    assert [w["id"] for w in webhooks_of(server, "wanda")] == [first.json()["id"]]
    other = call(server, "wanda", "POST", "/webhooks", {**spec, "url": "http://127.0.0.1:9/b"}, key)
    assert other.status_code == 422, other.text
    assert len(webhooks_of(server, "wanda")) == 1


def test_a_retried_rotate_secret_rotates_once(server: ServerProcess) -> None:
    made = call(
        server, "walt", "POST", "/webhooks", {"url": "http://127.0.0.1:9/r", "events": ["*"]}, None
    )
    assert made.status_code == 201, made.text
    path = f"/webhooks/{made.json()['id']}/rotate-secret"
    key = new_key()
    first = call(server, "walt", "POST", path, {"overlap_seconds": 0}, key)
    assert first.status_code == 200, first.text
    again = call(server, "walt", "POST", path, {"overlap_seconds": 0}, key)
    assert again.status_code == 200 and again.headers["idempotent-replayed"] == "true"
    assert again.json()["secret"] == first.json()["secret"] != made.json()["secret"]
    # Only one rotation happened: a rotation without a key now replaces the first one's
    # secret (no overlap), and the webhook's record changed once per rotation.
    fresh = call(server, "walt", "POST", path, {"overlap_seconds": 0}, None)
    assert fresh.json()["secret"] not in (first.json()["secret"], made.json()["secret"])


def test_a_keyed_delete_replays_its_answer(server: ServerProcess) -> None:
    made = call(
        server, "walt", "POST", "/webhooks", {"url": "http://127.0.0.1:9/d", "events": ["*"]}, None
    )
    path = f"/webhooks/{made.json()['id']}"
    key = new_key()
    assert call(server, "walt", "DELETE", path, None, key).status_code == 204
    again = call(server, "walt", "DELETE", path, None, key)
    assert again.status_code == 204 and again.headers["idempotent-replayed"] == "true"
    assert call(server, "walt", "DELETE", path, None, None).status_code == 404


def test_a_refused_message_webhook_frees_the_key(server: ServerProcess) -> None:
    """The message's webhook is checked after the key was taken (the task id is named by
    then): a refusal must give the key back, so the corrected request may use it."""
    key = new_key()
    refused = call(
        server,
        "wes",
        "POST",
        "/message",
        {"body": "x", "webhook": {"url": "http://10.9.9.9/"}},
        key,
    )
    assert refused.status_code == 400 and "webhook.url" in refused.json()["detail"], refused.text
    assert call(server, "wes", "GET", "/tasks", None, None).json() == {}
    corrected = call(server, "wes", "POST", "/message", {"body": "x"}, key)
    assert corrected.status_code == 200, corrected.text
    assert "idempotent-replayed" not in corrected.headers
