"""What start-up defers is loaded in the background once the server answers (issue 42).

A real `mail server` (CLI subprocess) with Python's import log on (PYTHONPROFILEIMPORTTIME:
one stderr line per module imported, when it is imported) and debug logging: after /health
answered, the warm-up (server/warmup.py) imports the deferred modules and builds the tool
specs without any request, in steps on the event loop; the first POST /message after it
then imports no mail module.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from mail.server.warmup import DEFERRED_MODULES
from server_fixtures import (
    ServerProcess,
    StubAuthService,
    auth,
    create_key,
    free_port,
    write_config,
    write_stub_swarms,
)

pytestmark = pytest.mark.timeout(120)

DONE = re.compile(
    r"start-up warm-up \((?P<trigger>[^)]*)\) done in \d+ ms \(longest step [\d.]+ ms\):"
    r" imported (?P<what>.*)"
)
IMPORTED = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|\s*(?P<module>\S+)\s*$", re.MULTILINE)


@contextmanager
def importlogged_server(
    directory: Path, env: dict[str, str] | None = None
) -> Iterator[tuple[ServerProcess, str]]:
    write_stub_swarms(directory)
    key = create_key(directory / "registries" / "keys.json", "user", "warm-user")
    port = free_port()
    config = write_config(directory, port=port)
    config.write_text(config.read_text().replace('log_level = "info"', 'log_level = "debug"'))
    server = ServerProcess(
        directory,
        port,
        args=["--config", str(config)],
        env={"PYTHONPROFILEIMPORTTIME": "1", **(env or {})},
    )
    server.start(wait=False)
    try:
        yield server, key
    finally:
        server.stop()


def wait_for_warm_up(server: ServerProcess, timeout: float = 60.0) -> re.Match[str]:
    """The warm-up's log line (polling the server's log: the only outside sign of it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = DONE.search(server.stderr_path.read_text(errors="replace"))
        if found:
            return found
        assert server.proc is not None and server.proc.poll() is None, server.logs()
        time.sleep(0.05)
    raise AssertionError(f"no warm-up within {timeout} s:\n{server.logs()[-4000:]}")


def test_the_warm_up_loads_what_the_first_request_needs_without_a_request(
    tmp_path: Path,
) -> None:
    with importlogged_server(tmp_path) as (server, key):
        server.wait_healthy()
        done = wait_for_warm_up(server)
        log = server.stderr_path.read_text(errors="replace")
        before = log[: log.index(done.group(0))]
        assert "POST /message" not in before  # no request did it
        for module in DEFERRED_MODULES:
            assert module in set(IMPORTED.findall(before)), module
        assert re.search(r"tool specs of [1-9]\d* agent", done.group(0)), done.group(0)

        mark = len(server.stderr_path.read_bytes())
        reply = httpx.post(
            f"{server.base_url}/message", json={"body": "hi"}, headers=auth(key), timeout=30
        )
        assert reply.status_code == 200, reply.text
        during = server.stderr_path.read_bytes()[mark:].decode(errors="replace")
        first_request_imports = [m for m in IMPORTED.findall(during) if m.startswith("mail")]
        # A module listed here belongs in warmup.DEFERRED_MODULES.
        assert first_request_imports == [], first_request_imports


def test_without_a_health_probe_the_warm_up_starts_anyway(tmp_path: Path) -> None:
    with importlogged_server(tmp_path) as (server, _key):
        deadline = time.monotonic() + 60
        while True:  # serving: GET / (not /health) answers
            try:
                if httpx.get(f"{server.base_url}/", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, server.logs()
            time.sleep(0.05)
        done = wait_for_warm_up(server)
        assert done.group("trigger") == "no GET /health within 1 s", done.group(0)
        assert "GET /health HTTP" not in server.logs()  # the access log: no probe came


def test_with_an_auth_service_the_first_request_imports_nothing(tmp_path: Path) -> None:
    """With the original's auth service (AUTH_ENDPOINT, TOKEN_INFO_ENDPOINT), the first
    request asks it with the HTTP client the server loaded at start (aiohttp): it imports
    nothing, as with local keys. It imported httpx's transport (httpcore, h11, h2, ...) and
    read a CA bundle on the way: its answer took 86.6 ms against 11 ms with local keys."""
    with (
        StubAuthService({"k-1": ("user", "alice")}) as service,
        importlogged_server(tmp_path, service.env) as (server, _local_key),
    ):
        server.wait_healthy()
        wait_for_warm_up(server)
        mark = len(server.stderr_path.read_bytes())
        reply = httpx.post(
            f"{server.base_url}/message", json={"body": "hi"}, headers=auth("k-1"), timeout=30
        )
        assert reply.status_code == 200, reply.text
        assert (service.login_calls, service.token_info_calls) == (1, 1)
        during = server.stderr_path.read_bytes()[mark:].decode(errors="replace")
        assert IMPORTED.findall(during) == []
