"""End-to-end against a real `mail server`: size limits and strict task state (issue 12).

Request bodies above ``max_request_body`` are refused with 413 while they are read; message
bodies above ``max_message_body`` too; ``GET /tasks`` lists summaries in pages; a running
task, an unpaused breakpoint, a second concurrent resume and a reclaimed task id are 409s;
unknown call ids and non-UUID task ids are 400s.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from server_fixtures import (
    ServerProcess,
    auth,
    create_key,
    free_port,
    keyed_stub_server,
    parse_sse_stream,
    post_as,
    write_config,
    write_stub_swarms,
)

pytestmark = pytest.mark.timeout(120)

REQUEST_LIMIT = 64 * 1024
MESSAGE_LIMIT = 20_000


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    extra = f"max_request_body = {REQUEST_LIMIT}\nmax_message_body = {MESSAGE_LIMIT}\n"
    keys = {"alice": ("user", "alice"), "bob": ("user", "bob")}
    with keyed_stub_server(tmp_path_factory.mktemp("limits"), keys, extra=extra) as proc:
        yield proc


def resume(server: ServerProcess, who: str, task_id: str, result: object) -> httpx.Response:
    return post_as(
        server,
        who,
        {
            "body": "",
            "task_id": task_id,
            "resume_from": "breakpoint_tool_call",
            "kwargs": {"breakpoint_tool_call_result": result},
        },
    )


# ------------------------------------------------------------------------------ item 5: sizes


def test_a_declared_oversized_body_is_413_naming_the_limit(server: ServerProcess) -> None:
    payload = {"body": "x" * (REQUEST_LIMIT + 10)}
    r = post_as(server, "alice", payload)
    assert r.status_code == 413
    assert str(REQUEST_LIMIT) in r.json()["detail"]
    assert "max_request_body" in r.json()["detail"]


async def test_a_client_that_sends_a_declared_oversized_body_whole_reads_the_413(
    server: ServerProcess,
) -> None:
    """A client that writes its whole body before reading (httpx's async client, the A2A
    SDK's) gets the 413, not a reset connection: the server reads the rest and drops it."""
    body = b'{"body": "' + b"x" * (8 * 1024 * 1024) + b'"}'
    headers = {**auth(server.keys["alice"]), "Content-Type": "application/json"}
    async with httpx.AsyncClient(timeout=30) as client:
        for _ in range(3):
            r = await client.post(f"{server.base_url}/message", content=body, headers=headers)
            assert r.status_code == 413, r.text
            assert "max_request_body" in r.json()["detail"]


def _peak_rss_kib(server: ServerProcess) -> int:
    assert server.proc is not None
    status = Path(f"/proc/{server.proc.pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM")))


def test_a_chunked_oversized_body_is_cut_off_while_reading(server: ServerProcess) -> None:
    total = 400 * 65536  # 25 MiB without a Content-Length: counted as it arrives

    def chunks():
        for _ in range(400):
            yield b"x" * 65536

    before = _peak_rss_kib(server)
    try:
        r = httpx.post(
            f"{server.base_url}/message",
            content=chunks(),
            headers={**auth(server.keys["alice"]), "Content-Type": "application/json"},
            timeout=30,
        )
    except httpx.HTTPError:
        pass  # the server may close the connection while we are still sending
    else:
        assert r.status_code == 413, r.text
        assert str(REQUEST_LIMIT) in r.json()["detail"]
    # The body was never held whole: the server's peak memory grew by far less than it.
    assert (_peak_rss_kib(server) - before) * 1024 < total // 3
    assert httpx.get(f"{server.base_url}/health", timeout=5).status_code == 200


def test_a_message_body_over_the_cap_is_413(server: ServerProcess) -> None:
    r = post_as(server, "alice", {"body": "y" * (MESSAGE_LIMIT + 1)})
    assert r.status_code == 413
    assert f"the limit is {MESSAGE_LIMIT}" in r.json()["detail"]
    # Just under the cap is fine (the echo adds a short prefix and must fit too).
    assert post_as(server, "alice", {"body": "y" * (MESSAGE_LIMIT - 100)}).status_code == 200


