"""`[server.store] max_stored_bytes_per_caller` bounds what a running task stores, not only
when a task may start: a real `mail server` on SQLite and on PostgreSQL, its agent driven by
the scripted LLM through the real stdlib `write_file`, the team tool `post_to_thread` and a
breakpoint tool resumed over HTTP.

Before, with a 20 MiB quota one task stored 180 MiB with `write_file` (plus 61 MiB of files
no quota counted and no retention removed), one task posting to a thread 95 MiB, and a
paused task resumed 40 times with 1 MB results 76 MiB. Now the action (or the resume) that
would pass the quota fails with a text naming the setting, which the agent sees as its tool
result (the caller: a 429, or the task's answer once it is stopped), and what the database
and the file root hold stays within the quota and one turn's worth. The files a task wrote
go when retention or `mail db-prune` removes the task.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from server_fixtures import ServerProcess, server_env
from support.llm_thread import ThreadedLLM
from support.quota_swarm import (
    MIB,
    file_bytes,
    files_in,
    headers,
    quota_server,
    stored_bytes,
    tool_results,
)
from support.scripted_llm import ScriptedRequest, reply, tool_call
from support.store_backends import DurableStore, scratch_store_fixture

pytestmark = pytest.mark.timeout(600)

durable_store = scratch_store_fixture("mail_quota_live")

QUOTA = 3 * MIB
SIZE = 256 * 1024
SETTING = "max_stored_bytes_per_caller"


@pytest.fixture
def llm() -> Iterator[ThreadedLLM]:
    with ThreadedLLM() as model:
        yield model


def _stopped_within_quota(
    store: DurableStore, server: ServerProcess, answer: httpx.Response
) -> list[str]:
    """The caller was told why the task stopped, its events say which call was refused and
    why, and the database and the files hold the quota and at most one turn's worth more.
    The refusals, as the task's events show them."""
    assert answer.status_code == 200, answer.text
    said = answer.json()["response"]
    assert said.startswith("Task stopped:") and f"{SETTING} = {QUOTA}" in said, said
    shown = httpx.get(
        f"{server.base_url}/task",
        params={"task_id": answer.json()["task_id"]},
        headers=headers(server),
        timeout=60,
    ).json()
    told = [json.loads(e["data"])["description"] for e in shown["events"]]
    refused = [t for t in told if SETTING in t and re.search(r"not (written|run|stored)\b", t)]
    assert refused, told
    time.sleep(1.0)  # the task's last writes reach the database (write-behind)
    held = stored_bytes(store) + file_bytes(store)
    assert held <= QUOTA + 3 * SIZE, f"{held / MIB:.1f} MiB stored with a quota of 3 MiB"
    return refused


def test_write_file_stops_at_the_quota(durable_store: DurableStore, llm: ThreadedLLM) -> None:
    for n in range(30):
        llm.queue(tool_call("write_file", {"path": f"f{n}.txt", "content": chr(97 + n) * SIZE}))
    with quota_server(durable_store, llm.base_url, quota=QUOTA) as server:
        answer = httpx.post(
            f"{server.base_url}/message",
            json={"body": "write"},
            headers=headers(server),
            timeout=300,
        )
        _stopped_within_quota(durable_store, server, answer)
        # The agent saw the first refusal as its call's result.
        seen = [r for r in tool_results(llm.requests()) if SETTING in r]
        assert seen and seen[0].startswith("SUCCESS: Error: not written: "), seen
        written = files_in(durable_store)
        assert 2 <= len(written) < QUOTA // SIZE, written
        # The file's content is stored once in the task's events (its tool_call), not again
        # in the action_call that names it; the action_call reads as it was streamed.
        sizes = durable_store.fetch(
            "SELECT event_type, length(event_data) AS n FROM task_events WHERE event_type = $1",
            "action_call",
        )
        assert sizes and max(row["n"] for row in sizes) < 2000, sizes
        shown = httpx.get(
            f"{server.base_url}/task",
            params={"task_id": answer.json()["task_id"]},
            headers=headers(server),
            timeout=60,
        ).json()
        calls = [json.loads(e["data"]) for e in shown["events"] if e["event"] == "action_call"]
        assert len(calls) >= len(written)
        args = json.dumps({"path": "f0.txt", "content": "a" * SIZE})
        assert calls[0]["description"] == (
            f"agent supervisor executing action tool: write_file with args: {args}"
        )


def _thread_id(request: ScriptedRequest) -> str:
    found = re.findall(r"th_[0-9a-f]+", " ".join(tool_results([request])))
    assert found, tool_results([request])
    return found[-1]


