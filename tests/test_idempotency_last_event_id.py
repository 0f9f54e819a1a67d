"""A ``Last-Event-ID`` that is not a plain event id, on a real `mail server` (stub agents).

A streamed ``POST /message`` repeated with its ``Idempotency-Key`` is attached to the task's
events after its ``Last-Event-ID`` (docs/api-http.md#idempotency-keys), and ``GET
/task/events`` starts after it. A header value is whatever a client (or a proxy) sends: a
character that Python counts as a digit but ``int()`` refuses (``²``, a Latin-1 byte), or
more digits than ``int()`` reads (4,300), must get an answer, never a 500: the repeat is
still attached (an unreadable id counts from the first event, an id past every event from
the end), and ``GET /task/events`` says 400 as for any id past the task's last event.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import httpx
import pytest

from server_fixtures import ServerProcess, keyed_stub_server, split_sse_frames

pytestmark = pytest.mark.timeout(180)

SUPERSCRIPT_TWO = b"\xb2"  # "²" as a Latin-1 header byte: str.isdigit() is True for it
LONG_ID = b"9" * 5000  # more digits than int() converts


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with keyed_stub_server(
        tmp_path_factory.mktemp("idem_last_event_id"), {"alice": ("user", "alice")}
    ) as srv:
        yield srv


def _events(text: str) -> list[tuple[str, dict[str, object]]]:
    """(event name, data) of each event of a whole SSE body (pings left out)."""
    frames, _rest = split_sse_frames(text)
    found = []
    for frame in frames:
        fields = dict(line.split(": ", 1) for line in frame.split("\n") if ": " in line)
        if fields.get("event", "message") != "ping" and "data" in fields:
            found.append((fields.get("event", "message"), json.loads(fields["data"])))
    return found


def _headers(server: ServerProcess, **more: bytes) -> list[tuple[bytes, bytes]]:
    headers = [(b"authorization", f"Bearer {server.keys['alice']}".encode())]
    return headers + [(name.replace("_", "-").encode(), value) for name, value in more.items()]


def _stream(server: ServerProcess, key: str, **more: bytes) -> httpx.Response:
    headers = _headers(server, idempotency_key=f'"{key}"'.encode(), **more)
    return httpx.post(
        f"{server.base_url}/message",
        json={"body": "hello", "stream": True},
        headers=headers,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("last_event_id", "from_start"),
    [(SUPERSCRIPT_TWO, True), (LONG_ID, False)],
    ids=["superscript-digit", "5000-digits"],
)
def test_a_repeated_stream_with_an_odd_last_event_id_is_attached(
    server: ServerProcess, last_event_id: bytes, from_start: bool
) -> None:
    key = str(uuid.uuid4())
    first = _stream(server, key)
    assert first.status_code == 200, first.text
    first_events = _events(first.text)
    assert first_events[-1][0] == "task_complete", first.text

    again = _stream(server, key, last_event_id=last_event_id)
    assert again.status_code == 200, (again.text, server.logs()[-2000:])
    assert again.headers["idempotent-replayed"] == "true"
    events = _events(again.text)
    assert events[-1][0] == "task_complete", again.text
    assert events[-1][1]["response"] == first_events[-1][1]["response"] == "echo[alice]: hello"
    if from_start:  # unreadable: the whole stream again, as without the header
        assert [name for name, _ in events] == [name for name, _ in first_events]
    else:  # past every event: only the closing answer
        assert [name for name, _ in events] == ["task_complete"]


@pytest.mark.parametrize("where", ["header", "query"])
def test_task_events_after_an_id_too_long_to_read_is_400(server: ServerProcess, where: str) -> None:
    first = _stream(server, str(uuid.uuid4()))
    task_id = str(_events(first.text)[-1][1]["task_id"])
    params = {"task_id": task_id}
    headers = _headers(server)
    if where == "header":
        headers.append((b"last-event-id", LONG_ID))
    else:
        params["after"] = LONG_ID.decode()
    answer = httpx.get(f"{server.base_url}/task/events", params=params, headers=headers, timeout=30)
    assert answer.status_code == 400, answer.text
    assert "past the last event" in answer.json()["detail"]
