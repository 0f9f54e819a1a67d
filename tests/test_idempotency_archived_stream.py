"""A keyed stream repeated after its instance was reclaimed, on a real `mail server` with
``--store memory`` (stub agents).

With the memory store, an instance idle for ``instance_idle_timeout`` seconds is shut down
and its tasks are archived in memory. A streamed ``POST /message`` repeated with its
``Idempotency-Key`` is attached to the task's stored events and ends with its answer
(docs/api-http.md#idempotency-keys), as ``GET /task/events`` ends with it: the archived
record must still say what the answer was, not close the stream with an empty one.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from server_fixtures import (
    ServerProcess,
    auth,
    create_key,
    free_port,
    split_sse_frames,
    write_config,
    write_stub_swarms,
)

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    write_stub_swarms(tmp_path)
    key = create_key(tmp_path / "registries" / "keys.json", "user", "alice")
    port = free_port()
    config = write_config(tmp_path, port=port)
    text = config.read_text(encoding="utf-8")
    config.write_text(
        text.replace("instance_idle_timeout = 0", "instance_idle_timeout = 1"), encoding="utf-8"
    )
    srv = ServerProcess(tmp_path, port, args=["--config", str(config), "--store", "memory"])
    srv.keys = {"alice": key}
    srv.start()
    try:
        yield srv
    finally:
        assert srv.stop() == 0, srv.logs()


def _closing(text: str) -> dict[str, object]:
    """The data of a whole SSE body's last ``task_complete`` event."""
    frames, _rest = split_sse_frames(text)
    for frame in reversed(frames):
        fields = dict(line.split(": ", 1) for line in frame.split("\n") if ": " in line)
        if fields.get("event") == "task_complete":
            found: dict[str, object] = json.loads(fields["data"])
            return found
    raise AssertionError(f"no task_complete in {text[-500:]!r}")


def test_a_keyed_stream_repeated_after_a_reclaim_ends_with_its_answer(
    server: ServerProcess,
) -> None:
    headers = {**auth(server.keys["alice"]), "Idempotency-Key": f'"{uuid.uuid4()}"'}
    payload = {"body": "hello", "stream": True}
    first = httpx.post(f"{server.base_url}/message", json=payload, headers=headers, timeout=60)
    assert first.status_code == 200, first.text
    answer = _closing(first.text)
    assert answer["response"] == "echo[alice]: hello", first.text
    deadline = time.monotonic() + 60
    while "reclaimed idle user instance" not in server.logs():  # (logged once it is archived)
        assert time.monotonic() < deadline, server.logs()[-2000:]
        time.sleep(0.1)

    again = httpx.post(f"{server.base_url}/message", json=payload, headers=headers, timeout=60)
    assert again.status_code == 200, again.text
    assert again.headers["idempotent-replayed"] == "true"
    replayed = _closing(again.text)
    assert replayed["task_id"] == answer["task_id"]
    assert replayed["response"] == answer["response"], again.text

    events = httpx.get(
        f"{server.base_url}/task/events",
        params={"task_id": str(answer["task_id"])},
        headers=auth(server.keys["alice"]),
        timeout=60,
    )
    assert events.status_code == 200, events.text
    assert _closing(events.text)["response"] == answer["response"], events.text
    # The task's record is what it was (the answer is not added to it).
    record = httpx.get(
        f"{server.base_url}/task",
        params={"task_id": str(answer["task_id"])},
        headers=auth(server.keys["alice"]),
        timeout=60,
    ).json()
    assert "answer" not in record and "response" not in record, sorted(record)
