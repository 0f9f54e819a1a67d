"""A2A's HTTP+JSON binding beside JSON-RPC, against a real `mail server` (stub agents) and a real
receiver process, through the official SDK's client.

The card declares both bindings at ``<base_url>/a2a``; the SDK's client gets the same answers
from each (send, stream, get, list, cancel, subscribe, push configs and their deliveries, the
errors); the REST routes take the same key, keep each caller to their own tasks and configs,
and hold the same limits (request shape, stream slots, a slow reader), refused in that
binding's own shape.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver
from a2a.helpers.proto_helpers import get_artifact_text
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    Role,
    SendMessageConfiguration,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
    TaskState,
)
from google.protobuf.json_format import MessageToDict
from tests.support.webhook_receiver import ReceiverProcess

from server_fixtures import ROOT_ALICE_BOB, ServerProcess, auth, free_port, keyed_stub_server
from support.a2a_clients import a2a_client, collect, message

pytestmark = pytest.mark.timeout(300)

BINDINGS = ("JSONRPC", "HTTP+JSON")
MAX_STREAMS = 2
MAX_PARTS = 5
BUFFER = 65536  # sse_max_buffer_bytes
V1 = {"A2A-Version": "1.0"}

EXTRA = f"""
max_event_streams_per_caller = {MAX_STREAMS}
max_a2a_message_parts = {MAX_PARTS}
sse_max_buffer_bytes = {BUFFER}
sse_slow_reader_timeout = 1
task_message_limit = 0

