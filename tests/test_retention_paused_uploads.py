"""Retention removes finished tasks only: a task paused for review keeps what it needs,
the caller's uploads included, however long the pause lasts.

A real `mail server` (default SQLite store) with `finished_task_ttl = 2` and rounds every
0.3 s, on a LiteLLM swarm (answered by the scripted model server) whose assistant has the file
tools and a reviewed `send_email` action. The caller sends a message with an attachment; the
model asks for `send_email`, so the task waits for review. While it waits (well past the TTL,
many retention rounds) the task and its attachment must stay; the review then completes it.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest

from server_fixtures import ServerProcess, auth
from support.llm_thread import ThreadedLLM, mentions
from support.review_server import review_server
from support.scripted_llm import reply, tool_call

pytestmark = pytest.mark.timeout(300)

TTL = 2.0
TEAM = ["reply_wait", "threads", "inbox", "files"]


@pytest.fixture(scope="module")
def llm() -> Iterator[ThreadedLLM]:
    with ThreadedLLM() as model:
        yield model


@pytest.fixture(scope="module", params=["sqlite", "memory"])
def server(
    llm: ThreadedLLM, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[ServerProcess]:
    directory = tmp_path_factory.mktemp("retention_paused")
    kind = 'kind = "memory"' if request.param == "memory" else ""
    extra = f"""
[server.store]
finished_task_ttl = {TTL}
prune_interval = 0.3
{kind}

[server.team_tools]
files_root = "{directory / "files"}"
"""
    with review_server(
        directory, llm.base_url, ["alice"], prefix="keep", team_tools=TEAM, extra=extra
    ) as srv:
        yield srv


def test_a_paused_tasks_upload_outlives_the_ttl(server: ServerProcess, llm: ThreadedLLM) -> None:
    token = f"keep-{uuid.uuid4().hex[:8]}"
    llm.queue(
        reply(tool_call("send_email", {"to": "a@example.org", "body": "see file"})),
        match=lambda r: mentions(r, token),
    )
    headers = auth(server.keys["alice"])
    with httpx.Client(base_url=server.base_url, headers=headers, timeout=120) as client:
        upload = {"filename": "keep.txt", "content": "needed after the review"}
        held = client.post("/message", json={"body": token, "attachments": [upload]})
        assert held.status_code == 200, held.text
        task_id = held.json()["task_id"]
        call_id = json.loads(held.json()["response"])[0]["tool_call_id"]
        record = client.get("/task", params={"task_id": task_id})
        found = [
            part
            for part in json.dumps(record.json()).replace('"', " ").replace("\\", " ").split()
            if part.startswith("att_")
        ]
        assert found, record.text
        attachment = found[0].rstrip(",.)")
        # (The model's first call can take longer than the TTL: the upload is already older.)
        first = client.get(f"/attachments/{attachment}")
        assert first.status_code == 200, f"the paused task's upload was removed: {first.text}"
        # Well past the TTL: many retention rounds run while the task waits for review.
        deadline = time.monotonic() + TTL * 4
        while time.monotonic() < deadline:
            assert client.get("/task", params={"task_id": task_id}).status_code == 200
            kept = client.get(f"/attachments/{attachment}")
            assert kept.status_code == 200, f"the paused task's upload was removed: {kept.text}"
            time.sleep(0.2)
        llm.queue(
            reply(tool_call("task_complete", {"finish_message": f"sent {token}"})),
            match=lambda r: mentions(r, token),
        )
        decided = client.post(
            "/message",
            json={
                "task_id": task_id,
                "resume_from": "action_review",
                "kwargs": {"decisions": [{"tool_call_id": call_id, "type": "accept"}]},
            },
        )
        assert decided.status_code == 200, decided.text
        assert decided.json()["response"] == f"sent {token}"


def test_a_finished_tasks_upload_stays_as_long_as_the_task(
    server: ServerProcess, llm: ThreadedLLM
) -> None:
    """Paused past the TTL, then finished: the task is kept `finished_task_ttl` from then on,
    and so is what it needs to be read whole (its upload). The upload went at the first
    retention round after the task finished (its own time was older than the TTL), while
    `GET /task` still listed it."""
    token = f"keep-{uuid.uuid4().hex[:8]}"
    llm.queue(
        reply(tool_call("send_email", {"to": "a@example.org", "body": "see file"})),
        match=lambda r: mentions(r, token),
    )
    headers = auth(server.keys["alice"])
    with httpx.Client(base_url=server.base_url, headers=headers, timeout=120) as client:
        upload = {"filename": "keep.txt", "content": "read after the task ended"}
        held = client.post("/message", json={"body": token, "attachments": [upload]})
        assert held.status_code == 200, held.text
        task_id = held.json()["task_id"]
        call_id = json.loads(held.json()["response"])[0]["tool_call_id"]
        record = client.get("/task", params={"task_id": task_id})
        text = json.dumps(record.json()).replace('"', " ").replace("\\", " ")
        attachment = next(p for p in text.split() if p.startswith("att_")).rstrip(",.)")
        time.sleep(TTL * 1.5)  # the upload's own time gets older than the TTL
        llm.queue(
            reply(tool_call("task_complete", {"finish_message": f"sent {token}"})),
            match=lambda r: mentions(r, token),
        )
        decided = client.post(
            "/message",
            json={
                "task_id": task_id,
                "resume_from": "action_review",
                "kwargs": {"decisions": [{"tool_call_id": call_id, "type": "accept"}]},
            },
        )
        assert decided.status_code == 200, decided.text
        # Until the task itself is removed, its upload is there (read first: a task
        # removed between the two reads took its upload with it).
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            kept = client.get(f"/attachments/{attachment}").status_code
            listed = client.get("/task", params={"task_id": task_id}).status_code
            if listed == 404:
                break
            assert kept == 200, "the finished task is listed but its upload was removed"
            time.sleep(0.05)
        else:
            raise AssertionError("the finished task was not removed after its TTL")
