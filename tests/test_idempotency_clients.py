"""MAILClient and the interswarm router send a fresh Idempotency-Key per call that starts
work and retry transient failures with that same key.

- MAILClient against a real `mail server` behind a proxy that resets the client's first
  connection right after passing its request on (the server runs it): the retry gets the
  one task's answer, and the caller has one task;
- MAILClient against a small loopback server answering 503 / 429 / 409 with Retry-After, or
  not answering in time: the same key on every attempt, bounded, nothing retried that must not be;
- the router against a peer that drops the first connection or answers 503.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import httpx
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from mail.client import MAILClient, MAILClientError
from mail.client_config import ClientConfig
from mail.core.message import create_agent_address, make_message, make_request
from mail.net import InterswarmError, InterswarmRouter, SwarmRegistry
from server_fixtures import ROOT_ALICE_BOB, ServerProcess, auth, keyed_stub_server
from support.resetting_proxy import ResettingProxy

pytestmark = pytest.mark.timeout(300)

FAST = ClientConfig(timeout=30, retries=3, retry_backoff=0.05, retry_max_delay=0.2)


# ------------------------------------------------------------------------- a real server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with keyed_stub_server(tmp_path_factory.mktemp("idem_client"), ROOT_ALICE_BOB) as srv:
        yield srv


async def test_mailclient_retries_a_reset_connection_and_gets_the_one_answer(
    server: ServerProcess,
) -> None:
    before = httpx.get(f"{server.base_url}/tasks", headers=auth(server.keys["alice"])).json()
    async with ResettingProxy(server.port) as proxy:
        async with MAILClient(
            f"http://127.0.0.1:{proxy.port}", server.keys["alice"], config=FAST
        ) as client:
            answer = await client.post_message("SLEEP 1 hello")
        assert proxy.connections >= 2  # the reset one and the retry(s)
    assert answer["response"] == "echo[alice]: hello"
    after = httpx.get(f"{server.base_url}/tasks", headers=auth(server.keys["alice"])).json()
    assert set(after) - set(before) == {answer["task_id"]}  # one task, not two


async def test_mailclient_without_retries_reports_the_reset(server: ServerProcess) -> None:
    async with ResettingProxy(server.port) as proxy:
        async with MAILClient(
            f"http://127.0.0.1:{proxy.port}", server.keys["bob"], config=FAST, retries=0
        ) as client:
            with pytest.raises(RuntimeError, match="request failed"):
                await client.post_message("hello")
        assert proxy.connections == 1


async def test_mailclient_stream_retries_the_opening(server: ServerProcess) -> None:
    async with ResettingProxy(server.port) as proxy:
        async with MAILClient(
            f"http://127.0.0.1:{proxy.port}", server.keys["bob"], config=FAST
        ) as client:
            names = []
            final: Any = None
            async for event in client.post_message_stream("SLEEP 0.5 streamed"):
                names.append(event.event)
                if event.event == "task_complete" and event.id is None:
                    final = event
                    break
        assert proxy.connections >= 2
    assert final is not None and '"echo[bob]: streamed"' in final.data
    assert names[0] == "new_message"  # attached to the task from its first event


# ------------------------------------------------------------------------- scripted answers


class Scripted:
    """A loopback server answering POST /message and GET /tasks from a list of replies,
    recording the Idempotency-Key of each request."""

    def __init__(self) -> None:
        self.replies: list[Any] = []
        self.keys: list[str | None] = []
        self.server: TestServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.port}"

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.keys.append(request.headers.get("Idempotency-Key"))
        reply = self.replies.pop(0) if self.replies else (200, {}, None)
        status, headers, delay, *body_delay = reply
        if delay:
            await asyncio.sleep(delay)
        body = (
            {"response": "done", "events": None, "task_id": "t"}
            if status == 200
            else {"detail": "no"}
        )
        if not body_delay:
            return web.json_response(body, status=status, headers=headers)
        # (status, headers, delay, body_delay): the status at once, the body that much later.
        raw = json.dumps(body).encode()
        response = web.StreamResponse(status=status, headers=headers)
        response.content_type = "application/json"
        response.content_length = len(raw)
        await response.prepare(request)
        await response.write(raw[:1])
        await asyncio.sleep(body_delay[0])
        await response.write(raw[1:])
        return response


@pytest.fixture
async def scripted() -> AsyncIterator[Scripted]:
    fake = Scripted()
    app = web.Application()
    app.router.add_post("/message", fake.handle)
    app.router.add_get("/tasks", fake.handle)
    fake.server = TestServer(app, host="127.0.0.1")
    await fake.server.start_server()
    yield fake
    await fake.server.close()


@pytest.mark.parametrize(
    "first",
    [
        (503, {}, None),
        (502, {}, None),
        (504, {"Retry-After": "0"}, None),
        (429, {"Retry-After": "0"}, None),
        (409, {"Retry-After": "0"}, None),  # "still working on your first attempt"
    ],
)
async def test_transient_answers_are_retried_with_the_same_key(
    scripted: Scripted, first: Any
) -> None:
    scripted.replies = [first, first, (200, {}, None)]
    async with MAILClient(scripted.url, "k", config=FAST) as client:
        assert (await client.post_message("hi"))["response"] == "done"
    assert len(scripted.keys) == 3
    assert len(set(scripted.keys)) == 1 and scripted.keys[0] is not None
    assert scripted.keys[0].startswith('"') and scripted.keys[0].endswith('"')
    async with MAILClient(scripted.url, "k", config=FAST) as client:
        await client.post_message("hi")
    assert scripted.keys[-1] != scripted.keys[0]  # a fresh key per call


async def test_a_still_working_answer_is_logged_as_not_a_retry(
    scripted: Scripted, caplog: pytest.LogCaptureFixture
) -> None:
    """A 409 with Retry-After is not counted against `retries` (docs/client.md#retries),
    and its log line says so: it read "HTTP 409; sending it again ... (retry 0 of 1)" at
    every ask, as if it were a retry."""
    scripted.replies = [(409, {"Retry-After": "0"}, None)] * 4 + [(200, {}, None)]
    with caplog.at_level(logging.INFO, logger="mail.client"):
        async with MAILClient(scripted.url, "k", config=FAST, retries=1) as client:
            assert (await client.post_message("hi"))["response"] == "done"
    lines = [r.getMessage() for r in caplog.records if r.name == "mail.client"]
    waits = [line for line in lines if "409" in line]
    assert len(waits) == 4, lines
    assert all("still working on an earlier attempt" in line for line in waits), waits
    assert not any("of 1)" in line for line in waits), waits  # no retry count


def _key_uuid(header: str | None) -> uuid.UUID:
    assert header is not None and header.startswith('"') and header.endswith('"')
    return uuid.UUID(header[1:-1])


async def test_mailclient_keys_are_time_ordered_uuids(scripted: Scripted) -> None:
    """Version 7 UUIDs (RFC 9562): the server appends such keys to its key index."""
    async with MAILClient(scripted.url, "k", config=FAST) as client:
        for _ in range(3):
            await client.post_message("hi")
            await asyncio.sleep(0.002)  # the next key in a later millisecond
    made = [_key_uuid(header) for header in scripted.keys]
    assert [key.version for key in made] == [7, 7, 7]
    assert all(key.variant == uuid.RFC_4122 for key in made)
    assert made == sorted(made, key=lambda key: key.bytes) and len(set(made)) == 3
    now_ms = time.time_ns() // 1_000_000
    assert now_ms - 60_000 < int.from_bytes(made[-1].bytes[:6]) <= now_ms  # the time in front


async def test_a_timeout_before_the_answer_is_retried(scripted: Scripted) -> None:
    scripted.replies = [(200, {}, 5.0), (200, {}, None)]
    config = ClientConfig(timeout=1.0, retries=2, retry_backoff=0.05, retry_max_delay=0.1)
    async with MAILClient(scripted.url, "k", config=config) as client:
        assert (await client.post_message("hi"))["response"] == "done"
    assert len(scripted.keys) == 2 and scripted.keys[0] == scripted.keys[1]


async def test_a_still_working_answer_after_a_timeout_is_asked_again_in_the_retrys_time(
    scripted: Scripted,
) -> None:
    """The first attempt timed out; the retry's 409s are waited out within the retry's own
    `timeout` (it used to raise the first of them: the call's one deadline was spent)."""
    still_working = (409, {"Retry-After": "0.1"}, None)
    scripted.replies = [(200, {}, 3.0), still_working, still_working, (200, {}, None)]
    config = ClientConfig(timeout=1.0, retries=1, retry_backoff=0.05, retry_max_delay=0.1)
    async with MAILClient(scripted.url, "k", config=config) as client:
        assert (await client.post_message("hi"))["response"] == "done"
    assert len(scripted.keys) == 4 and len(set(scripted.keys)) == 1


async def test_asking_while_the_server_is_still_working_is_bounded_by_the_retries(
    scripted: Scripted, caplog: pytest.LogCaptureFixture
) -> None:
    """An attempt whose `timeout` runs out among 409s counts as a timeout: the next one
    gets a `timeout` of its own, and after the last one the 409 is raised."""
    scripted.replies = [(409, {"Retry-After": "0.2"}, None)] * 100
    config = ClientConfig(timeout=1.0, retries=2, retry_backoff=0.05, retry_max_delay=0.1)
    started = time.monotonic()
    with caplog.at_level(logging.INFO, logger="mail.client"):
        async with MAILClient(scripted.url, "k", config=config) as client:
            with pytest.raises(MAILClientError) as raised:
                await client.post_message("hi")
    took = time.monotonic() - started
    assert raised.value.status == 409 and raised.value.retry_after == 0.2
    lines = [r.getMessage() for r in caplog.records if r.name == "mail.client"]
    counted = [line for line in lines if "of 2)" in line]
    assert len(counted) == 2 and "still working when the attempt timed out" in counted[0]
    # Three attempts of 1 s (each asking every 0.2 s), and the waits between them.
    assert 2.5 < took < 3 * 1.0 + 2 * 0.2 + 2.0, took
    assert 3 * 2 <= len(scripted.keys) <= 3 * 5 + 1 and len(set(scripted.keys)) == 1


@pytest.mark.parametrize("retries", [0, 1])
async def test_an_ask_cut_by_the_attempts_end_counts_as_still_working(
    scripted: Scripted, caplog: pytest.LogCaptureFixture, retries: int
) -> None:
    """The ask after a 409 gets what is left of the attempt; when that runs out before its
    answer, the server was still working when the attempt timed out: retried like the
    409, and after the last attempt the 409 is raised, not the ask's timeout."""
    scripted.replies = [(409, {"Retry-After": "0.7"}, None), (409, {"Retry-After": "0.7"}, 3.0)]
    config = ClientConfig(timeout=1.0, retries=retries, retry_backoff=0.05, retry_max_delay=0.1)
    with caplog.at_level(logging.INFO, logger="mail.client"):
        async with MAILClient(scripted.url, "k", config=config) as client:
            if retries == 0:
                with pytest.raises(MAILClientError) as raised:
                    await client.post_message("hi")
                assert raised.value.status == 409 and raised.value.retry_after == 0.7
            else:
                assert (await client.post_message("hi"))["response"] == "done"
    assert len(scripted.keys) == 2 + retries and len(set(scripted.keys)) == 1
    counted = [r.getMessage() for r in caplog.records if "of 1)" in r.getMessage()]
    assert len(counted) == retries
    assert all("still working when the attempt timed out" in line for line in counted)


async def test_an_answer_cut_short_after_a_409_is_not_taken_for_still_working(
    scripted: Scripted,
) -> None:
    """The ask got its answer's status (200) but the body outlasted the attempt: the server
    had answered, so what comes out is the body's timeout, not the earlier 409."""
    scripted.replies = [(409, {"Retry-After": "0.3"}, None), (200, {}, None, 5.0)]
    config = ClientConfig(timeout=1.0, retries=0)
    async with MAILClient(scripted.url, "k", config=config) as client:
        with pytest.raises(RuntimeError) as raised:
            await client.post_message("hi")
    assert not isinstance(raised.value, MAILClientError), raised.value
    assert "MAIL client request failed" in str(raised.value)
    assert isinstance(raised.value.__cause__, TimeoutError)


async def test_a_timer_other_than_the_attempts_end_is_not_taken_for_still_working(
    scripted: Scripted,
) -> None:
    """A caller's own session with a short sock_read and no config: the attempt (the
    config's `timeout`) has nearly all its time left when that timer cuts an ask, so it is
    an ordinary timeout, not "still working when the attempt timed out"."""
    scripted.replies = [(409, {"Retry-After": "0.2"}, None), (200, {}, 10.0)]
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_read=0.5))
    async with session, MAILClient(scripted.url, "k", session=session, retries=0) as client:
        assert client.config.timeout > 60  # the attempt's own end is far away
        with pytest.raises(RuntimeError) as raised:
            await client.post_message("hi")
    assert not isinstance(raised.value, MAILClientError), raised.value
    assert isinstance(raised.value.__cause__, TimeoutError)


