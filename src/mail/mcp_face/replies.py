"""Answers an MCP client can read: none is over ``[server.mcp] max_reply_bytes``."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, INVALID_REQUEST, CallToolResult, ErrorData, TextContent
from pydantic import BaseModel, ValidationError

logger = logging.getLogger("mail.mcp")

# What surrounds a tool's text in the JSON-RPC message ({"jsonrpc":"2.0","id":..,"result":
# {"content":[{"type":"text","text":..}],"isError":false}}), with room to spare.
TEXT_OVERHEAD = 256
RPC_OVERHEAD = 64  # {"jsonrpc":"2.0","id":...,"result":...} around a result
MIN_KEPT_CHARS = 100  # strings are never cut shorter than this by `cut_strings`
SETTING = "[server.mcp] max_reply_bytes"
WIDEST_COUNT = 10**9  # placeholder of a count filled in after packing (never wider)
URI_METHODS = ("resources/read", "resources/subscribe", "resources/unsubscribe")


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def wire_bytes(text: str) -> int:
    """Bytes `text` takes as a JSON string's contents (escaped, UTF-8)."""
    return utf8_len(json.dumps(text, ensure_ascii=False)) - 2


def nested_bytes(text: str) -> int:
    """Bytes `text` takes as a string inside a JSON text that is itself sent as a string."""
    return wire_bytes(json.dumps(text, ensure_ascii=False)[1:-1])


def text_budget(limit: int) -> int:
    """Bytes a tool's text may take (as sent) in an answer of at most `limit` bytes."""
    return limit - TEXT_OVERHEAD


def fit_prefix(text: str, room: int, measure: Callable[[str], int] = nested_bytes) -> int:
    """The most leading characters of `text` whose `measure` is at most `room`."""
    lo, hi = 0, max(0, min(len(text), room))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if measure(text[:mid]) <= room:
            lo = mid
        else:
            hi = mid - 1
    return lo


def pack(
    shell: dict[str, Any],
    field: str,
    items: list[Any],
    budget: int,
    shrink: Callable[[Any, int], Any | None],
) -> tuple[dict[str, Any], int]:
    """`shell` with `field` set to the longest leading run of `items` that keeps the answer's
    text within `budget` bytes; when not even the first fits, it is `shrink(item, room)`
    (None leaves it out). Returns the answer and how many items it holds."""
    answer = {**shell, field: []}
    used = wire_bytes(dumps(answer))
    kept: list[Any] = []
    for item in items:
        size = wire_bytes(dumps(item)) + (1 if kept else 0)  # 1: the comma
        if used + size <= budget:
            kept.append(item)
            used += size
            continue
        if not kept:
            small = shrink(item, budget - used)
            if small is not None:
                kept.append(small)
        break
    answer[field] = kept
    return answer, len(kept)


def cut_message(entry: dict[str, Any], room: int) -> dict[str, Any]:
    """An inbox message cut to `room` bytes: the start of its body, ``truncated: true``, its
    length and the offset ``read_message`` continues from."""
    body = str(entry.get("body") or "")
    marked = {**entry, "truncated": True, "body_chars": len(body), "next_offset": len(body)}
    avail = room - wire_bytes(dumps({**marked, "body": ""}))
    if avail >= 0:
        kept = fit_prefix(body, avail)
        return {**marked, "body": body[:kept], "next_offset": kept}
    # The rest of it (a subject, a list of attachments) is too large already: its strings
    # cut, or, past that, its ids alone, so that it is still handed out (and read on).
    cut = cut_strings(marked, room)
    if cut is not None:
        return {**cut, "body": "", "next_offset": 0}
    keep = ("entry_id", "kind", "thread_id", "sender", "task_id", "timestamp")
    return {
        **{k: entry.get(k) for k in keep},
        "body": "",
        "truncated": True,
        "body_chars": len(body),
        "next_offset": 0,
        "omitted": f"its subject and attachments are too large for one answer ({SETTING})",
    }


def cut_marker(dropped: int) -> str:
    return f" …[{dropped} more characters cut: answers are limited by {SETTING}]"


def _cut(value: Any, keep: int) -> Any:
    if isinstance(value, str):
        if len(value) > keep + 80:  # never cut less than the marker adds
            return value[:keep] + cut_marker(len(value) - keep)
        return value
    if isinstance(value, dict):
        return {k: _cut(v, keep) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut(v, keep) for v in value]
    return value


