"""`[server] access_log` in mail.toml: one line per request when on, none when off.

Lines are written by a background thread (mail.server.logs), so the checks poll the log file.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from server_fixtures import free_port, running_server, write_config, write_stub_swarms

pytestmark = pytest.mark.timeout(120)

ACCESS_LINE = '"GET /health?probe=1 HTTP/1.1" 200'


def _serve_and_probe(tmp_path: Path, access_log: bool) -> str:
    write_stub_swarms(tmp_path)
    path = write_config(tmp_path, port=free_port())
    text = path.read_text().replace(
        'log_level = "info"', f'log_level = "info"\naccess_log = {str(access_log).lower()}'
    )
    path.write_text(text)
    with running_server(tmp_path) as server:
        for _ in range(3):
            assert httpx.get(f"{server.base_url}/health?probe=1").status_code == 200
        deadline = time.monotonic() + 10
        # The "listening" line is logged before any request; wait for the writer to catch up.
        while time.monotonic() < deadline:
            logs = server.logs()
            if logs.count(ACCESS_LINE) == (3 if access_log else 0) and "listening on" in logs:
                break
            time.sleep(0.05)
        return server.logs()


def test_access_log_on_writes_one_line_per_request(tmp_path: Path) -> None:
    logs = _serve_and_probe(tmp_path, access_log=True)
    assert logs.count(ACCESS_LINE) == 3, logs


def test_access_log_off_writes_none(tmp_path: Path) -> None:
    logs = _serve_and_probe(tmp_path, access_log=False)
    assert "listening on" in logs  # the server's own log lines still come through
    assert ACCESS_LINE not in logs, logs
