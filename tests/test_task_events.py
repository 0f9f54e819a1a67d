"""End-to-end: GET /task/events (resubscribe) and bounded SSE buffers for slow readers."""

from __future__ import annotations

import json
import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from server_fixtures import (
    ServerProcess,
    SSEEvent,
    auth,
    keyed_stub_server,
    parse_sse_stream,
)

pytestmark = pytest.mark.timeout(180)

BUFFER_LIMIT = 65536


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    extra = (
        # the chatty task takes ~600 agent turns: no turn bound here
        f"task_message_limit = 0\ntask_turn_limit = 0\nsse_max_buffer_bytes = {BUFFER_LIMIT}\n"
        "sse_slow_reader_timeout = 0.5\n"
    )
    keys = {
        "admin": ("admin", "root"),
        "user": ("user", "ada"),
        "other": ("user", "bob"),
        "agent": ("agent", "peer"),
    }
    with keyed_stub_server(tmp_path_factory.mktemp("task-events"), keys, extra=extra) as proc:
        yield proc


def _events(server: ServerProcess, who: str, task_id: str, **params: Any) -> list[SSEEvent]:
    headers = auth(server.keys[who])
    last = params.pop("last_event_id", None)
    if last is not None:
        headers["Last-Event-ID"] = str(last)
    with httpx.stream(
        "GET",
        f"{server.base_url}/task/events",
        params={"task_id": task_id, **params},
        headers=headers,
        timeout=60,
    ) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        return list(parse_sse_stream(response))


def _task(server: ServerProcess, who: str, task_id: str) -> dict[str, Any]:
    r = httpx.get(
        f"{server.base_url}/task",
        params={"task_id": task_id},
        headers=auth(server.keys[who]),
        timeout=30,
    )
    assert r.status_code == 200, r.text
    return r.json()


