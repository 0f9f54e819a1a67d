"""A webhook receiver process for tests: verifies Standard Webhooks signatures with the
``standardwebhooks`` library, answers as scripted, and reports what it got.

    python -m tests.support.webhook_receiver PORT [PORT ...]

(one process, the same answers on every port: a path's script holds for all of them).

Control (JSON over HTTP, on the same port):

- ``POST /_control/secrets`` ``{"path": "/a", "secrets": ["whsec_..."]}``: verify deliveries
  to ``/a`` with these secrets (a delivery verifies if one of them matches);
- ``POST /_control/script`` ``{"path": "/a", "statuses": [500, 500, 200], "delay": 0,
  "retry_after": null}``: answer the next requests to ``/a`` with these statuses (then 200),
  each after ``delay`` seconds;
- ``GET /_control/received``: every delivery so far, in arrival order:
  ``{path, headers, body, verified, error, at}``.

``ReceiverProcess`` starts one as a subprocess and talks to it.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx


def _app() -> Any:
    from aiohttp import web
    from standardwebhooks.webhooks import Webhook, WebhookVerificationError

    secrets: dict[str, list[str]] = {}
    scripts: dict[str, dict[str, Any]] = {}
    received: list[dict[str, Any]] = []

    async def set_secrets(request: web.Request) -> web.Response:
        data = await request.json()
        secrets[data["path"]] = list(data["secrets"])
        return web.json_response({"ok": True})

    async def set_script(request: web.Request) -> web.Response:
        data = await request.json()
        scripts[data["path"]] = {
            "statuses": list(data.get("statuses", [])),
            "delay": float(data.get("delay", 0)),
            "retry_after": data.get("retry_after"),
        }
        return web.json_response({"ok": True})

    async def get_received(_request: web.Request) -> web.Response:
        return web.json_response(received)

    async def deliver(request: web.Request) -> web.Response:
        body = await request.read()
        path = request.path
        headers = {k.lower(): v for k, v in request.headers.items()}
        verified: bool | None = None
        error = None
        if path in secrets:
            verified = False
            for secret in secrets[path]:
                try:
                    Webhook(secret).verify(body, headers)
                    verified = True
                    break
                except WebhookVerificationError as exc:
                    error = str(exc)
        received.append(
            {
                "path": path,
                "headers": headers,
                "body": body.decode("utf-8", errors="replace"),
                "verified": verified,
                "error": None if verified else error,
                "at": time.time(),
            }
        )
        script = scripts.get(path) or {"statuses": [], "delay": 0.0, "retry_after": None}
        if script["delay"]:
            await asyncio.sleep(script["delay"])
        status = script["statuses"].pop(0) if script["statuses"] else 200
        extra = {}
        if script["retry_after"] is not None and status != 200:
            extra["Retry-After"] = str(script["retry_after"])
        return web.Response(status=status, text=f"answer {status}", headers=extra)

    app = web.Application(client_max_size=4 * 1024 * 1024)
    app.router.add_post("/_control/secrets", set_secrets)
    app.router.add_post("/_control/script", set_script)
    app.router.add_get("/_control/received", get_received)
    app.router.add_route("POST", "/{tail:.*}", deliver)
    return app


def main() -> None:
    from aiohttp import web

    async def serve(ports: list[int]) -> None:
        runner = web.AppRunner(_app(), access_log=None)
        await runner.setup()
        for port in ports:
            await web.TCPSite(runner, "127.0.0.1", port).start()
        await asyncio.Event().wait()  # until killed

    asyncio.run(serve([int(p) for p in sys.argv[1:]]))


class ReceiverProcess:
    """A receiver subprocess on `port`, and on `more_ports` too (started by `start`,
    stopped by `stop`)."""

    def __init__(self, port: int, directory: Path, more_ports: tuple[int, ...] = ()) -> None:
        self.port = port
        self.more_ports = more_ports
        self.directory = directory
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        return self.base_url + path

    def start(self) -> ReceiverProcess:
        from tests.server_fixtures import REPO_ROOT, server_env

        log = (self.directory / f"receiver-{self.port}.log").open("wb")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.webhook_receiver",
                *(str(p) for p in (*self.more_ports, self.port)),  # `port` last: ready
            ],
            cwd=REPO_ROOT,
            env=server_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                httpx.get(self.url("/_control/received"), timeout=0.5)
                return self
            except httpx.HTTPError:
                time.sleep(0.05)
        raise RuntimeError("the webhook receiver did not start")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def secrets(self, path: str, *secrets: str) -> None:
        httpx.post(self.url("/_control/secrets"), json={"path": path, "secrets": list(secrets)})

    def script(
        self, path: str, statuses: list[int], delay: float = 0, retry_after: Any = None
    ) -> None:
        httpx.post(
            self.url("/_control/script"),
            json={"path": path, "statuses": statuses, "delay": delay, "retry_after": retry_after},
        )

    def received(self, path: str | None = None) -> list[dict[str, Any]]:
        found = httpx.get(self.url("/_control/received"), timeout=10).json()
        return [r for r in found if path is None or r["path"] == path]

    def wait_for(
        self, count: int, path: str | None = None, timeout: float = 30.0
    ) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while True:
            found = self.received(path)
            if len(found) >= count or time.monotonic() > deadline:
                return found
            time.sleep(0.05)

    @staticmethod
    def payload(entry: dict[str, Any]) -> dict[str, Any]:
        return json.loads(entry["body"])  # type: ignore[no-any-return]


if __name__ == "__main__":
    main()
