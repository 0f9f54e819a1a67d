"""Quotas and paged operator views against a real `mail server` (issue 26, part A).

``GET /tasks/all`` answers summaries in pages (it used to return every task's full event log:
179 MB for 31 tasks), concurrent event streams per caller are bounded (429 with Retry-After),
and the server's peak RSS stays within ``RSS_BOUND_MIB`` of where it was.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from server_fixtures import ServerProcess, auth, keyed_stub_server, post_as
from support.abuse_harness import Memory

pytestmark = pytest.mark.timeout(240)

RSS_BOUND_MIB = 30
KEYS = {
    "admin": ("admin", "root"),
    "alice": ("user", "alice"),
    "bob": ("user", "bob"),
    "carol": ("user", "carol"),
    "dave": ("user", "dave"),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    extra = (
        "task_message_limit = 0\nmax_event_streams_per_caller = 3\n"
        "max_paused_tasks_per_caller = 3\n"
    )
    with keyed_stub_server(tmp_path_factory.mktemp("quotas"), KEYS, extra=extra) as proc:
        yield proc


def test_tasks_all_pages_summaries_whatever_the_event_logs_weigh(server: ServerProcess) -> None:
    assert server.proc is not None
    made = set()
    for who in ("alice", "bob") * 4:  # 8 tasks of ~2 MB of events each
        r = post_as(server, who, {"body": "CHATTY 10 200000"}, timeout=120)
        assert r.status_code == 200 and "chatted 10" in r.text, r.text[:300]
        made.add(r.json()["task_id"])
    admin = auth(server.keys["admin"])
    memory = Memory(server.proc.pid).start()
    seen: list[str] = []
    cursor = None
    sizes = []
    with httpx.Client(base_url=server.base_url, headers=admin, timeout=60) as client:
        while True:
            params = {"limit": "3", **({"cursor": cursor} if cursor else {})}
            r = client.get("/tasks/all", params=params)
            assert r.status_code == 200, r.text
            sizes.append(len(r.content))
            page = r.json()["tasks"]
            assert len(page) <= 3
            assert all("events" not in t and t["event_count"] > 20 for t in page)
            seen += [t["task_id"] for t in page]
            cursor = r.headers.get("X-Next-Cursor")
            if cursor is None:
                break
            assert 'rel="next"' in r.headers["Link"]
        memory.stop()
        full = client.get("/tasks/all", params={"task_id": seen[0]}).json()["tasks"]
    print("GET /tasks/all pages: bytes", sizes, "RSS before/peak/after MiB", memory.row())
    assert made <= set(seen) and len(seen) == len(set(seen))
    assert max(sizes) < 64 * 1024
    assert len(full) == 1 and len(json.dumps(full[0]["events"])) > 1_000_000
    assert memory.growth < RSS_BOUND_MIB, memory.row()


def _open_stream(
    client: httpx.Client, key: str, body: str, task_id: str | None = None
) -> httpx.Response:
    payload = {"body": body, "stream": True, **({"task_id": task_id} if task_id else {})}
    request = client.build_request("POST", "/message", json=payload, headers=auth(key))
    return client.send(request, stream=True)


def test_event_streams_per_caller_are_bounded_with_429_and_retry_after(
    server: ServerProcess,
) -> None:
    assert server.proc is not None
    alice, bob = server.keys["alice"], server.keys["bob"]
    with httpx.Client(base_url=server.base_url, timeout=60) as client:
        before = len(client.get("/tasks", headers=auth(alice)).json())
        ids = [str(uuid.uuid4()) for _ in range(3)]
        held = [_open_stream(client, alice, "SLEEP 60 held", task_id) for task_id in ids]
        try:
            assert [r.status_code for r in held] == [200, 200, 200]
            refused = _open_stream(client, alice, "SLEEP 60 one too many")
            refused.read()
            assert refused.status_code == 429, refused.text
            assert int(refused.headers["Retry-After"]) > 0
            assert "max_event_streams_per_caller = 3" in refused.json()["detail"]
            # Resubscribing counts too, and the refused POST started no task.
            again = client.get("/task/events", params={"task_id": ids[0]}, headers=auth(alice))
            assert again.status_code == 429
            assert len(client.get("/tasks", headers=auth(alice)).json()) == before + 3
            # Another caller is not affected.
            other = _open_stream(client, bob, "quick")
            other.read()
            assert other.status_code == 200 and "task_complete" in other.text
        finally:
            for response in held:
                response.close()
        # A closed stream gives its slot back (the server notices the hang-up): following a
        # task that still runs works again. (A new task would not: alice's three run on,
        # and running tasks count towards max_paused_tasks_per_caller.)
        deadline = time.monotonic() + 20
        while True:
            request = client.build_request(
                "GET", "/task/events", params={"task_id": ids[0]}, headers=auth(alice)
            )
            reopened = client.send(request, stream=True)
            status = reopened.status_code
            reopened.close()
            if status == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert status == 200, status


def test_paused_tasks_per_caller_are_bounded(server: ServerProcess) -> None:
    paused = []
    for question in ("first", "second", "third"):
        r = post_as(server, "carol", {"body": f"BREAKPOINT {question}"})
        assert r.status_code == 200, r.text
        paused.append(r.json()["task_id"])
    refused = post_as(server, "carol", {"body": "a fourth task"})
    assert refused.status_code == 429, refused.text
    assert int(refused.headers["Retry-After"]) > 0
    assert "max_paused_tasks_per_caller = 3" in refused.json()["detail"]
    streamed = post_as(server, "carol", {"body": "a streamed one", "stream": True})
    assert streamed.status_code == 429
    # Another caller is not affected; resuming a paused task is always allowed, and frees a place.
    assert post_as(server, "bob", {"body": "hello"}).status_code == 200
    resumed = post_as(
        server,
        "carol",
        {
            "body": "",
            "task_id": paused[0],
            "resume_from": "breakpoint_tool_call",
            "kwargs": {"breakpoint_tool_call_result": {"content": "ok"}},
        },
    )
    assert resumed.status_code == 200, resumed.text
    assert post_as(server, "carol", {"body": "now there is room"}).status_code == 200


def test_paused_quota_also_counts_finished_tasks_that_are_continued(
    server: ServerProcess,
) -> None:
    """Continuing finished tasks with a message that pauses them must not go past the quota
    (it did: six finished tasks continued with BREAKPOINT made six paused tasks of two)."""
    headers = auth(server.keys["admin"])  # the admin's own instance: no other test pauses it

    def post(payload: dict[str, object]) -> httpx.Response:
        return httpx.post(f"{server.base_url}/message", json=payload, headers=headers, timeout=30)

    finished = [str(uuid.uuid4()) for _ in range(4)]
    for task_id in finished:
        assert post({"body": "hello", "task_id": task_id}).status_code == 200
    codes = [post({"body": "BREAKPOINT", "task_id": t}).status_code for t in finished]
    assert codes == [200, 200, 200, 429], codes
    tasks = httpx.get(f"{server.base_url}/tasks", headers=headers).json()
    paused = [t for t in tasks.values() if t.get("pending_breakpoints")]
    assert len(paused) == 3, tasks
    # A message to a paused task closes its pause: never refused, and it frees a place.
    closed = post({"body": "never mind", "task_id": finished[0]})
    assert closed.status_code == 200, closed.text
    assert post({"body": "BREAKPOINT", "task_id": finished[3]}).status_code == 200


def test_concurrent_new_tasks_cannot_all_pause_past_the_quota(server: ServerProcess) -> None:
    """Ten tasks started at once that each pause a second later: the running ones count
    (they may pause), so at most the quota's 3 end up paused (all ten did before)."""

    def start(_: int) -> httpx.Response:
        return post_as(server, "dave", {"body": "SLEEP 1 BREAKPOINT"}, timeout=60)

    with ThreadPoolExecutor(max_workers=10) as pool:
        answers = list(pool.map(start, range(10)))
    codes = sorted(r.status_code for r in answers)
    assert set(codes) <= {200, 429}, [r.text for r in answers]
    assert 1 <= codes.count(200) <= 3, codes
    refused = next(r for r in answers if r.status_code == 429)
    assert "max_paused_tasks_per_caller = 3" in refused.json()["detail"]
    tasks = httpx.get(
        f"{server.base_url}/tasks", headers=auth(server.keys["dave"]), timeout=30
    ).json()
    paused = [t for t in tasks.values() if t.get("pending_breakpoints")]
    assert len(paused) == codes.count(200) <= 3, tasks
