"""A scripted LLM provider on 127.0.0.1 for tests.

The server speaks three wire formats so LiteLLM's real request building and response parsing
run against it:

- OpenAI Chat Completions: ``POST /v1/chat/completions`` (JSON, or SSE chunks with tool-call
  argument deltas split across chunks when ``stream`` is true);
- OpenAI Responses: ``POST /v1/responses`` (JSON, or the streamed event sequence including
  reasoning-summary deltas and function-call argument deltas);
- Anthropic Messages: ``POST /v1/messages`` (thinking / text / tool_use blocks, JSON or SSE).

A test queues provider-neutral replies built from small parts and reads back what was sent::

    async with ScriptedLLM() as llm:
        llm.queue(reasoning("check the city"), tool_call("get_weather", {"city": "Paris"}))
        llm.queue(text("It is sunny."))
        ...  # point LiteLLM at llm.base_url (OpenAI) or llm.root_url (Anthropic)
        assert llm.requests[0].tool_names == [...]

Each queued reply answers exactly one HTTP request, whatever its format; an optional
``match`` predicate lets concurrent agents pick their own replies. A request with no queued
reply gets an HTTP 500 whose message says so, and is listed in ``llm.unanswered``. A request
whose client went away before it was answered (a timeout, a cancelled call) is listed in
``llm.disconnected``.

``ScriptedLLM(quirks=LLAMA_CPP_PYTHON)`` answers the way a real local server did (see
`ServerQuirks`): the quirks are checked before any queued reply is taken.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

# ------------------------------------------------------------------------------------------
# Reply parts and builders


@dataclass(frozen=True)
class ReasoningPart:
    text: str


@dataclass(frozen=True)
class TextPart:
    text: str


@dataclass(frozen=True)
class ToolCallPart:
    name: str
    # A str is sent verbatim, which lets a test send malformed JSON arguments.
    arguments: dict[str, Any] | str
    call_id: str

    @property
    def arguments_json(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments)


@dataclass(frozen=True)
class WebSearchPart:
    """A provider-executed web search (Responses `web_search_call`, Anthropic `server_tool_use`)."""

    query: str
    call_id: str


Part = ReasoningPart | TextPart | ToolCallPart | WebSearchPart


@dataclass(frozen=True)
class Reply:
    parts: tuple[Part, ...]


@dataclass(frozen=True)
class ErrorReply:
    status: int
    message: str


@dataclass(frozen=True)
class HangReply:
    """Sleep before answering (the client is expected to time out first)."""

    seconds: float
    then: Reply | None = None


ReplyLike = Reply | ErrorReply | HangReply


def text(value: str) -> TextPart:
    return TextPart(value)


def reasoning(value: str) -> ReasoningPart:
    return ReasoningPart(value)


def tool_call(
    name: str, arguments: dict[str, Any] | str, call_id: str | None = None
) -> ToolCallPart:
    return ToolCallPart(name, arguments, call_id or f"call_{uuid.uuid4().hex[:12]}")


def web_search(query: str, call_id: str | None = None) -> WebSearchPart:
    return WebSearchPart(query, call_id or f"ws_{uuid.uuid4().hex[:12]}")


def reply(*parts: Part) -> Reply:
    return Reply(tuple(parts))


def error(status: int = 500, message: str | None = None) -> ErrorReply:
    return ErrorReply(status, message or f"scripted provider error {status}")


def hang(seconds: float, then: Reply | None = None) -> HangReply:
    return HangReply(seconds, then)


# ------------------------------------------------------------------------------------------
# Real servers' departures from OpenAI


@dataclass(frozen=True)
class ServerQuirks:
    """What a real OpenAI-compatible server did, reproduced byte for byte where it matters.

    - ``responses_api=False``: ``/v1/responses`` answers 404 (the server has no such route);
    - ``required_tool_choice=False``: ``tool_choice: "required"`` answers 500 with an empty
      message (llama-cpp-python's function-calling format asserts on it);
    - ``needs_assistant_content``: an assistant message without a ``content`` key answers 500
      (its chat template reads ``message.content`` strictly);
    - ``stream_usage``: ``"always"`` (the scripted default: usage in the last chunk),
      ``"when_asked"`` (OpenAI, vLLM, Ollama: a last chunk with usage and no choices, only with
      ``stream_options.include_usage``) or ``"never"`` (llama-cpp-python);
    - ``context_tokens``: a request larger than this (counted as its JSON size / 4) answers 400
      with the server's context error;
    - ``chunk_delay``: seconds between the chunks of a streamed reply (a slow generation whose
      every read is quick);
    - ``streams_tool_calls=False``: a streamed Chat Completions request with tools under
      ``"required"``, or under ``"auto"`` when the next reply is a tool call, answers 200 with
      an event stream that ends before its first chunk (llama-cpp-python's handler raises
      inside the stream: "Automatic streaming tool choice is not supported"); the reply stays
      queued for the next request (the same prompt at temperature 0 chooses the same).
      With ``tool_stream_breaks`` the connection is closed right after the headers instead
      (the server's app raises once the response has started: seen as often as the clean end);
      with ``drops_kept_connection`` the stream ends cleanly but its connection is closed,
      unanswered, when the next request comes on it (the server closes it once its app
      raised, after the client had already sent its next request on the kept-alive
      connection: "Connection error" in 3 of 5 tries against llama-cpp-python 0.3.36).
    """

    responses_api: bool = True
    required_tool_choice: bool = True
    needs_assistant_content: bool = False
    stream_usage: str = "always"
    context_tokens: int | None = None
    chunk_delay: float = 0.0
    streams_tool_calls: bool = True
    tool_stream_breaks: bool = False
    drops_kept_connection: bool = False

    def refusal(self, path: str, body: dict[str, Any]) -> web.Response | None:
        """The server's own answer to a request it refuses, or None."""
        if not self.responses_api and path.endswith("/responses"):
            return _raw(404, b'{"detail":"Not Found"}')
        streamed_error = bool(body.get("stream")) and not self.streams_tool_calls
        if not self.required_tool_choice and body.get("tool_choice") == "required":
            # (streamed, its refusal ends the event stream instead: `ends_stream_at_once`)
            if not streamed_error:
                return _raw(500, _llama_error(""))
        messages = body.get("messages") or []
        if self.needs_assistant_content and any(
            m.get("role") == "assistant" and "content" not in m for m in messages
        ):
            return _raw(500, _llama_error("'dict object' has no attribute 'content'"))
        if self.context_tokens is not None:
            prompt = len(json.dumps(messages)) // 4
            if prompt > self.context_tokens:
                completion = body.get("max_tokens")
                text = (
                    f"This model's maximum context length is {self.context_tokens} tokens. "
                    f"However, you requested {prompt + (completion or 0)} tokens ({prompt} in "
                    f"the messages, {completion} in the completion). Please reduce the length "
                    "of the messages or completion."
                )
                error = {
                    "error": {
                        "message": text,
                        "type": "invalid_request_error",
                        "param": "messages",
                        "code": "context_length_exceeded",
                    }
                }
                return _raw(400, json.dumps(error, separators=(",", ":")).encode())
        return None

    def ends_stream_at_once(self, body: dict[str, Any], next_reply: Any) -> bool:
        """True when this streamed request gets an event stream without a chunk."""
        if self.streams_tool_calls or not body.get("stream") or not body.get("tools"):
            return False
        choice = body.get("tool_choice")
        if choice == "required":
            return True
        parts = next_reply.parts if isinstance(next_reply, Reply) else ()
        return choice in (None, "auto") and any(isinstance(p, ToolCallPart) for p in parts)


# llama-cpp-python's server (python -m llama_cpp.server, chat format chatml-function-calling).
LLAMA_CPP_PYTHON = ServerQuirks(
    responses_api=False,
    required_tool_choice=False,
    needs_assistant_content=True,
    stream_usage="never",
    streams_tool_calls=False,
)
# What it sends then: sse-starlette's headers, and no byte of body.
EMPTY_EVENT_STREAM = {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-store",
    "X-Accel-Buffering": "no",
}


def _llama_error(message: str) -> bytes:
    error = {"message": message, "type": "internal_server_error", "param": None, "code": None}
    return json.dumps({"error": error}, separators=(",", ":")).encode()


def _raw(status: int, body: bytes) -> web.Response:
    return web.Response(status=status, body=body, content_type="application/json")


# ------------------------------------------------------------------------------------------
# Recorded requests


@dataclass
class ScriptedRequest:
    path: str
    body: dict[str, Any]
    headers: dict[str, str]

    @property
    def format(self) -> str:
        if self.path.endswith("/chat/completions"):
            return "completions"
        if self.path.endswith("/responses"):
            return "responses"
        return "anthropic"

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The conversation as sent (`messages` or Responses `input`)."""
        if self.format == "responses":
            value = self.body.get("input", [])
            return value if isinstance(value, list) else [{"role": "user", "content": value}]
        return list(self.body.get("messages", []))

    @property
    def system_text(self) -> str:
        """The system prompt, wherever the format puts it."""
        if self.format == "anthropic":
            system = self.body.get("system", "")
            if isinstance(system, list):
                return "".join(block.get("text", "") for block in system)
            return system or ""
        chunks = [self.body.get("instructions") or ""]
        for msg in self.messages:
            if isinstance(msg, dict) and msg.get("role") in ("system", "developer"):
                chunks.append(_content_text(msg.get("content")))
        return "".join(chunks)

    @property
    def tool_names(self) -> list[str]:
        names = []
        for tool in self.body.get("tools") or []:
            names.append(tool.get("name") or tool.get("function", {}).get("name"))
        return names

    def tool(self, name: str) -> dict[str, Any]:
        for tool in self.body.get("tools") or []:
            if (tool.get("name") or tool.get("function", {}).get("name")) == name:
                return tool
        raise KeyError(name)

    @property
    def last_user_text(self) -> str:
        for msg in reversed(self.messages):
            if isinstance(msg, dict) and msg.get("role") == "user":
                return _content_text(msg.get("content"))
        return ""


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


Matcher = Callable[[ScriptedRequest], bool]


@dataclass
class _Queued:
    reply: ReplyLike | Callable[[ScriptedRequest], ReplyLike]
    match: Matcher | None


# ------------------------------------------------------------------------------------------
# The server


@dataclass
class ScriptedLLM:
    host: str = "127.0.0.1"
    quirks: ServerQuirks = field(default_factory=ServerQuirks)
    # The largest request body taken (aiohttp's own default is 1 MiB): a task whose agents
    # handle large texts sends its whole history with every model call.
    max_request_bytes: int = 64 * 1024 * 1024
    requests: list[ScriptedRequest] = field(default_factory=list)
    unanswered: list[ScriptedRequest] = field(default_factory=list)
    disconnected: list[ScriptedRequest] = field(default_factory=list)
    # Requests answered with an event stream without a chunk (``streams_tool_calls=False``)
    empty_streams: list[ScriptedRequest] = field(default_factory=list)
    _queue: list[_Queued] = field(default_factory=list)
    _dropping: set[Any] = field(default_factory=set)  # connections closed at their next request
    _runner: web.AppRunner | None = None
    _closing: asyncio.Event = field(default_factory=asyncio.Event)
    _port: int = 0

    async def __aenter__(self) -> ScriptedLLM:
        app = web.Application(client_max_size=self.max_request_bytes)
        app.router.add_post("/v1/chat/completions", self._handle)
        app.router.add_post("/chat/completions", self._handle)
        app.router.add_post("/v1/responses", self._handle)
        app.router.add_post("/responses", self._handle)
        app.router.add_post("/v1/messages", self._handle)
        self._closing = asyncio.Event()
        # Cancel handlers whose client went away (a timed-out request must not linger).
        self._runner = web.AppRunner(app, handle_signals=False, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, 0)
        await site.start()
        server = site._server
        assert server is not None and server.sockets  # type: ignore[attr-defined]
        self._port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._closing.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def port(self) -> int:
        return self._port

    @property
    def root_url(self) -> str:
        """Base URL without `/v1` (what LiteLLM's Anthropic provider expects)."""
        return f"http://{self.host}:{self._port}"

    @property
    def base_url(self) -> str:
        """OpenAI-style base URL (`.../v1`)."""
        return f"{self.root_url}/v1"

    def queue(
        self,
        *parts: Part | ReplyLike | Callable[[ScriptedRequest], ReplyLike],
        match: Matcher | None = None,
    ) -> None:
        """Queue ONE reply. Several parts are combined, in order, into a single reply."""
        if not parts:
            raise ValueError("queue() needs at least one part or reply")
        if (
            len(parts) == 1
            and isinstance(parts[0], (Reply, ErrorReply, HangReply))
            or (len(parts) == 1 and callable(parts[0]) and not isinstance(parts[0], Part))
        ):
            item = parts[0]
        else:
            for part in parts:
                if not isinstance(part, Part):
                    raise TypeError(f"cannot combine {part!r} with other reply parts")
            item = Reply(tuple(parts))  # type: ignore[arg-type]
        self._queue.append(_Queued(item, match))  # type: ignore[arg-type]

    @property
    def pending(self) -> int:
        return len(self._queue)

    def _peek(self, request: ScriptedRequest) -> Any:
        """The queued reply `request` would take (a callable one as queued), left queued."""
        for queued in self._queue:
            if queued.match is None or queued.match(request):
                return queued.reply
        return None

    def _take(self, request: ScriptedRequest) -> ReplyLike | None:
        for index, queued in enumerate(self._queue):
            if queued.match is None or queued.match(request):
                del self._queue[index]
                item = queued.reply
                if not isinstance(item, (Reply, ErrorReply, HangReply)):
                    item = item(request)
                return item
        return None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except json.JSONDecodeError:
            return web.json_response({"error": {"message": "invalid JSON body"}}, status=400)
        recorded = ScriptedRequest(request.path, body, dict(request.headers))
        self.requests.append(recorded)
        if request.transport is not None and request.transport in self._dropping:
            self._dropping.discard(request.transport)
            request.transport.close()  # the close of the connection's empty stream
            return web.Response(status=500)  # (goes nowhere)
        refused = self.quirks.refusal(request.path, body)
        if refused is not None:
            return refused
        if recorded.format == "completions" and self.quirks.ends_stream_at_once(
            body, self._peek(recorded)
        ):
            self.empty_streams.append(recorded)
            empty = web.StreamResponse(status=200, headers=EMPTY_EVENT_STREAM)
            await empty.prepare(request)
            if self.quirks.tool_stream_breaks and request.transport is not None:
                request.transport.close()  # no end of the chunked body
                return empty
            await empty.write_eof()
            if self.quirks.drops_kept_connection and request.transport is not None:
                self._dropping.add(request.transport)
            return empty
        item = self._take(recorded)
        if item is None:
            self.unanswered.append(recorded)
            item = ErrorReply(500, "scripted LLM: no reply queued for this request")
        if isinstance(item, HangReply):
            try:
                await asyncio.wait_for(self._closing.wait(), item.seconds)
            except TimeoutError:
                pass
            except asyncio.CancelledError:  # the client closed the connection
                self.disconnected.append(recorded)
                raise
            if item.then is None:
                return _error_response(recorded, ErrorReply(504, "scripted LLM: hung request"))
            item = item.then
        if isinstance(item, ErrorReply):
            return _error_response(recorded, item)
        model = str(body.get("model", "scripted-model"))
        renderer = _RENDERERS[recorded.format]
        if recorded.stream:
            response = web.StreamResponse(
                status=200,
                headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"},
            )
            await response.prepare(request)
            events = renderer.stream(item, model)
            if recorded.format == "completions":
                events = self._stream_usage(events, body)
            for event_name, payload in events:
                try:
                    if self.quirks.chunk_delay:
                        await asyncio.sleep(self.quirks.chunk_delay)
                    await response.write(_sse(event_name, payload))
                except (asyncio.CancelledError, ConnectionResetError):
                    self.disconnected.append(recorded)  # the client closed the stream
                    raise
            if recorded.format == "completions":
                await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
            return response
        return web.json_response(renderer.full(item, model))

    def _stream_usage(
        self, events: list[tuple[str | None, dict[str, Any]]], body: dict[str, Any]
    ) -> list[tuple[str | None, dict[str, Any]]]:
        """Chat Completions chunks with usage where this server would send it."""
        mode = self.quirks.stream_usage
        if mode == "always":
            return events
        final = events[-1][1]
        usage = final.pop("usage")
        asked = bool((body.get("stream_options") or {}).get("include_usage"))
        if mode == "when_asked" and asked:
            events.append((None, {**final, "choices": [], "usage": usage}))
        return events


def _sse(event_name: str | None, payload: dict[str, Any]) -> bytes:
    data = json.dumps(payload)
    if event_name is None:
        return f"data: {data}\n\n".encode()
    return f"event: {event_name}\ndata: {data}\n\n".encode()


def _error_response(request: ScriptedRequest, item: ErrorReply) -> web.Response:
    if request.format == "anthropic":
        kind = "overloaded_error" if item.status >= 500 else "invalid_request_error"
        body: dict[str, Any] = {"type": "error", "error": {"type": kind, "message": item.message}}
    else:
        body = {"error": {"message": item.message, "type": "server_error", "code": item.status}}
    return web.json_response(body, status=item.status)


def _chunks(value: str, pieces: int = 3) -> list[str]:
    """Split a string into up to `pieces` non-empty chunks (to exercise delta assembly)."""
    if len(value) <= 1:
        return [value]
    size = max(1, -(-len(value) // pieces))
    return [value[i : i + size] for i in range(0, len(value), size)]


def _usage_completions() -> dict[str, int]:
    return {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}


# ------------------------------------------------------------------------------------------
# Chat Completions rendering


class _Completions:
    @staticmethod
    def _split(item: Reply) -> tuple[str, str | None, list[ToolCallPart]]:
        reasoning_text = "".join(p.text for p in item.parts if isinstance(p, ReasoningPart))
        content = "".join(p.text for p in item.parts if isinstance(p, TextPart))
        calls = [p for p in item.parts if isinstance(p, ToolCallPart)]
        return reasoning_text, (content or None), calls

    @classmethod
    def full(cls, item: Reply, model: str) -> dict[str, Any]:
        reasoning_text, content, calls = cls._split(item)
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if reasoning_text:
            message["reasoning_content"] = reasoning_text
        if calls:
            message["tool_calls"] = [
                {
                    "id": c.call_id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments_json},
                }
                for c in calls
            ]
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if calls else "stop",
                }
            ],
            "usage": _usage_completions(),
        }

    @classmethod
    def stream(cls, item: Reply, model: str) -> list[tuple[str | None, dict[str, Any]]]:
        reasoning_text, content, calls = cls._split(item)
        chunk_id = f"chatcmpl-{uuid.uuid4().hex[:12]}"
        created = int(time.time())

        def chunk(delta: dict[str, Any], finish: str | None = None) -> tuple[None, dict]:
            return None, {
                "id": chunk_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }

        events = [chunk({"role": "assistant", "content": ""})]
        for piece in _chunks(reasoning_text) if reasoning_text else []:
            events.append(chunk({"reasoning_content": piece}))
        for piece in _chunks(content) if content else []:
            events.append(chunk({"content": piece}))
        for index, call in enumerate(calls):
            events.append(
                chunk(
                    {
                        "tool_calls": [
                            {
                                "index": index,
                                "id": call.call_id,
                                "type": "function",
                                "function": {"name": call.name, "arguments": ""},
                            }
                        ]
                    }
                )
            )
            for piece in _chunks(call.arguments_json):
                events.append(
                    chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                )
        events.append(chunk({}, "tool_calls" if calls else "stop"))
        final = events[-1][1]
        final["usage"] = _usage_completions()
        return events


# ------------------------------------------------------------------------------------------
# Responses rendering


class _Responses:
    @staticmethod
    def _items(item: Reply) -> list[dict[str, Any]]:
        """Output items in order; consecutive text parts form one message item."""
        items: list[dict[str, Any]] = []
        for part in item.parts:
            if isinstance(part, ReasoningPart):
                items.append(
                    {
                        "type": "reasoning",
                        "id": f"rs_{uuid.uuid4().hex[:12]}",
                        "summary": [{"type": "summary_text", "text": part.text}],
                        "encrypted_content": "scripted-encrypted",
                    }
                )
            elif isinstance(part, TextPart):
                if items and items[-1]["type"] == "message":
                    items[-1]["content"][0]["text"] += part.text
                    continue
                items.append(
                    {
                        "type": "message",
                        "id": f"msg_{uuid.uuid4().hex[:12]}",
                        "status": "completed",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": part.text, "annotations": []}],
                    }
                )
            elif isinstance(part, ToolCallPart):
                items.append(
                    {
                        "type": "function_call",
                        "id": f"fc_{uuid.uuid4().hex[:12]}",
                        "call_id": part.call_id,
                        "name": part.name,
                        "arguments": part.arguments_json,
                        "status": "completed",
                    }
                )
            elif isinstance(part, WebSearchPart):
                items.append(
                    {
                        "type": "web_search_call",
                        "id": part.call_id,
                        "status": "completed",
                        "action": {"type": "search", "query": part.query},
                    }
                )
        return items

    @staticmethod
    def _envelope(model: str, output: list[dict[str, Any]], status: str) -> dict[str, Any]:
        return {
            "id": f"resp_{uuid.uuid4().hex[:12]}",
            "object": "response",
            "created_at": int(time.time()),
            "status": status,
            "model": model,
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": {
                "input_tokens": 11,
                "output_tokens": 7,
                "total_tokens": 18,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens_details": {"reasoning_tokens": 3},
            },
        }

    @classmethod
    def full(cls, item: Reply, model: str) -> dict[str, Any]:
        return cls._envelope(model, cls._items(item), "completed")

    @classmethod
    def stream(cls, item: Reply, model: str) -> list[tuple[str | None, dict[str, Any]]]:
        items = cls._items(item)
        envelope = cls._envelope(model, [], "in_progress")
        events: list[tuple[str | None, dict[str, Any]]] = []

        def emit(kind: str, **payload: Any) -> None:
            payload = {"type": kind, "sequence_number": len(events), **payload}
            events.append((kind, payload))

        emit("response.created", response=envelope)
        emit("response.in_progress", response=envelope)
        for index, out in enumerate(items):
            kind = out["type"]
            if kind == "reasoning":
                summary_text = out["summary"][0]["text"]
                emit("response.output_item.added", output_index=index, item={**out, "summary": []})
                part = {"type": "summary_text", "text": ""}
                common = {"item_id": out["id"], "output_index": index, "summary_index": 0}
                emit("response.reasoning_summary_part.added", **common, part=part)
                for piece in _chunks(summary_text):
                    emit("response.reasoning_summary_text.delta", **common, delta=piece)
                emit("response.reasoning_summary_text.done", **common, text=summary_text)
                emit(
                    "response.reasoning_summary_part.done",
                    **common,
                    part={"type": "summary_text", "text": summary_text},
                )
                emit("response.output_item.done", output_index=index, item=out)
            elif kind == "message":
                body_text = out["content"][0]["text"]
                emit(
                    "response.output_item.added",
                    output_index=index,
                    item={**out, "status": "in_progress", "content": []},
                )
                common = {"item_id": out["id"], "output_index": index, "content_index": 0}
                empty = {"type": "output_text", "text": "", "annotations": []}
                emit("response.content_part.added", **common, part=empty)
                for piece in _chunks(body_text):
                    emit("response.output_text.delta", **common, delta=piece, logprobs=[])
                emit("response.output_text.done", **common, text=body_text, logprobs=[])
                emit("response.content_part.done", **common, part=out["content"][0])
                emit("response.output_item.done", output_index=index, item=out)
            elif kind == "function_call":
                emit(
                    "response.output_item.added",
                    output_index=index,
                    item={**out, "arguments": "", "status": "in_progress"},
                )
                common = {"item_id": out["id"], "output_index": index}
                for piece in _chunks(out["arguments"]):
                    emit("response.function_call_arguments.delta", **common, delta=piece)
                emit("response.function_call_arguments.done", **common, arguments=out["arguments"])
                emit("response.output_item.done", output_index=index, item=out)
            else:
                emit("response.output_item.added", output_index=index, item=out)
                emit("response.output_item.done", output_index=index, item=out)
        # As observed with OpenAI: the final response omits reasoning items, so reasoning can
        # only be recovered from the streamed summary events.
        final_output = [out for out in items if out["type"] != "reasoning"]
        completed = {**envelope, "status": "completed", "output": final_output}
        emit("response.completed", response=completed)
        return events