[server.webhooks]
allowed_hosts = ["127.0.0.1"]
retry_schedule = [0.2, 0.2]
poll_interval = 0.2
"""


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Any]]:
    root = tmp_path_factory.mktemp("a2a_rest")
    receiver = ReceiverProcess(free_port(), root).start()
    try:
        with keyed_stub_server(root, ROOT_ALICE_BOB, extra=EXTRA) as server:
            yield server, receiver
    finally:
        receiver.stop()


def _rest(server: ServerProcess, path: str) -> str:
    return f"{server.base_url}/a2a{path}"


async def test_the_card_declares_both_bindings(servers: tuple[ServerProcess, Any]) -> None:
    server, _ = servers
    async with httpx.AsyncClient(timeout=30) as http:
        card = await A2ACardResolver(http, server.base_url).get_agent_card()
        raw = (await http.get(f"{server.base_url}/.well-known/agent-card.json")).json()
    declared = [(i.protocol_binding, i.url, i.protocol_version) for i in card.supported_interfaces]
    url = f"{server.base_url}/a2a"
    assert declared == [("JSONRPC", url, "1.0"), ("HTTP+JSON", url, "1.0")]
    assert "signatures" not in raw  # unsigned unless a key is set
    # The SDK's client reaches the REST binding through the card.
    async with a2a_client(server.base_url, server.keys["alice"], binding="HTTP+JSON") as client:
        events = await collect(client, message("over rest"))
    assert get_artifact_text(events[-2].artifact_update.artifact) == "echo[alice]: over rest"


def _error(exc: BaseException) -> str:
    return type(exc).__name__


async def _raises(call: Any) -> str:
    try:
        result = await call
    except Exception as exc:  # noqa: BLE001 - the error is the answer compared
        return _error(exc)
    raise AssertionError(f"no error: {result}")


def _pushed_states(entries: list[dict[str, Any]]) -> list[str]:
    states = []
    for entry in entries:
        body = json.loads(entry["body"])
        if "statusUpdate" in body:
            states.append(body["statusUpdate"]["status"]["state"])
        elif "task" in body:
            states.append(body["task"]["status"]["state"])
    return states


async def _scenario(server: ServerProcess, receiver: Any, binding: str) -> dict[str, Any]:
    """One caller's A2A session over ``binding``, reduced to what must not depend on it."""
    key = server.keys["alice"]
    seen: dict[str, Any] = {}
    async with a2a_client(server.base_url, key, streaming=False, binding=binding) as client:
        done = (await collect(client, message("hello")))[-1].task
        seen["send"] = (TaskState.Name(done.status.state), get_artifact_text(done.artifacts[0]))
        got = await client.get_task(GetTaskRequest(id=done.id))
        seen["get"] = (TaskState.Name(got.status.state), [a.name for a in got.artifacts])
        listed = await client.list_tasks(ListTasksRequest(context_id=done.context_id))
        seen["list"] = [(t.id == done.id, TaskState.Name(t.status.state)) for t in listed.tasks]
        seen["ended task"] = await _raises(
            collect(client, message("again", task_id=done.id, context_id=done.context_id))
        )
        seen["cancel ended"] = await _raises(client.cancel_task(CancelTaskRequest(id=done.id)))
        seen["get unknown"] = await _raises(client.get_task(GetTaskRequest(id=str(uuid.uuid4()))))
        agents = message("from the agent?")
        agents.message.role = Role.ROLE_AGENT
        seen["agent role"] = await _raises(collect(client, agents))
        # Push configs: create, read, list, delete; one sent with a message is delivered.
        path = f"/push-{binding}"
        config = TaskPushNotificationConfig(
            task_id=done.id, id="cfg", url=receiver.url(path), token="tok"
        )
        made = await client.create_task_push_notification_config(config)
        read = await client.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=done.id, id="cfg")
        )
        seen["push config"] = [(c.id, c.url == receiver.url(path), c.token) for c in (made, read)]
        await client.delete_task_push_notification_config(
            DeleteTaskPushNotificationConfigRequest(task_id=done.id, id="cfg")
        )
        left = await client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=done.id)
        )
        seen["push configs left"] = list(left.configs)
        paused_request = message("BREAKPOINT may I?")
        paused_request.configuration.CopyFrom(
            SendMessageConfiguration(task_push_notification_config=config)
        )
        paused = (await collect(client, paused_request))[-1].task
        seen["paused"] = TaskState.Name(paused.status.state)
    async with a2a_client(server.base_url, key, binding=binding) as client:
        stream = await collect(client, message("DELEGATE build it"))
        seen["stream"] = [
            (
                event.WhichOneof("payload"),
                MessageToDict(event.status_update.metadata).get("mail_event", {}).get("event")
                if event.HasField("status_update")
                else None,
            )
            for event in stream
        ]
        seen["stream answer"] = get_artifact_text(stream[-2].artifact_update.artifact)
        with pytest.raises(Exception) as unknown:  # noqa: PT011 - compared below
            async for _ in client.subscribe(SubscribeToTaskRequest(id=str(uuid.uuid4()))):
                pass
        seen["subscribe unknown"] = _error(unknown.value)
    async with a2a_client(
        server.base_url, key, streaming=False, polling=True, binding=binding
    ) as client:
        running = (await collect(client, message("SLEEP 2 late answer")))[-1].task
    async with a2a_client(server.base_url, key, binding=binding) as client:
        followed = []
        async for event in client.subscribe(SubscribeToTaskRequest(id=running.id)):
            if event.HasField("status_update"):
                followed.append(TaskState.Name(event.status_update.status.state))
            elif event.HasField("artifact_update"):
                followed.append(get_artifact_text(event.artifact_update.artifact))
        seen["subscribe"] = followed[-2:]
    async with a2a_client(
        server.base_url, key, streaming=False, polling=True, binding=binding
    ) as client:
        sleeping = (await collect(client, message("SLEEP 30 never answered")))[-1].task
        cancelled = await client.cancel_task(CancelTaskRequest(id=sleeping.id))
        after = await client.get_task(GetTaskRequest(id=sleeping.id))
        seen["cancel"] = [TaskState.Name(t.status.state) for t in (cancelled, after)]
    deadline = time.monotonic() + 30
    while "TASK_STATE_INPUT_REQUIRED" not in _pushed_states(receiver.received(path)):
        assert time.monotonic() < deadline, receiver.received(path)
        time.sleep(0.05)
    pushed = receiver.received(path)
    seen["pushed"] = (
        {json.loads(e["body"]).get("statusUpdate", {}).get("taskId") for e in pushed}
        <= {paused.id, None},
        {e["headers"]["x-a2a-notification-token"] for e in pushed},
    )
    return seen


