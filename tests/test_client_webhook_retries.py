"""MAILClient's webhook calls change work on the server (a subscription, its secret, its
deliveries), so like `post_message` they carry a fresh Idempotency-Key and are retried with
it after a transient failure.

A real `mail server` behind a proxy that resets the client's first connection right after
passing its request on (the server does the work, the client never hears): the call still
returns the server's answer, and the server did the work once (one webhook, not two with two
secrets).
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from mail.client import MAILClient
from mail.client_config import ClientConfig
from server_fixtures import ROOT_ALICE_BOB, ServerProcess, auth, keyed_stub_server
from support.resetting_proxy import ResettingProxy

pytestmark = pytest.mark.timeout(300)

FAST = ClientConfig(timeout=30, retries=3, retry_backoff=0.05, retry_max_delay=0.2)
HOOK = "http://127.0.0.1:9/hook"  # never called: no task runs in these tests
ALLOW_LOOPBACK = '\n[server.webhooks]\nallowed_hosts = ["127.0.0.1"]\n'


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    directory = tmp_path_factory.mktemp("client_webhooks")
    with keyed_stub_server(directory, ROOT_ALICE_BOB, extra=ALLOW_LOOPBACK) as srv:
        yield srv


def _webhooks(server: ServerProcess, who: str) -> list[dict[str, object]]:
    answer = httpx.get(f"{server.base_url}/webhooks", headers=auth(server.keys[who]), timeout=30)
    assert answer.status_code == 200, answer.text
    return list(answer.json()["webhooks"])


async def test_create_webhook_survives_a_reset_connection_and_makes_one(
    server: ServerProcess,
) -> None:
    async with ResettingProxy(server.port) as proxy:
        async with MAILClient(
            f"http://127.0.0.1:{proxy.port}", server.keys["alice"], config=FAST
        ) as client:
            made = await client.create_webhook(HOOK, ["task.completed"])
        assert proxy.connections >= 2  # the reset one and the retry
    assert str(made["secret"]).startswith("whsec_")
    assert [hook["id"] for hook in _webhooks(server, "alice")] == [made["id"]]


async def test_webhook_changes_survive_a_reset_connection(server: ServerProcess) -> None:
    async with MAILClient(server.base_url, server.keys["bob"], config=FAST) as direct:
        made = await direct.create_webhook(HOOK, ["task.completed"])
    hook_id = str(made["id"])
    async with ResettingProxy(server.port) as proxy:
        async with MAILClient(
            f"http://127.0.0.1:{proxy.port}", server.keys["bob"], config=FAST
        ) as client:
            changed = await client.update_webhook(hook_id, description="retried")
        assert proxy.connections >= 2
    assert changed["description"] == "retried"
    async with ResettingProxy(server.port) as proxy:
        async with MAILClient(
            f"http://127.0.0.1:{proxy.port}", server.keys["bob"], config=FAST
        ) as client:
            rotated = await client.rotate_webhook_secret(hook_id, overlap_seconds=60)
        assert proxy.connections >= 2
    assert rotated["secret"] != made["secret"]
    async with ResettingProxy(server.port) as proxy:
        async with MAILClient(
            f"http://127.0.0.1:{proxy.port}", server.keys["bob"], config=FAST
        ) as client:
            await client.delete_webhook(hook_id)  # the retry is told 204 again, not 404
        assert proxy.connections >= 2
    assert _webhooks(server, "bob") == []
