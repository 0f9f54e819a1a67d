"""MAILClient against a fake MAIL server on loopback: requests sent, answers read, errors mapped."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from collections.abc import Iterator

import aiohttp
import pytest
from sse_starlette import ServerSentEvent

from mail.client import ClientConfig, MAILClient, MAILClientError, MAILEventStream
from test_client_fakes import ADMIN_KEY, AGENT_KEY, USER_KEY, FakeMailServer

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def server() -> Iterator[FakeMailServer]:
    fake = FakeMailServer().start()
    yield fake
    fake.stop()


def _client(server: FakeMailServer, key: str | None = USER_KEY, **config: object) -> MAILClient:
    return MAILClient(server.url, api_key=key, config=ClientConfig(**config))  # type: ignore[arg-type]


ENVELOPE = {
    "message_id": "m-1",
    "source_swarm": "swarm-b",
    "target_swarm": "fake-swarm",
    "timestamp": "2025-01-01T00:00:00Z",
    "payload": {"task_id": "t-9", "body": "hi"},
    "msg_type": "request",
    "auth_token": "tok",
    "task_owner": "user:u@swarm-b",
    "task_contributors": ["user:u@swarm-b"],
    "metadata": {},
}


# ---------------------------------------------------------------- service and identity


async def test_public_routes_and_headers(server: FakeMailServer) -> None:
    async with MAILClient(server.url + "/", config=ClientConfig()) as client:
        assert client.base_url == server.url  # trailing slash dropped
        root = await client.ping()
        health = await client.get_health()
    assert root["protocol_version"] == "1.3"
    assert health["status"] == "healthy"
    headers = server.last("/health").headers
    assert headers["Accept"] == "application/json"
    assert headers["User-Agent"].startswith("MAIL-Client/")
    assert "Authorization" not in headers


async def test_authenticated_routes_send_bearer_key(server: FakeMailServer) -> None:
    async with _client(server) as client:
        me = await client.get_whoami()
        status = await client.get_status()
    assert me == {"id": "alice-0123456789", "role": "user"}
    assert status["user_mail_ready"] is True
    assert server.last("/status").headers["Authorization"] == f"Bearer {USER_KEY}"


async def test_update_health_as_admin(server: FakeMailServer) -> None:
    async with _client(server, ADMIN_KEY) as client:
        result = await client.update_health("degraded")
    assert result["status"] == "degraded"
    assert server.last("/health").body == {"status": "degraded"}


async def test_login_uses_whoami_and_remembers_identity(server: FakeMailServer) -> None:
    async with _client(server, None) as client:
        identity = await client.login(ADMIN_KEY)
        assert identity["role"] == "admin"
        assert (client.api_key, client.user_role, client.user_id) == (ADMIN_KEY, "admin", "root")
        with pytest.raises(RuntimeError, match="MAIL client login failed: .*401.*invalid API key"):
            await client.login("wrong-key")
        # A failed login forgets the key and the previous identity.
        assert (client.api_key, client.user_role, client.user_id) == (None, None, None)
        await client.login(USER_KEY)
        client.logout()
        assert client.api_key is None and client.user_id is None
    assert [r.path for r in server.requests].count("/whoami") == 3
    assert not any(r.path.startswith("/auth") for r in server.requests)


# ---------------------------------------------------------------- messaging


async def test_post_message_body_and_kwargs(server: FakeMailServer) -> None:
    async with _client(server) as client:
        result = await client.post_message(
            "Hello",
            subject="Greeting",
            entrypoint="supervisor",
            show_events=True,
            task_id="task-1",
            resume_from="user_response",
            breakpoint_tool_call_result={"content": "sunny"},
            max_steps=5,
        )
    assert result["response"] == "echo: Hello"
    assert result["events"][0]["event"] == "new_message"
    assert server.last("/message").body == {
        "subject": "Greeting",
        "body": "Hello",
        "msg_type": "request",
        "entrypoint": "supervisor",
        "task_id": "task-1",
        "resume_from": "user_response",
        "kwargs": {"breakpoint_tool_call_result": {"content": "sunny"}, "max_steps": 5},
        "show_events": True,
    }


async def test_post_message_defaults_omit_unset_fields(server: FakeMailServer) -> None:
    async with _client(server) as client:
        await client.post_message("Hi")
    assert server.last("/message").body == {
        "subject": "New Message",
        "body": "Hi",
        "msg_type": "request",
        "show_events": False,
    }


async def test_stream_yields_each_event_as_its_frame_arrives(server: FakeMailServer) -> None:
    received: list[ServerSentEvent] = []
    async with _client(server) as client:
        started = time.monotonic()
        stream = await client.post_message_stream("Stream this", task_id="s-1")
        async for event in stream:
            if not received:
                # The server is parked until we release it: seeing this event now proves
                # the client did not wait for the end of the response.
                assert event.event == "new_message"
                assert not server.stream_gate.is_set()
                assert time.monotonic() - started < 3
                server.stream_gate.set()
            received.append(event)
    names = [e.event for e in received]
    assert names == ["new_message", "tool_call", "ping", "task_complete"]
    assert "gate_timeout" not in names
    assert all(isinstance(e, ServerSentEvent) for e in received)
    tool_call = received[1]
    assert tool_call.data == "line one\nline two s-1"
    assert (tool_call.id, tool_call.retry, tool_call.comment) == ("7", 2500, None)
    final = json.loads(received[-1].data)
    assert final["response"] == "echo: Stream this"
    sent = server.last("/message")
    assert sent.body["stream"] is True and sent.body["task_id"] == "s-1"
    assert sent.headers["Accept"] == "text/event-stream"


async def test_stream_can_be_iterated_without_await(server: FakeMailServer) -> None:
    server.stream_gate.set()
    async with _client(server) as client:
        names = [e.event async for e in client.post_message_stream("direct")]
    assert names[-1] == "task_complete"


async def test_leaving_a_stream_early_closes_the_connection(server: FakeMailServer) -> None:
    async with _client(server) as client:
        async with await client.post_message_stream("hang") as stream:
            async for event in stream:
                assert event.event == "new_message"
                break
        assert await asyncio.to_thread(server.stream_disconnected.wait, 5)
        # The client stays usable afterwards.
        assert (await client.get_health())["status"] == "healthy"


async def test_stream_http_error_is_raised_by_the_await(server: FakeMailServer) -> None:
    async with _client(server, "wrong-key") as client:
        with pytest.raises(MAILClientError) as caught:
            await client.post_message_stream("x")
    assert caught.value.status == 401


async def test_stream_timeout_raises_runtime_error_after_delivered_events(
    server: FakeMailServer,
) -> None:
    seen: list[str] = []
    async with _client(server, timeout=0.6) as client:
        with pytest.raises(RuntimeError, match="stream failed") as caught:
            async for event in client.post_message_stream("hang"):
                seen.append(event.event)
    assert seen == ["new_message"]
    assert isinstance(caught.value.__cause__, TimeoutError)


async def test_tasks_and_task_lookup(server: FakeMailServer) -> None:
    async with _client(server) as client:
        await client.post_message("remember me", task_id="t-42")
        tasks = await client.get_tasks()
        task = await client.get_task("t-42")
        with pytest.raises(MAILClientError) as caught:
            await client.get_task("nope")
    assert "t-42" in tasks
    assert task["task_id"] == "t-42"
    sent = server.last("/task")
    assert sent.body == {"task_id": "nope"} and sent.query == {"task_id": "nope"}
    assert caught.value.status == 404
    assert caught.value.detail == "task 'nope' not found"
    assert str(caught.value) == "HTTP request failed with status code 404: 'task 'nope' not found'"
    assert isinstance(caught.value, RuntimeError)


# ---------------------------------------------------------------- registry and interswarm


async def test_swarm_registry_methods(server: FakeMailServer) -> None:
    async with _client(server, ADMIN_KEY) as client:
        swarms = await client.get_swarms()
        registered = await client.register_swarm(
            "remote", "http://remote:8000", auth_token="t", volatile=False, metadata={"k": 1}
        )
        dumped = await client.dump_swarm()
        loaded = await client.load_swarm_from_json(json.dumps({"name": "new-swarm"}))
    assert swarms["swarms"][0]["swarm_name"] == "fake-swarm"
    assert registered == {"status": "registered", "swarm_name": "remote"}
    assert server.last("/swarms").body == {
        "name": "remote",
        "base_url": "http://remote:8000",
        "auth_token": "t",
        "volatile": False,
        "metadata": {"k": 1},
    }
    assert dumped["status"] == "dumped"
    assert loaded == {"status": "success", "swarm_name": "new-swarm"}
    assert server.last("/swarms/load").body == {"json": '{"name": "new-swarm"}'}


async def test_send_interswarm_message_omits_unset_fields(server: FakeMailServer) -> None:
    async with _client(server) as client:
        result = await client.send_interswarm_message(
            "hello there", USER_KEY, targets=["analyst@swarm-b"], stream=True
        )
        with pytest.raises(TypeError, match="list"):
            await client.send_interswarm_message("x", USER_KEY, targets="analyst@b")  # type: ignore[arg-type]
    assert result["response"]["message"]["body"] == "remote ok"
    assert server.last("/interswarm/message").body == {
        "body": "hello there",
        "user_token": USER_KEY,
        "targets": ["analyst@swarm-b"],
        "stream": True,
    }


async def test_interswarm_envelopes_go_to_forward_and_back(server: FakeMailServer) -> None:
    async with _client(server, AGENT_KEY) as client:
        forwarded = await client.post_interswarm_message(ENVELOPE)
        returned = await client.post_interswarm_response(ENVELOPE)
        with pytest.raises(ValueError, match="envelope"):
            await client.post_interswarm_response({"body": "not an envelope"})
    assert forwarded["local_runner"] == "swarm:swarm-b@fake-swarm"
    assert returned["task_id"] == "t-9"
    assert server.last("/interswarm/forward").body == {"message": ENVELOPE}
    assert server.last("/interswarm/back").body == {"message": ENVELOPE}


async def test_post_interswarm_message_passes_plain_bodies_through(server: FakeMailServer) -> None:
    body = {"user_token": USER_KEY, "body": "hi", "targets": ["a@b"]}
    async with _client(server) as client:
        result = await client.post_interswarm_message(body)
    assert result["response"]["message"]["body"] == "remote ok"
    assert server.last("/interswarm/message").body == body


async def test_debug_post_responses_returns_openai_response(server: FakeMailServer) -> None:
    async with _client(server) as client:
        response = await client.debug_post_responses(
            [{"role": "user", "content": "Plan"}],
            [],
            instructions="be brief",
            parallel_tool_calls=True,
            temperature=0,
        )
    assert response.output[0].content[0].text == "planned"
    assert server.last("/responses").body == {
        "input": [{"role": "user", "content": "Plan"}],
        "tools": [],
        "instructions": "be brief",
        "parallel_tool_calls": True,
        "kwargs": {"temperature": 0},
    }


# ---------------------------------------------------------------- error mapping


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_connection_refused_is_a_chained_runtime_error() -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    async with MAILClient(url, config=ClientConfig()) as client:
        with pytest.raises(RuntimeError, match="MAIL client request failed: GET") as caught:
            await client.get_health()
    assert isinstance(caught.value.__cause__, aiohttp.ClientConnectionError)
    assert not isinstance(caught.value, MAILClientError)


async def test_timeout_is_a_chained_runtime_error(server: FakeMailServer) -> None:
    async with _client(server, timeout=0.3) as client:
        with pytest.raises(RuntimeError, match="timed out") as caught:
            await client._request_json("GET", "/slow")
    assert isinstance(caught.value.__cause__, TimeoutError)


async def test_non_json_answer_is_a_value_error_with_content_type_and_body(
    server: FakeMailServer,
) -> None:
    server.health_as_html = True
    async with _client(server) as client:
        with pytest.raises(ValueError) as caught:
            await client.get_health()
    message = str(caught.value)
    assert "text/html" in message and "not an API" in message


async def test_plain_text_error_body_becomes_the_detail(server: FakeMailServer) -> None:
    async with _client(server) as client:
        with pytest.raises(MAILClientError) as caught:
            await client._request_json("GET", "/crash")
    assert caught.value.status == 502
    assert caught.value.detail == "Bad Gateway from a proxy"


async def test_role_error_carries_server_detail(server: FakeMailServer) -> None:
    async with _client(server, USER_KEY) as client:
        with pytest.raises(MAILClientError) as caught:
            await client.dump_swarm()
    assert (caught.value.status, caught.value.detail) == (403, "invalid role")


async def test_stream_route_answering_json_is_a_value_error(server: FakeMailServer) -> None:
    async with _client(server) as client:
        # A JSON route standing in for a misbehaving server that ignores stream=true.
        stream = MAILEventStream(lambda: client._open("GET", "/health"), "GET /health")
        with pytest.raises(ValueError, match="expected an event stream.*application/json"):
            await stream


# ---------------------------------------------------------------- sessions and config


async def test_external_session_is_never_closed(server: FakeMailServer) -> None:
    async with aiohttp.ClientSession() as session:
        async with MAILClient(server.url, session=session, config=ClientConfig()) as client:
            await client.get_health()
        await client.aclose()
        assert not session.closed
        async with session.get(f"{server.url}/health") as response:
            assert response.status == 200


async def test_own_session_is_closed_and_reopened_on_demand(server: FakeMailServer) -> None:
    client = MAILClient(server.url, config=ClientConfig())
    await client.get_health()
    session = client._session
    assert session is not None and not session.closed
    await client.aclose()
    assert session.closed
    assert (await client.get_health())["status"] == "healthy"
    await client.aclose()


async def test_verbose_logs_requests_at_info(
    server: FakeMailServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mail.client")
    async with _client(server, verbose=True) as client:
        await client.get_health()
    async with _client(server, verbose=False) as client:
        await client.ping()
    lines = [r.getMessage() for r in caplog.records if r.name == "mail.client"]
    assert any(line.startswith("-> GET") and line.endswith("/health") for line in lines)
    assert any(line.startswith("<- 200 GET /health") for line in lines)
    assert not any(line.endswith(f"{server.url}/") for line in lines)


def test_empty_base_url_is_rejected() -> None:
    with pytest.raises(ValueError, match="base_url"):
        MAILClient("  ", config=ClientConfig())


def test_client_docs_cover_every_public_method() -> None:
    import inspect
    from pathlib import Path

    docs = (Path(__file__).resolve().parents[1] / "docs" / "client.md").read_text()
    public = [
        name
        for name, member in inspect.getmembers(MAILClient, inspect.isfunction)
        if not name.startswith("_") and name != "aclose"
    ]
    assert len(public) >= 19
    for name in public:
        assert f"`{name}(" in docs, f"MAILClient.{name} is not documented in docs/client.md"
