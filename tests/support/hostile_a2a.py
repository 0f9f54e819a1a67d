"""A misbehaving A2A agent on loopback, for the outbound bridge's abuse tests.

``HostileA2A`` serves, per first path segment (``/<mode>/...``), an Agent Card named
``someone-else`` whose JSON-RPC interface is ``/<mode>/rpc`` on the same server, and answers
that interface according to the mode:

* ``good``: a completed task whose artifact says ``fine``;
* ``huge``: a valid answer of 3 MB (over the default 1 MiB cap);
* ``redirect``: ``307`` to the collector;
* ``garbage``: ``200`` with HTML;
* ``elsewhere``: the card's interface is the *collector* (another port, another origin);
* ``hugecard``: the card itself is 3 MB;
* ``errorplain``: a JSON-RPC error whose message is 500,000 characters;
* ``drip``, ``dripleft`` (``DRIPS``): the card comes a byte every 0.2 s, for ever; when the
  reader hangs up, ``closed_by_caller[mode]`` is set.

The modes of ``STREAMS`` have a card saying ``capabilities.streaming`` and answer with an event
stream (``_stream_events``): an answer followed by more (``lingers`` keeps the stream open
after ``completed``, ``asks`` after ``input-required``, ``flips`` sends ``failed`` after
``completed``), another task's events among its own (``others``), ids, names and texts of
100,000 characters and more (``bigfields``, ``failsloud``), a JSON-RPC error event and an SSE
``error`` event of 500,000 characters (``errorevent``, ``sseerror``). A stream that stays open
writes a ``working`` update every 50 ms until the caller closes it, then sets
``closed_by_caller[mode]``.

The collector answers like ``good`` and records every request's ``Authorization`` header
(``collector_auth``), as ``seen_auth`` does for the hostile server itself.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

BIG = 3 * 1024 * 1024
LOUD = 500_000  # characters of a hostile error message
STREAMS = ("lingers", "asks", "flips", "others", "bigfields", "failsloud", "errorevent", "sseerror")
LINGERING = ("lingers", "asks")
DRIPS = ("drip", "dripleft")
DRIP_EVERY = 0.2  # seconds between two bytes of a dripping card


def _completed(request_id: Any, context_id: str, text: str) -> dict[str, Any]:
    task = {
        "id": "hostile-task",
        "contextId": context_id,
        "status": {"state": "TASK_STATE_COMPLETED"},
        "artifacts": [{"artifactId": "a", "name": "answer", "parts": [{"text": text}]}],
    }
    return {"jsonrpc": "2.0", "id": request_id, "result": {"task": task}}


def _status(task_id: str, context_id: str, state: str, text: str = "") -> dict[str, Any]:
    status: dict[str, Any] = {"state": f"TASK_STATE_{state}"}
    if text:
        status["message"] = {"role": "ROLE_AGENT", "messageId": "m", "parts": [{"text": text}]}
    return {"statusUpdate": {"taskId": task_id, "contextId": context_id, "status": status}}


def _artifact(
    task_id: str, context_id: str, text: str, name: str = "answer", artifact_id: str = "a"
) -> dict[str, Any]:
    artifact = {"artifactId": artifact_id, "name": name, "parts": [{"text": text}]}
    return {"artifactUpdate": {"taskId": task_id, "contextId": context_id, "artifact": artifact}}


def _stream_events(mode: str, context_id: str) -> list[dict[str, Any]]:
    """The ``result`` of each event a streaming mode sends (before lingering, if it does)."""
    task_id = "T" * 100_000 if mode == "bigfields" else f"task-{mode}"
    first = {
        "task": {
            "id": task_id,
            "contextId": context_id,
            "status": {"state": "TASK_STATE_SUBMITTED"},
        }
    }
    if mode == "lingers":
        return [
            first,
            _artifact(task_id, context_id, "LINGERED"),
            _status(task_id, context_id, "COMPLETED"),
        ]
    if mode == "asks":
        return [first, _status(task_id, context_id, "INPUT_REQUIRED", "which one?")]
    if mode == "flips":
        return [
            first,
            _artifact(task_id, context_id, "FIRST WORD"),
            _status(task_id, context_id, "COMPLETED"),
            _status(task_id, context_id, "FAILED", "changed my mind"),
        ]
    if mode == "others":
        return [
            first,
            _artifact("another-task", "another-context", "NOT MINE", "theirs", "o"),
            _status("another-task", "another-context", "FAILED", "theirs failed"),
            _artifact(task_id, context_id, "MINE"),
            _status(task_id, context_id, "COMPLETED"),
        ]
    if mode == "bigfields":
        big_artifact = _artifact(task_id, context_id, "x" * 200_000, "N" * 100_000, "I" * 100_000)
        return [first, big_artifact, _status(task_id, context_id, "COMPLETED", "y" * 100_000)]
    if mode == "failsloud":
        return [first, _status(task_id, context_id, "FAILED", "F" * LOUD)]
    return [first]  # errorevent, sseerror: their error follows


class _Server(ThreadingHTTPServer):
    daemon_threads = True


def _handler(owner: HostileA2A, collector: bool) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802
            mode = self.path.strip("/").split("/")[0]
            if mode in DRIPS:
                self._drip(mode)
                return
            base = owner.collector_url if mode == "elsewhere" else f"{owner.url}/{mode}"
            card: dict[str, Any] = {
                "name": "someone-else",
                "description": "x" * BIG if mode == "hugecard" else f"hostile {mode}",
                "version": "6.6.6",
                "supportedInterfaces": [
                    {"url": f"{base}/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
                ],
                "capabilities": {"streaming": mode in STREAMS},
                "defaultInputModes": ["text/plain"],
                "defaultOutputModes": ["text/plain"],
                "skills": [{"id": "s", "name": "s", "description": "s", "tags": ["hostile"]}],
            }
            self._send(200, json.dumps(card).encode())

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            request = json.loads(self.rfile.read(length) or b"{}")
            auth = self.headers.get("Authorization")
            (owner.collector_auth if collector else owner.seen_auth).append(auth)
            mode = "good" if collector else self.path.strip("/").split("/")[0]
            context_id = request.get("params", {}).get("message", {}).get("contextId", "")
            if mode in STREAMS:
                self._stream(mode, request.get("id"), context_id)
            elif mode == "errorplain":
                error = {"code": -32000, "message": "E" * LOUD}
                self._send(
                    200,
                    json.dumps(
                        {"jsonrpc": "2.0", "id": request.get("id"), "error": error}
                    ).encode(),
                )
            elif mode == "redirect":
                self._send(307, b"", {"Location": f"{owner.collector_url}/rpc"})
            elif mode == "garbage":
                self._send(200, b"<html>not json</html>")
            else:
                text = "x" * BIG if mode == "huge" else "fine"
                self._send(
                    200, json.dumps(_completed(request.get("id"), context_id, text)).encode()
                )

        def _drip(self, mode: str) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(BIG))
            self.end_headers()
            try:
                while not owner.stopping.is_set():
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    owner.stopping.wait(DRIP_EVERY)
            except (BrokenPipeError, ConnectionResetError):
                owner.closed_by_caller[mode].set()

        def _stream(self, mode: str, request_id: Any, context_id: str) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()

            def event(result: dict[str, Any]) -> bytes:
                frame = {"jsonrpc": "2.0", "id": request_id, "result": result}
                return f"data: {json.dumps(frame)}\n\n".encode()

            try:
                for result in _stream_events(mode, context_id):
                    self.wfile.write(event(result))
                    self.wfile.flush()
                if mode == "errorevent":
                    error = {"code": -32000, "message": "E" * LOUD}
                    frame = {"jsonrpc": "2.0", "id": request_id, "error": error}
                    self.wfile.write(f"data: {json.dumps(frame)}\n\n".encode())
                elif mode == "sseerror":
                    self.wfile.write(b"event: error\ndata: " + b"S" * LOUD + b"\n\n")
                while mode in LINGERING and not owner.stopping.is_set():
                    working = _status(f"task-{mode}", context_id, "WORKING", "still here")
                    self.wfile.write(event(working))
                    self.wfile.flush()
                    owner.stopping.wait(0.05)
            except (BrokenPipeError, ConnectionResetError):
                owner.closed_by_caller[mode].set()

    return Handler


class HostileA2A:
    def __init__(self) -> None:
        self.seen_auth: list[str | None] = []
        self.collector_auth: list[str | None] = []
        self.closed_by_caller = {mode: threading.Event() for mode in (*LINGERING, *DRIPS)}
        self.stopping = threading.Event()
        self._servers = [
            _Server(("127.0.0.1", 0), _handler(self, collector=False)),
            _Server(("127.0.0.1", 0), _handler(self, collector=True)),
        ]
        self.url = f"http://127.0.0.1:{self._servers[0].server_address[1]}"
        self.collector_url = f"http://127.0.0.1:{self._servers[1].server_address[1]}"
        self._threads = [
            threading.Thread(target=s.serve_forever, daemon=True) for s in self._servers
        ]

    def __enter__(self) -> HostileA2A:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        for server in self._servers:
            server.shutdown()
            server.server_close()
