"""Memory figures of a server process and the hostile peers its agents talk to.

Used by the abuse tests and by ``bench/abuse.py``:

- `Memory` reads ``/proc/<pid>/status`` of the server: ``VmRSS`` now and ``VmHWM`` (the peak),
  whose high-water mark is reset through ``/proc/<pid>/clear_refs`` before each abusive input,
  so ``peak - before`` is what that input cost.
- `HostileSite` is a loopback HTTP server (a thread) answering every path with canned bytes:
  a gzip bomb, a huge MCP ``tools/list`` answer, ... .
"""

from __future__ import annotations

import gzip
import json
import threading
import time
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

MIB = 1024 * 1024
DEFLATE_SPLIT_TEXT = b"split deflate answer " * 20


def _status_kib(pid: int, name: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {name} in /proc/{pid}/status")


@dataclass
class Memory:
    """RSS of one process around an abusive input (MiB)."""

    pid: int
    before: float = 0.0
    peak: float = 0.0
    after: float = 0.0

    def start(self) -> Memory:
        # "5" resets the peak RSS (VmHWM) to the current RSS (Linux >= 4.0).
        Path(f"/proc/{self.pid}/clear_refs").write_text("5")
        self.before = _status_kib(self.pid, "VmRSS") / 1024
        return self

    def stop(self) -> Memory:
        self.peak = _status_kib(self.pid, "VmHWM") / 1024
        self.after = _status_kib(self.pid, "VmRSS") / 1024
        return self

    @property
    def growth(self) -> float:
        """Peak minus before, in MiB."""
        return self.peak - self.before

    def row(self) -> str:
        return f"{self.before:7.1f} {self.peak:7.1f} {self.after:7.1f}  (+{self.growth:.1f})"


# A stdio MCP server that answers the handshake, then writes one endless tools/list line.
GREEDY_STDIO = """
import json, sys
for line in sys.stdin:
    message = json.loads(line)
    if message.get("method") == "initialize":
        result = {
            "protocolVersion": message["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "greedy", "version": "1"},
        }
        print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}), flush=True)
    elif message.get("method") == "tools/list":
        sys.stdout.write('{"jsonrpc": "2.0", "id": %s, "result": {"tools": [' % message["id"])
        for _ in range(150):
            sys.stdout.write('{"name": "t", "description": "' + "d" * 1048576 + '"},')
        sys.stdout.flush()
"""

# A stdio MCP server that writes 64 MiB to stderr before it answers tools/list (no tools).
LOUD_STDIO = """
import json, sys
for line in sys.stdin:
    message = json.loads(line)
    if message.get("method") == "initialize":
        result = {
            "protocolVersion": message["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "loud", "version": "1"},
        }
        print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}), flush=True)
    elif message.get("method") == "tools/list":
        for _ in range(64):
            sys.stderr.write("E" * 1048576)
        sys.stderr.flush()
        answer = {"jsonrpc": "2.0", "id": message["id"], "result": {"tools": []}}
        print(json.dumps(answer), flush=True)
"""


def gzip_bomb(decompressed: int) -> bytes:
    """``decompressed`` zero bytes, gzipped (about 1/1000 of that on the wire)."""
    return gzip.compress(b"\0" * decompressed, compresslevel=9)


def big_tools_list(size: int) -> bytes:
    """A JSON-RPC ``tools/list`` answer of about ``size`` bytes (id 1 is the first request)."""
    tool_count = max(1, size // 1000)
    tools = [
        {"name": f"t{i}", "description": "d" * 900, "inputSchema": {"type": "object"}}
        for i in range(tool_count)
    ]
    return json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"tools": tools}}).encode()