async def test_both_bindings_give_the_same_answers(servers: tuple[ServerProcess, Any]) -> None:
    server, receiver = servers
    jsonrpc, rest = [await _scenario(server, receiver, binding) for binding in BINDINGS]
    assert rest == jsonrpc
    # ... and they are the bridge's answers, not two equal failures.
    assert jsonrpc["send"] == ("TASK_STATE_COMPLETED", "echo[alice]: hello")
    assert jsonrpc["get"] == ("TASK_STATE_COMPLETED", ["response"])
    assert jsonrpc["list"] == [(True, "TASK_STATE_COMPLETED")]
    assert jsonrpc["ended task"] == "UnsupportedOperationError"
    assert jsonrpc["cancel ended"] == "TaskNotCancelableError"
    assert jsonrpc["get unknown"] == "TaskNotFoundError"
    assert jsonrpc["subscribe unknown"] == "TaskNotFoundError"
    assert jsonrpc["agent role"] == "InvalidParamsError"
    assert jsonrpc["push config"] == [("cfg", True, "tok")] * 2
    assert jsonrpc["push configs left"] == []
    assert jsonrpc["paused"] == "TASK_STATE_INPUT_REQUIRED"
    assert jsonrpc["pushed"] == (True, {"tok"})
    assert jsonrpc["stream answer"] == "delegated: worked: build it"
    names = [name for _, name in jsonrpc["stream"] if name]
    assert "new_message" in names and "tool_call" in names, jsonrpc["stream"]
    assert jsonrpc["subscribe"] == ["echo[alice]: late answer", "TASK_STATE_COMPLETED"]
    assert jsonrpc["cancel"] == ["TASK_STATE_CANCELED", "TASK_STATE_CANCELED"]


async def test_rest_takes_the_key_and_keeps_callers_apart(
    servers: tuple[ServerProcess, Any],
) -> None:
    server, receiver = servers
    async with httpx.AsyncClient(timeout=30) as http:
        for method, path in (("GET", "/tasks"), ("POST", "/message:send"), ("GET", "/tasks/x")):
            for headers in ({}, {"Authorization": "Bearer mail_not_a_key"}):
                r = await http.request(method, _rest(server, path), headers={**V1, **headers})
                assert r.status_code == 401, (method, path, r.text)
                assert r.json()["error"]["status"] == "UNAUTHENTICATED", r.text  # its own shape
                assert r.headers["WWW-Authenticate"].startswith("Bearer"), r.headers
    async with a2a_client(
        server.base_url, server.keys["alice"], streaming=False, binding="HTTP+JSON"
    ) as alice:
        task = (await collect(alice, message("BREAKPOINT alice's secret")))[-1].task
        await alice.create_task_push_notification_config(
            TaskPushNotificationConfig(task_id=task.id, id="mine", url=receiver.url("/alice"))
        )
    async with a2a_client(
        server.base_url, server.keys["bob"], streaming=False, binding="HTTP+JSON"
    ) as bob:
        for call in (
            bob.get_task(GetTaskRequest(id=task.id)),
            bob.cancel_task(CancelTaskRequest(id=task.id)),
            bob.get_task_push_notification_config(
                GetTaskPushNotificationConfigRequest(task_id=task.id, id="mine")
            ),
            bob.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=task.id)
            ),
        ):
            assert await _raises(call) == "TaskNotFoundError"
        assert task.id not in [t.id for t in (await bob.list_tasks(ListTasksRequest())).tasks]
        # Naming alice's context gives bob a task of his own, in his own instance.
        mine = (await collect(bob, message("COUNT", context_id=task.context_id)))[-1].task
        assert get_artifact_text(mine.artifacts[0]) == "turn 1"
    async with a2a_client(server.base_url, server.keys["bob"], binding="HTTP+JSON") as bob:
        with pytest.raises(Exception, match="(?i)not found"):
            async for _ in bob.subscribe(SubscribeToTaskRequest(id=task.id)):
                pass
    # Alice's task is still paused, with her config: nothing bob did reached it.
    async with a2a_client(
        server.base_url, server.keys["alice"], streaming=False, binding="HTTP+JSON"
    ) as alice:
        still: Task = await alice.get_task(GetTaskRequest(id=task.id))
        assert still.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        configs = await alice.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task.id)
        )
        assert [c.id for c in configs.configs] == ["mine"]


def _send_body(parts: list[dict[str, Any]]) -> dict[str, Any]:
    msg = {"role": "ROLE_USER", "messageId": str(uuid.uuid4()), "parts": parts}
    return {"message": msg}


