"""End-to-end: POST /message (JSON and SSE), breakpoints, multi-turn, isolation, concurrency.

One real `mail server` subprocess (local auth, stub agents, 0.3 s SSE heartbeat) serves the
whole module; keys are created with `mail keys` before it starts.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest

from server_fixtures import (
    ROOT_ALICE_BOB,
    ServerProcess,
    aparse_sse_stream,
    auth,
    keyed_stub_server,
    parse_sse_stream,
    post_as,
)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with keyed_stub_server(tmp_path_factory.mktemp("server"), ROOT_ALICE_BOB) as proc:
        yield proc


def test_post_message_returns_final_response_and_task_id(server: ServerProcess) -> None:
    r = post_as(server, "alice", {"body": "Hello"})
    assert r.status_code == 200
    data = r.json()
    assert data["response"] == "echo[alice]: Hello"
    assert data["events"] is None
    uuid.UUID(data["task_id"])


def test_message_alias_field_and_subject(server: ServerProcess) -> None:
    r = post_as(server, "alice", {"message": "via alias", "subject": "Greeting"})
    assert r.status_code == 200
    assert r.json()["response"] == "echo[alice]: via alias"


def test_show_events_shape_and_ids(server: ServerProcess) -> None:
    r = post_as(server, "bob", {"body": "events please", "show_events": True})
    data = r.json()
    events = data["events"]
    names = [e["event"] for e in events]
    assert names[0] == "new_message"
    assert "task_complete_call" in names
    for e in events:
        assert set(e) >= {"event", "data", "id"}
        assert isinstance(e["data"], dict)  # parsed, not a JSON string
        assert e["data"]["task_id"] == data["task_id"]
    ids = [int(e["id"]) for e in events]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)


def test_agent_failure_is_a_200_with_the_error_in_the_task(server: ServerProcess) -> None:
    r = post_as(server, "alice", {"body": "FAIL now"})
    assert r.status_code == 200
    assert "stub agent failure" in r.json()["response"] or "::" in r.json()["response"]
    task = httpx.get(
        f"{server.base_url}/task",
        params={"task_id": r.json()["task_id"]},
        headers=auth(server.keys["alice"]),
    ).json()
    assert any(e["event"] == "agent_error" for e in task["events"])


def test_task_message_limit_from_mail_toml_is_applied(server: ServerProcess) -> None:
    # The original never applied [server.settings].task_message_limit (default 15).
    r = post_as(server, "alice", {"body": "LOOP", "show_events": True})
    assert r.json()["response"] == "stopped: step limit"
    deliveries = [e for e in r.json()["events"] if e["event"] == "new_message"]
    assert 10 <= len(deliveries) <= 20


def test_multi_agent_delegation(server: ServerProcess) -> None:
    r = post_as(server, "alice", {"body": "DELEGATE sum it"})
    assert r.json()["response"] == "delegated: worked: sum it"


# ---------------------------------------------------------------------------------- SSE


def test_stream_event_order_heartbeats_and_final_event(server: ServerProcess) -> None:
    with httpx.stream(
        "POST",
        f"{server.base_url}/message",
        json={"body": "SLEEP 1.0 stream me", "stream": True},
        headers=auth(server.keys["alice"]),
        timeout=30,
    ) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        assert r.headers["cache-control"] == "no-cache"
        assert r.headers["x-accel-buffering"] == "no"
        events = list(parse_sse_stream(r))
    names = [e.event for e in events]
    assert names[0] == "new_message"
    assert names[-1] == "task_complete"
    # 1 s of agent work with a 0.3 s heartbeat: at least two pings, all before the tool call.
    pings = [i for i, n in enumerate(names) if n == "ping"]
    assert len(pings) >= 2
    assert max(pings) < names.index("tool_call")
    final = events[-1].json()
    assert final["response"] == "echo[alice]: stream me"
    assert final["task_id"] == events[0].json()["task_id"]
    stored = [int(e.id) for e in events if e.event not in ("ping", "task_complete")]
    assert stored == sorted(stored) and stored[0] == 1


def test_stream_first_event_is_prompt(server: ServerProcess) -> None:
    start = time.monotonic()
    with httpx.stream(
        "POST",
        f"{server.base_url}/message",
        json={"body": "SLEEP 2 quick", "stream": True},
        headers=auth(server.keys["bob"]),
        timeout=30,
    ) as r:
        events = parse_sse_stream(r)
        first = next(events)
        elapsed = first.received_at - start
        rest = list(events)
    assert rest[-1].event == "task_complete"
    assert first.event == "new_message"
    # Well before the agent finishes: the model takes 2 s after the prompt is sent.
    assert rest[-1].received_at - first.received_at > 1.0, (elapsed, rest[-1].received_at)


def test_client_disconnect_does_not_cancel_the_task(server: ServerProcess) -> None:
    with httpx.stream(
        "POST",
        f"{server.base_url}/message",
        json={"body": "SLEEP 0.8 survive", "stream": True},
        headers=auth(server.keys["alice"]),
        timeout=30,
    ) as r:
        first = next(parse_sse_stream(r))
    task_id = first.json()["task_id"]  # the connection is closed here, mid-task
    deadline = time.monotonic() + 10
    task = {}
    while time.monotonic() < deadline:
        task = httpx.get(
            f"{server.base_url}/task",
            params={"task_id": task_id},
            headers=auth(server.keys["alice"]),
        ).json()
        if task.get("completed"):
            break
        time.sleep(0.1)
    assert task["completed"] is True
    assert any(e["event"] == "task_complete_call" for e in task["events"])


def test_stream_ends_promptly_when_a_breakpoint_pauses_the_task(server: ServerProcess) -> None:
    start = time.monotonic()
    with httpx.stream(
        "POST",
        f"{server.base_url}/message",
        json={"body": "BREAKPOINT in a stream", "stream": True},
        headers=auth(server.keys["alice"]),
        timeout=30,
    ) as r:
        events = list(parse_sse_stream(r))
    assert time.monotonic() - start < 2.0
    assert events[-1].event == "task_complete"
    assert "breakpoint_tool_call" in [e.event for e in events]
    calls = json.loads(events[-1].json()["response"])
    assert calls[0]["name"] == "human_review"


def test_two_streams_of_one_user_do_not_interfere(server: ServerProcess) -> None:
    async def one(text: str) -> list:
        async with httpx.AsyncClient(timeout=30) as client:
            async with client.stream(
                "POST",
                f"{server.base_url}/message",
                json={"body": f"SLEEP 0.4 {text}", "stream": True},
                headers=auth(server.keys["bob"]),
            ) as r:
                return [e async for e in aparse_sse_stream(r)]

    async def both() -> tuple[list, list]:
        return await asyncio.gather(one("first"), one("second"))

    a, b = asyncio.run(both())
    assert a[-1].json()["response"] == "echo[bob]: first"
    assert b[-1].json()["response"] == "echo[bob]: second"
    assert {e.json()["task_id"] for e in a} != {e.json()["task_id"] for e in b}
    assert len({e.json()["task_id"] for e in a}) == 1


# ---------------------------------------------------------------------------- breakpoints


def test_breakpoint_pause_and_resume_with_a_dict(server: ServerProcess) -> None:
    r = post_as(server, "alice", {"body": "BREAKPOINT please review"})
    assert r.status_code == 200
    paused = r.json()
    calls = json.loads(paused["response"])
    assert calls[0]["name"] == "human_review"
    assert json.loads(calls[0]["arguments"]) == {"question": "BREAKPOINT please review"}
    r = post_as(
        server,
        "alice",
        {
            "body": "",
            "task_id": paused["task_id"],
            "resume_from": "breakpoint_tool_call",
            "kwargs": {"breakpoint_tool_call_result": {"content": "approved"}},
        },
    )
    assert r.status_code == 200
    assert r.json()["response"] == "reviewed: approved"


def test_breakpoint_resume_with_a_list_matched_by_call_id(server: ServerProcess) -> None:
    paused = post_as(server, "bob", {"body": "BREAKPOINT2"}).json()
    calls = json.loads(paused["response"])
    assert [c["name"] for c in calls] == ["human_review", "human_review"]
    results = [
        {"call_id": calls[1]["call_id"], "content": "second ok"},
        {"call_id": calls[0]["call_id"], "content": "first ok"},
    ]
    r = post_as(
        server,
        "bob",
        {
            "body": "",
            "task_id": paused["task_id"],
            "resume_from": "breakpoint_tool_call",
            "kwargs": {"breakpoint_tool_call_result": json.dumps(results)},
        },
    )
    # Each result is matched to its call by id and added in the order it was sent.
    assert r.json()["response"] == "reviewed: second ok | first ok"


def test_breakpoint_resume_over_sse(server: ServerProcess) -> None:
    paused = post_as(server, "alice", {"body": "BREAKPOINT streamed resume"}).json()
    with httpx.stream(
        "POST",
        f"{server.base_url}/message",
        json={
            "body": "",
            "task_id": paused["task_id"],
            "resume_from": "breakpoint_tool_call",
            "stream": True,
            "kwargs": {"breakpoint_tool_call_result": [{"content": "y"}]},
        },
        headers=auth(server.keys["alice"]),
        timeout=30,
    ) as r:
        events = list(parse_sse_stream(r))
    names = [e.event for e in events]
    assert names[-1] == "task_complete"
    assert "breakpoint_action_complete" in names
    # Only the new events of the resumed task are streamed, not the earlier ones.
    assert "breakpoint_tool_call" not in names


def test_user_response_multi_turn_on_one_task(server: ServerProcess) -> None:
    first = post_as(server, "alice", {"body": "COUNT"}).json()
    assert first["response"] == "turn 1"
    second = post_as(
        server,
        "alice",
        {"body": "COUNT again", "task_id": first["task_id"], "resume_from": "user_response"},
    ).json()
    assert second["response"] == "turn 2"
    assert second["task_id"] == first["task_id"]
    third = post_as(
        server,
        "alice",
        {"body": "COUNT more", "task_id": first["task_id"], "resume_from": "user_response"},
    ).json()
    assert third["response"] == "turn 3"
    # Reusing a completed task's id without resume_from continues it the same way.
    fourth = post_as(
        server, "alice", {"body": "COUNT once more", "task_id": first["task_id"]}
    ).json()
    assert fourth["response"] == "turn 4"


def test_resuming_an_unknown_task_is_404(server: ServerProcess) -> None:
    r = post_as(
        server,
        "alice",
        {"body": "hi", "task_id": str(uuid.uuid4()), "resume_from": "user_response"},
    )
    assert r.status_code == 404
    assert "not found" in r.json()["detail"]


# -------------------------------------------------------------------- isolation, load


def test_users_cannot_see_or_resume_each_others_tasks(server: ServerProcess) -> None:
    alice_task = post_as(server, "alice", {"body": "private to alice"}).json()["task_id"]
    bob_tasks = httpx.get(f"{server.base_url}/tasks", headers=auth(server.keys["bob"])).json()
    assert alice_task not in bob_tasks
    assert all(t["task_owner"].startswith("user:bob@") for t in bob_tasks.values())
    r = httpx.get(
        f"{server.base_url}/task", params={"task_id": alice_task}, headers=auth(server.keys["bob"])
    )
    assert r.status_code == 404
    r = post_as(
        server, "bob", {"body": "hijack", "task_id": alice_task, "resume_from": "user_response"}
    )
    assert r.status_code == 404
    alice_tasks = httpx.get(f"{server.base_url}/tasks", headers=auth(server.keys["alice"])).json()
    assert alice_tasks[alice_task]["task_owner"] == "user:alice@stub"


def test_twenty_concurrent_messages_from_two_users_are_not_crossed(server: ServerProcess) -> None:
    async def send(client: httpx.AsyncClient, who: str, i: int) -> tuple[str, int, dict]:
        r = await client.post(
            "/message", json={"body": f"SLEEP 0.1 msg-{who}-{i}"}, headers=auth(server.keys[who])
        )
        assert r.status_code == 200, r.text
        return who, i, r.json()

    async def run() -> list[tuple[str, int, dict]]:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=60) as client:
            return await asyncio.gather(
                *(send(client, who, i) for who in ("alice", "bob") for i in range(10))
            )

    results = asyncio.run(run())
    assert len(results) == 20
    for who, i, data in results:
        assert data["response"] == f"echo[{who}]: msg-{who}-{i}"
    assert len({data["task_id"] for _, _, data in results}) == 20
    alice_tasks = httpx.get(f"{server.base_url}/tasks", headers=auth(server.keys["alice"])).json()
    for who, _, data in results:
        assert (data["task_id"] in alice_tasks) == (who == "alice")


def test_admin_gets_its_own_instance(server: ServerProcess) -> None:
    r = post_as(server, "admin", {"body": "from the admin"})
    assert r.json()["response"] == "echo[root]: from the admin"
    tasks = httpx.get(f"{server.base_url}/tasks", headers=auth(server.keys["admin"])).json()
    assert tasks[r.json()["task_id"]]["task_owner"] == "admin:root@stub"