def _longest(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return max((_longest(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return max((_longest(v) for v in value), default=0)
    return 0


def cut_strings(value: Any, room: int) -> Any | None:
    """`value` with its longest strings cut (each marked) so that its JSON text takes at most
    `room` bytes as sent; None when even strings of MIN_KEPT_CHARS do not fit."""

    def fits(candidate: Any) -> bool:
        return wire_bytes(dumps(candidate)) <= room

    if fits(value):
        return value
    lo, hi = MIN_KEPT_CHARS, _longest(value)
    if hi <= lo or not fits(_cut(value, lo)):
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(_cut(value, mid)):
            lo = mid
        else:
            hi = mid - 1
    return _cut(value, lo)


def fit_text(text: str, room: int) -> str | None:
    """`text` within `room` bytes as sent: a JSON text keeps its shape with its longest
    strings cut; other text is cut at the end; both marked. None when it cannot be done."""
    if wire_bytes(text) <= room:
        return text
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    else:
        cut = cut_strings(value, room)
        return None if cut is None else dumps(cut)
    marker = cut_marker(len(text))  # the widest marker it can get
    kept = fit_prefix(text, room - wire_bytes(marker), wire_bytes)
    if kept == 0:
        return None
    return text[:kept] + cut_marker(len(text) - kept)


class ReplyCap:
    """Server middleware: no answer to ``tools/call`` or ``resources/read``, and no error, is
    over `limit` bytes, and no URI over `max_uri_chars` characters is looked at. Tools that
    return lists pack them themselves; this is the last check."""

    def __init__(self, limit: int, max_uri_chars: int) -> None:
        self.limit = limit
        self.max_uri_chars = max_uri_chars

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        self._check_uri(ctx)
        try:
            result = await call_next(ctx)
        except ValidationError:
            raise  # sent as "Invalid request parameters", without what was sent
        except Exception as exc:
            cut = self._cut_error(exc)
            if cut is None:
                raise
            logger.info("the error answering %s was cut to fit %s", ctx.method, SETTING)
            raise cut from None
        if ctx.method not in ("tools/call", "resources/read") or result is None:
            return result
        data = (
            result.model_dump(by_alias=True, mode="json", exclude_none=True)
            if isinstance(result, BaseModel)
            else result
        )
        size = utf8_len(dumps(data)) + RPC_OVERHEAD
        if size <= self.limit:
            return result
        if ctx.method == "tools/call":
            return self._tool_result(data, size)
        return self._resource_result(data, size)

    def _check_uri(self, ctx: ServerRequestContext[Any, Any]) -> None:
        # Before the SDK matches it against the templates, logs it and echoes it in errors.
        if ctx.method not in URI_METHODS or not isinstance(ctx.params, Mapping):
            return
        uri = ctx.params.get("uri")
        if isinstance(uri, str) and len(uri) > self.max_uri_chars:
            raise MCPError(
                INVALID_PARAMS,
                f"the URI is {len(uri)} characters; the limit is {self.max_uri_chars} "
                "([server.mcp] max_uri_chars)",
            )

    def _cut_error(self, exc: Exception) -> MCPError | None:
        """None when the JSON-RPC error `exc` makes fits the limit; else that error with its
        message and data cut to half of the limit each (data that cannot be cut is left
        out). Any exception but an MCPError is sent with code 0 and its text (the SDK's
        JSON-RPC dispatcher does so), which may echo what the client sent."""
        error = exc.error if isinstance(exc, MCPError) else ErrorData(code=0, message=str(exc))
        dumped = error.model_dump(by_alias=True, mode="json", exclude_none=True)
        if utf8_len(dumps(dumped)) + RPC_OVERHEAD <= self.limit:
            return None
        room = (self.limit - RPC_OVERHEAD - TEXT_OVERHEAD) // 2
        message = fit_text(error.message, room) or f"an error too large to send ({SETTING})"
        data = None if error.data is None else cut_strings(error.data, room)
        return MCPError(error.code, message, data)

    def _fitted(self, text: str, size: int) -> str | None:
        return fit_text(text, self.limit - (size - wire_bytes(text)))

    def _too_large(self, size: int) -> str:
        return (
            f"the answer would be {size} bytes, over the {self.limit} of {SETTING}; "
            "ask for less (a smaller limit, one thread, a later start)"
        )

    def _tool_result(self, data: dict[str, Any], size: int) -> CallToolResult:
        content = data.get("content") or []
        fitted = None
        if len(content) == 1 and content[0].get("type") == "text":
            # The text alone: a copy of it as structured content is dropped first.
            only = {"content": content, "isError": bool(data.get("isError"))}
            size = utf8_len(dumps(only)) + RPC_OVERHEAD
            fitted = self._fitted(content[0]["text"], size)
        if fitted is None:
            return CallToolResult(
                content=[TextContent(type="text", text=self._too_large(size))], is_error=True
            )
        return CallToolResult(
            content=[TextContent(type="text", text=fitted)], is_error=bool(data.get("isError"))
        )

    def _resource_result(self, data: dict[str, Any], size: int) -> dict[str, Any]:
        contents = data.get("contents") or []
        if len(contents) == 1 and isinstance(contents[0].get("text"), str):
            fitted = self._fitted(contents[0]["text"], size)
            if fitted is not None:
                return {**data, "contents": [{**contents[0], "text": fitted}]}
        raise MCPError(INVALID_REQUEST, self._too_large(size))