async def test_rest_requests_are_bounded_like_jsonrpc_ones(
    servers: tuple[ServerProcess, Any],
) -> None:
    server, _ = servers
    headers = {**auth(server.keys["alice"]), **V1}
    async with httpx.AsyncClient(timeout=30) as http:
        many = _send_body([{"text": str(i)} for i in range(MAX_PARTS + 1)])
        r = await http.post(_rest(server, "/message:send"), json=many, headers=headers)
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert error["status"] == "INVALID_ARGUMENT"
        assert "max_a2a_message_parts" in error["message"], error
        deep = _send_body([{"data": json.loads("[" * 45 + "]" * 45)}])
        r = await http.post(_rest(server, "/message:send"), json=deep, headers=headers)
        assert r.status_code == 400 and "40 levels" in r.json()["error"]["message"], r.text
        for raw, reason in ((b'{"message": "\\ud800"}', "not JSON"), (b"\xff", "UTF-8")):
            r = await http.post(_rest(server, "/message:send"), content=raw, headers=headers)
            assert r.status_code == 400, r.text
            assert reason in r.json()["error"]["message"], r.text
        assert "Traceback" not in server.logs()
    # A body over [server.settings] max_request_body (4 MiB), declared and then sent chunked
    # without a Content-Length: 413 in this binding's shape, not MAIL's {detail}.
    over = 4 * 1024 * 1024 + 1
    chunks = [b"x" * 65536] * (over // 65536) + [b"x" * (over % 65536)]
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
    for framing, body in (
        (b"Content-Length: %d" % over, b""),
        (b"Transfer-Encoding: chunked", chunked),
    ):
        status, answer = await _raw_post(server, "/a2a/message:send", headers, framing, body)
        assert status == 413, answer
        error = json.loads(answer)["error"]
        assert error["code"] == 413 and "max_request_body" in error["message"], error
        # gRPC's name for a message over its size limit (it was INVALID_ARGUMENT)
        assert error["status"] == "RESOURCE_EXHAUSTED", error
        assert "Traceback" not in server.logs()
    # A compressed body is refused unread (415), in this binding's shape too.
    gzipped = {**headers, "Content-Encoding": "gzip"}
    async with httpx.AsyncClient(timeout=30) as http:
        r = await http.post(_rest(server, "/message:send"), content=b"\x1f\x8b", headers=gzipped)
    assert r.status_code == 415 and r.headers["accept-encoding"] == "identity", r.text
    error = r.json()["error"]
    assert (error["code"], error["status"]) == (415, "INVALID_ARGUMENT"), error
    assert "Content-Encoding 'gzip'" in error["message"], error


async def test_a_failing_store_is_503_unavailable_under_a2a_and_detail_elsewhere() -> None:
    """A request the store cannot serve (StoreUnavailableError) is 503 with Retry-After: a
    google.rpc.Status under /a2a/, MAIL's {detail} on its own routes."""
    from fastapi import FastAPI

    from mail.server.errors import install_error_handling
    from mail.store.base import StoreUnavailableError

    app = FastAPI()
    install_error_handling(app)

    async def failing() -> None:
        raise StoreUnavailableError("the database is away")

    app.add_api_route("/a2a/tasks", failing)
    app.add_api_route("/tasks", failing)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://mail") as http:
        a2a, own = await http.get("/a2a/tasks"), await http.get("/tasks")
    assert (a2a.status_code, own.status_code) == (503, 503)
    assert a2a.headers["retry-after"] and own.headers["retry-after"]
    error = a2a.json()["error"]
    assert error == {"code": 503, "status": "UNAVAILABLE", "message": "the database is away"}
    assert own.json() == {"detail": "the database is away"}


async def _raw_post(
    server: ServerProcess, path: str, headers: dict[str, str], framing: bytes, body: bytes
) -> tuple[int, bytes]:
    """POST ``body`` framed as ``framing`` on a fresh connection; the status and the body."""
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    lines = [b"POST %s HTTP/1.1" % path.encode(), b"Host: 127.0.0.1", b"Connection: close", framing]
    lines += [f"{name}: {value}".encode() for name, value in headers.items()]
    writer.write(b"\r\n".join(lines) + b"\r\n\r\n" + body)
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 30)
    writer.close()
    head, _, rest = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), rest


