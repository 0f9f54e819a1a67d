"""``DELETE /swarms/{name}`` (forget a remote swarm) honours ``Idempotency-Key``, as
``POST /swarms`` (which registers one) does: a removal whose answer was lost and that is
sent again with its key gets the first answer, not a 404 saying the swarm is unknown (the
client could not tell whether its removal or someone else's took it away). A real
`mail server` on the stub swarms.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.support.fake_peer import fake_peer

from server_fixtures import ROOT_ALICE_BOB, ServerProcess, auth, keyed_stub_server

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def peer_url() -> Iterator[str]:
    with fake_peer("peer-one") as url:
        yield url


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with keyed_stub_server(tmp_path, ROOT_ALICE_BOB) as srv:
        yield srv


def test_a_keyed_swarm_removal_is_replayed(server: ServerProcess, peer_url: str) -> None:
    admin = auth(server.keys["admin"])
    peer = {"name": "peer-one", "base_url": peer_url}
    made = httpx.post(f"{server.base_url}/swarms", json=peer, headers=admin, timeout=30)
    assert made.status_code == 200, made.text
    headers = {**admin, "Idempotency-Key": f'"{uuid.uuid4()}"'}
    url = f"{server.base_url}/swarms/peer-one"
    first = httpx.delete(url, headers=headers, timeout=30)
    assert first.status_code == 200, first.text
    again = httpx.delete(url, headers=headers, timeout=30)
    assert again.status_code == 200, again.text
    assert again.content == first.content and again.headers["idempotent-replayed"] == "true"
    # Without the key (or with another one) the swarm is gone: 404 as before.
    assert httpx.delete(url, headers=admin, timeout=30).status_code == 404
    # The same key for another swarm's removal is another request.
    other = httpx.delete(f"{server.base_url}/swarms/peer-two", headers=headers, timeout=30)
    assert other.status_code == 422, other.text