def test_thread_posts_stop_at_the_quota(durable_store: DurableStore, llm: ThreadedLLM) -> None:
    llm.queue(tool_call("create_thread", {"title": "notes", "participants": ["worker"]}))
    for _ in range(30):
        llm.queue(
            lambda request: reply(
                tool_call("post_to_thread", {"thread_id": _thread_id(request), "body": "p" * SIZE})
            )
        )
    with quota_server(durable_store, llm.base_url, quota=QUOTA) as server:
        answer = httpx.post(
            f"{server.base_url}/message",
            json={"body": "post"},
            headers=headers(server),
            timeout=300,
        )
        _stopped_within_quota(durable_store, server, answer)
        # (the thread's first post says who takes part)
        posts = durable_store.fetch("SELECT count(*) AS n FROM team_posts")[0]["n"]
        assert 2 <= posts < QUOTA // SIZE, posts
        # A post's body is stored once in the task's events (its tool_call), not again in
        # the thread_post event, which reads as it was streamed.
        sizes = durable_store.fetch(
            "SELECT length(event_data) AS n FROM task_events WHERE event_type = $1", "thread_post"
        )
        assert len(sizes) == posts - 1 and max(row["n"] for row in sizes) < 2000, sizes
        shown = httpx.get(
            f"{server.base_url}/task",
            params={"task_id": answer.json()["task_id"]},
            headers=headers(server),
            timeout=60,
        ).json()
        bodies = [
            json.loads(e["data"])["extra_data"]["body"]
            for e in shown["events"]
            if e["event"] == "thread_post"
        ]
        assert bodies == ["p" * SIZE] * len(sizes)


def test_breakpoint_resumes_stop_at_the_quota(
    durable_store: DurableStore, llm: ThreadedLLM
) -> None:
    for _ in range(30):
        llm.queue(tool_call("read_directory", {"path": "."}))  # a breakpoint: pauses the task
    with quota_server(durable_store, llm.base_url, quota=QUOTA, breakpoint=True) as server:
        with httpx.Client(base_url=server.base_url, headers=headers(server), timeout=300) as c:
            paused = c.post("/message", json={"body": "list"})
            assert paused.status_code == 200, paused.text
            task_id = paused.json()["task_id"]
            resume = {
                "body": "here",
                "task_id": task_id,
                "resume_from": "breakpoint_tool_call",
                "kwargs": {"breakpoint_tool_call_result": "r" * SIZE},
            }
            answers = [c.post("/message", json=resume) for _ in range(20)]
            codes = [a.status_code for a in answers]
            assert 429 in codes, codes
            first = codes.index(429)
            assert set(codes[:first]) == {200} and 2 <= first < QUOTA // SIZE, codes
            assert f"{SETTING} = {QUOTA}" in answers[first].json()["detail"]
            # Still paused: a resume that fits would continue it.
            assert c.get("/task", params={"task_id": task_id}).json()["pending_breakpoints"]
    held = stored_bytes(durable_store)
    assert held <= QUOTA + 3 * SIZE, f"{held / MIB:.1f} MiB stored with a quota of 3 MiB"


def _prune(store: DurableStore) -> str:
    where = (
        ["--database-url", store.database_url or ""]
        if store.kind == "postgres"
        else ["--sqlite", str(store.sqlite_path)]
    )
    done = subprocess.run(
        [sys.executable, "-m", "mail.cli", "db-prune", "--older-than", "0", *where],
        cwd=store.directory,
        env=server_env(store.env),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _write_and_answer(llm: ThreadedLLM, name: str) -> None:
    llm.queue(tool_call("write_file", {"path": name, "content": f"kept by {name}"}))
    llm.queue(tool_call("task_complete", {"finish_message": f"wrote {name}"}))


def test_files_go_with_their_task(durable_store: DurableStore, llm: ThreadedLLM) -> None:
    """Retention removes a finished task's files with it, `mail db-prune` too; a file the
    task wrote that someone changed since, and a file no task wrote, stay."""
    retention = "finished_task_ttl = 1\nprune_interval = 0.3\n"
    with quota_server(durable_store, llm.base_url, quota=QUOTA, extra=retention) as server:
        folder = durable_store.directory / "files" / "user-alice"
        folder.mkdir(parents=True)
        (folder / "mine.txt").write_text("not a task's", encoding="utf-8")
        with httpx.Client(base_url=server.base_url, headers=headers(server), timeout=120) as c:
            _write_and_answer(llm, "a.txt")
            _write_and_answer(llm, "b.txt")
            first = c.post("/message", json={"body": "one"}).json()
            c.post("/message", json={"body": "two"})
            assert (folder / "a.txt").exists() and (folder / "b.txt").exists()
            (folder / "b.txt").write_text("changed by a person", encoding="utf-8")
            deadline = time.monotonic() + 60
            while (folder / "a.txt").exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            assert not (folder / "a.txt").exists(), server.logs()
            gone = c.get("/task", params={"task_id": first["task_id"]})
            assert gone.status_code == 404
    assert (folder / "b.txt").read_text() == "changed by a person"
    assert (folder / "mine.txt").exists()

    keep = "finished_task_ttl = 0\n"  # the server keeps everything: db-prune removes it
    with quota_server(durable_store, llm.base_url, quota=QUOTA, extra=keep) as server:
        _write_and_answer(llm, "c.txt")
        httpx.post(
            f"{server.base_url}/message",
            json={"body": "three"},
            headers=headers(server),
            timeout=120,
        )
        assert (folder / "c.txt").exists()
    out = _prune(durable_store)
    assert "1 file(s)" in out, out
    assert not (folder / "c.txt").exists()
    assert (folder / "mine.txt").exists() and (folder / "b.txt").exists()
