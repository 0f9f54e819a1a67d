"""A model's reply whose JSON holds a lone surrogate (`"\\ud800"`, which Python's JSON decoder
accepts) reaches the caller as an answer, not as a 500: a real `mail server` (SQLite), the
scripted model server. Found while testing event runs (the store drops the events carrying
it: neither SQLite nor PostgreSQL takes such text).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest

from server_fixtures import ServerProcess, auth
from support.llm_thread import ThreadedLLM, mentions
from support.review_server import review_server
from support.scripted_llm import reply, text, tool_call

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def llm() -> Iterator[ThreadedLLM]:
    with ThreadedLLM() as model:
        yield model


@pytest.fixture(scope="module")
def server(llm: ThreadedLLM, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    directory = tmp_path_factory.mktemp("lone_surrogate")
    with review_server(directory, llm.base_url, ["alice"], prefix="sur") as srv:
        yield srv


def test_a_lone_surrogate_in_a_models_answer_is_not_a_500(
    server: ServerProcess, llm: ThreadedLLM
) -> None:
    token = f"sur-{uuid.uuid4().hex[:8]}"
    llm.queue(
        reply(tool_call("task_complete", {"finish_message": "done \ud800 here"})),
        match=lambda r: mentions(r, token),
    )
    with httpx.Client(
        base_url=server.base_url, headers=auth(server.keys["alice"]), timeout=120
    ) as client:
        answered = client.post("/message", json={"body": token})
        assert answered.status_code == 200, answered.text
        assert answered.json()["response"].startswith("done ")
        assert client.get("/tasks").status_code == 200


def test_a_lone_surrogate_in_a_models_text_reply_is_stored_and_answered(
    server: ServerProcess, llm: ThreadedLLM
) -> None:
    """A plain text reply (no tool call) with a lone surrogate: the answer carries U+FFFD in
    its place, and the task's record, events and the caller's listing read back whole."""
    token = f"sur-{uuid.uuid4().hex[:8]}"
    llm.queue(reply(text(f"plain {token} \ud800 reply")), match=lambda r: mentions(r, token))
    llm.queue(
        reply(tool_call("task_complete", {"finish_message": f"closing {token}"})),
        match=lambda r: mentions(r, token),
    )
    with httpx.Client(
        base_url=server.base_url, headers=auth(server.keys["alice"]), timeout=120
    ) as client:
        answered = client.post("/message", json={"body": token})
        assert answered.status_code == 200, answered.text
        task_id = answered.json()["task_id"]
        record = client.get("/task", params={"task_id": task_id})
        assert record.status_code == 200, record.text
        assert "\ufffd reply" in record.text or "\\ufffd reply" in record.text, record.text
        assert client.get("/tasks").status_code == 200
    assert "Traceback" not in server.logs(), server.logs()