def test_tasks_are_summaries_in_pages_and_task_keeps_the_events(server: ServerProcess) -> None:
    ids = [post_as(server, "bob", {"body": f"page {i}"}).json()["task_id"] for i in range(5)]
    headers = auth(server.keys["bob"])
    seen: list[str] = []
    cursor: str | None = None
    for _ in range(10):
        params = {"limit": "2", **({"cursor": cursor} if cursor else {})}
        r = httpx.get(f"{server.base_url}/tasks", params=params, headers=headers, timeout=10)
        assert r.status_code == 200
        page = r.json()
        assert len(page) <= 2
        for record in page.values():
            assert "events" not in record and record["event_count"] > 0
        seen.extend(page)
        cursor = r.headers.get("X-Next-Cursor")
        if cursor is None:
            break
        assert 'rel="next"' in r.headers["Link"]
    assert sorted(seen) == sorted(ids)  # every task exactly once, over three pages
    assert seen == list(reversed(ids))  # newest first
    one = httpx.get(f"{server.base_url}/task", params={"task_id": ids[0]}, headers=headers)
    assert one.json()["events"]
    bad = httpx.get(f"{server.base_url}/tasks", params={"limit": "0"}, headers=headers)
    assert bad.status_code == 400 and "parameter 'limit'" in bad.json()["detail"]
    bad = httpx.get(f"{server.base_url}/tasks", params={"cursor": "%%%"}, headers=headers)
    assert bad.status_code == 400 and "parameter 'cursor'" in bad.json()["detail"]


# ------------------------------------------------------------------------------ item 7: resumes


def test_resume_of_a_task_not_paused_is_409_in_every_form(server: ServerProcess) -> None:
    done = post_as(server, "alice", {"body": "finished"}).json()
    for form in ({"content": "x"}, [{"call_id": "c", "content": "x"}], "plain"):
        r = resume(server, "alice", done["task_id"], form)
        assert r.status_code == 409, r.text
        assert "not paused at a breakpoint" in r.json()["detail"]


def test_a_second_resume_of_one_pause_is_409(server: ServerProcess) -> None:
    paused = post_as(server, "alice", {"body": "BREAKPOINT once"}).json()
    assert resume(server, "alice", paused["task_id"], {"content": "ok"}).status_code == 200
    for form in ({"content": "again"}, [{"content": "again"}], "again"):
        r = resume(server, "alice", paused["task_id"], form)
        assert r.status_code == 409, r.text


def test_unknown_or_missing_call_ids_are_400_naming_them(server: ServerProcess) -> None:
    paused = post_as(server, "bob", {"body": "BREAKPOINT2"}).json()
    calls = [c["call_id"] for c in json.loads(paused["response"])]
    r = resume(server, "bob", paused["task_id"], [{"call_id": "bogus", "content": "?"}])
    assert r.status_code == 400
    detail = r.json()["detail"]
    assert "unknown call_id(s): bogus" in detail
    assert f"no result for call_id(s): {calls[0]}, {calls[1]}" in detail
    r = resume(server, "bob", paused["task_id"], [{"call_id": calls[0], "content": "one"}])
    assert r.status_code == 400 and calls[1] in r.json()["detail"]
    # Nothing was consumed by the refused attempts: a complete answer still resumes.
    good = [{"call_id": c, "content": f"r{i}"} for i, c in enumerate(calls)]
    r = resume(server, "bob", paused["task_id"], good)
    assert r.status_code == 200 and r.json()["response"] == "reviewed: r0 | r1"


async def test_concurrent_resumes_exactly_one_wins(server: ServerProcess) -> None:
    paused = post_as(server, "alice", {"body": "BREAKPOINT race"}).json()
    payload = {
        "body": "",
        "task_id": paused["task_id"],
        "resume_from": "breakpoint_tool_call",
        "kwargs": {"breakpoint_tool_call_result": {"content": "SLEEP 1 raced"}},
    }
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
        answers = await asyncio.gather(
            *(
                client.post("/message", json=payload, headers=auth(server.keys["alice"]))
                for _ in range(4)
            )
        )
    codes = sorted(r.status_code for r in answers)
    assert codes == [200, 409, 409, 409], [r.text for r in answers]


# ------------------------------------------------------------------------------ item 8: running


