"""The A2A bridge under abuse, against a real `mail server` (stub agents) over HTTP.

Bodies nested too deeply, a caller filling the A2A task store, streams beyond the caller's stream slots, a MAIL cancel from outside
A2A (``POST /task/cancel``) on a task an A2A client is driving.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator

import httpx
import pytest
from a2a.types.a2a_pb2 import GetTaskRequest, ListTasksRequest, TaskState

from server_fixtures import ROOT_ALICE_BOB, ServerProcess, auth, keyed_stub_server
from support.a2a_clients import a2a_client, collect, message

pytestmark = pytest.mark.timeout(300)

MAX_TASKS = 4
MAX_STREAMS = 2


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    extra = (
        f"max_a2a_tasks_per_caller = {MAX_TASKS}\nmax_a2a_task_bytes_per_caller = 200000\n"
        f"max_event_streams_per_caller = {MAX_STREAMS}\n"
    )
    with keyed_stub_server(tmp_path_factory.mktemp("a2a_lim"), ROOT_ALICE_BOB, extra=extra) as srv:
        yield srv


def _rpc(method: str, params: object, id_: int = 1) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": id_, "method": method, "params": params}


async def test_deeply_nested_body_is_a_parse_error_not_an_internal_one(
    server: ServerProcess,
) -> None:
    deep = '{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": ' + "[" * 50_000
    deep += "]" * 50_000 + "}"
    async with httpx.AsyncClient(timeout=30) as http:
        r = await http.post(
            f"{server.base_url}/a2a",
            content=deep,
            headers={**auth(server.keys["alice"]), "Content-Type": "application/json"},
        )
    assert r.status_code == 200, r.text
    error = r.json()["error"]
    assert error["code"] == -32700, error  # parse error, the client's mistake
    assert "nested" in error["message"], error
    assert "RecursionError" not in server.logs()


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("tasks/get", {"id": "\\ud800"}),
        ("GetTask", {"id": "x\\udfffy"}),
        (
            "message/send",
            {
                "message": {
                    "role": "user",
                    "messageId": "m1",
                    "parts": [{"kind": "text", "text": "hi \\ud800"}],
                }
            },
        ),
        (
            "SendMessage",
            {
                "message": {
                    "role": "ROLE_USER",
                    "messageId": "m2",
                    "parts": [{"text": "hi \\ud800"}],
                }
            },
        ),
        (
            "message/stream",
            {
                "message": {
                    "role": "user",
                    "messageId": "m3",
                    "parts": [{"kind": "text", "text": "\\ud800"}],
                }
            },
        ),
    ],
)
async def test_a_lone_surrogate_is_a_parse_error_not_an_internal_one(
    server: ServerProcess, method: str, params: dict[str, object]
) -> None:
    """JSON may spell a lone UTF-16 surrogate, which no A2A message can hold: the SDK failed
    with an internal error (-32603, 'surrogates not allowed', a traceback in the log); it is
    the caller's malformed request, refused as POST /message refuses it."""
    import json

    # json.dumps doubles the backslash; undone, the body holds the JSON escape \ud800 itself.
    body = json.dumps(_rpc(method, params)).replace("\\\\u", "\\u")
    assert "\\ud" in body, body
    before = server.logs().count("Traceback")
    async with httpx.AsyncClient(timeout=30) as http:
        r = await http.post(
            f"{server.base_url}/a2a",
            content=body,
            headers={**auth(server.keys["alice"]), "Content-Type": "application/json"},
        )
    assert r.status_code == 200, r.text
    error = r.json()["error"]
    assert error["code"] == -32700, error
    assert "surrogate" in error["message"], error
    assert server.logs().count("Traceback") == before, server.logs()[-3000:]


@pytest.mark.parametrize("method", ["message/send", "SendMessage", "message/stream"])
async def test_a_data_part_nested_past_the_sdks_depth_is_invalid_params(
    server: ServerProcess, method: str
) -> None:
    """A data part nested 60 levels deep: the SDK's protobuf conversion gives up past about 48
    (100 of its own levels); a 0.3 method answered that as an internal error (-32603) with a
    400-line traceback in the log. It is the caller's request that is too deep: -32602."""
    deep: object = 0
    for _ in range(60):
        deep = [deep]
    if method == "SendMessage":
        part: dict[str, object] = {"data": deep}
        role = "ROLE_USER"
    else:
        part, role = {"kind": "data", "data": {"a": deep}}, "user"
    params = {"message": {"role": role, "messageId": uuid.uuid4().hex, "parts": [part]}}
    before = server.logs().count("Traceback")
    async with httpx.AsyncClient(timeout=30) as http:
        r = await http.post(
            f"{server.base_url}/a2a", json=_rpc(method, params), headers=auth(server.keys["alice"])
        )
    assert r.status_code == 200, r.text
    error = r.json()["error"]
    assert error["code"] == -32602, error
    assert "levels deep" in error["message"], error
    assert server.logs().count("Traceback") == before, server.logs()[-3000:]