async def test_an_ask_after_a_409_gets_what_is_left_of_the_attempts_timeout(
    scripted: Scripted,
) -> None:
    """The attempt's time bounds the asks after its 409s: an ask that gets no answer
    gives up when the attempt's `timeout` is over, not a whole `timeout` later (and the
    call, out of retries, raises the attempt's 409)."""
    scripted.replies = [(409, {"Retry-After": "1"}, None), (200, {}, 10.0)]
    config = ClientConfig(timeout=2.0, retries=0)
    started = time.monotonic()
    async with MAILClient(scripted.url, "k", config=config) as client:
        with pytest.raises(MAILClientError) as raised:
            await client.post_message("hi")
    assert raised.value.status == 409
    assert time.monotonic() - started < 2.0 + 0.9  # (the whole timeout again: 3 s)
    assert len(scripted.keys) == 2


@pytest.mark.parametrize(
    "reply",
    [(400, {}, None), (429, {}, None), (500, {}, None), (409, {}, None), (422, {}, None)],
)
async def test_answers_that_are_not_transient_are_not_retried(
    scripted: Scripted, reply: Any
) -> None:
    scripted.replies = [reply, (200, {}, None)]
    async with MAILClient(scripted.url, "k", config=FAST) as client:
        with pytest.raises(MAILClientError) as raised:
            await client.post_message("hi")
    assert raised.value.status == reply[0]
    assert len(scripted.keys) == 1


