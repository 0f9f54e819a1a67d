"""A streamed ``POST /message`` with its own ``webhook``, against real `mail server` processes
(stub agents; SQLite, the default store, and PostgreSQL) and a real webhook receiver process.

- A keyed stream's repeat (same ``Idempotency-Key``) names the same webhook in its headers
  as the first stream did (``MAIL-Webhook-Id`` / ``MAIL-Webhook-Secret``), as a plain
  message's repeat names it in its body; after a kill -9 and a restart too (SQLite and
  PostgreSQL).
- ``MAILClient.post_message_stream(..., webhook=...)`` gives the streamed message its own
  webhook, whose deliveries arrive signed with the secret the stream's headers named.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from standardwebhooks.webhooks import Webhook
from tests.support.pg_schema import BASE_URL, scratch_schema, with_search_path
from tests.support.webhook_receiver import ReceiverProcess

from mail.client import ClientConfig, MAILClient
from server_fixtures import (
    ServerProcess,
    auth,
    create_key,
    free_port,
    parse_sse_stream,
    write_config,
    write_stub_swarms,
)

pytestmark = pytest.mark.timeout(300)

WEBHOOKS = """
[server.webhooks]
allowed_hosts = ["127.0.0.1"]
retry_schedule = [0.2, 0.2]
retry_jitter = 0.1
poll_interval = 0.2
"""


class Deployment:
    """A stub-swarm server on its default SQLite file, or on PostgreSQL with `database_url`
    (restartable on the same port), and a webhook receiver."""

    def __init__(self, directory: Path, database_url: str | None = None) -> None:
        self.directory = directory
        write_stub_swarms(directory)
        self.key = create_key(directory / "registries" / "keys.json", "user", "alice")
        self.port = free_port()
        self.config = write_config(directory, port=self.port, extra=WEBHOOKS)
        self.env = {"DATABASE_URL": database_url} if database_url else {}
        self.receiver = ReceiverProcess(free_port(), directory).start()
        self.server: ServerProcess | None = None

    def start(self) -> ServerProcess:
        args = ["--config", str(self.config)]
        self.server = ServerProcess(self.directory, self.port, args=args, env=self.env)
        return self.server.start()

    def kill9(self) -> None:
        assert self.server is not None and self.server.proc is not None
        self.server.proc.kill()
        self.server.proc.wait(30)

    def close(self) -> None:
        try:
            if self.server is not None and self.server.proc is not None:
                assert self.server.stop(timeout=60) in (0, None), self.server.logs()[-3000:]
        finally:
            self.receiver.stop()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stream(self, payload: dict[str, Any], key: str) -> tuple[httpx.Headers, list[Any]]:
        """A keyed streamed POST /message read to its closing event: (headers, events)."""
        headers = {**auth(self.key), "Idempotency-Key": key}
        events = []
        with httpx.stream(
            "POST", f"{self.base_url}/message", json=payload, headers=headers, timeout=60
        ) as response:
            assert response.status_code == 200, response.read()
            for event in parse_sse_stream(response):
                if event.event != "ping":
                    events.append(event)
                if event.event in ("task_complete", "task_error") and event.id is None:
                    break
        return response.headers, events

    def post(self, payload: dict[str, Any], key: str) -> httpx.Response:
        headers = {**auth(self.key), "Idempotency-Key": key}
        return httpx.post(f"{self.base_url}/message", json=payload, headers=headers, timeout=60)


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[Deployment]:
    made = Deployment(tmp_path)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture(params=["sqlite", "postgres"])
def durable_deployment(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Deployment]:
    """The default SQLite file, or a PostgreSQL schema of this test's own."""
    with contextlib.ExitStack() as stack:
        url = None
        if request.param == "postgres":
            schema = stack.enter_context(scratch_schema("mail_hook_replay", BASE_URL))
            url = with_search_path(BASE_URL, schema)
        made = Deployment(tmp_path, url)
        try:
            yield made
        finally:
            made.close()


