"""An error names the bad value it was given, but repeats at most 100 characters of it
(then '...'): a 3,000-character id or parameter does not come back whole in the 4xx/5xx body
(docs/security.md, limits table). A real `mail server` on the stub swarm.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from server_fixtures import ROOT_ALICE_BOB, ServerProcess, auth, keyed_stub_server

pytestmark = pytest.mark.timeout(180)

LONG = "x" * 3000
ECHO = 100  # mail.utils.echo.ECHO_CHARS

PROBES: list[tuple[str, str, str, Any]] = [
    ("alice", "GET", f"/threads/{LONG}", None),
    ("alice", "GET", f"/attachments/{LONG}", None),
    ("alice", "GET", f"/webhooks/{LONG}", None),
    ("alice", "PATCH", f"/webhooks/{LONG}", {"active": True}),
    ("alice", "POST", f"/webhooks/{LONG}/deliveries/{LONG}/retry", {}),
    ("admin", "DELETE", f"/swarms/{LONG}", None),
    ("alice", "POST", "/message", {"body": "hi", "msg_type": LONG}),
    ("alice", "POST", "/message", {"body": "hi", "entrypoint": LONG}),
    ("alice", "POST", "/message", {"body": "hi", "resume_from": LONG}),
    ("alice", "POST", "/webhooks", {"url": "http://127.0.0.1:9/h", "events": [LONG]}),
    ("alice", "POST", "/webhooks", {"url": "http://127.0.0.1:9/h", LONG: 1}),  # its name
    ("alice", "POST", "/crons", {"schedule": "0 9 * * *", "message": {"body": "hi"}, LONG: 1}),
    ("alice", "GET", f"/task?task_id={LONG}", None),
    ("alice", "GET", f"/tasks?limit={LONG}", None),
    # A peer address past MAX_BASE_URL_CHARS (2048) is refused up front, not a 500 later.
    ("admin", "POST", "/swarms", {"name": "peer", "base_url": f"http://{LONG}.example/"}),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    extra = '[server.webhooks]\nallowed_hosts = ["127.0.0.1"]\n'
    with keyed_stub_server(tmp_path_factory.mktemp("echo"), ROOT_ALICE_BOB, extra=extra) as s:
        yield s


@pytest.mark.parametrize(("who", "method", "path", "body"), PROBES, ids=lambda v: str(v)[:30])
def test_a_long_value_is_echoed_cut_to_100_characters(
    server: ServerProcess, who: str, method: str, path: str, body: Any
) -> None:
    response = httpx.request(
        method, server.base_url + path, headers=auth(server.keys[who]), json=body, timeout=30
    )
    assert 400 <= response.status_code < 500, response.text[:300]
    detail = response.json()["detail"]
    assert isinstance(detail, str)
    assert "x" * (ECHO + 1) not in detail, detail[:300]
    assert len(response.content) < 800, detail[:300]
    if "x" * ECHO in detail:  # the value is named, and the cut is marked
        assert "x" * ECHO + "..." in detail, detail[:300]


def test_a_short_value_is_echoed_whole(server: ServerProcess) -> None:
    r = httpx.get(f"{server.base_url}/threads/no-such-thread", headers=auth(server.keys["alice"]))
    assert r.status_code == 404 and "'no-such-thread'" in r.json()["detail"], r.text


def _a2a(server: ServerProcess, method: str, params: Any) -> dict[str, Any]:
    response = httpx.post(
        f"{server.base_url}/a2a",
        json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
        headers={**auth(server.keys["alice"]), "A2A-Version": "1.0"},
        timeout=60,
    )
    assert response.status_code == 200, response.text[:300]
    return response.json()  # type: ignore[no-any-return]


def test_a2a_errors_echo_a_long_value_cut_to_100_characters(server: ServerProcess) -> None:
    """A2A errors follow the same rule: a reused messageId (up to 1024 characters, the id
    limit) and a ListTasks status are repeated cut, not whole."""
    message_id = "x" * 1000

    def message(text: str) -> dict[str, Any]:
        return {"role": "ROLE_USER", "messageId": message_id, "parts": [{"text": text}]}

    assert "result" in _a2a(server, "SendMessage", {"message": message("first")})
    reused = _a2a(server, "SendMessage", {"message": message("another")})["error"]["message"]
    assert "was already used" in reused, reused[:300]
    refused = _a2a(server, "ListTasks", {"status": LONG})["error"]["message"]
    assert "is not a task state" in refused, refused[:300]
    for said in (reused, refused):
        assert "x" * ECHO + "..." in said and "x" * (ECHO + 1) not in said, said[:300]