def _wait_completed(server: ServerProcess, who: str, task_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        r = httpx.get(
            f"{server.base_url}/task",
            params={"task_id": task_id},
            headers=auth(server.keys[who]),
            timeout=30,
        )
        if r.status_code == 200 and r.json()["completed"]:
            return r.json()
        time.sleep(0.1)
    raise AssertionError(f"task {task_id} did not complete")


def _ids(events: list[SSEEvent]) -> list[int]:
    return [int(e.id) for e in events if e.id is not None]


def test_resubscribe_after_a_drop_mid_task_sees_each_event_once_in_order(
    server: ServerProcess,
) -> None:
    task_id = str(uuid.uuid4())
    first: list[SSEEvent] = []
    with httpx.stream(
        "POST",
        f"{server.base_url}/message",
        json={"body": "SLEEP 1.5 DELEGATE slowly", "stream": True, "task_id": task_id},
        headers=auth(server.keys["user"]),
        timeout=60,
    ) as response:
        for event in parse_sse_stream(response):
            first.append(event)
            break  # the client drops the stream while the agent is still sleeping
    assert first and first[0].id == "1"
    rest = _events(server, "user", task_id, last_event_id=first[-1].id)
    closing = rest[-1]
    assert closing.event == "task_complete" and closing.id is None
    assert closing.json()["response"] == "delegated: worked: slowly"
    stored = _task(server, "user", task_id)["events"]
    got = _ids(first) + _ids(rest)
    # Every stored event exactly once, in order, with no gap: 1..N.
    assert got == list(range(1, len(stored) + 1))
    assert [e.event for e in first + rest if e.id] == [e["event"] for e in stored]
    assert all(e.event == "ping" for e in rest[:-1] if e.id is None)


def test_resubscribe_to_a_finished_task_replays_and_closes(server: ServerProcess) -> None:
    r = httpx.post(
        f"{server.base_url}/message",
        json={"body": "DELEGATE done"},
        headers=auth(server.keys["user"]),
        timeout=60,
    )
    task_id = r.json()["task_id"]
    stored = _task(server, "user", task_id)["events"]
    everything = _events(server, "user", task_id)
    assert _ids(everything) == list(range(1, len(stored) + 1))
    assert everything[-1].event == "task_complete" and everything[-1].id is None
    # The waiter of a non-streamed answer stored its own task_complete: replayed under its id
    # (as GET /task lists it), then the closing event, the only one without an id.
    assert stored[-1]["event"] == "task_complete"
    ends = [(e.id, e.event) for e in everything if e.event == "task_complete"]
    assert ends == [(str(len(stored)), "task_complete"), (None, "task_complete")]
    assert everything[-1].json() | {"timestamp": ""} == {
        "timestamp": "",
        "task_id": task_id,
        "response": "delegated: worked: done",
    }
    # `after` (query) and Last-Event-ID (header) both resume after the given id.
    tail = _events(server, "user", task_id, after=3)
    assert _ids(tail) == list(range(4, len(stored) + 1))
    assert _ids(_events(server, "user", task_id, last_event_id=len(stored))) == []
    # The admin may watch any user's task.
    assert _ids(_events(server, "admin", task_id)) == list(range(1, len(stored) + 1))


def test_multi_turn_task_resubscribe_after_each_turn(server: ServerProcess) -> None:
    task_id = str(uuid.uuid4())
    headers = auth(server.keys["user"])
    seen: list[int] = []
    for turn in (1, 2):
        r = httpx.post(
            f"{server.base_url}/message",
            json={"body": "COUNT", "task_id": task_id},
            headers=headers,
            timeout=60,
        )
        assert r.json()["response"] == f"turn {turn}"
        events = _events(server, "user", task_id, after=seen[-1] if seen else 0)
        assert events[-1].json()["response"] == f"turn {turn}"
        seen += _ids(events)
    assert seen == list(range(1, len(_task(server, "user", task_id)["events"]) + 1))


def test_resubscribe_errors(server: ServerProcess) -> None:
    r = httpx.post(
        f"{server.base_url}/message",
        json={"body": "mine"},
        headers=auth(server.keys["user"]),
        timeout=60,
    )
    task_id = r.json()["task_id"]
    url = f"{server.base_url}/task/events"

    def get(who: str | None, **params: Any) -> httpx.Response:
        headers = auth(server.keys[who]) if who else {}
        return httpx.get(url, params=params, headers=headers, timeout=30)

    # Another user's task is indistinguishable from a task that does not exist.
    r = get("other", task_id=task_id)
    assert r.status_code == 404 and r.json()["detail"] == f"task '{task_id}' not found"
    assert get("user", task_id=str(uuid.uuid4())).status_code == 404
    assert get(None, task_id=task_id).status_code == 401
    assert get("agent", task_id=task_id).status_code == 403
    r = get("user")
    assert r.status_code == 400 and r.json()["detail"] == "task_id is required"
    r = get("user", task_id=task_id, after="x")
    assert r.status_code == 400 and "after must be an event id" in r.json()["detail"]
    r = get("user", task_id=task_id, after="-1")
    assert r.status_code == 400
    r = get("user", task_id=task_id, after="100000")
    assert r.status_code == 400 and "past the last event" in r.json()["detail"]
    r = httpx.get(
        url,
        params={"task_id": task_id},
        headers={**auth(server.keys["user"]), "Last-Event-ID": "abc"},
        timeout=30,
    )
    assert r.status_code == 400 and "Last-Event-ID" in r.json()["detail"]


def _read_http_stream(sock: socket.socket) -> bytes:
    sock.settimeout(30)
    data = b""
    while not data.endswith(b"\r\n0\r\n\r\n"):
        chunk = sock.recv(1 << 16)
        if not chunk:
            break
        data += chunk
    return data


def _sse_frames(raw: bytes) -> list[SSEEvent]:
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    text = b""
    while body:  # de-chunk
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        text += rest[:size]
        body = rest[size + 2 :]
    events = []
    for frame in text.decode().replace("\r\n", "\n").split("\n\n"):
        if frame.strip():
            from server_fixtures import _frame

            events.append(_frame(frame))
    return events


def test_slow_consumer_is_told_to_resubscribe_and_loses_nothing(
    server: ServerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    assert server.proc is not None
    key = server.keys["user"]
    rss_before = server.rss_kib()
    task_id = str(uuid.uuid4())
    body = json.dumps({"body": "CHATTY 1000 12000", "stream": True, "task_id": task_id}).encode()
    sock = socket.socket()
    # A small receive window, so the kernel holds little on the reader's behalf; the task
    # produces far more than the server side's socket buffers (up to 4 MB here) can absorb.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", server.port))
    try:
        sock.sendall(
            b"POST /message HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
            + f"Authorization: Bearer {key}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        # The reader reads nothing while the task produces megabytes of events.
        record = _wait_completed(server, "user", task_id)
        rss_after = server.rss_kib()
        produced = sum(len(e["data"]) for e in record["events"])
        frames = _sse_frames(_read_http_stream(sock))
    finally:
        sock.close()
    assert record["events"][-1]["event"] != "task_complete"  # a stream stores no final event
    assert produced > 20 * BUFFER_LIMIT
    notice = frames[-1]
    assert notice.event == "resubscribe", [f.event for f in frames[-3:]]
    data = notice.json()
    assert data["task_id"] == task_id and "too slowly" in data["reason"]
    first_ids = _ids(frames[:-1])
    assert first_ids == list(range(1, len(first_ids) + 1))
    assert data["last_event_id"] == str(first_ids[-1])
    assert len(first_ids) < len(record["events"])  # the stream really stopped early
    rest = _events(server, "user", task_id, last_event_id=data["last_event_id"])
    assert first_ids + _ids(rest) == list(range(1, len(record["events"]) + 1))
    assert rest[-1].event == "task_complete" and rest[-1].json()["response"] == "chatted 1000"
    with capsys.disabled():
        print(
            f"\n[slow consumer] events {len(record['events'])} ({produced / 1e6:.1f} MB), "
            f"first stream stopped after {len(first_ids)}; server RSS {rss_before} KiB "
            f"before, {rss_after} KiB after (+{rss_after - rss_before} KiB)"
        )


async def test_client_resubscribes_after_dropping_a_stream(server: ServerProcess) -> None:
    from mail.client import MAILClient

    task_id = str(uuid.uuid4())
    async with MAILClient(server.base_url, api_key=server.keys["user"]) as client:
        stream = client.post_message_stream("SLEEP 1 DELEGATE via client", task_id=task_id)
        first = []
        async for event in stream:
            first.append(event)
            break  # drop the stream after its first event
        await stream.aclose()
        assert stream.last_event_id == "1"
        rest = [e async for e in client.resubscribe_task(task_id, stream.last_event_id)]
        record = await client.get_task(task_id)
    ids = [int(e.id) for e in first + rest if e.id is not None]
    assert ids == list(range(1, len(record["events"]) + 1))
    assert rest[-1].event == "task_complete"
    assert json.loads(rest[-1].data)["response"] == "delegated: worked: via client"


def test_repl_task_events_replays_and_follows(server: ServerProcess) -> None:
    import asyncio
    import io

    from rich.console import Console

    from mail.client_config import ClientConfig
    from mail.repl import MAILREPL

    key = server.keys["user"]
    r = httpx.post(
        f"{server.base_url}/message", json={"body": "hello repl"}, headers=auth(key), timeout=60
    )
    task_id = r.json()["task_id"]
    out = io.StringIO()
    console = Console(file=out, width=200, color_system=None, force_terminal=False)
    repl = MAILREPL(server.base_url, api_key=key, config=ClientConfig(), console=console)
    with asyncio.Runner() as runner:
        repl.execute(runner, f"task-events {task_id}")
        everything = out.getvalue()
        repl.execute(runner, f"te {task_id} --after 3")
        tail = out.getvalue()[len(everything) :]
        runner.run(repl.client.aclose())
    assert "sending message" in everything and "echo[ada]: hello repl" in everything
    assert "✗" not in everything
    # Event 1 (the user's message being delivered) is not replayed after id 3.
    assert "sending message" not in tail and "echo[ada]: hello repl" in tail