def _named(headers: httpx.Headers) -> tuple[str | None, str | None]:
    return headers.get("mail-webhook-id"), headers.get("mail-webhook-secret")


def test_a_keyed_streams_repeat_names_its_webhook_before_and_after_a_kill_9(
    durable_deployment: Deployment,
) -> None:
    deployment = durable_deployment
    deployment.start()
    hook = {"url": deployment.receiver.url("/streamed")}
    streamed = {"body": "stream with a hook", "stream": True, "webhook": hook}
    plain = {"body": "plain with a hook", "webhook": {"url": deployment.receiver.url("/plain")}}
    stream_key, plain_key = (f'"{uuid.uuid4()}"' for _ in range(2))

    first_headers, first_events = deployment.stream(streamed, stream_key)
    first = _named(first_headers)
    assert first[0] is not None and first[0].startswith("wh_"), first_headers
    assert first[1] is not None and first[1].startswith("whsec_"), first_headers
    task_id = first_events[-1].json()["task_id"]
    plain_first = deployment.post(plain, plain_key)
    assert plain_first.status_code == 200, plain_first.text

    again_headers, again_events = deployment.stream(streamed, stream_key)
    assert again_headers.get("idempotent-replayed") == "true"
    assert again_events[-1].json()["task_id"] == task_id
    assert _named(again_headers) == first  # the same id, and the secret shown again

    deployment.kill9()
    # On SQLite: the default file (no store configured), which the restart reads.
    assert deployment.env or (deployment.directory / "data" / "mail.db").is_file()
    deployment.start()
    plain_again = deployment.post(plain, plain_key)
    assert plain_again.headers.get("idempotent-replayed") == "true"
    assert plain_again.json()["webhook"] == plain_first.json()["webhook"]
    after_headers, after_events = deployment.stream(streamed, stream_key)
    assert after_headers.get("idempotent-replayed") == "true"
    assert after_events[-1].json()["task_id"] == task_id
    assert _named(after_headers) == first

    # A secret the caller chose is not echoed by the first stream nor by its repeats.
    chosen = {
        **streamed,
        "webhook": {**hook, "secret": "whsec_Y2hvc2VuLWJ5LXRoZS1jYWxsZXItMzItYnl0ZXMhISE="},
    }
    key = f'"{uuid.uuid4()}"'
    own = _named(deployment.stream(chosen, key)[0])
    assert own[0] is not None and own[1] is None
    assert _named(deployment.stream(chosen, key)[0]) == own
    listed = httpx.get(f"{deployment.base_url}/webhooks", headers=auth(deployment.key), timeout=30)
    ids = [w["id"] for w in listed.json()["webhooks"]]
    assert sorted(ids) == sorted([first[0], plain_first.json()["webhook"]["id"], own[0]])


async def test_client_post_message_stream_takes_a_webhook(deployment: Deployment) -> None:
    deployment.start()
    url = deployment.receiver.url("/client-stream")
    async with MAILClient(
        deployment.base_url, api_key=deployment.key, config=ClientConfig(timeout=60)
    ) as client:
        stream = await client.post_message_stream("streamed by the client", webhook={"url": url})
        hook = stream.webhook
        events = [event async for event in stream]
        # A message without one names none.
        plain = await client.post_message_stream("no hook here")
        assert plain.webhook is None
        async for _ in plain:
            pass
    assert events[-1].event == "task_complete"
    task_id = json.loads(events[-1].data)["task_id"]
    assert hook is not None and hook["id"].startswith("wh_"), hook
    assert hook["secret"] is not None and hook["secret"].startswith("whsec_"), hook

    deadline = time.monotonic() + 60
    while True:
        got = deployment.receiver.received("/client-stream")
        types = {ReceiverProcess.payload(entry)["type"] for entry in got}
        if "task.completed" in types or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert "task.completed" in types, got
    signer = Webhook(hook["secret"])
    for entry in got:  # signed with the secret the stream's headers named, for this task only
        signer.verify(entry["body"].encode(), entry["headers"])
        assert ReceiverProcess.payload(entry)["data"]["task_id"] == task_id
