"""The debug bridge `POST /responses` honours `Idempotency-Key` like `POST /message`: a retry
with its key gets the first answer and starts no second task; the key belongs to its caller;
another body under the key is a 422; without `--debug` the route is a 404 before any check,
a key's included; `MAILClient.debug_post_responses` sends a key and retries a dropped
connection with it. A real `mail server --debug` on the stub swarms.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from mail.client import MAILClient
from mail.client_config import ClientConfig
from server_fixtures import ROOT_ALICE_BOB, ServerProcess, auth, keyed_stub_server
from support.resetting_proxy import ResettingProxy

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    directory = tmp_path_factory.mktemp("responses-keys")
    with keyed_stub_server(directory, ROOT_ALICE_BOB, args=("--debug",)) as proc:
        yield proc


def _respond(server: ServerProcess, who: str, key: str, text: str) -> httpx.Response:
    body = {"input": [{"role": "user", "content": text}], "tools": []}
    headers = {**auth(server.keys[who]), "Idempotency-Key": f'"{key}"'}
    return httpx.post(f"{server.base_url}/responses", json=body, headers=headers, timeout=30)


def _task_ids(server: ServerProcess, who: str) -> set[str]:
    r = httpx.get(f"{server.base_url}/tasks", headers=auth(server.keys[who]), timeout=30)
    assert r.status_code == 200, r.text
    tasks = r.json()
    return set(tasks) if isinstance(tasks, dict) else {t["task_id"] for t in tasks}


def test_a_retried_response_with_its_key_runs_once(server: ServerProcess) -> None:
    key = str(uuid.uuid4())
    before = _task_ids(server, "alice")
    first = _respond(server, "alice", key, "plan tomorrow")
    assert first.status_code == 200, first.text
    assert first.json()["output"][0]["content"][0]["text"] == "echo[alice]: plan tomorrow"
    again = _respond(server, "alice", key, "plan tomorrow")
    assert again.status_code == 200 and again.headers.get("idempotent-replayed") == "true"
    assert again.content == first.content  # the same bytes: its id, its created_at
    assert _task_ids(server, "alice") - before == {first.json()["id"]}  # one task, not two

    other = _respond(server, "alice", key, "plan the day after")
    assert other.status_code == 422, other.text

    # The same key of another caller is that caller's own: a task of its own.
    bobs = _respond(server, "bob", key, "plan tomorrow")
    assert bobs.status_code == 200 and "idempotent-replayed" not in bobs.headers
    assert bobs.json()["id"] != first.json()["id"]
    assert bobs.json()["output"][0]["content"][0]["text"] == "echo[bob]: plan tomorrow"


async def test_mailclient_retries_a_dropped_response_with_its_key(server: ServerProcess) -> None:
    """The client's `debug_post_responses` (the REPL's `responses`) starts a task like
    `post_message`: a connection reset after the request reached the server is sent again
    with the same key, and the caller gets the one task's answer."""
    config = ClientConfig(timeout=30, retries=3, retry_backoff=0.05, retry_max_delay=0.2)
    before = _task_ids(server, "bob")
    async with ResettingProxy(server.port) as proxy:
        async with MAILClient(
            f"http://127.0.0.1:{proxy.port}", server.keys["bob"], config=config
        ) as client:
            answer = await client.debug_post_responses(
                [{"role": "user", "content": "SLEEP 0.5 book a table"}], []
            )
        assert proxy.connections >= 2  # the reset one and the retry
    assert answer.output_text == "echo[bob]: book a table"
    assert _task_ids(server, "bob") - before == {answer.id}  # one task, not two


def test_without_debug_a_keyed_request_is_404_before_any_check(tmp_path: Path) -> None:
    with keyed_stub_server(tmp_path, ROOT_ALICE_BOB) as plain:
        r = httpx.post(
            f"{plain.base_url}/responses",
            json={"input": [], "tools": []},
            headers={"Idempotency-Key": '"k"'},  # (and no credentials)
            timeout=30,
        )
        assert r.status_code == 404 and r.json()["detail"] == "Not found"


def test_a_keyed_continuation_is_replayed_after_its_task_ended(server: ServerProcess) -> None:
    """A keyed continuation (``previous_response_id``) of a task that ended, and its repeat:
    the first gets the task's answer, the repeat the same bytes. Found by a review attack:
    the route's "previous response not found" check looked only at the instance, where an
    ended task no longer is (it is in the store), so a continuation of an ended task got
    404, and so did the repeat of a keyed one that had answered 200 (the route takes its
    key only later, in `run_message`, so the check answered before the key could)."""
    headers = {**auth(server.keys["alice"]), "Idempotency-Key": f'"{uuid.uuid4()}"'}
    url = f"{server.base_url}/responses"
    paused = httpx.post(
        url,
        json={"input": [{"role": "user", "content": "BREAKPOINT check it"}], "tools": []},
        headers=auth(server.keys["alice"]),
        timeout=30,
    )
    assert paused.status_code == 200, paused.text
    calls = [o for o in paused.json()["output"] if o["type"] == "function_call"]
    assert calls, paused.text
    resumed = {
        "input": [
            {"type": "function_call_output", "call_id": c["call_id"], "output": "approved"}
            for c in calls
        ],
        "tools": [],
        "previous_response_id": paused.json()["id"],
    }
    first = httpx.post(url, json=resumed, headers=headers, timeout=30)
    assert first.status_code == 200, first.text
    again = httpx.post(url, json=resumed, headers=headers, timeout=30)
    assert again.status_code == 200, again.text
    assert again.headers.get("idempotent-replayed") == "true"
    assert again.content == first.content

    # The task ended: a new message continues it (keyed or not), under the same id.
    before = _task_ids(server, "alice")
    more = {
        "input": [{"role": "user", "content": "one more"}],
        "tools": [],
        "previous_response_id": paused.json()["id"],
    }
    headers["Idempotency-Key"] = f'"{uuid.uuid4()}"'
    cont = httpx.post(url, json=more, headers=headers, timeout=30)
    assert cont.status_code == 200, cont.text
    assert cont.json()["id"] == paused.json()["id"]
    assert cont.json()["output"][0]["content"][0]["text"] == "echo[alice]: one more"
    repeat = httpx.post(url, json=more, headers=headers, timeout=30)
    assert repeat.status_code == 200 and repeat.content == cont.content, repeat.text
    assert _task_ids(server, "alice") == before  # no task of its own