# ------------------------------------------------------------------------------------------
# Anthropic Messages rendering


class _Anthropic:
    @staticmethod
    def _blocks(item: Reply) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = []
        for part in item.parts:
            if isinstance(part, ReasoningPart):
                blocks.append(
                    {"type": "thinking", "thinking": part.text, "signature": "scripted-signature"}
                )
            elif isinstance(part, TextPart):
                blocks.append({"type": "text", "text": part.text})
            elif isinstance(part, ToolCallPart):
                arguments = part.arguments
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": part.call_id,
                        "name": part.name,
                        # Anthropic always sends an object; malformed JSON is not expressible.
                        "input": arguments if isinstance(arguments, dict) else {"raw": arguments},
                    }
                )
            elif isinstance(part, WebSearchPart):
                blocks.append(
                    {
                        "type": "server_tool_use",
                        "id": part.call_id,
                        "name": "web_search",
                        "input": {"query": part.query},
                    }
                )
                blocks.append(
                    {
                        "type": "web_search_tool_result",
                        "tool_use_id": part.call_id,
                        "content": [
                            {
                                "type": "web_search_result",
                                "title": "Scripted result",
                                "url": "https://example.invalid/",
                                "encrypted_content": "x",
                                "page_age": None,
                            }
                        ],
                    }
                )
        return blocks

    @staticmethod
    def _stop_reason(blocks: list[dict[str, Any]]) -> str:
        return "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"

    @classmethod
    def full(cls, item: Reply, model: str) -> dict[str, Any]:
        blocks = cls._blocks(item)
        return {
            "id": f"msg_{uuid.uuid4().hex[:12]}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": blocks,
            "stop_reason": cls._stop_reason(blocks),
            "stop_sequence": None,
            "usage": {"input_tokens": 11, "output_tokens": 7},
        }

    @classmethod
    def stream(cls, item: Reply, model: str) -> list[tuple[str | None, dict[str, Any]]]:
        blocks = cls._blocks(item)
        events: list[tuple[str | None, dict[str, Any]]] = []

        def emit(kind: str, **payload: Any) -> None:
            events.append((kind, {"type": kind, **payload}))

        message = {**cls.full(item, model), "content": [], "stop_reason": None}
        message["usage"] = {"input_tokens": 11, "output_tokens": 1}
        emit("message_start", message=message)
        for index, block in enumerate(blocks):
            kind = block["type"]
            if kind == "thinking":
                emit(
                    "content_block_start",
                    index=index,
                    content_block={**block, "thinking": "", "signature": ""},
                )
                for piece in _chunks(block["thinking"]):
                    emit(
                        "content_block_delta",
                        index=index,
                        delta={"type": "thinking_delta", "thinking": piece},
                    )
                emit(
                    "content_block_delta",
                    index=index,
                    delta={"type": "signature_delta", "signature": block["signature"]},
                )
            elif kind == "text":
                emit("content_block_start", index=index, content_block={"type": "text", "text": ""})
                for piece in _chunks(block["text"]):
                    emit(
                        "content_block_delta",
                        index=index,
                        delta={"type": "text_delta", "text": piece},
                    )
            elif kind in ("tool_use", "server_tool_use"):
                emit("content_block_start", index=index, content_block={**block, "input": {}})
                for piece in _chunks(json.dumps(block["input"])):
                    emit(
                        "content_block_delta",
                        index=index,
                        delta={"type": "input_json_delta", "partial_json": piece},
                    )
            else:
                emit("content_block_start", index=index, content_block=block)
            emit("content_block_stop", index=index)
        emit(
            "message_delta",
            delta={"stop_reason": cls._stop_reason(blocks), "stop_sequence": None},
            usage={"output_tokens": 7},
        )
        emit("message_stop")
        return events


_RENDERERS: dict[str, Any] = {
    "completions": _Completions,
    "responses": _Responses,
    "anthropic": _Anthropic,
}