@dataclass
class HostileSite:
    """Answers GET ``/bomb`` with a gzip bomb, GET ``/slow?s=N`` after N seconds, GET
    ``/deflate-split`` with raw deflate whose first chunk is one byte, and POST
    ``/mcp`` as a (greedy) MCP server."""

    bomb: bytes = b""
    tools_answer_size: int = 0
    hits: list[str] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None

    @property
    def base_url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> HostileSite:
        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def do_GET(self) -> None:  # noqa: N802
                site.hits.append(f"GET {self.path}")
                if self.path.startswith("/bomb"):
                    self._send(200, site.bomb, {"Content-Encoding": "gzip"})
                elif self.path.startswith("/deflate-split"):
                    self._deflate_split()
                elif self.path.startswith("/slow"):
                    time.sleep(float(self.path.rsplit("=", 1)[-1]))  # /slow?s=<seconds>
                    self._send(200, b"slow answer", {})
                else:
                    self._send(405, b"", {})

            def _deflate_split(self) -> None:
                # A raw (headerless) deflate body whose first chunk is one byte: a valid
                # answer, although the first chunk alone cannot tell raw from zlib-wrapped.
                packer = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
                body = packer.compress(DEFLATE_SPLIT_TEXT) + packer.flush()
                self.send_response(200)
                self.send_header("Content-Encoding", "deflate")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for part in (body[:1], body[1:]):
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                    self.wfile.flush()
                    time.sleep(0.2)  # separate network chunks
                self.wfile.write(b"0\r\n\r\n")

            def do_DELETE(self) -> None:  # noqa: N802
                self._send(200, b"", {})

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                request = json.loads(self.rfile.read(length) or b"{}")
                method = request.get("method")
                site.hits.append(f"POST {method}")
                json_headers = {"Content-Type": "application/json", "Mcp-Session-Id": "s1"}
                if method == "initialize":
                    answer = {
                        "jsonrpc": "2.0",
                        "id": request["id"],
                        "result": {
                            "protocolVersion": request["params"]["protocolVersion"],
                            "capabilities": {"tools": {}},
                            "serverInfo": {"name": "greedy", "version": "1"},
                        },
                    }
                    self._send(200, json.dumps(answer).encode(), json_headers)
                elif "id" not in request:
                    self._send(202, b"", {})
                elif method == "tools/list":
                    body = big_tools_list(site.tools_answer_size)
                    body = body.replace(b'"id": 1', b'"id": ' + json.dumps(request["id"]).encode())
                    self._send(200, body, json_headers)
                else:
                    answer = {"jsonrpc": "2.0", "id": request["id"], "result": {}}
                    self._send(200, json.dumps(answer).encode(), json_headers)

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client hanging up on a bomb is the expected outcome

        self._server = Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()


def abuse_server(
    directory: Path,
    *,
    extra: str = "",
    env: dict[str, str] | None = None,
    keys: dict[str, tuple[str, str]] | None = None,
) -> Any:
    """A real `mail server` (CLI subprocess) on the abuse swarm of `abuse_agents`, as a
    context manager yielding the ServerProcess (keys in ``server.keys``). ``extra`` is
    appended to the config after ``[server.settings]``."""
    import contextlib

    from server_fixtures import ServerProcess, create_key, free_port, write_config
    from support.abuse_agents import abuse_swarms_json

    @contextlib.contextmanager
    def run() -> Any:
        (directory / "swarms.json").write_text(json.dumps(abuse_swarms_json()), "utf-8")
        keys_file = directory / "registries" / "keys.json"
        wanted = keys or {"alice": ("user", "alice"), "bob": ("user", "bob")}
        made = {name: create_key(keys_file, role, id_) for name, (role, id_) in wanted.items()}
        port = free_port()
        config = write_config(directory, port=port, swarm="abuse", extra=extra)
        server = ServerProcess(directory, port, args=["--config", str(config)], env=dict(env or {}))
        server.keys = made
        server.start()
        try:
            yield server
        finally:
            server.stop()

    return run()


def steps_body(*steps: dict[str, Any]) -> str:
    """The message body that makes the abuse agent take these steps."""
    return "STEPS " + json.dumps(list(steps))