async def test_retries_are_bounded_and_reads_carry_no_key(scripted: Scripted) -> None:
    scripted.replies = [(503, {}, None)] * 10
    async with MAILClient(scripted.url, "k", config=FAST, retries=2) as client:
        with pytest.raises(MAILClientError):
            await client.post_message("hi")
        assert len(scripted.keys) == 3  # the call and 2 retries
        scripted.replies = [(503, {}, None), (200, {}, None)]
        with pytest.raises(MAILClientError):
            await client.get_tasks()  # reads start nothing: no key, not retried
    assert scripted.keys[-1] is None and len(scripted.keys) == 4


def test_retries_keep_the_original_constructor() -> None:
    # The original's MAILClient(url, api_key=None, session=None, config=None) still works.
    client = MAILClient("http://127.0.0.1:1", "key", None, ClientConfig(retries=5))
    assert client.retry_policy.retries == 5
    assert MAILClient("http://127.0.0.1:1", retries=0).retry_policy.retries == 0
    with pytest.raises(ValueError):
        MAILClient("http://127.0.0.1:1", retries=-1)


# ------------------------------------------------------------------------- the router


class Peer:
    """A peer's /interswarm/forward: drops the first `drops` connections, then answers
    `statuses` in turn (200 after them); records each request's Idempotency-Key."""

    def __init__(self) -> None:
        self.drops = 0
        self.statuses: list[int] = []
        self.keys: list[str | None] = []
        self.server: TestServer | None = None

    async def forward(self, request: web.Request) -> web.StreamResponse:
        self.keys.append(request.headers.get("Idempotency-Key"))
        await request.read()
        if self.drops:
            self.drops -= 1
            assert request.transport is not None
            request.transport.abort()  # no answer at all
            return web.Response()
        status = self.statuses.pop(0) if self.statuses else 200
        return web.json_response(
            {"status": "success"} if status == 200 else {"detail": "busy"}, status=status
        )

    async def root(self, _: web.Request) -> web.Response:
        return web.json_response({"protocol_version": "1.3", "swarm": {"public": True}})


