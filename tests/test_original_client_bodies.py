"""`POST /message` takes the bodies v1.3's MAILClient sends, every field present.

v1.3's client always sent `entrypoint`, `task_id` and `resume_from` (null when not given)
and `kwargs` (`{}`), with `show_events` or `stream`; ours leaves unset fields out
(docs/differences.md, "`MAILClient` message bodies"), so the server must read both forms alike.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from server_fixtures import (
    ROOT_ALICE_BOB,
    ServerProcess,
    auth,
    keyed_stub_server,
    parse_sse_stream,
    post_as,
)

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with keyed_stub_server(tmp_path_factory.mktemp("v13-bodies"), ROOT_ALICE_BOB) as running:
        yield running


def v13_body(body: str, **fields: object) -> dict[str, object]:
    """A body as v1.3's `MAILClient.post_message` built it."""
    sent: dict[str, object] = {
        "subject": "New Message",
        "body": body,
        "msg_type": "request",
        "entrypoint": None,
        "task_id": None,
        "resume_from": None,
        "kwargs": {},
    }
    sent.update(fields)
    return sent


def test_v13_post_message_bodies_are_answered(server: ServerProcess) -> None:
    r = post_as(server, "alice", v13_body("hello", show_events=False))
    assert r.status_code == 200, r.text
    assert r.json()["response"] == "echo[alice]: hello"
    task_id = r.json()["task_id"]

    r = post_as(server, "alice", v13_body("with events", show_events=True))
    assert r.status_code == 200, r.text
    events = r.json()["events"]
    assert [e["event"] for e in events][0] == "new_message"
    assert r.json()["response"] == "echo[alice]: with events"

    # Continuing the first task, as v1.3's client did with task_id and resume_from set.
    r = post_as(server, "alice", v13_body("COUNT", task_id=task_id, resume_from="user_response"))
    assert r.status_code == 200, r.text
    assert r.json()["response"] == "turn 2"


def test_v13_post_message_stream_body_streams(server: ServerProcess) -> None:
    body = v13_body("streamed", stream=True)
    headers = {**auth(server.keys["bob"]), "Accept": "text/event-stream"}
    with httpx.stream(
        "POST", f"{server.base_url}/message", json=body, headers=headers, timeout=60
    ) as response:
        assert response.status_code == 200
        events = list(parse_sse_stream(response))
    names = [e.event for e in events if e.event != "ping"]
    assert names[0] == "new_message" and names[-1] == "task_complete", names
    assert json.loads(events[-1].data)["response"] == "echo[bob]: streamed"


def test_our_client_leaves_unset_fields_out(tmp_path: Path) -> None:
    import asyncio

    from aiohttp import web

    from mail.client import MAILClient

    seen: list[dict[str, object]] = []

    async def scenario() -> None:
        async def message(request: web.Request) -> web.Response:
            seen.append(await request.json())
            return web.json_response({"response": "ok", "events": None, "task_id": "t"})

        app = web.Application()
        app.router.add_post("/message", message)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        try:
            async with MAILClient(f"http://127.0.0.1:{port}", api_key="k", retries=0) as client:
                await client.post_message("hello")
        finally:
            await runner.cleanup()

    asyncio.run(scenario())
    assert seen == [
        {"subject": "New Message", "body": "hello", "msg_type": "request", "show_events": False}
    ]
