"""`a2a_send` (and so `MAILClient.a2a_send` and the REPL's `a2a-send`) sends a message again
after its connection was reset, with the same messageId: the server answers with the task
the first attempt started, so the caller gets the answer and has one task, not two.

A real `mail server` whose Agent Card names a proxy in front of it (its public URL): the
proxy passes the card fetch on, then resets the client's side of the SendMessage after
passing that request on whole (the server runs it; the client never hears).
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from mail.a2a.client import a2a_send
from server_fixtures import ROOT_ALICE_BOB, ServerProcess, auth, free_port, keyed_stub_server
from support.post_resetting_proxy import PostResettingProxy

pytestmark = pytest.mark.timeout(300)

PROXY_PORT = free_port()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    extra = f'[server.cluster]\npublic_url = "http://127.0.0.1:{PROXY_PORT}"\n'
    with keyed_stub_server(
        tmp_path_factory.mktemp("a2a_retry"), ROOT_ALICE_BOB, extra=extra
    ) as srv:
        yield srv


def tasks_of(server: ServerProcess, who: str) -> set[str]:
    answer = httpx.get(f"{server.base_url}/tasks", headers=auth(server.keys[who]), timeout=30)
    return set(answer.json())


async def test_a2a_send_resends_a_reset_message_and_makes_one_task(server: ServerProcess) -> None:
    before = tasks_of(server, "alice")
    async with PostResettingProxy(server.port, PROXY_PORT) as proxy:
        reply = await a2a_send(proxy_url(), "SLEEP 1 hello", api_key=server.keys["alice"])
        assert proxy.reset_done and proxy.connections >= 2  # the reset send, the resend
    assert reply.state == "completed"
    assert "hello" in reply.text
    assert len(tasks_of(server, "alice") - before) == 1  # one task, not two


async def test_a2a_send_without_retries_reports_the_reset(server: ServerProcess) -> None:
    async with PostResettingProxy(server.port, PROXY_PORT) as proxy:
        with pytest.raises(Exception, match="(?i)network|connection|reset"):
            await a2a_send(proxy_url(), "hello", api_key=server.keys["bob"], retries=0)
        assert proxy.reset_done and proxy.connections == 1


def proxy_url() -> str:
    return f"http://127.0.0.1:{PROXY_PORT}"
