"""Helpers for server tests: a real `mail server` subprocess, keys via `mail keys`, SSE parsing.

Server subprocesses run with the repository root on PYTHONPATH so test swarms can name
``python::tests.support.stub_agents:stub_factory`` as their factory. The same path is added
to ``sys.path`` here for in-process tests that build templates from those swarms.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from tests.support.stub_agents import stub_swarms_json  # noqa: E402

STARTUP_TIMEOUT = 120.0  # generous: a busy CI machine can take long to import


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """Run ``mail <args>`` in-process (the real CLI entry point); returns (code, out, err)."""
    from mail.cli import main

    out, err = io.StringIO(), io.StringIO()
    saved = dict(os.environ)
    if env:
        os.environ.update(env)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exc:  # argparse errors
                code = int(exc.code or 0)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return code, out.getvalue(), err.getvalue()


def create_key(keys_file: Path, role: str, key_id: str) -> str:
    code, out, err = run_cli(
        "keys", "--keys-file", str(keys_file), "create", "--role", role, "--id", key_id, "--json"
    )
    assert code == 0, err
    return json.loads(out)["key"]


def write_config(
    directory: Path, *, port: int, swarm: str = "stub", source: str | None = None, extra: str = ""
) -> Path:
    """A mail.toml for a test server living entirely in ``directory``."""
    source = source or str(directory / "swarms.json")
    text = f"""
[server]
port = {port}
host = "127.0.0.1"
log_level = "info"

[server.swarm]
name = "{swarm}"
source = "{source}"
registry = "{directory / "registries" / (swarm + ".json")}"

[server.settings]
sse_ping_interval = 0.3
instance_idle_timeout = 0
{extra}
"""
    path = directory / "mail.toml"
    path.write_text(text, encoding="utf-8")
    return path


def write_stub_swarms(directory: Path, name: str = "stub", *, public: bool = False) -> Path:
    path = directory / "swarms.json"
    path.write_text(json.dumps(stub_swarms_json(name, public=public), indent=2), encoding="utf-8")
    return path


def server_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    for var in (
        "AUTH_ENDPOINT",
        "TOKEN_INFO_ENDPOINT",
        "MAIL_KEYS_FILE",
        "MAIL_SERVER_TEMPLATE",
        "DATABASE_URL",
    ):
        env.pop(var, None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


@dataclass
class ServerProcess:
    """A `mail server` subprocess; stdout/stderr go to files in ``directory``."""

    directory: Path
    port: int
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    keys: dict[str, str] = field(default_factory=dict)  # name -> API key, as the test made them
    # Between the interpreter and `-m mail.cli` (a bench runs the server under a profiler).
    python_args: list[str] = field(default_factory=list)
    # A user's Python script to run in place of `mail server` (``args`` follow it).
    script: Path | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def stdout_path(self) -> Path:
        return self.directory / "server.out"

    @property
    def stderr_path(self) -> Path:
        return self.directory / "server.err"

    def rss_kib(self) -> int:
        """The server's resident memory now (VmRSS), in KiB."""
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")

    def start(self, *, wait: bool = True) -> ServerProcess:
        if self.script is not None:
            cmd = [sys.executable, *self.python_args, str(self.script), *self.args]
        else:
            cmd = [sys.executable, *self.python_args, "-m", "mail.cli", "server", *self.args]
        self.proc = subprocess.Popen(
            cmd,
            cwd=self.directory,
            env=server_env(self.env),
            stdout=self.stdout_path.open("wb"),
            stderr=self.stderr_path.open("wb"),
        )
        if wait:
            self.wait_healthy()
        return self

    def wait_healthy(self, timeout: float = STARTUP_TIMEOUT) -> float:
        """Seconds until ``GET /health`` answered 200."""
        assert self.proc is not None
        started = time.monotonic()
        deadline = started + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.logs()}")
            try:
                if httpx.get(f"{self.base_url}/health", timeout=0.5).status_code == 200:
                    return time.monotonic() - started
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"server did not become healthy in {timeout}s:\n{self.logs()}")

    def logs(self) -> str:
        out = self.stdout_path.read_text(errors="replace") if self.stdout_path.exists() else ""
        err = self.stderr_path.read_text(errors="replace") if self.stderr_path.exists() else ""
        return out + err

    def stop(self, timeout: float = 15.0) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
            raise AssertionError(f"server did not stop within {timeout}s:\n{self.logs()}") from None

    def wait_exit(self, timeout: float = 20.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)


