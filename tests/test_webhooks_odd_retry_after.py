"""A webhook receiver's ``Retry-After`` that is not a plain number, on a real `mail server`.

A receiver that answers 503 with ``Retry-After: ²`` (a character ``str.isdigit()`` accepts
and ``float()`` refuses) must get its attempt recorded like any other unreadable header: a
retry on the schedule, counted. Reading it as a number failed the whole attempt ("could not
be recorded"): the delivery stayed pending with no attempt counted and was sent again each
time its lease ran out, never counted towards giving up.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from tests.support.webhook_receiver import ReceiverProcess

from server_fixtures import ServerProcess, auth, free_port, keyed_stub_server

pytestmark = pytest.mark.timeout(180)

WEBHOOKS = '\n[server.webhooks]\nallowed_hosts = ["127.0.0.1"]\nretry_schedule = [0.2, 0.2]\n'


@pytest.fixture(scope="module")
def setup(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ServerProcess, ReceiverProcess]]:
    root = tmp_path_factory.mktemp("odd_retry_after")
    receiver = ReceiverProcess(free_port(), root).start()
    try:
        with keyed_stub_server(root, {"ola": ("user", "ola")}, extra=WEBHOOKS) as server:
            yield server, receiver
    finally:
        receiver.stop()


def _deliveries(server: ServerProcess, hook_id: str) -> list[dict[str, Any]]:
    answer = httpx.get(
        f"{server.base_url}/webhooks/{hook_id}/deliveries",
        headers=auth(server.keys["ola"]),
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    found: list[dict[str, Any]] = answer.json()["deliveries"]
    return found


def test_an_unreadable_retry_after_is_a_counted_retry(
    setup: tuple[ServerProcess, ReceiverProcess],
) -> None:
    server, receiver = setup
    made = httpx.post(
        f"{server.base_url}/webhooks",
        json={"url": receiver.url("/odd"), "events": ["*"]},
        headers=auth(server.keys["ola"]),
        timeout=30,
    )
    assert made.status_code == 201, made.text
    hook_id = made.json()["id"]
    receiver.script("/odd", [503], retry_after="\u00b2")
    tested = httpx.post(
        f"{server.base_url}/webhooks/{hook_id}/test", headers=auth(server.keys["ola"]), timeout=30
    )
    assert tested.status_code == 202, tested.text
    assert len(receiver.wait_for(2, "/odd")) == 2  # the 503, then the retry's 200
    deadline = time.monotonic() + 30
    while True:
        (delivery,) = _deliveries(server, hook_id)
        if delivery["status"] != "pending":
            break
        assert time.monotonic() < deadline, (delivery, server.logs()[-3000:])
        time.sleep(0.05)
    assert delivery["status"] == "delivered" and delivery["attempts"] == 2, delivery
    log = delivery["attempts_log"]
    assert [(a["status"], a["outcome"]) for a in log] == [(503, "retry"), (200, "delivered")]
