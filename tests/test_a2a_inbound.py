"""The A2A SDK's own client against a real `mail server` (stub agents) over HTTP.

Card resolution, send, stream, get, cancel, resubscribe, a breakpoint round trip through
`input-required`, multi-turn in one context, and per-user isolation.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver
from a2a.helpers.proto_helpers import get_artifact_text, get_data_parts, get_message_text
from a2a.types.a2a_pb2 import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from google.protobuf.json_format import MessageToDict, ParseDict

from server_fixtures import ROOT_ALICE_BOB, ServerProcess, auth, keyed_stub_server
from support.a2a_clients import a2a_client, collect, message

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with keyed_stub_server(tmp_path_factory.mktemp("a2a_in"), ROOT_ALICE_BOB) as srv:
        yield srv


def _final_task(events: list[Any]) -> tuple[str, str, str]:
    """(task id, context id, last state name) of a stream of StreamResponses."""
    task_id = context_id = state = ""
    for ev in events:
        if ev.HasField("task"):
            task_id, context_id = ev.task.id, ev.task.context_id
            state = TaskState.Name(ev.task.status.state)
        elif ev.HasField("status_update"):
            state = TaskState.Name(ev.status_update.status.state)
    return task_id, context_id, state


def _mail_events(events: list[Any]) -> list[dict[str, Any]]:
    found = []
    for ev in events:
        if ev.HasField("status_update") and "mail_event" in ev.status_update.metadata:
            found.append(MessageToDict(ev.status_update.metadata)["mail_event"])
    return found


def _task(events: list[Any]) -> Task:
    task = events[-1].task if events[-1].HasField("task") else None
    assert task is not None, events
    return task


async def test_agent_card_resolves_and_validates(server: ServerProcess) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        card = await A2ACardResolver(http, server.base_url).get_agent_card()
        raw = (await http.get(f"{server.base_url}/.well-known/agent-card.json")).json()
    # The SDK's model accepts the JSON as is (unknown fields would raise).
    ParseDict(raw, AgentCard())
    assert card.name == "stub"
    assert card.description == "stub swarm for server tests"
    assert card.capabilities.streaming
    assert card.supported_interfaces[0].url == f"{server.base_url}/a2a"
    assert card.supported_interfaces[0].protocol_binding == "JSONRPC"
    scheme = next(iter(card.security_schemes.values()))
    assert scheme.http_auth_security_scheme.scheme == "bearer"
    assert [s.id for s in card.skills] == ["swarm:stub"]


async def test_send_without_streaming_returns_completed_task(server: ServerProcess) -> None:
    async with a2a_client(server.base_url, server.keys["alice"], streaming=False) as client:
        task = _task(await collect(client, message("hello there")))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert [a.name for a in task.artifacts] == ["response"]
    assert get_artifact_text(task.artifacts[0]) == "echo[alice]: hello there"
    # A blocking send gets no per-event `working` updates (nobody could see them): the final
    # task carries no leftover MAIL event in its metadata.
    assert "mail_event" not in MessageToDict(task.metadata)
    # The MAIL task is the A2A context: same record over MAIL's own API.
    r = httpx.get(
        f"{server.base_url}/task",
        params={"task_id": task.context_id},
        headers=auth(server.keys["alice"]),
    )
    assert r.status_code == 200, r.text
    assert r.json()["completed"] is True


async def test_stream_carries_mail_events_with_ids(server: ServerProcess) -> None:
    async with a2a_client(server.base_url, server.keys["alice"]) as client:
        events = await collect(client, message("DELEGATE build it"))
    _, _, state = _final_task(events)
    assert state == "TASK_STATE_COMPLETED"
    mail = _mail_events(events)
    names = [e["event"] for e in mail]
    assert "new_message" in names and "tool_call" in names, names
    ids = [int(e["id"]) for e in mail]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    artifacts = [e.artifact_update.artifact for e in events if e.HasField("artifact_update")]
    assert get_artifact_text(artifacts[-1]) == "delegated: worked: build it"


async def test_a_second_task_in_the_context_continues_the_mail_task(server: ServerProcess) -> None:
    context = str(uuid.uuid4())
    answers = []
    async with a2a_client(server.base_url, server.keys["alice"], streaming=False) as client:
        for _ in range(2):
            task = _task(await collect(client, message("COUNT", context_id=context)))
            answers.append(get_artifact_text(task.artifacts[0]))
            got = await client.get_task(GetTaskRequest(id=task.id))
            assert got.status.state == TaskState.TASK_STATE_COMPLETED
    assert answers == ["turn 1", "turn 2"]


async def test_breakpoint_pause_is_input_required_and_data_part_resumes(
    server: ServerProcess,
) -> None:
    async with a2a_client(server.base_url, server.keys["alice"], streaming=False) as client:
        task = _task(await collect(client, message("BREAKPOINT ok to book?")))
        assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        (pause,) = get_data_parts(task.status.message.parts)
        assert pause["mail_pause"] == "breakpoint"
        assert pause["answer_with"] == "breakpoint_tool_call_result"
        (call,) = pause["calls"]
        answer = {"breakpoint_tool_call_result": [{"call_id": call["call_id"], "content": "yes"}]}
        resumed = _task(
            await collect(client, message(data=answer, task_id=task.id, context_id=task.context_id))
        )
    assert resumed.id == task.id
    assert resumed.status.state == TaskState.TASK_STATE_COMPLETED
    assert get_artifact_text(resumed.artifacts[-1]) == "reviewed: yes"


async def test_a_wrong_resume_is_rejected_with_the_mail_explanation(server: ServerProcess) -> None:
    async with a2a_client(server.base_url, server.keys["alice"], streaming=False) as client:
        task = _task(await collect(client, message("BREAKPOINT again?")))
        bad = {"breakpoint_tool_call_result": [{"call_id": "nope", "content": "x"}]}
        after = _task(
            await collect(client, message(data=bad, task_id=task.id, context_id=task.context_id))
        )
    assert after.status.state == TaskState.TASK_STATE_REJECTED
    assert get_message_text(after.status.message).startswith("400: ")


async def test_cancel_stops_the_mail_task(server: ServerProcess) -> None:
    key = server.keys["alice"]
    async with a2a_client(server.base_url, key, polling=True, streaming=False) as client:
        task = _task(await collect(client, message("SLEEP 30 never finished")))
        assert task.status.state in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)
        cancelled = await client.cancel_task(CancelTaskRequest(id=task.id))
        assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
        got = await client.get_task(GetTaskRequest(id=task.id))
        assert got.status.state == TaskState.TASK_STATE_CANCELED
    record = httpx.get(
        f"{server.base_url}/task", params={"task_id": task.context_id}, headers=auth(key)
    ).json()
    assert "events" in record, record
    names = [e["event"] for e in record["events"]]
    assert "task_cancelled" in names, names
    assert record["is_running"] is False
    # Nothing after the cancel: the sleeping turn was cancelled, no answer was delivered.
    assert names[-1] == "task_cancelled", names


async def test_subscribe_follows_a_running_task(server: ServerProcess) -> None:
    key = server.keys["alice"]
    async with a2a_client(server.base_url, key, polling=True, streaming=False) as client:
        task = _task(await collect(client, message("SLEEP 3 late answer")))
        assert task.status.state != TaskState.TASK_STATE_COMPLETED
    states = []
    async with a2a_client(server.base_url, key) as client:
        async for ev in client.subscribe(SubscribeToTaskRequest(id=task.id)):
            if ev.HasField("status_update"):
                states.append(TaskState.Name(ev.status_update.status.state))
            elif ev.HasField("task"):
                states.append(TaskState.Name(ev.task.status.state))
            elif ev.HasField("artifact_update"):
                states.append(get_artifact_text(ev.artifact_update.artifact))
    assert states[-2:] == ["echo[alice]: late answer", "TASK_STATE_COMPLETED"], states


async def test_a_dropped_stream_is_picked_up_again_by_subscribing(server: ServerProcess) -> None:
    key = server.keys["alice"]
    async with a2a_client(server.base_url, key) as client:
        stream = client.send_message(message("SLEEP 2 after the drop"))
        async with contextlib.aclosing(stream):
            first = await anext(stream)  # the task, then the caller hangs up
        task_id = first.task.id
        assert first.task.status.state != TaskState.TASK_STATE_COMPLETED
        seen = []
        async for ev in client.subscribe(SubscribeToTaskRequest(id=task_id)):
            if ev.HasField("artifact_update"):
                seen.append(get_artifact_text(ev.artifact_update.artifact))
            elif ev.HasField("status_update"):
                seen.append(TaskState.Name(ev.status_update.status.state))
        got = await client.get_task(GetTaskRequest(id=task_id))
    # Hanging up did not stop the task: the subscription saw it finish.
    assert seen[-2:] == ["echo[alice]: after the drop", "TASK_STATE_COMPLETED"], seen
    assert get_artifact_text(got.artifacts[-1]) == "echo[alice]: after the drop"


async def test_users_cannot_see_or_cancel_each_others_tasks(server: ServerProcess) -> None:
    async with a2a_client(server.base_url, server.keys["alice"], streaming=False) as alice:
        task = _task(await collect(alice, message("alice's secret")))
        listed = await alice.list_tasks(ListTasksRequest())
        assert task.id in [t.id for t in listed.tasks]
    async with a2a_client(server.base_url, server.keys["bob"], streaming=False) as bob:
        with pytest.raises(Exception, match="(?i)not found"):
            await bob.get_task(GetTaskRequest(id=task.id))
        with pytest.raises(Exception, match="(?i)not found"):
            await bob.cancel_task(CancelTaskRequest(id=task.id))
    async with a2a_client(server.base_url, server.keys["bob"]) as bob:
        with pytest.raises(Exception, match="(?i)not found"):
            async for _ in bob.subscribe(SubscribeToTaskRequest(id=task.id)):
                pass
    async with a2a_client(server.base_url, server.keys["bob"], streaming=False) as bob:
        # Bob naming Alice's context gets a task of his own, in his own instance.
        mine = _task(await collect(bob, message("COUNT", context_id=task.context_id)))
        assert get_artifact_text(mine.artifacts[0]) == "turn 1"
        bobs = [t.id for t in (await bob.list_tasks(ListTasksRequest())).tasks]
        assert mine.id in bobs and task.id not in bobs


async def test_list_tasks_refuses_a_status_that_is_not_a_task_state(server: ServerProcess) -> None:
    """The SDK reads an unknown state as no filter: the answer would be every task."""
    async with a2a_client(server.base_url, server.keys["alice"], streaming=False) as alice:
        done = _task(await collect(alice, message("listed by state")))
        completed = await alice.list_tasks(ListTasksRequest(status=TaskState.TASK_STATE_COMPLETED))
        working = await alice.list_tasks(ListTasksRequest(status=TaskState.TASK_STATE_WORKING))
    assert done.id in [t.id for t in completed.tasks]
    assert done.id not in [t.id for t in working.tasks]

    async def list_by(status: Any) -> dict[str, Any]:
        body = {"jsonrpc": "2.0", "id": 7, "method": "ListTasks", "params": {"status": status}}
        headers = {**auth(server.keys["alice"]), "A2A-Version": "1.0"}
        answer = await http.post(f"{server.base_url}/a2a", json=body, headers=headers)
        assert answer.status_code == 200, answer.text
        return answer.json()  # type: ignore[no-any-return]

    async with httpx.AsyncClient(timeout=30) as http:
        for unknown in ("TASK_STATE_FINISHED", "completed", 99, True, ["TASK_STATE_WORKING"]):
            refused = await list_by(unknown)
            assert refused["id"] == 7 and "result" not in refused, (unknown, refused)
            assert refused["error"]["code"] == -32602, refused
            assert "is not a task state" in refused["error"]["message"], refused
            assert "TASK_STATE_COMPLETED" in refused["error"]["message"], refused
        for known in ("TASK_STATE_COMPLETED", TaskState.TASK_STATE_COMPLETED, None):
            listed = await list_by(known)
            assert done.id in [t["id"] for t in listed["result"]["tasks"]], (known, listed)


async def test_no_key_is_401_like_message(server: ServerProcess) -> None:
    async with httpx.AsyncClient() as http:
        r = await http.post(
            f"{server.base_url}/a2a",
            json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {}},
        )
    assert r.status_code == 401


async def test_http_cancel_route(server: ServerProcess) -> None:
    key = server.keys["bob"]
    async with httpx.AsyncClient(timeout=30) as http:
        task_id = str(uuid.uuid4())
        running = asyncio.create_task(
            http.post(
                f"{server.base_url}/message",
                json={"body": "SLEEP 30 slow", "task_id": task_id},
                headers=auth(key),
            )
        )
        for _ in range(500):
            r = await http.get(
                f"{server.base_url}/task", params={"task_id": task_id}, headers=auth(key)
            )
            if r.status_code == 200 and r.json()["is_running"]:
                break
            await asyncio.sleep(0.02)
        r = await http.post(
            f"{server.base_url}/task/cancel", json={"task_id": task_id}, headers=auth(key)
        )
        assert r.status_code == 200, r.text
        assert r.json() == {"task_id": task_id, "cancelled": True, "state": "completed"}
        answer = await running
        assert answer.json()["response"] == "The task was cancelled."
        again = await http.post(
            f"{server.base_url}/task/cancel", json={"task_id": task_id}, headers=auth(key)
        )
        assert again.json()["cancelled"] is False
        other = await http.post(
            f"{server.base_url}/task/cancel",
            json={"task_id": task_id},
            headers=auth(server.keys["alice"]),
        )
        assert other.status_code == 404


async def test_cancelling_a_finished_task_that_left_memory(server: ServerProcess) -> None:
    """A task whose answer is out leaves its instance (the store keeps it): cancelling it is
    `cancelled: false` as for any finished task, not 404; another caller still gets 404."""
    key = server.keys["bob"]
    async with httpx.AsyncClient(timeout=30) as http:
        r = await http.post(f"{server.base_url}/message", json={"body": "hi"}, headers=auth(key))
        assert r.status_code == 200, r.text
        task_id = r.json()["task_id"]
        r = await http.post(
            f"{server.base_url}/task/cancel", json={"task_id": task_id}, headers=auth(key)
        )
        assert r.status_code == 200, r.text
        assert r.json() == {"task_id": task_id, "cancelled": False, "state": "completed"}
        other = await http.post(
            f"{server.base_url}/task/cancel",
            json={"task_id": task_id},
            headers=auth(server.keys["alice"]),
        )
        assert other.status_code == 404
        r = await http.get(
            f"{server.base_url}/task", params={"task_id": task_id}, headers=auth(key)
        )
        assert r.json()["events"][-1]["event"] != "task_cancelled"


async def test_mail_client_speaks_a2a_and_cancels(server: ServerProcess) -> None:
    from mail.client import MAILClient

    async with MAILClient(server.base_url, api_key=server.keys["bob"]) as client:
        card = await client.a2a_card()
        assert card["name"] == "stub"
        reply = await client.a2a_send("via MAILClient")
        assert (reply.state, reply.text) == ("completed", "echo[bob]: via MAILClient")
        paused = await client.a2a_send("BREAKPOINT stop?", context_id=str(uuid.uuid4()))
        assert paused.state == "input-required"
        assert paused.data[0]["mail_pause"] == "breakpoint"
        cancelled = await client.cancel_task(paused.context_id)
        assert cancelled == {"task_id": paused.context_id, "cancelled": True, "state": "completed"}
        record = await client.get_task(paused.context_id)
        assert record["pending_breakpoints"] == []
        assert record["events"][-1]["event"] == "task_cancelled"
