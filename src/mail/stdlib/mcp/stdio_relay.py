"""Relay between the mcp SDK and a stdio MCP server that counts the bytes the server writes."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from typing import Any

CHUNK = 65536


def _forward_stdin(child: subprocess.Popen[bytes], last_id: list[Any]) -> None:
    """Copy our stdin (the SDK's requests, one JSON object per line) to the server."""
    assert child.stdin is not None
    try:
        for line in sys.stdin.buffer:
            try:
                message = json.loads(line)
            except ValueError:
                message = None
            if isinstance(message, dict) and "method" in message and "id" in message:
                last_id[0] = message["id"]
            child.stdin.write(line)
            child.stdin.flush()
    except (BrokenPipeError, OSError):
        pass
    finally:
        with contextlib.suppress(OSError):
            child.stdin.close()


def _forward_stderr(child: subprocess.Popen[bytes], limit: int) -> None:
    """Copy the server's stderr to ours up to ``limit`` bytes; drain and drop the rest."""
    assert child.stderr is not None
    err = sys.stderr.buffer
    passed = 0
    try:
        while chunk := os.read(child.stderr.fileno(), CHUNK):
            if passed < limit:
                kept = chunk[: limit - passed]
                passed += len(chunk)
                err.write(kept)
                if passed >= limit:
                    err.write(
                        f"\n[stdio_relay] the MCP server's stderr is cut after {limit} bytes "
                        "([stdlib.mcp] max_response_bytes); the rest is dropped\n".encode()
                    )
                err.flush()
    except OSError:
        pass


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print("usage: stdio_relay.py LIMIT COMMAND [ARGS...]", file=sys.stderr)
        return 2
    limit = int(argv[1])
    child = subprocess.Popen(
        argv[2:], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    last_id: list[Any] = [None]
    threading.Thread(target=_forward_stdin, args=(child, last_id), daemon=True).start()
    threading.Thread(target=_forward_stderr, args=(child, limit), daemon=True).start()
    assert child.stdout is not None
    out = sys.stdout.buffer
    sent = 0
    while True:
        chunk = os.read(child.stdout.fileno(), CHUNK)
        if not chunk:
            return child.wait()
        sent += len(chunk)
        if sent > limit:
            error = {
                "jsonrpc": "2.0",
                "id": last_id[0],
                "error": {
                    "code": -32000,
                    "message": (
                        f"the MCP server sent more than {limit} bytes "
                        "([stdlib.mcp] max_response_bytes)"
                    ),
                },
            }
            out.write(b"\n" + json.dumps(error).encode() + b"\n")
            out.flush()
            child.kill()
            child.wait()
            return 0
        out.write(chunk)
        out.flush()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
