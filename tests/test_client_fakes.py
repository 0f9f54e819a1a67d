"""A small fake MAIL server (aiohttp.web on 127.0.0.1) for the client and REPL tests.

It mimics the documented routes closely enough to check what the client sends and how it
reads answers, and lets a test hold an SSE stream open until it has seen the first event.
It runs in its own thread and event loop so both async tests and pseudo-terminal tests
(which block on reads) can use it. This module holds no tests of its own.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import ClientConnectionResetError, web

USER_KEY = "user-key"
ADMIN_KEY = "admin-key"
AGENT_KEY = "agent-key"
IDENTITIES = {
    USER_KEY: {"id": "alice-0123456789", "role": "user"},
    ADMIN_KEY: {"id": "root", "role": "admin"},
    AGENT_KEY: {"id": "swarm-b", "role": "agent"},
}
SWARM_NAME = "fake-swarm"
GATE_TIMEOUT = 8.0


def _now() -> str:
    return datetime.now(UTC).isoformat()


def event_frame(name: str, data: dict[str, Any] | str, sep: str = "\r\n", **extra: str) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    lines = [f"{key}: {value}" for key, value in extra.items()]
    lines.append(f"event: {name}")
    lines.extend(f"data: {part}" for part in text.split("\n"))
    return (sep.join(lines) + sep + sep).encode()


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any


@dataclass
class FakeMailServer:
    requests: list[Recorded] = field(default_factory=list)
    stream_gate: threading.Event = field(default_factory=threading.Event)
    stream_disconnected: threading.Event = field(default_factory=threading.Event)
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)
    health_status: str = "healthy"
    health_as_html: bool = False
    health_http_status: int = 200
    health_delay: float = 0.0
    port: int = 0

    def __post_init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._ready = threading.Event()

    # ------------------------------------------------------------------ lifecycle

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeMailServer:
        self._thread = threading.Thread(target=self._run, name="fake-mail-server", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("fake MAIL server did not start")
        return self

    def stop(self) -> None:
        if self._loop is None or self._thread is None:
            return
        self.stream_gate.set()  # let any parked stream finish
        future = asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop)
        future.result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._startup())
        self._ready.set()
        self._loop.run_forever()
        self._loop.close()

    async def _startup(self) -> None:
        app = web.Application(middlewares=[self._record])
        routes = [
            ("GET", "/", self.root),
            ("GET", "/health", self.health),
            ("POST", "/health", self.set_health),
            ("GET", "/whoami", self.whoami),
            ("GET", "/status", self.status),
            ("POST", "/message", self.message),
            ("GET", "/tasks", self.get_tasks),
            ("GET", "/task", self.get_task),
            ("GET", "/swarms", self.swarms),
            ("POST", "/swarms", self.register_swarm),
            ("GET", "/swarms/dump", self.dump),
            ("POST", "/swarms/load", self.load),
            ("POST", "/interswarm/message", self.interswarm_message),
            ("POST", "/interswarm/forward", self.interswarm_receive),
            ("POST", "/interswarm/back", self.interswarm_receive),
            ("POST", "/responses", self.responses),
            ("GET", "/html", self.html),
            ("GET", "/crash", self.crash),
            ("GET", "/slow", self.slow),
        ]
        for method, path, handler in routes:
            app.router.add_route(method, path, handler)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def _shutdown(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    # ------------------------------------------------------------------ helpers

    @web.middleware
    async def _record(self, request: web.Request, handler: Any) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        self.requests.append(
            Recorded(request.method, request.path, dict(request.query), dict(request.headers), body)
        )
        return await handler(request)

    def last(self, path: str) -> Recorded:
        for recorded in reversed(self.requests):
            if recorded.path == path:
                return recorded
        raise AssertionError(f"no request to {path}; saw {[r.path for r in self.requests]}")

    @staticmethod
    def _identity(request: web.Request, roles: tuple[str, ...]) -> dict[str, str]:
        header = request.headers.get("Authorization", "")
        if not header.startswith("Bearer "):
            raise web.HTTPUnauthorized(
                text=json.dumps({"detail": "no API key provided"}), content_type="application/json"
            )
        identity = IDENTITIES.get(header.removeprefix("Bearer "))
        if identity is None:
            raise web.HTTPUnauthorized(
                text=json.dumps({"detail": "invalid API key"}), content_type="application/json"
            )
        if identity["role"] not in roles:
            raise web.HTTPForbidden(
                text=json.dumps({"detail": "invalid role"}), content_type="application/json"
            )
        return identity

    # ------------------------------------------------------------------ routes

    async def root(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "name": "mail",
                "protocol_version": "1.3",
                "swarm": {"name": SWARM_NAME, "version": "1.0.0", "entrypoint": "supervisor"},
                "status": "running",
                "uptime": 1.5,
            }
        )

    async def health(self, request: web.Request) -> web.Response:
        if self.health_delay:
            await asyncio.sleep(self.health_delay)
        if self.health_as_html:
            return await self.html(request)
        if self.health_http_status != 200:
            return web.json_response({"detail": "unwell"}, status=self.health_http_status)
        return web.json_response(
            {"status": self.health_status, "swarm_name": SWARM_NAME, "timestamp": _now()}
        )

    async def set_health(self, request: web.Request) -> web.Response:
        self._identity(request, ("admin",))
        body = await request.json()
        if not body.get("status"):
            return web.json_response({"detail": "status is required"}, status=400)
        self.health_status = body["status"]
        return await self.health(request)

    async def whoami(self, request: web.Request) -> web.Response:
        return web.json_response(dict(self._identity(request, ("admin", "user"))))

    async def status(self, request: web.Request) -> web.Response:
        self._identity(request, ("admin", "user"))
        return web.json_response(
            {
                "swarm": {"name": SWARM_NAME, "status": "ready"},
                "active_users": 1,
                "user_mail_ready": True,
                "user_task_running": True,
            }
        )

    async def message(self, request: web.Request) -> web.StreamResponse:
        identity = self._identity(request, ("admin", "user"))
        body = await request.json()
        text = body.get("body", "")
        if not text and body.get("resume_from") != "breakpoint_tool_call":
            return web.json_response({"detail": "no message provided"}, status=400)
        task_id = body.get("task_id") or str(uuid.uuid4())
        answer = f"echo: {text}"
        self.tasks[task_id] = {
            "task_id": task_id,
            "task_owner": f"{identity['role']}:{identity['id']}@{SWARM_NAME}",
            "completed": True,
            "is_running": False,
            "events": [],
        }
        if body.get("stream"):
            return await self._stream(request, task_id, text, answer)
        events = None
        if body.get("show_events"):
            events = [
                {
                    "event": "new_message",
                    "data": {"task_id": task_id, "description": "sending message"},
                    "id": None,
                }
            ]
        return web.json_response({"response": answer, "events": events})

    async def _stream(
        self, request: web.Request, task_id: str, text: str, answer: str
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
        await response.prepare(request)
        base = {"timestamp": _now(), "task_id": task_id}
        try:
            await response.write(
                event_frame("new_message", {**base, "description": f"sending message: {text}"})
            )
            if text == "hang":
                # Parks until the client goes away; the REPL's Ctrl+C test relies on this.
                while True:
                    await asyncio.sleep(0.05)
                    await response.write(b": keep-alive\r\n\r\n")
            if text.startswith("slow"):
                await asyncio.sleep(1.0)
            else:
                released = await asyncio.to_thread(self.stream_gate.wait, GATE_TIMEOUT)
                if not released:
                    await response.write(event_frame("gate_timeout", base))
            # A comment block, a multi-line data event with id and retry, then a ping.
            await response.write(b": just a comment\r\n\r\n")
            await response.write(
                event_frame("tool_call", f"line one\nline two {task_id}", id="7", retry="2500")
            )
            await response.write(event_frame("ping", base))
            await response.write(event_frame("task_complete", {**base, "response": answer}))
            await response.write_eof()
        except asyncio.CancelledError:
            self.stream_disconnected.set()
            raise
        except (ConnectionError, ClientConnectionResetError):
            # The client went away mid-stream (e.g. Ctrl+C in the REPL): that is the point.
            self.stream_disconnected.set()
        return response

    async def get_tasks(self, request: web.Request) -> web.Response:
        self._identity(request, ("admin", "user"))
        return web.json_response(self.tasks)

    async def get_task(self, request: web.Request) -> web.Response:
        self._identity(request, ("admin", "user"))
        raw = await request.read()
        task_id = json.loads(raw).get("task_id") if raw else request.query.get("task_id")
        if task_id not in self.tasks:
            return web.json_response({"detail": f"task '{task_id}' not found"}, status=404)
        return web.json_response(self.tasks[task_id])

    async def swarms(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"swarms": [{"swarm_name": SWARM_NAME, "base_url": self.url, "is_active": True}]}
        )

    async def register_swarm(self, request: web.Request) -> web.Response:
        self._identity(request, ("admin",))
        body = await request.json()
        if not body.get("name") or not body.get("base_url"):
            return web.json_response({"detail": "name and base_url are required"}, status=400)
        return web.json_response({"status": "registered", "swarm_name": body["name"]})

    async def dump(self, request: web.Request) -> web.Response:
        self._identity(request, ("admin",))
        return web.json_response({"status": "dumped", "swarm_name": SWARM_NAME})

    async def load(self, request: web.Request) -> web.Response:
        self._identity(request, ("admin",))
        body = await request.json()
        swarm = json.loads(body["json"])
        return web.json_response({"status": "success", "swarm_name": swarm["name"]})

    async def interswarm_message(self, request: web.Request) -> web.Response:
        self._identity(request, ("admin", "user"))
        body = await request.json()
        if not body.get("user_token"):
            return web.json_response({"detail": "user token is required"}, status=401)
        if not body.get("targets") or not body.get("body"):
            return web.json_response({"detail": "'targets' and 'body' are required"}, status=400)
        return web.json_response({"response": {"message": {"body": "remote ok"}}, "events": None})

    async def interswarm_receive(self, request: web.Request) -> web.Response:
        identity = self._identity(request, ("agent",))
        body = await request.json()
        if "message" not in body:
            return web.json_response({"detail": "parameter 'message' is required"}, status=400)
        return web.json_response(
            {
                "swarm": SWARM_NAME,
                "task_id": body["message"]["payload"]["task_id"],
                "status": "success",
                "local_runner": f"swarm:{identity['id']}@{SWARM_NAME}",
            }
        )

    async def responses(self, request: web.Request) -> web.Response:
        self._identity(request, ("admin", "user"))
        body = await request.json()
        result = {
            "id": body.get("previous_response_id") or "resp_1",
            "object": "response",
            "created_at": 1700000000,
            "model": "fake-swarm",
            "output": [
                {
                    "type": "message",
                    "id": "msg_1",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": "planned", "annotations": []}],
                }
            ],
            "parallel_tool_calls": bool(body.get("parallel_tool_calls", False)),
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": [],
        }
        # Like the original server: the JSON body is itself a JSON-encoded string.
        return web.json_response(json.dumps(result))

    async def html(self, request: web.Request) -> web.Response:
        return web.Response(text="<html><body>not an API</body></html>", content_type="text/html")

    async def slow(self, request: web.Request) -> web.Response:
        await asyncio.sleep(1.5)
        return web.json_response({"slow": True})

    async def crash(self, request: web.Request) -> web.Response:
        return web.Response(status=502, text="Bad Gateway from a proxy")