async def test_a_message_to_a_running_task_is_409(server: ServerProcess) -> None:
    task_id = str(uuid.uuid4())
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
        headers = auth(server.keys["bob"])
        first = asyncio.create_task(
            client.post(
                "/message", json={"body": "SLEEP 1.5 slow", "task_id": task_id}, headers=headers
            )
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # until the task exists and runs
            r = await client.get("/task", params={"task_id": task_id}, headers=headers)
            if r.status_code == 200 and r.json()["is_running"]:
                break
            await asyncio.sleep(0.05)
        second = await client.post(
            "/message", json={"body": "me too", "task_id": task_id}, headers=headers
        )
        assert second.status_code == 409
        assert "still running" in second.json()["detail"]
        stream = await client.post(
            "/message",
            json={"body": "me too", "task_id": task_id, "stream": True},
            headers=headers,
        )
        assert stream.status_code == 409
        assert (await first).json()["response"] == "echo[bob]: slow"
    # Once finished, the task takes a new message again (multi-turn).
    assert post_as(server, "bob", {"body": "COUNT", "task_id": task_id}).status_code == 200


async def test_concurrent_first_messages_with_one_new_task_id(server: ServerProcess) -> None:
    task_id = str(uuid.uuid4())
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
        answers = await asyncio.gather(
            *(
                client.post(
                    "/message",
                    json={"body": "SLEEP 0.5 hi", "task_id": task_id, "stream": stream},
                    headers=auth(server.keys["alice"]),
                )
                for stream in (False, True, False, True)
            )
        )
    assert sorted(r.status_code for r in answers) == [200, 409, 409, 409]


# ------------------------------------------------------------------------------ item 10: ids


@pytest.mark.parametrize("bad", ["fed-1", "*", "z" * 50_000, "not-a-uuid-but-36-characters-long!!"])
def test_task_ids_must_be_uuids(server: ServerProcess, bad: str) -> None:
    r = post_as(server, "alice", {"body": "x", "task_id": bad})
    assert r.status_code == 400
    assert "parameter 'task_id' must be a UUID" in r.json()["detail"]
    assert len(r.text) < 1000  # a 100k id is not echoed back whole


def test_a_stream_to_an_unknown_task_id_is_a_clean_404(server: ServerProcess) -> None:
    missing = str(uuid.uuid4())
    with httpx.stream(
        "POST",
        f"{server.base_url}/message",
        json={"body": "x", "task_id": missing, "resume_from": "user_response", "stream": True},
        headers=auth(server.keys["alice"]),
        timeout=10,
    ) as r:
        assert r.status_code == 404
        assert not list(parse_sse_stream(r))


# ------------------------------------------------------------------------------ item 9: reclaim


def test_a_reclaimed_task_id_is_never_replaced(tmp_path: Path) -> None:
    write_stub_swarms(tmp_path)
    port = free_port()
    config = write_config(tmp_path, port=port)
    text = config.read_text().replace("instance_idle_timeout = 0", "instance_idle_timeout = 0.5")
    config.write_text(text)
    key = create_key(tmp_path / "registries" / "keys.json", "user", "sleepy")
    # Without a store the conversation goes with the instance (SQLite, the default, keeps it).
    args = ["--config", str(config), "--store", "memory"]
    proc = ServerProcess(tmp_path, port, args=args).start()
    try:
        first = httpx.post(
            f"{proc.base_url}/message", json={"body": "keep me"}, headers=auth(key), timeout=30
        ).json()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            status = httpx.get(f"{proc.base_url}/status", headers=auth(key), timeout=5).json()
            if not status["user_mail_ready"]:
                break
            time.sleep(0.1)
        else:
            raise AssertionError("the idle instance was not reclaimed")
        r = httpx.post(
            f"{proc.base_url}/message",
            json={"body": "replace it?", "task_id": first["task_id"]},
            headers=auth(key),
            timeout=30,
        )
        assert r.status_code == 409 and "reclaimed" in r.json()["detail"]
        record = httpx.get(
            f"{proc.base_url}/task", params={"task_id": first["task_id"]}, headers=auth(key)
        ).json()
        assert record["completed"] is True
        assert any("keep me" in e["data"] for e in record["events"])
    finally:
        assert proc.stop() == 0, proc.logs()
