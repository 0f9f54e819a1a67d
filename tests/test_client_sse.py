"""The incremental event-stream parser used by MAILClient.post_message_stream."""

from __future__ import annotations

import pytest
from sse_starlette import ServerSentEvent

from mail.client_sse import IncrementalSSEDecoder, SSEParser


def _summary(
    events: list[ServerSentEvent],
) -> list[tuple[str | None, str | None, str | None, int | None]]:
    return [(e.event, e.data, e.id, e.retry) for e in events]


STREAM = (
    "event: new_message\n"
    'data: {"a":1}\n'
    "\n"
    ": keep-alive comment\n"
    "\n"
    "id: 42\n"
    "retry: 1500\n"
    "event: tool_call\n"
    "data: first line\n"
    "data: second line\n"
    "\n"
    "data: no event name\n"
    "\n"
)
EXPECTED = [
    ("new_message", '{"a":1}', None, None),
    ("tool_call", "first line\nsecond line", "42", 1500),
    ("message", "no event name", None, None),
]


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"], ids=["LF", "CRLF", "CR"])
def test_all_line_endings_give_the_same_events(newline: str) -> None:
    text = STREAM.replace("\n", newline)
    events = SSEParser().feed(text)
    assert _summary(events) == EXPECTED
    assert all(isinstance(e, ServerSentEvent) for e in events)


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"], ids=["LF", "CRLF", "CR"])
def test_one_character_at_a_time_gives_the_same_events(newline: str) -> None:
    parser = SSEParser()
    events: list[ServerSentEvent] = []
    for char in STREAM.replace("\n", newline):
        events.extend(parser.feed(char))
    assert _summary(events) == EXPECTED


def test_each_event_is_produced_by_the_chunk_that_completes_it() -> None:
    parser = SSEParser()
    assert parser.feed("event: a\r\ndata: 1\r\n") == []
    first = parser.feed("\r\nevent: b\r\n")
    assert _summary(first) == [("a", "1", None, None)]
    assert parser.feed("data: 2") == []
    assert _summary(parser.feed("\r\n\r\n")) == [("b", "2", None, None)]


def test_cr_ending_one_chunk_and_lf_starting_the_next_is_one_line_ending() -> None:
    parser = SSEParser()
    assert parser.feed("data: a\r") == []
    # Were the LF a second line ending, this would be a blank line dispatching "a" alone.
    events = parser.feed("\ndata: b\r\n\r\n")
    assert _summary(events) == [("message", "a\nb", None, None)]


def test_cr_only_stream_dispatches_without_waiting_for_the_next_chunk() -> None:
    parser = SSEParser()
    assert _summary(parser.feed("data: x\r\r")) == [("message", "x", None, None)]


def test_comments_attach_to_their_event_and_comment_only_blocks_are_skipped() -> None:
    parser = SSEParser()
    events = parser.feed(": ping\n\n:note one\n: note two\nevent: e\ndata: d\n\n")
    assert len(events) == 1
    assert events[0].comment == "note one\nnote two"
    assert events[0].data == "d"


def test_field_parsing_rules() -> None:
    parser = SSEParser()
    events = parser.feed(
        "data:nospace\n"  # no space after the colon
        "data:  two spaces\n"  # only one leading space is stripped
        "data\n"  # a field without a colon has an empty value
        "retry: soon\n"  # not digits: ignored
        "id: has\0nul\n"  # NUL in an id: ignored
        "colour: blue\n"  # unknown field: ignored
        "\n"
    )
    assert _summary(events) == [("message", "nospace\n two spaces\n", None, None)]
    assert parser.last_event_id is None


def test_id_and_retry_are_remembered_by_the_parser() -> None:
    parser = SSEParser()
    parser.feed("id: 1\nretry: 10\ndata: a\n\n")
    parser.feed("data: b\n\n")
    assert parser.last_event_id == "1"
    assert parser.retry == 10


def test_a_block_with_event_but_no_data_is_still_an_event() -> None:
    events = SSEParser().feed("event: ping\n\n")
    assert _summary(events) == [("ping", None, None, None)]


def test_close_dispatches_an_unterminated_final_event_but_not_a_partial_line() -> None:
    parser = SSEParser()
    parser.feed("event: last\ndata: done\n")
    assert _summary(parser.close()) == [("last", "done", None, None)]
    parser = SSEParser()
    parser.feed("data: cut in the midd")
    assert parser.close() == []


def test_byte_decoder_handles_split_utf8_and_bom() -> None:
    raw = "\ufeffevent: greet\ndata: héllo wörld ✓\n\n".encode()
    decoder = IncrementalSSEDecoder()
    events: list[ServerSentEvent] = []
    for index in range(len(raw)):
        events.extend(decoder.feed(raw[index : index + 1]))
    events.extend(decoder.close())
    assert _summary(events) == [("greet", "héllo wörld ✓", None, None)]
