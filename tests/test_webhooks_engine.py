"""The delivery engine in-process (memory store, a real HTTP receiver on loopback): a span per
attempt with nothing secret on it, the quota on subscriptions; and a `mail server` with the
memory store (no task store: the instances' own outbox observer)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from tests.support.telemetry_fixtures import spans  # noqa: F401 - fixture
from tests.support.webhook_receiver import ReceiverProcess

from mail.store.webhooks_sql import SqliteWebhookStore
from mail.webhook_settings import WebhooksConfig
from mail.webhooks.service import WebhookService
from mail.webhooks.views import WebhookError
from server_fixtures import auth, free_port, keyed_stub_server

pytestmark = pytest.mark.timeout(120)

ALICE = ("user", "alice")


@pytest.fixture
async def receiver() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    got: list[dict[str, Any]] = []

    async def hook(request: web.Request) -> web.Response:
        got.append({"headers": dict(request.headers), "body": await request.text()})
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/{tail:.*}", hook)
    async with TestServer(app, host="127.0.0.1") as server:
        yield str(server.make_url("/hook/secret-token-in-path")), got


async def _service(**settings: Any) -> WebhookService:
    cfg = WebhooksConfig(allowed_hosts=["127.0.0.1"], poll_interval=0.1, **settings)
    service = WebhookService(cfg, SqliteWebhookStore(), "swarm")
    await service.start()
    return service


async def _wait(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)


async def test_each_attempt_is_a_span_without_secrets(
    spans: Any,  # noqa: F811
    receiver: tuple[str, list[dict[str, Any]]],
) -> None:
    url, got = receiver
    service = await _service()
    try:
        made = await service.create(ALICE, {"url": url, "events": ["*"]})
        delivery = await service.test(ALICE, made["id"])
        await _wait(lambda: got)
        await _wait(
            lambda: any(s.name == "mail.webhook.attempt" for s in spans.get_finished_spans())
        )
    finally:
        await service.close()
    (span,) = [s for s in spans.get_finished_spans() if s.name == "mail.webhook.attempt"]
    attributes = dict(span.attributes or {})
    assert attributes["mail.webhook.delivery_id"] == delivery["id"]
    assert attributes["mail.webhook.subscription_id"] == made["id"]
    assert attributes["mail.webhook.outcome"] == "delivered"
    assert attributes["http.response.status_code"] == 204
    text = json.dumps({k: str(v) for k, v in attributes.items()})
    assert "secret-token-in-path" not in text and made["secret"] not in text
    assert got[0]["headers"]["webhook-id"] == delivery["id"]


async def test_subscriptions_per_caller_are_bounded(
    receiver: tuple[str, list[dict[str, Any]]],
) -> None:
    url, _ = receiver
    service = await _service(max_subscriptions_per_caller=2)
    try:
        for _ in range(2):
            await service.create(ALICE, {"url": url, "events": ["*"]})
        with pytest.raises(WebhookError) as refused:
            await service.create(ALICE, {"url": url, "events": ["*"]})
        assert refused.value.status == 429
        assert "max_subscriptions_per_caller" in refused.value.detail
        # Another caller has a quota of their own.
        await service.create(("user", "bob"), {"url": url, "events": ["*"]})
    finally:
        await service.close()


async def test_a_burst_of_creates_cannot_pass_the_quota(
    receiver: tuple[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    from mail.store.webhooks_sql import SqliteWebhookStore

    url, _ = receiver
    cfg = WebhooksConfig(allowed_hosts=["127.0.0.1"], max_subscriptions_per_caller=2)
    # SQLite's reads and writes leave the event loop, so concurrent creates interleave.
    service = WebhookService(cfg, SqliteWebhookStore(tmp_path / "hooks.db"), "swarm")
    await service.start()
    try:
        results = await asyncio.gather(
            *(service.create(("user", "carol"), {"url": url, "events": ["*"]}) for _ in range(8)),
            return_exceptions=True,
        )
        made = [r for r in results if isinstance(r, dict)]
        refusals = [r for r in results if isinstance(r, WebhookError) and r.status == 429]
        assert len(made) == 2 and len(refusals) == 6, results
    finally:
        await service.close()


def test_a_server_without_a_task_store_delivers_too(tmp_path: Path) -> None:
    receiver = ReceiverProcess(free_port(), tmp_path).start()
    extra = '\n[server.webhooks]\nallowed_hosts = ["127.0.0.1"]\npoll_interval = 0.2\n'
    try:
        with keyed_stub_server(
            tmp_path,
            {"alice": ("user", "alice")},
            extra=extra,
            args=("--store", "memory"),
        ) as server:
            key = server.keys["alice"]
            r = httpx.post(
                server.base_url + "/webhooks",
                json={"url": receiver.url("/mem"), "events": ["task.completed"]},
                headers=auth(key),
                timeout=30,
            )
            assert r.status_code == 201, r.text
            receiver.secrets("/mem", r.json()["secret"])
            task = httpx.post(
                server.base_url + "/message", json={"body": "hi"}, headers=auth(key), timeout=30
            ).json()
            (got,) = receiver.wait_for(1, "/mem")
            assert (
                got["verified"]
                and ReceiverProcess.payload(got)["data"]["task_id"] == task["task_id"]
            )
    finally:
        receiver.stop()


async def test_answers_are_read_only_up_to_the_cap_and_redirects_not_followed() -> None:
    hits: list[str] = []

    async def big(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.Response(status=200, body=b"x" * 100_000)

    async def moved(request: web.Request) -> web.Response:
        hits.append(request.path)
        raise web.HTTPFound("/elsewhere")

    app = web.Application()
    app.router.add_post("/big", big)
    app.router.add_post("/moved", moved)
    app.router.add_post("/elsewhere", big)
    async with TestServer(app, host="127.0.0.1") as server:
        from mail.webhooks.transport import WebhookTransport

        transport = WebhookTransport(
            WebhooksConfig(allowed_hosts=["127.0.0.1"], max_response_bytes=512)
        )
        try:
            answer = await transport.post(str(server.make_url("/big")), b"{}", {})
            assert answer.status == 200 and len(answer.excerpt) == 512
            answer = await transport.post(str(server.make_url("/moved")), b"{}", {})
            assert answer.status == 302
        finally:
            await transport.aclose()
    assert hits == ["/big", "/moved"]  # never /elsewhere
