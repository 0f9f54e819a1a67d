"""MAILClient (and the REPL) against a real `mail server` subprocess.

One server serves the module: local auth with keys made by `mail keys`, the deterministic
stub agents of tests/support, a 0.3 s SSE heartbeat, and --debug for the /responses bridge.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from mail.client import ClientConfig, MAILClient, MAILClientError
from server_fixtures import (
    ROOT_ALICE_BOB,
    ServerProcess,
    keyed_stub_server,
)
from test_repl import Terminal

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    keys = {**ROOT_ALICE_BOB, "agent": ("agent", "swarm-far")}
    with keyed_stub_server(tmp_path_factory.mktemp("client-e2e"), keys, args=("--debug",)) as proc:
        yield proc


def client_for(server: ServerProcess, who: str | None = "alice") -> MAILClient:
    key = server.keys[who] if who else None
    return MAILClient(server.base_url, api_key=key, config=ClientConfig(timeout=30))


def envelope(task_id: str) -> dict[str, Any]:
    return {
        "message_id": str(uuid.uuid4()),
        "source_swarm": "swarm-far",
        "target_swarm": "stub",
        "timestamp": "2025-01-01T00:00:00+00:00",
        "payload": {
            "task_id": task_id,
            "request_id": str(uuid.uuid4()),
            "sender": {"address_type": "agent", "address": "scout@swarm-far"},
            "recipient": {"address_type": "agent", "address": "supervisor"},
            "subject": "hello",
            "body": "from far away",
            "sender_swarm": "swarm-far",
            "recipient_swarm": "stub",
            "routing_info": {},
        },
        "msg_type": "request",
        "auth_token": "unused",
        "task_owner": "user:u@swarm-far",
        "task_contributors": ["user:u@swarm-far"],
        "metadata": {},
    }


# ---------------------------------------------------------------------- service and identity


async def test_service_and_identity(server: ServerProcess) -> None:
    async with client_for(server, None) as client:
        root = await client.ping()
        health = await client.get_health()
        identity = await client.login(server.keys["alice"])
        status = await client.get_status()
    assert root["protocol_version"] == "1.3" and root["swarm"]["name"] == "stub"
    assert health["status"] == "healthy" and health["swarm_name"] == "stub"
    assert identity["role"] == "user"
    assert (client.user_role, client.user_id) == ("user", "alice")
    assert status["swarm"]["name"] == "stub"


async def test_health_update_and_auth_errors(server: ServerProcess) -> None:
    async with client_for(server, "admin") as admin:
        assert (await admin.update_health("maintenance"))["status"] == "maintenance"
        assert (await admin.update_health("healthy"))["status"] == "healthy"
    async with client_for(server, "alice") as alice:
        with pytest.raises(MAILClientError) as wrong_role:
            await alice.update_health("broken")
    async with MAILClient(server.base_url, api_key="not-a-key", config=ClientConfig()) as bad:
        with pytest.raises(MAILClientError) as bad_key:
            await bad.get_whoami()
        with pytest.raises(RuntimeError, match="MAIL client login failed"):
            await bad.login("still-not-a-key")
    assert wrong_role.value.status == 403
    assert bad_key.value.status == 401 and bad_key.value.detail


# ---------------------------------------------------------------------- messaging


async def test_post_message_with_events(server: ServerProcess) -> None:
    async with client_for(server) as client:
        result = await client.post_message("Hello", subject="Greeting", show_events=True)
        with pytest.raises(MAILClientError) as empty:
            await client.post_message("")
    assert result["response"] == "echo[alice]: Hello"
    names = [event["event"] for event in result["events"]]
    assert names[0] == "new_message" and "task_complete_call" in names
    assert empty.value.status == 400 and "no message provided" in str(empty.value.detail)


async def test_stream_events_arrive_before_the_task_completes(server: ServerProcess) -> None:
    arrivals: list[tuple[str, float, Any]] = []
    async with client_for(server) as client:
        started = time.monotonic()
        stream = await client.post_message_stream("SLEEP 3 streamed", entrypoint="supervisor")
        async for event in stream:
            arrivals.append((event.event, time.monotonic() - started, event))
    names = [name for name, _, _ in arrivals]
    assert names[0] == "new_message" and names[-1] == "task_complete"
    first_at, done_at = arrivals[0][1], arrivals[-1][1]
    # The agent sleeps 3 s: the first event was in our hands long before the end.
    assert first_at < 2.5 and done_at - first_at >= 1.5
    assert "ping" in names[: names.index("task_complete")]  # heartbeats while waiting
    final = json.loads(arrivals[-1][2].data)
    assert final["response"] == "echo[alice]: streamed"
    # Stored task events carry their per-task sequence number as the SSE id.
    stored = [e for _, _, e in arrivals if e.event not in ("ping", "task_complete")]
    assert stored and all(e.id for e in stored)
    task_ids = {json.loads(e.data)["task_id"] for _, _, e in arrivals}
    assert len(task_ids) == 1


async def test_breakpoint_and_user_response_resumes(server: ServerProcess) -> None:
    async with client_for(server) as client:
        paused = await client.post_message("BREAKPOINT please check")
        calls = json.loads(paused["response"])
        assert calls[0]["name"] == "human_review"
        resumed = await client.post_message(
            "",
            task_id=paused["task_id"],
            resume_from="breakpoint_tool_call",
            breakpoint_tool_call_result=json.dumps({"content": "approved"}),
        )
        assert resumed["response"] == "reviewed: approved"

        paused = await client.post_message("BREAKPOINT streamed resume")
        call_id = json.loads(paused["response"])[0]["call_id"]
        events = [
            event
            async for event in client.post_message_stream(
                "",
                task_id=paused["task_id"],
                resume_from="breakpoint_tool_call",
                breakpoint_tool_call_result=[{"call_id": call_id, "content": "looks good"}],
            )
        ]
        assert events[-1].event == "task_complete"
        assert json.loads(events[-1].data)["response"] == "reviewed: looks good"
        assert "breakpoint_action_complete" in [e.event for e in events]

        first = await client.post_message("COUNT")
        second = await client.post_message(
            "COUNT again", task_id=first["task_id"], resume_from="user_response"
        )
    assert (first["response"], second["response"]) == ("turn 1", "turn 2")


KEPT_TASK = "c11e2e00-0000-4000-8000-000000000001"
REPL_TASK = "c11e2e00-0000-4000-8000-000000000002"
MISSING_TASK = "c11e2e00-0000-4000-8000-0000000000ff"


async def test_task_inspection_is_per_user(server: ServerProcess) -> None:
    async with client_for(server) as alice, client_for(server, "bob") as bob:
        done = await alice.post_message("keep this", task_id=KEPT_TASK)
        tasks = await alice.get_tasks()
        task = await alice.get_task(KEPT_TASK)
        with pytest.raises(MAILClientError) as missing:
            await alice.get_task(MISSING_TASK)
        with pytest.raises(MAILClientError) as foreign:
            await bob.get_task(KEPT_TASK)
    assert done["response"] == "echo[alice]: keep this"
    assert KEPT_TASK in tasks
    assert task["task_id"] == KEPT_TASK and task["completed"] is True
    assert any(e["event"] == "task_complete_call" for e in task["events"])
    assert missing.value.status == 404 and "not found" in str(missing.value.detail)
    assert foreign.value.status == 404


# ---------------------------------------------------------------------- registry and admin


async def test_swarm_registry_and_template_methods(server: ServerProcess) -> None:
    async with client_for(server, "admin") as admin, client_for(server) as alice:
        # A server registered under a name it does not report is refused (it would be an
        # entry no message can use); the client passes the 400 on.
        with pytest.raises(MAILClientError) as misnamed:
            await admin.register_swarm("mirror", server.base_url, volatile=True)
        swarms = await admin.get_swarms()
        dumped = await admin.dump_swarm()
        swarm = json.loads((server.directory / "swarms.json").read_text())[0]
        loaded = await admin.load_swarm_from_json(json.dumps(swarm))
        with pytest.raises(MAILClientError) as not_admin:
            await alice.dump_swarm()
        with pytest.raises(MAILClientError) as bad_json:
            await admin.load_swarm_from_json("{not json")
    assert misnamed.value.status == 400 and "is swarm 'stub', not 'mirror'" in str(
        misnamed.value.detail
    )
    assert isinstance(swarms["swarms"], list)
    assert dumped == {"status": "dumped", "swarm_name": "stub"}
    assert loaded == {"status": "success", "swarm_name": "stub"}
    assert not_admin.value.status == 403
    assert 400 <= bad_json.value.status < 500


async def test_debug_responses_bridge(server: ServerProcess) -> None:
    async with client_for(server) as client:
        response = await client.debug_post_responses(
            [{"role": "user", "content": "Hello bridge"}], []
        )
    assert "echo[alice]: Hello bridge" in response.output_text


async def test_interswarm_methods_reach_their_routes(server: ServerProcess) -> None:
    # The stub swarm has interswarm off, so each route answers 409 "interswarm is off", which
    # shows the client reached a route that exists (the original posted to a missing one).
    # The success paths run between two federated servers in test_client_e2e_interswarm.py.
    async with client_for(server) as alice, client_for(server, "agent") as agent:
        with pytest.raises(MAILClientError) as send:
            await alice.send_interswarm_message(
                "hi",
                server.keys["alice"],
                targets=["worker@elsewhere"],
            )
        with pytest.raises(MAILClientError) as forward:
            await agent.post_interswarm_message(envelope(str(uuid.uuid4())))
        with pytest.raises(MAILClientError) as back:
            await agent.post_interswarm_response(envelope(str(uuid.uuid4())))
    # Interswarm is off for this swarm: a 409 that says how to turn it on (not a retryable 503).
    assert send.value.status == 409, send.value
    assert "enable_interswarm" in str(send.value.detail)
    assert forward.value.status == 409, forward.value
    assert "interswarm is off" in str(forward.value.detail)
    # A missing route would be a 404/405: all three reached theirs and were refused alike.
    assert back.value.status == 409, back.value
    assert "interswarm is off" in str(back.value.detail)


# ---------------------------------------------------------------------- sessions


async def test_external_session_survives_the_client(server: ServerProcess) -> None:
    async with aiohttp.ClientSession() as session:
        key = server.keys["alice"]
        async with MAILClient(server.base_url, api_key=key, session=session) as client:
            assert (await client.get_whoami())["role"] == "user"
        await client.aclose()
        assert not session.closed
        async with session.get(f"{server.base_url}/health") as response:
            assert response.status == 200


# ---------------------------------------------------------------------- the REPL


def test_repl_against_the_real_server(server: ServerProcess, tmp_path: Path) -> None:
    key = server.keys["alice"]
    term = Terminal(["client", server.base_url, "--api-key", key, "--timeout", "60"], tmp_path)
    prompt = r"mail::user:alice@127\.0\.0\.1:\d+> "
    try:
        term.expect(r"✓ logged in as user:alice")
        term.expect(prompt)
        term.sendline('message "Hello from the REPL"')
        term.expect(r"│ echo\[alice\]: Hello from the REPL")
        term.expect(prompt)
        term.sendline("ms 'SLEEP 1 streaming in the REPL' -tid " + REPL_TASK)
        term.expect(r"new_message\s+sending message")
        term.expect(r"waiting for more")
        term.expect(r"task_complete\s+echo\[alice\]: streaming in the REPL")
        term.expect(prompt)
        term.sendline("tsg")
        term.expect(REPL_TASK)
        term.expect(prompt)
        term.sendline("tg " + REPL_TASK)
        term.expect(r"task_owner\s+user:alice@stub")
        term.expect(prompt)
        term.sendline("exit")
        assert term.wait() == 0
    finally:
        term.close()


async def test_request_after_the_server_closed_an_idle_connection(server: ServerProcess) -> None:
    """Like the REPL: the event loop is blocked (waiting for input) while the server closes
    the idle keep-alive connection; the next request must still go through."""
    async with client_for(server) as client:
        assert (await client.ping())["name"] == "mail"
        time.sleep(5.5)  # longer than the server's keep-alive; the loop cannot see the close
        events = [e async for e in await client.post_message_stream("after idle")]
        assert events[-1].event == "task_complete"
        assert json.loads(events[-1].data)["response"] == "echo[alice]: after idle"
