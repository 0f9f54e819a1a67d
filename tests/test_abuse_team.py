"""Team tools under abusive inputs, against a real `mail server` with the memory store and
with PostgreSQL (issue 26, part A).

Thread titles, posts, attachment descriptions and file names are bounded before anything is
stored; threads and attachment bytes per instance are quotas (the agent's tool result and the
caller's HTTP error name the setting); stored posts per thread and inbox entries per agent
keep the newest ones in both stores; the server's peak RSS stays within ``RSS_BOUND_MIB``.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from server_fixtures import ServerProcess, auth, post_as
from support.abuse_harness import Memory, abuse_server, steps_body
from support.pg_schema import BASE_URL, scratch_schema, with_search_path

pytestmark = pytest.mark.timeout(240)

RSS_BOUND_MIB = 30
BODY_LIMIT = 50_000
ATTACHMENT = 900
QUOTA = 3 * ATTACHMENT + 100  # three attachments fit, the fourth does not


KEYS = {"alice": ("user", "alice"), "bob": ("user", "bob"), "carol": ("user", "carol")}


def _extra(directory: Path) -> str:
    return f"""max_message_body = {BODY_LIMIT}
task_repeat_limit = 0

[server.team_tools]
files_root = "{directory / "files"}"
attachments_dir = "{directory / "attachments"}"
max_attachment_bytes = 1000
max_threads = 5
max_posts_per_thread = 4
max_inbox_entries = 6
max_attachment_bytes_per_instance = {QUOTA}
"""


@pytest.fixture(scope="module", params=["memory", "postgres"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    directory = tmp_path_factory.mktemp(f"team-{request.param}")
    if request.param == "memory":
        with abuse_server(directory, extra=_extra(directory), keys=KEYS) as proc:
            yield proc
        return
    with scratch_schema("abuse_team") as schema:
        env = {"DATABASE_URL": with_search_path(BASE_URL, schema)}
        with abuse_server(directory, extra=_extra(directory), env=env, keys=KEYS) as proc:
            yield proc


def run_steps(server: ServerProcess, who: str, *steps: dict[str, Any]) -> dict[str, Any]:
    r = post_as(server, who, {"body": steps_body(*steps)}, timeout=120)
    assert r.status_code == 200, r.text
    body = r.json()["response"]
    try:
        return dict(json.loads(body))
    except ValueError:
        raise AssertionError(f"the task did not end with a summary: {body[:2000]}") from None


def threads_of(server: ServerProcess, who: str) -> list[dict[str, Any]]:
    r = httpx.get(f"{server.base_url}/threads", headers=auth(server.keys[who]), timeout=30)
    assert r.status_code == 200, r.text
    return list(r.json()["threads"])


def create(title: Any = "plans", **extra: Any) -> dict[str, Any]:
    return {"tool": "create_thread", "args": {"title": title, "participants": ["worker"], **extra}}


def test_titles_and_posts_are_bounded_before_they_are_stored(server: ServerProcess) -> None:
    before = len(threads_of(server, "bob"))
    long_title = run_steps(server, "bob", create({"$big": 300_000}))
    assert "max_title_chars" in long_title["first_error"], long_title
    long_first = run_steps(server, "bob", create(initial_message={"$big": BODY_LIMIT + 1}))
    assert "max_message_body" in long_first["first_error"], long_first
    assert len(threads_of(server, "bob")) == before
    long_post = run_steps(
        server,
        "bob",
        create("short"),
        {"tool": "post_to_thread", "args": {"thread_id": "$TH", "body": {"$big": BODY_LIMIT + 1}}},
    )
    assert "max_message_body" in long_post["first_error"], long_post
    (thread,) = [t for t in threads_of(server, "bob") if t["title"] == "short"]
    detail = httpx.get(
        f"{server.base_url}/threads/{thread['thread_id']}",
        headers=auth(server.keys["bob"]),
        timeout=30,
    ).json()
    assert all(len(m["body"]) <= BODY_LIMIT for m in detail["messages"])


def test_threads_per_instance_are_a_quota_and_posts_keep_the_newest(
    server: ServerProcess,
) -> None:
    assert server.proc is not None
    memory = Memory(server.proc.pid).start()
    outcome = run_steps(server, "alice", dict(create(), repeat=300))
    memory.stop()
    print("300 create_thread calls: RSS before/peak/after MiB", memory.row())
    assert outcome["calls"] == 300 and outcome["errors"] == 295, outcome
    assert "max_threads = 5" in outcome["first_error"]
    assert len(threads_of(server, "alice")) == 5
    assert memory.growth < RSS_BOUND_MIB, memory.row()
    # Another caller's instance has its own quota.
    assert run_steps(server, "bob", create("bob's own"))["errors"] == 0

    thread_id = threads_of(server, "alice")[0]["thread_id"]
    posts = [
        {"tool": "post_to_thread", "args": {"thread_id": thread_id, "body": f"post {i}"}}
        for i in range(10)
    ]
    assert run_steps(server, "alice", *posts)["errors"] == 0
    detail = httpx.get(
        f"{server.base_url}/threads/{thread_id}",
        headers=auth(server.keys["alice"]),
        timeout=30,
    ).json()
    assert [m["body"] for m in detail["messages"]] == [f"post {i}" for i in range(6, 10)]
    # The worker's inbox keeps its newest entries only (the unread counts show them).
    assert sum(detail["unread"].values()) <= 6


def _agent_file(server: ServerProcess, who: str) -> None:
    folder = server.directory / "files" / f"user-{who}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "data.bin").write_bytes(b"x" * ATTACHMENT)


def transfer(**extra: Any) -> dict[str, Any]:
    return {
        "tool": "transfer_file",
        "args": {"recipient": "user", "source_path": "data.bin", **extra},
    }


def test_attachment_bytes_per_instance_are_a_quota(server: ServerProcess) -> None:
    _agent_file(server, "alice")
    named = run_steps(server, "alice", transfer(destination_filename="n" * 300))
    assert "max_filename_chars" in named["first_error"], named
    described = run_steps(server, "alice", transfer(description={"$big": 5000}))
    assert "max_description_chars" in described["first_error"], described
    outcome = run_steps(server, "alice", dict(transfer(), repeat=5))
    assert outcome["errors"] == 2, outcome
    assert "max_attachment_bytes_per_instance" in outcome["first_error"]
    # The caller's own uploads count against the same quota: 413 naming the setting.
    upload = {
        "filename": "more.bin",
        "content_base64": base64.b64encode(b"y" * ATTACHMENT).decode(),
    }
    r = post_as(server, "alice", {"body": "hi", "attachments": [upload]})
    assert r.status_code == 413, r.text
    assert "max_attachment_bytes_per_instance" in r.json()["detail"]
    # Long upload names and descriptions are 400s naming the field and the setting.
    for field, setting in (
        ("filename", "max_filename_chars"),
        ("description", "max_description_chars"),
    ):
        bad = {**upload, field: "z" * 3000}
        r = post_as(server, "bob", {"body": "hi", "attachments": [bad]})
        assert r.status_code == 400, r.text
        assert f"attachments[0].{field}" in r.json()["detail"] and setting in r.json()["detail"]


def test_quotas_hold_under_concurrent_tasks_of_one_caller(server: ServerProcess) -> None:
    """The quota check and the write it allows are one step: with PostgreSQL, 12 concurrent
    tasks each creating a thread stored 10 threads of a quota of 3 (and uploads alike)."""
    headers = auth(server.keys["carol"])
    upload = {
        "filename": "c.bin",
        "content_base64": base64.b64encode(b"c" * ATTACHMENT).decode(),
    }

    async def burst() -> tuple[list[int], list[int]]:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=120) as client:

            async def task(body: dict[str, Any]) -> httpx.Response:
                return await client.post("/message", json=body, headers=headers)

            creates = [task({"body": steps_body(create(f"c{i}"))}) for i in range(10)]
            uploads = [task({"body": "hi", "attachments": [upload]}) for _ in range(6)]
            made = await asyncio.gather(*creates)
            sent = await asyncio.gather(*uploads)
            return [r.status_code for r in made], [r.status_code for r in sent]

    made, sent = asyncio.run(burst())
    assert made == [200] * 10, made
    assert len(threads_of(server, "carol")) == 5  # max_threads
    assert sorted(sent) == [200, 200, 200, 413, 413, 413], sent  # three fit the quota