def start_on_a_free_port(make: Callable[[int], ServerProcess], attempts: int = 5) -> ServerProcess:
    """``make(port).start()`` on a port free when picked; another process (a Ray worker of
    the cluster matrix, say) may bind it before the server does: then pick another."""
    for attempt in range(attempts):
        server = make(free_port())
        try:
            return server.start()
        except RuntimeError:
            if attempt == attempts - 1 or "already in use" not in server.logs():
                raise
    raise AssertionError("unreachable")


@contextlib.contextmanager
def running_server(
    directory: Path, args: list[str] | None = None, env: dict[str, str] | None = None
) -> Iterator[ServerProcess]:
    server = start_on_a_free_port(
        lambda port: ServerProcess(
            directory, port, args=["--port", str(port), *(args or [])], env=env or {}
        )
    )
    try:
        yield server
    finally:
        server.stop()


# The keys most end-to-end modules use: name -> (role, id).
ROOT_ALICE_BOB = {"admin": ("admin", "root"), "alice": ("user", "alice"), "bob": ("user", "bob")}


@contextlib.contextmanager
def keyed_stub_server(
    directory: Path,
    keys: dict[str, tuple[str, str]],
    *,
    extra: str = "",
    args: tuple[str, ...] = (),
    public: bool = False,
    python_args: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> Iterator[ServerProcess]:
    """A real `mail server` on the stub swarms with a key per entry of ``keys`` (name ->
    (role, id)), found again in ``server.keys`` (the file is ``registries/keys.json`` of
    ``directory``); it must stop cleanly (exit 0)."""
    write_stub_swarms(directory, public=public)
    keys_file = directory / "registries" / "keys.json"
    made = {name: create_key(keys_file, role, id_) for name, (role, id_) in keys.items()}

    def make(port: int) -> ServerProcess:
        config = write_config(directory, port=port, extra=extra)
        return ServerProcess(
            directory,
            port,
            args=["--config", str(config), *args],
            python_args=list(python_args),
            env=env or {},
        )

    server = start_on_a_free_port(make)
    server.keys = made
    try:
        yield server
    except BaseException:
        server.stop()  # the test failed: stop the server all the same, then report that
        raise
    assert server.stop() == 0, server.logs()


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def post_as(
    server: ServerProcess, who: str, payload: dict[str, Any], timeout: float = 30.0
) -> httpx.Response:
    """POST /message with the key named ``who`` of ``server.keys``."""
    return httpx.post(
        f"{server.base_url}/message", json=payload, headers=auth(server.keys[who]), timeout=timeout
    )


def get_task(base_url: str, key: str, task_id: str, timeout: float = 30.0) -> httpx.Response:
    """GET /task of ``task_id`` with the API key ``key``."""
    return httpx.get(
        f"{base_url}/task", params={"task_id": task_id}, headers=auth(key), timeout=timeout
    )


@dataclass
class SSEEvent:
    event: str
    data: str
    id: str | None
    received_at: float

    def json(self) -> Any:
        return json.loads(self.data)


def parse_sse_stream(response: httpx.Response) -> Iterator[SSEEvent]:
    """Events of a streaming httpx response as they arrive (CRLF or LF framing)."""
    buffer = ""
    for chunk in response.iter_text():
        frames, buffer = split_sse_frames(buffer + chunk)
        for frame in frames:
            yield _frame(frame)


async def aparse_sse_stream(response: httpx.Response) -> Any:
    buffer = ""
    async for chunk in response.aiter_text():
        frames, buffer = split_sse_frames(buffer + chunk)
        for frame in frames:
            yield _frame(frame)


def split_sse_frames(text: str) -> tuple[list[str], str]:
    """The complete frames of ``text`` and the unfinished rest.

    CRLF is normalised on the joined text, not per chunk: a chunk may end between the CR and
    the LF of a line ending, and normalising each chunk alone then merged two frames.
    """
    *frames, rest = text.replace("\r\n", "\n").split("\n\n")
    return frames, rest


def _frame(frame: str) -> SSEEvent:
    name, ev_id, data = "message", None, []
    for line in frame.split("\n"):
        if line.startswith(":"):
            continue
        key, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if key == "event":
            name = value
        elif key == "data":
            data.append(value)
        elif key == "id":
            ev_id = value
    return SSEEvent(name, "\n".join(data), ev_id, time.monotonic())


class StubAuthService:
    """An auth service on 127.0.0.1 (login + token info), counting the calls it receives.

    ``users`` maps API keys to ``(role, id)``. ``POST /login`` with ``Bearer <key>`` answers
    ``{"token": "tok-<key>"}``; ``GET /token-info`` with ``Bearer tok-<key>`` answers
    ``{"role", "id", "api_key"}``. Unknown credentials get 401; ``fail_with`` forces a status.
    """

    def __init__(self, users: dict[str, tuple[str, str]], delay: float = 0.0) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.users = users
        self.delay = delay
        self.login_calls = 0
        self.token_info_calls = 0
        self.fail_with: int | None = None
        self._lock = threading.Lock()
        service = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _reply(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _bearer(self) -> str:
                return self.headers.get("Authorization", "").removeprefix("Bearer ")

            def do_POST(self) -> None:  # noqa: N802
                with service._lock:
                    service.login_calls += 1
                time.sleep(service.delay)
                if service.fail_with:
                    return self._reply(service.fail_with, {"detail": "forced"})
                key = self._bearer()
                if self.path != "/login" or key not in service.users:
                    return self._reply(401, {"detail": "bad key"})
                self._reply(200, {"token": f"tok-{key}"})

            def do_GET(self) -> None:  # noqa: N802
                with service._lock:
                    service.token_info_calls += 1
                time.sleep(service.delay)
                if service.fail_with:
                    return self._reply(service.fail_with, {"detail": "forced"})
                key = self._bearer().removeprefix("tok-")
                if self.path != "/token-info" or key not in service.users:
                    return self._reply(401, {"detail": "bad token"})
                role, ident = service.users[key]
                self._reply(200, {"role": role, "id": ident, "api_key": key})

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def env(self) -> dict[str, str]:
        return {
            "AUTH_ENDPOINT": f"{self.url}/login",
            "TOKEN_INFO_ENDPOINT": f"{self.url}/token-info",
        }

    def reset_counts(self) -> None:
        with self._lock:
            self.login_calls = self.token_info_calls = 0

    def __enter__(self) -> StubAuthService:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


# The single-process server; with MAIL_TEST_SERVER_MODE=cluster, `ServerProcess` (and so
# `running_server`) start a two-front-end cluster deployment instead (tests/test_cluster_matrix.py).
SingleServerProcess = ServerProcess
if os.environ.get("MAIL_TEST_SERVER_MODE") == "cluster":
    from tests.support.cluster_server import cluster_server_class

    ServerProcess = cluster_server_class(SingleServerProcess)  # type: ignore[misc]


def read_http_response(conn: socket.socket) -> tuple[bytes, bytes]:
    """One HTTP/1.1 response with a Content-Length from a raw socket: (head, body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        assert chunk, f"closed before a response: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += conn.recv(65536)
    return head, body


async def healthy(server: ServerProcess, timeout: float = 240.0) -> None:
    """Poll /health without blocking the event loop (a scripted LLM in the test may live on it)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    async with httpx.AsyncClient(timeout=1) as client:
        while loop.time() < deadline:
            assert server.proc is not None
            if server.proc.poll() is not None:
                raise AssertionError(f"server exited:\n{server.logs()}")
            try:
                if (await client.get(f"{server.base_url}/health")).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError(f"server not healthy in {timeout}s:\n{server.logs()}")
