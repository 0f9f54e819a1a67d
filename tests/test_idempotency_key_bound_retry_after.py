"""The 429 of the per-caller Idempotency-Key bound tells the caller to come back no later
than its keys expire: `Retry-After` is at most `idempotency_key_ttl` (rounded up), not a fixed
60 s, which with a short TTL sent clients (MAILClient honours Retry-After) away for nothing.

A real `mail server` on the stub swarm with `max_idempotency_keys_per_caller = 1` and
`idempotency_key_ttl = 3`: while one keyed request is under way, a second key is refused.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import httpx
import pytest

from server_fixtures import ROOT_ALICE_BOB, ServerProcess, auth, keyed_stub_server

pytestmark = pytest.mark.timeout(240)

EXTRA = "idempotency_key_ttl = 3.0\nmax_idempotency_keys_per_caller = 1\n"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with keyed_stub_server(
        tmp_path_factory.mktemp("key_bound"), ROOT_ALICE_BOB, extra=EXTRA
    ) as srv:
        yield srv


def test_key_bound_retry_after_is_within_the_key_ttl(server: ServerProcess) -> None:
    headers = auth(server.keys["alice"])
    started = threading.Event()
    results: list[int] = []

    def slow() -> None:
        with httpx.Client(timeout=60) as client:
            started.set()
            answer = client.post(
                f"{server.base_url}/message",
                json={"body": "SLEEP 6 first"},
                headers={**headers, "Idempotency-Key": '"first"'},
            )
            results.append(answer.status_code)

    worker = threading.Thread(target=slow)
    worker.start()
    started.wait(10)
    refused = None
    with httpx.Client(timeout=30) as client:
        for attempt in range(200):  # until the first request holds its key
            answer = client.post(
                f"{server.base_url}/message",
                json={"body": "second"},
                headers={**headers, "Idempotency-Key": f'"second-{attempt}"'},
            )
            if answer.status_code == 429:
                refused = answer
                break
            # The first request had not taken its key yet: this one ran (its answered key
            # is forgotten to make room for the next).
            assert answer.status_code == 200, answer.text
    worker.join(60)
    assert results == [200]
    assert refused is not None, "the second key was never refused"
    assert "max_idempotency_keys_per_caller = 1" in refused.json()["detail"]
    assert 1 <= int(refused.headers["Retry-After"]) <= 3, refused.headers