async def test_a_data_part_nested_within_the_bound_is_read(server: ServerProcess) -> None:
    deep: object = {"leaf": True}
    for _ in range(30):
        deep = [deep]
    async with a2a_client(server.base_url, server.keys["alice"], streaming=False) as client:
        events = await collect(client, message("with data", {"deep": deep}))
    assert events[-1].task.status.state == TaskState.TASK_STATE_COMPLETED, events[-1]


async def test_each_callers_task_records_are_bounded(server: ServerProcess) -> None:
    key = server.keys["bob"]
    ids = []
    async with a2a_client(server.base_url, key, streaming=False) as client:
        for i in range(MAX_TASKS + 3):
            events = await collect(client, message(f"hello {i}"))
            ids.append(events[-1].task.id)
        listed = await client.list_tasks(ListTasksRequest(page_size=100))
        assert listed.total_size == MAX_TASKS
        assert {t.id for t in listed.tasks} == set(ids[-MAX_TASKS:])
        with pytest.raises(Exception, match="(?i)not found"):
            await client.get_task(GetTaskRequest(id=ids[0]))
        # A big message takes its bytes out of the caller's budget: older records go.
        await collect(client, message("x" * 150_000))
        listed = await client.list_tasks(ListTasksRequest(page_size=100))
        assert listed.total_size <= 2, [t.id for t in listed.tasks]
    # Another caller's records are untouched by Bob's.
    async with a2a_client(server.base_url, server.keys["alice"], streaming=False) as client:
        mine = await collect(client, message("alice keeps hers"))
        got = await client.get_task(GetTaskRequest(id=mine[-1].task.id))
        assert got.status.state == TaskState.TASK_STATE_COMPLETED


async def test_a_mail_cancel_ends_the_a2a_task_as_canceled(server: ServerProcess) -> None:
    key = server.keys["alice"]
    async with a2a_client(server.base_url, key, polling=True, streaming=False) as client:
        events = await collect(client, message("SLEEP 30 never", context_id=str(uuid.uuid4())))
        task = events[-1].task
        async with httpx.AsyncClient(timeout=30) as http:
            for _ in range(500):
                r = await http.get(
                    f"{server.base_url}/task",
                    params={"task_id": task.context_id},
                    headers=auth(key),
                )
                if r.status_code == 200 and r.json()["is_running"]:
                    break
                await asyncio.sleep(0.02)
            r = await http.post(
                f"{server.base_url}/task/cancel",
                json={"task_id": task.context_id},
                headers=auth(key),
            )
            assert r.status_code == 200 and r.json()["cancelled"] is True, r.text
        state = None
        for _ in range(500):
            state = (await client.get_task(GetTaskRequest(id=task.id))).status.state
            if state != TaskState.TASK_STATE_WORKING:
                break
            await asyncio.sleep(0.02)
        assert state == TaskState.TASK_STATE_CANCELED, TaskState.Name(state or 0)


def _stream_body(text: str) -> dict[str, object]:
    msg = {"role": "ROLE_USER", "messageId": str(uuid.uuid4()), "parts": [{"text": text}]}
    return _rpc("SendStreamingMessage", {"message": msg})


async def test_a2a_streams_take_the_callers_stream_slots(server: ServerProcess) -> None:
    headers = {**auth(server.keys["admin"]), "A2A-Version": "1.0"}
    url = f"{server.base_url}/a2a"
    async with httpx.AsyncClient(timeout=30) as http, contextlib.AsyncExitStack() as stack:
        streams = []
        for i in range(MAX_STREAMS):
            r = await stack.enter_async_context(
                http.stream("POST", url, json=_stream_body(f"SLEEP 30 s{i}"), headers=headers)
            )
            assert r.status_code == 200
            lines = r.aiter_lines()  # kept: a dropped iterator closes the response
            await anext(lines)  # the stream is open
            streams.append((r, lines))
        full = await http.post(url, json=_stream_body("one more"), headers=headers)
        assert full.status_code == 429, full.text
        assert "max_event_streams_per_caller" in full.text
        assert full.headers["Retry-After"]
        # Non-streaming methods are not counted.
        plain = await http.post(url, json=_rpc("ListTasks", {}), headers=headers)
        assert plain.status_code == 200, plain.text
        await streams[0][0].aclose()  # a client that goes away gives its slot back
        for _ in range(500):
            r = await http.post(url, json=_stream_body("after close"), headers=headers)
            if r.status_code == 200:
                break
            await asyncio.sleep(0.02)
        assert r.status_code == 200, r.text
