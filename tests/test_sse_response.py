"""The SSE response itself: frame encoding, how the body ends, hang-ups and shutdown.

Driven at the ASGI level (a recorded ``send``, a scripted ``receive``), so what is asserted
is exactly what the server hands to the HTTP protocol.
"""

from __future__ import annotations

import asyncio
import datetime
import json
from collections.abc import AsyncIterator
from typing import Any

from mail.client_sse import IncrementalSSEDecoder
from mail.core.events import TaskEvent, compact_json
from mail.server.sse import encode_event, event_stream_response
from mail.server.stream_shutdown import OpenStreams


class Source:
    """Events in groups (one loop pass apart), then ends at once or waits forever."""

    def __init__(self, groups: list[list[str]], then_wait: bool = False) -> None:
        self.groups = groups
        self.then_wait = then_wait
        self.produced: list[str] = []
        self.closed = asyncio.Event()

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        try:
            for number, group in enumerate(self.groups):
                if number:
                    await asyncio.sleep(0)
                for name in group:
                    self.produced.append(name)
                    yield {"event": name, "data": {"n": len(self.produced)}, "id": name}
            if self.then_wait:
                await asyncio.Event().wait()
        finally:
            self.closed.set()


class Peer:
    """The HTTP side: records what is sent; ``hang_up`` makes ``receive`` report it."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.body_sent = asyncio.Event()
        self.gone = asyncio.Event()

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)
        if message["type"] == "http.response.body":
            self.body_sent.set()

    async def receive(self) -> dict[str, Any]:
        await self.gone.wait()
        return {"type": "http.disconnect"}

    def bodies(self) -> list[dict[str, Any]]:
        return [m for m in self.sent if m["type"] == "http.response.body"]

    def events(self) -> list[Any]:
        decoder = IncrementalSSEDecoder()
        found = [e for m in self.bodies() for e in decoder.feed(m["body"])]
        return found + decoder.close()


SCOPE = {"type": "http", "asgi": {"spec_version": "2.3"}}


def test_line_separators_inside_json_text_survive_the_stream() -> None:
    # JSON text keeps U+2028, U+2029, U+0085 and U+001C..U+001E raw; str.splitlines would
    # cut a data line there and the reader's "\n".join would put a raw newline in the JSON.
    text = "a\u2028b\u2029c\x85d\x1ce\x1df\x1eg and a real\nnewline"
    event = TaskEvent("new_message", "t-1", text, event_id="7")
    frame = encode_event(event)
    [decoded] = IncrementalSSEDecoder().feed(frame)
    assert decoded.id == "7"
    assert json.loads(decoded.data)["description"] == text
    # Data that does hold CR/LF line breaks still comes back as the "\n"-joined lines.
    [multi] = IncrementalSSEDecoder().feed(
        encode_event({"event": "x", "data": "one\r\ntwo\rthree\nfour\n"})
    )
    assert multi.data == "one\ntwo\nthree\nfour\n"


def test_event_json_is_the_same_text_as_the_stdlib_gives() -> None:
    # compact_json takes a faster encoder when there is one; stored and streamed event text
    # must not change with it.
    value = {
        "description": 'é ü 😀 \u2028 "quoted" \\ \n\t\x00',
        "numbers": [0, -1, 2**53, 1.5, 0.1 + 0.2, 2e300, -0.0],
        "flags": [True, False, None],
        "nested": {"deep": [{"x": {"y": []}}], "empty": {}},
        "when": datetime.datetime(2026, 11, 23, 1, 2, 3, tzinfo=datetime.UTC),
        "day": datetime.date(2026, 11, 23),
        "other": {1, 2},
    }
    stdlib = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    assert compact_json(value) == stdlib
    assert compact_json({1: "key not a string", "big": 2**80}) == json.dumps(
        {1: "key not a string", "big": 2**80}, separators=(",", ":"), ensure_ascii=False
    )
    # The one spelling that may differ: a small float's exponent (1e-7 for 1e-07), same value.
    assert json.loads(compact_json({"small": 1e-7})) == {"small": 1e-7}


async def test_each_group_is_one_chunk_and_the_last_one_ends_the_body() -> None:
    source = Source([["a"], ["b", "c"], ["d", "e", "f"]])
    peer = Peer()
    response = event_stream_response(source.events(), max_buffer_bytes=1 << 20, task_id="t")
    await response(SCOPE, peer.receive, peer.send)
    start, *bodies = peer.sent
    assert start["type"] == "http.response.start" and start["status"] == 200
    headers = dict(start["headers"])
    assert headers[b"content-type"].startswith(b"text/event-stream")
    assert [m["more_body"] for m in bodies] == [True, True, False]
    assert all(m["body"] for m in bodies)  # no empty message just to end the body
    assert [e.id for e in peer.events()] == ["a", "b", "c", "d", "e", "f"]
    assert source.closed.is_set()


async def test_a_client_that_hangs_up_ends_the_response_quietly() -> None:
    source = Source([["a"]], then_wait=True)
    peer = Peer()
    response = event_stream_response(source.events(), max_buffer_bytes=1 << 20, task_id="t")
    serving = asyncio.create_task(response(SCOPE, peer.receive, peer.send))
    await asyncio.wait_for(peer.body_sent.wait(), 5)
    peer.gone.set()
    await asyncio.wait_for(serving, 5)  # returns: no CancelledError reaches the server
    assert not serving.cancelled() and serving.exception() is None
    assert source.closed.is_set()  # the subscription is dropped at once, not on a later ping
    assert [e.id for e in peer.events()] == ["a"]


async def test_shutdown_ends_a_waiting_stream_after_the_last_event_it_sent() -> None:
    streams = OpenStreams()
    source = Source([["a", "b"]], then_wait=True)
    peer = Peer()
    response = event_stream_response(
        source.events(), max_buffer_bytes=1 << 20, task_id="t-9", streams=streams
    )
    serving = asyncio.create_task(response(SCOPE, peer.receive, peer.send))
    await asyncio.wait_for(peer.body_sent.wait(), 5)
    streams.close_all()
    await asyncio.wait_for(serving, 5)
    events = peer.events()
    assert [e.event for e in events] == ["a", "b", "resubscribe"]
    notice = json.loads(events[-1].data)
    assert notice["last_event_id"] == "b"
    assert notice["reason"] == "the server is shutting down"
    assert notice["resubscribe"] == "/task/events?task_id=t-9&after=b"
    assert peer.bodies()[-1]["more_body"] is False
    assert source.closed.is_set()


async def test_a_stream_opened_while_shutting_down_ends_at_once_without_reading() -> None:
    streams = OpenStreams()
    streams.close_all()
    source = Source([["a"]], then_wait=True)
    peer = Peer()
    response = event_stream_response(
        source.events(), max_buffer_bytes=1 << 20, task_id="t", streams=streams
    )
    await asyncio.wait_for(response(SCOPE, peer.receive, peer.send), 5)
    assert [e.event for e in peer.events()] == ["resubscribe"]
    assert json.loads(peer.events()[0].data)["last_event_id"] is None
    assert source.produced == []  # the task was never submitted


class HeldSource:
    """Sets ``opened`` only when told (as a stream's commit would), then yields one event."""

    def __init__(self, opened: asyncio.Event) -> None:
        self.opened = opened
        self.commit = asyncio.Event()
        self.started = asyncio.Event()
        self.closed = asyncio.Event()

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        try:
            self.started.set()
            await self.commit.wait()
            self.opened.set()
            yield {"event": "new_message", "data": {"n": 1}, "id": "1"}
            await asyncio.Event().wait()
        finally:
            self.closed.set()


def test_held_headers_leave_only_once_the_source_opens_the_response() -> None:
    async def run() -> None:
        opened = asyncio.Event()
        source, peer = HeldSource(opened), Peer()
        response = event_stream_response(source.events(), opened=opened)
        serving = asyncio.create_task(response(SCOPE, peer.receive, peer.send))
        await source.started.wait()  # the source runs before anything is sent
        for _ in range(5):
            await asyncio.sleep(0)
        assert peer.sent == []  # not even the status line
        source.commit.set()
        await peer.body_sent.wait()
        assert peer.sent[0]["type"] == "http.response.start"
        assert [e.event for e in peer.events()] == ["new_message"]
        peer.gone.set()
        await serving
        assert source.closed.is_set()

    asyncio.run(run())


def test_a_hang_up_before_the_held_headers_closes_the_source() -> None:
    async def run() -> None:
        opened = asyncio.Event()
        source, peer = HeldSource(opened), Peer()
        response = event_stream_response(source.events(), opened=opened)
        serving = asyncio.create_task(response(SCOPE, peer.receive, peer.send))
        await source.started.wait()
        peer.gone.set()
        await asyncio.wait_for(serving, 10)
        assert peer.sent == []
        assert source.closed.is_set()  # the stream's lease and subscription are dropped

    asyncio.run(run())
