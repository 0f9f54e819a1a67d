"""A task held for review with the caller's upload: the steps the retention tests share
(`test_retention_paused_uploads`, `test_retention_paused_restart`). The review swarm's model
(support.review_swarm, answered by the scripted model server) asks for the reviewed
`send_email` action, so the task pauses; `finish` accepts the call and the model ends it."""

from __future__ import annotations

import json
import time
import uuid

import httpx

from support.llm_thread import ThreadedLLM, mentions
from support.scripted_llm import reply, tool_call

TEAM = ["reply_wait", "threads", "inbox", "files"]


class PausedUpload:
    """One task waiting for review, holding an upload (`attachment`)."""

    def __init__(self, client: httpx.Client, llm: ThreadedLLM, content: str) -> None:
        self.client = client
        self.llm = llm
        self.token = token = f"keep-{uuid.uuid4().hex[:8]}"
        llm.queue(
            reply(tool_call("send_email", {"to": "a@example.org", "body": "see file"})),
            match=lambda r: mentions(r, token),
        )
        upload = {"filename": "keep.txt", "content": content}
        held = client.post("/message", json={"body": token, "attachments": [upload]})
        assert held.status_code == 200, held.text
        self.task_id: str = held.json()["task_id"]
        self.call_id: str = json.loads(held.json()["response"])[0]["tool_call_id"]
        self.attachment = attachment_of(self.record())

    def record(self) -> httpx.Response:
        return self.client.get("/task", params={"task_id": self.task_id})

    def upload_status(self) -> int:
        return self.client.get(f"/attachments/{self.attachment}").status_code

    def stays_for(self, seconds: float) -> None:
        """For `seconds`, the task is listed and its upload readable at every look."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            assert self.record().status_code == 200
            assert self.upload_status() == 200, "the paused task's upload was removed"
            time.sleep(0.2)

    def finish(self) -> None:
        """Accept the reviewed call; the model then completes the task."""
        token = self.token
        self.llm.queue(
            reply(tool_call("task_complete", {"finish_message": f"sent {token}"})),
            match=lambda r: mentions(r, token),
        )
        decided = self.client.post(
            "/message",
            json={
                "task_id": self.task_id,
                "resume_from": "action_review",
                "kwargs": {"decisions": [{"tool_call_id": self.call_id, "type": "accept"}]},
            },
        )
        assert decided.status_code == 200, decided.text
        assert decided.json()["response"] == f"sent {token}"


def attachment_of(record: httpx.Response) -> str:
    """The id of the first attachment a task record mentions."""
    text = json.dumps(record.json()).replace('"', " ").replace("\\", " ")
    found = [part for part in text.split() if part.startswith("att_")]
    assert found, record.text
    return found[0].rstrip(",.)")