@pytest.fixture
async def peer_router(tmp_path: Any) -> AsyncIterator[tuple[Peer, InterswarmRouter]]:
    for var in [v for v in os.environ if v.startswith("SWARM_AUTH_TOKEN")]:
        os.environ.pop(var)
    peer = Peer()
    app = web.Application()
    app.router.add_get("/", peer.root)
    app.router.add_post("/interswarm/forward", peer.forward)
    peer.server = TestServer(app, host="127.0.0.1")
    await peer.server.start_server()
    registry = SwarmRegistry(
        "alpha", "http://127.0.0.1:1", persistence_file=tmp_path / "alpha.json"
    )
    await registry.register_swarm("beta", f"http://127.0.0.1:{peer.server.port}", auth_token="t")
    router = InterswarmRouter(registry, "alpha", request_timeout=10)
    await router.start()
    yield peer, router
    await router.stop()
    await registry.aclose()
    await peer.server.close()


def _envelope(router: InterswarmRouter) -> Any:
    payload = make_request(
        "task-1",
        create_agent_address("supervisor@alpha"),
        create_agent_address("worker@beta"),
        "Q",
        "hello",
        sender_swarm="alpha",
        recipient_swarm="beta",
    )
    owner = "user:u1@alpha"
    return router.wrap_message(make_message(payload, "request"), "beta", owner, [owner])


