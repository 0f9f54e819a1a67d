"""The size accounting behind ``[server.mcp] max_reply_bytes`` (mail.mcp_face.replies),
checked against what the `mcp` SDK itself puts on the wire. The end-to-end behaviour over a
real server is in test_mcp_face_replies.py."""

from __future__ import annotations

import json

from mcp.types import CallToolResult, JSONRPCResponse, TextContent

from mail.mcp_face import replies

# Text that costs more escaped than it counts: quotes, backslashes, control characters,
# non-ASCII and an emoji (4 bytes in UTF-8).
AWKWARD = 'a "quoted" \\ back\nslash\t\x01 é 漢 🙂 '


def sent_bytes(text: str) -> int:
    """Bytes of the JSON-RPC message the SDK's server sends for a tool answering `text`."""
    result = CallToolResult(content=[TextContent(type="text", text=text)])
    message = JSONRPCResponse(
        jsonrpc="2.0", id=123, result=result.model_dump(by_alias=True, exclude_none=True)
    )
    return len(message.model_dump_json(by_alias=True, exclude_unset=True).encode())


def test_wire_bytes_is_what_the_sdk_sends() -> None:
    for text in ("", "plain", AWKWARD, AWKWARD * 1000, replies.dumps({"body": AWKWARD})):
        envelope = sent_bytes("")
        assert sent_bytes(text) - envelope == replies.wire_bytes(text)
        assert envelope <= replies.TEXT_OVERHEAD  # what the tools leave room for


def test_pack_keeps_whole_items_in_order_within_the_budget() -> None:
    items = [{"n": i, "body": AWKWARD * 20} for i in range(50)]
    shell = {"more": replies.WIDEST_COUNT}
    answer, count = replies.pack(shell, "messages", items, 8000, lambda item, room: None)
    assert 0 < count < 50 and answer["messages"] == items[:count]
    assert replies.wire_bytes(replies.dumps(answer)) <= 8000
    # One more would not have fit.
    bigger = {**answer, "messages": items[: count + 1]}
    assert replies.wire_bytes(replies.dumps(bigger)) > 8000


def test_a_long_message_is_cut_and_reads_back_whole() -> None:
    body = AWKWARD * 5000
    entry = {"entry_id": "e1", "sender": "a", "subject": "s", "body": body}
    answer, count = replies.pack({"more": 0}, "messages", [entry], 6000, replies.cut_message)
    assert count == 1 and replies.wire_bytes(replies.dumps(answer)) <= 6000
    [cut] = answer["messages"]
    assert cut["truncated"] is True and cut["body_chars"] == len(body)
    assert body.startswith(cut["body"]) and cut["next_offset"] == len(cut["body"]) > 0
    # Pieces of at most 6000 bytes each give the body back exactly.
    parts, offset = [cut["body"]], cut["next_offset"]
    while offset < len(body):
        step = replies.fit_prefix(body[offset:], 6000)
        assert step > 0
        parts.append(body[offset : offset + step])
        offset += step
    assert "".join(parts) == body


def test_a_message_whose_head_alone_is_too_large_still_goes_out() -> None:
    entry = {
        "entry_id": "e2",
        "sender": "a",
        "subject": "s" * 50_000,
        "body": "b",
        "attachments": [{"id": f"att{i}", "filename": "f" * 60} for i in range(500)],
    }
    cut = replies.cut_message(entry, 4000)
    assert replies.wire_bytes(replies.dumps(cut)) <= 4000
    assert cut["entry_id"] == "e2" and cut["truncated"] is True and cut["next_offset"] == 0


def test_other_answers_keep_their_shape_and_say_what_was_cut() -> None:
    value = {"response": "r" * 100_000, "events": [{"body": "x" * 50_000}, {"body": "short"}]}
    text = replies.fit_text(replies.dumps(value), 20_000)
    assert text is not None and replies.wire_bytes(text) <= 20_000
    cut = json.loads(text)
    assert cut["events"][1]["body"] == "short"  # short strings are left alone
    assert cut["response"].endswith(f"answers are limited by {replies.SETTING}]")
    assert "more characters cut" in cut["events"][0]["body"]
    plain = replies.fit_text("p" * 100_000, 5000)
    assert plain is not None and replies.wire_bytes(plain) <= 5000 and "cut" in plain
    # Thousands of small items cannot be cut down: no answer rather than a wrong one.
    assert replies.fit_text(replies.dumps([{"k": i} for i in range(5000)]), 5000) is None
