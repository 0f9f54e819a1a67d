"""Ctrl+C with event streams open: the server stops at once, every stream ends cleanly.

Before, uvicorn's graceful shutdown waited out its 10 s for the open streams, then cancelled
them: "Exception in ASGI application" tracebacks, and clients cut off mid-chunk (curl exit 18).
Now each stream ends with ``event: resubscribe`` and a complete chunked body.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest

from server_fixtures import ROOT_ALICE_BOB, SSEEvent, auth, keyed_stub_server, parse_sse_stream

pytestmark = pytest.mark.timeout(120)


ERRORS: list[BaseException] = []


def _follow(url: str, key: str, method: str, out: list[SSEEvent], **kwargs: object) -> None:
    try:
        with httpx.stream(method, url, headers=auth(key), timeout=60, **kwargs) as response:  # type: ignore[arg-type]
            assert response.status_code == 200, response.read()
            for event in parse_sse_stream(response):  # raises if cut off mid-chunk
                out.append(event)
    except BaseException as exc:  # noqa: BLE001 - reported by the test
        ERRORS.append(exc)


def test_sigint_with_streams_open_ends_them_with_resubscribe_and_exits_at_once(
    tmp_path: Path,
) -> None:
    with keyed_stub_server(tmp_path, ROOT_ALICE_BOB) as server:
        key = server.keys["alice"]
        posted: list[SSEEvent] = []
        streaming = threading.Thread(
            target=_follow,
            args=(f"{server.base_url}/message", key, "POST", posted),
            kwargs={"json": {"body": "SLEEP 60 long", "stream": True}},
        )
        streaming.start()
        deadline = time.monotonic() + 30
        while not posted and time.monotonic() < deadline:  # the stream is under way
            time.sleep(0.02)
        tasks = httpx.get(f"{server.base_url}/tasks", headers=auth(key), timeout=30).json()
        (task_id,) = tasks
        attached: list[SSEEvent] = []
        reattach = threading.Thread(
            target=_follow,
            args=(f"{server.base_url}/task/events?task_id={task_id}", key, "GET", attached),
        )
        reattach.start()
        deadline = time.monotonic() + 30
        while not attached and time.monotonic() < deadline:  # the replay arrived: it is open
            time.sleep(0.02)
        assert attached, "the /task/events stream never opened"

        assert server.proc is not None
        started = time.monotonic()
        server.proc.send_signal(2)  # SIGINT, as Ctrl+C
        assert server.proc.wait(30) == 0, server.logs()
        stopped_in = time.monotonic() - started
        streaming.join(10)
        reattach.join(10)

    assert not streaming.is_alive() and not reattach.is_alive()
    assert ERRORS == []
    assert stopped_in < 8, f"took {stopped_in:.1f}s (the 10 s grace period was waited out)"
    for events in (posted, attached):
        final = events[-1]
        assert final.event == "resubscribe", [e.event for e in events]
        data = final.json()
        assert data["task_id"] == task_id and data["reason"] == "the server is shutting down"
        assert data["resubscribe"].startswith(f"/task/events?task_id={task_id}&after=")
    logs = server.logs()
    assert "Exception in ASGI application" not in logs and "Traceback" not in logs, logs
    assert "graceful shutdown exceeded" not in logs, logs