async def test_router_resends_after_a_dropped_connection_and_a_503(
    peer_router: tuple[Peer, InterswarmRouter],
) -> None:
    peer, router = peer_router
    peer.drops, peer.statuses = 1, [503]
    answer = await router.send_interswarm(_envelope(router), "forward")
    assert answer["status"] == "success"
    assert len(peer.keys) == 3 and len(set(peer.keys)) == 1 and peer.keys[0] is not None
    await router.send_interswarm(_envelope(router), "forward")
    assert peer.keys[-1] != peer.keys[0]  # a fresh key per send
    assert _key_uuid(peer.keys[0]).version == _key_uuid(peer.keys[-1]).version == 7


async def test_router_gives_up_after_its_retries_and_on_a_400(
    peer_router: tuple[Peer, InterswarmRouter],
) -> None:
    peer, router = peer_router
    peer.statuses = [503, 503, 503, 503]
    with pytest.raises(InterswarmError, match="HTTP 503"):
        await router.send_interswarm(_envelope(router), "forward")
    assert len(peer.keys) == 1 + router.retries
    peer.keys.clear()
    peer.statuses = [400]
    with pytest.raises(InterswarmError, match="HTTP 400"):
        await router.send_interswarm(_envelope(router), "forward")
    assert len(peer.keys) == 1
