"""An MCP client connecting to `mail server` reads the server's name and version in the
`initialize` answer (serverInfo); the version was "" (the SDK's default)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from mail.version import __version__
from mcp_face_support import ACCEPT, INITIALIZE
from server_fixtures import keyed_stub_server

pytestmark = pytest.mark.timeout(120)


def test_initialize_names_the_server_and_its_version(tmp_path: Path) -> None:
    with keyed_stub_server(tmp_path, {"alice": ("user", "alice")}) as server:
        headers = {
            "Authorization": f"Bearer {server.keys['alice']}",
            "Accept": ACCEPT,
        }
        answer = httpx.post(f"{server.base_url}/mcp", json=INITIALIZE, headers=headers, timeout=30)
        assert answer.status_code == 200, answer.text
        data = next(
            line[len("data:") :] for line in answer.text.splitlines() if line.startswith("data:")
        )
        info = json.loads(data)["result"]["serverInfo"]
        assert info == {"name": "mail", "version": __version__}