async def test_rest_streams_take_the_callers_stream_slots(
    servers: tuple[ServerProcess, Any],
) -> None:
    server, _ = servers
    headers = {**auth(server.keys["admin"]), **V1}
    url = _rest(server, "/message:stream")
    async with httpx.AsyncClient(timeout=30) as http, contextlib.AsyncExitStack() as stack:
        open_streams = []
        for i in range(MAX_STREAMS):
            body = _send_body([{"text": f"SLEEP 30 s{i}"}])
            r = await stack.enter_async_context(
                http.stream("POST", url, json=body, headers=headers)
            )
            assert r.status_code == 200
            lines = r.aiter_lines()  # kept: a dropped iterator closes the response
            await anext(lines)  # the stream is open
            open_streams.append(lines)
        full = await http.post(url, json=_send_body([{"text": "one more"}]), headers=headers)
        assert full.status_code == 429, full.text
        assert "max_event_streams_per_caller" in full.text and full.headers["Retry-After"]
        plain = await http.get(_rest(server, "/tasks"), headers=headers)  # not a stream
        assert plain.status_code == 200, plain.text


async def test_a_slow_rest_reader_gets_that_bindings_error(
    servers: tuple[ServerProcess, Any],
) -> None:
    """A stream its client does not read is cut at its buffer, as on JSON-RPC, and ends with
    an error event in the HTTP+JSON binding's shape (what the SDK's REST client reads)."""
    server, _ = servers
    key = server.keys["bob"]
    body = _send_body([{"text": "CHATTY 60 100000"}])
    tail = b""
    async with (
        httpx.AsyncClient(timeout=120) as http,
        http.stream(
            "POST", _rest(server, "/message:stream"), json=body, headers={**auth(key), **V1}
        ) as response,
    ):
        assert response.status_code == 200
        chunks = response.aiter_raw()
        first = await anext(chunks)
        context_id = json.loads(first.split(b"data: ", 1)[1].split(b"\r\n", 1)[0])["task"][
            "contextId"
        ]
        for _ in range(3000):  # read nothing more until the task is done
            r = await http.get(
                f"{server.base_url}/task", params={"task_id": context_id}, headers=auth(key)
            )
            if r.status_code == 200 and r.json()["completed"]:
                break
            await asyncio.sleep(0.05)
        async for chunk in chunks:
            tail = (tail + chunk)[-2000:]
    assert b"event: error" in tail, tail
    data = tail.rsplit(b"event: error", 1)[1].split(b"data: ", 1)[1].split(b"\r\n", 1)[0]
    error = json.loads(data)["error"]
    assert (error["code"], error["status"]) == (429, "RESOURCE_EXHAUSTED"), error
    assert "sse_max_buffer_bytes" in error["message"]


async def test_an_unknown_status_filter_is_refused_on_both_bindings(
    servers: tuple[ServerProcess, Any],
) -> None:
    """The validation of issue 64 item 18 holds on both: an unknown state is invalid params,
    not the whole list (the SDK drops an enum value it does not know)."""
    server, _ = servers
    headers = {**auth(server.keys["alice"]), **V1}
    async with httpx.AsyncClient(timeout=30) as http:
        rpc = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {"status": "BOGUS"}}
        r = await http.post(f"{server.base_url}/a2a", json=rpc, headers=headers)
        assert r.json().get("error", {}).get("code") == -32602, r.text
        r = await http.get(_rest(server, "/tasks"), params={"status": "BOGUS"}, headers=headers)
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert (
            error["status"] == "INVALID_ARGUMENT"
            and "'BOGUS' is not a task state" in error["message"]
        ), error
        by_name = {"status": "TASK_STATE_COMPLETED"}
        r = await http.get(_rest(server, "/tasks"), params=by_name, headers=headers)
        assert r.status_code == 200, r.text
        assert {t["status"]["state"] for t in r.json()["tasks"]} <= {"TASK_STATE_COMPLETED"}
        # A state's number is a task state too, as protobuf's JSON reads it (and JSON-RPC's
        # `"status": 3` is): a query parameter is text, "3" (it was refused as unknown).
        by_number = await http.get(_rest(server, "/tasks"), params={"status": "3"}, headers=headers)
        assert by_number.status_code == 200, by_number.text
        assert by_number.json()["tasks"] == r.json()["tasks"]
