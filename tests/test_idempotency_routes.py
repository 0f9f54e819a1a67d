"""``Idempotency-Key`` on a real `mail server` (stub agents): header syntax, the per-caller
bound, expiry, and the other routes that start or change work (POST /task/cancel,
POST /swarms, POST /swarms/load) replaying their first outcome. A2A: a SendMessage repeated
with one messageId (the A2A SDK's own client) makes one task."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from a2a.types.a2a_pb2 import TaskState

from mail.server.idempotency import fingerprint
from server_fixtures import ROOT_ALICE_BOB, ServerProcess, auth, keyed_stub_server
from support.a2a_clients import a2a_client, collect, message

pytestmark = pytest.mark.timeout(300)

TTL = 2.0  # seconds: short, so expiry is seen within the test


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    extra = f"max_idempotency_keys_per_caller = 3\nidempotency_key_ttl = {TTL}\nmax_idempotency_key_length = 64"
    with keyed_stub_server(
        tmp_path_factory.mktemp("idem_routes"),
        {**ROOT_ALICE_BOB, "carol": ("user", "carol")},
        extra=extra,
    ) as srv:
        yield srv


def post(
    server: ServerProcess, who: str, path: str, body: Any, key: str | None, **extra: str
) -> httpx.Response:
    headers = {**auth(server.keys[who]), **extra}
    if key is not None:
        headers["Idempotency-Key"] = key
    return httpx.post(f"{server.base_url}{path}", json=body, headers=headers, timeout=30)


def tasks_of(server: ServerProcess, who: str) -> dict[str, Any]:
    result: dict[str, Any] = httpx.get(
        f"{server.base_url}/tasks", headers=auth(server.keys[who]), timeout=30
    ).json()
    return result


def test_quoted_and_bare_keys_are_the_same_key(server: ServerProcess) -> None:
    """The draft's form is an RFC 8941 string (quoted); the same characters unquoted (what
    people type in curl) name the same key."""
    unique = uuid.uuid4().hex
    a = post(server, "alice", "/message", {"body": "same"}, f'"{unique}"')
    b = post(server, "alice", "/message", {"body": "same"}, unique)
    assert a.status_code == b.status_code == 200
    assert b.json()["task_id"] == a.json()["task_id"]
    assert b.headers["idempotent-replayed"] == "true"
    escaped = post(server, "alice", "/message", {"body": "esc"}, '"a\\"b"')
    assert escaped.status_code == 200, escaped.text


@pytest.mark.parametrize(
    "raw,detail",
    [
        ('"unterminated', "quoted string"),
        ('"bad \\n escape"', "quoted string"),
        ('"é"', "quoted string"),
        ('""', "quoted string"),
        ('"' + "x" * 65 + '"', "max_idempotency_key_length"),
    ],
)
def test_malformed_keys_are_400_and_start_nothing(
    server: ServerProcess, raw: str, detail: str
) -> None:
    before = len(tasks_of(server, "bob"))
    r = httpx.post(
        f"{server.base_url}/message",
        json={"body": "x"},
        headers={**auth(server.keys["bob"]).copy(), "Idempotency-Key": raw.encode("utf-8")},  # type: ignore[dict-item]
        timeout=30,
    )
    assert r.status_code == 400, r.text
    assert detail in r.json()["detail"]
    assert len(tasks_of(server, "bob")) == before


def test_two_key_headers_are_400(server: ServerProcess) -> None:
    r = httpx.post(
        f"{server.base_url}/message",
        json={"body": "x"},
        headers=[
            ("Authorization", f"Bearer {server.keys['bob']}"),
            ("Idempotency-Key", '"one"'),
            ("Idempotency-Key", '"two"'),
        ],
        timeout=30,
    )
    assert r.status_code == 400 and "one Idempotency-Key" in r.json()["detail"]


def test_fingerprint_ignores_key_order_and_spacing() -> None:
    a = fingerprint("POST", "/message", b'{"body": "x", "subject": "s"}')
    assert a == fingerprint("post", "/message", b'{"subject":"s","body":"x"}')
    assert a != fingerprint("POST", "/message", b'{"subject":"s","body":"y"}')
    assert a != fingerprint("POST", "/other", b'{"subject":"s","body":"x"}')


def test_fingerprint_digest_is_the_stored_one() -> None:
    """Keys live a day in the store, across restarts and upgrades: a retry is compared with
    the digest its first request stored, so the digest's recipe never changes (sha256 of
    "METHOD path\\n" then the canonical body, or the raw bytes of a body that is not JSON)."""
    import hashlib

    def stored(method: str, path: str, canonical: bytes) -> str:
        digest = hashlib.sha256(f"{method} {path}\n".encode())
        digest.update(canonical)
        return digest.hexdigest()

    body = b'{"subject": "s", "body": "x\\u00e9", "n": [1, 2.5, null]}'
    canonical = '{"body":"x\u00e9","n":[1,2.5,null],"subject":"s"}'.encode()
    assert fingerprint("post", "/message", body) == stored("POST", "/message", canonical)
    for raw in (b"", b"   ", b"not json", b'{"a": 1'):
        assert fingerprint("POST", "/task/cancel", raw) == stored("POST", "/task/cancel", raw)
    # Paths past the kept prefixes (ids in them) hash alike.
    for n in range(100):
        path = f"/webhooks/wh_{n}"
        assert fingerprint("DELETE", path, b"") == stored("DELETE", path, b"")


def test_keys_per_caller_are_bounded_and_expire(server: ServerProcess) -> None:
    """At the bound (3 here) a caller is not refused: its oldest answered key is forgotten
    (a repeat of that request runs again); keys still under way refuse (the store tests)."""
    who = "carol"
    first: dict[int, str] = {}
    for n in range(4):
        r = post(server, who, "/message", {"body": f"n{n}"}, f'"bound-{n}"')
        assert r.status_code == 200, r.text
        first[n] = r.json()["task_id"]
    kept = post(server, who, "/message", {"body": "n3"}, '"bound-3"')
    assert kept.headers.get("idempotent-replayed") == "true"
    assert kept.json()["task_id"] == first[3]
    # Without a key the caller is not limited.
    assert post(server, who, "/message", {"body": "unkeyed"}, None).status_code == 200
    forgotten = post(server, who, "/message", {"body": "n0"}, '"bound-0"')
    assert forgotten.status_code == 200 and "idempotent-replayed" not in forgotten.headers
    assert forgotten.json()["task_id"] != first[0]
    tasks = len(tasks_of(server, who))
    time.sleep(TTL + 0.5)
    # Expired: the keys are free again, and the same key with the same body runs anew.
    again = post(server, who, "/message", {"body": "n0"}, '"bound-0"')
    assert again.status_code == 200 and "idempotent-replayed" not in again.headers
    assert len(tasks_of(server, who)) == tasks + 1


def test_task_cancel_replays_its_first_outcome(server: ServerProcess) -> None:
    task_id = str(uuid.uuid4())
    with httpx.stream(
        "POST",
        f"{server.base_url}/message",
        json={"body": "SLEEP 30 long", "task_id": task_id, "stream": True},
        headers=auth(server.keys["bob"]),
        timeout=30,
    ) as response:
        assert response.status_code == 200
        next(response.iter_lines())
    key = f'"{uuid.uuid4()}"'
    first = post(server, "bob", "/task/cancel", {"task_id": task_id}, key)
    assert first.status_code == 200 and first.json()["cancelled"] is True, first.text
    again = post(server, "bob", "/task/cancel", {"task_id": task_id}, key)
    assert again.json() == first.json()  # "cancelled": true, as the first answer said
    assert again.headers["idempotent-replayed"] == "true"
    plain = post(server, "bob", "/task/cancel", {"task_id": task_id}, None)
    assert plain.json()["cancelled"] is False  # without the key: a second cancel
    # A refused first attempt (404) is not stored: the key is free again at once.
    missing = post(server, "bob", "/task/cancel", {"task_id": str(uuid.uuid4())}, '"cancel-404"')
    assert missing.status_code == 404
    reused = post(server, "bob", "/task/cancel", {"task_id": task_id}, '"cancel-404"')
    assert reused.status_code == 200 and "idempotent-replayed" not in reused.headers


def test_register_and_load_swarm_replay(server: ServerProcess) -> None:
    key = f'"{uuid.uuid4()}"'
    bad = {"name": "", "base_url": ""}
    first = post(server, "admin", "/swarms", bad, key)
    assert first.status_code == 400  # refused: nothing stored, the key is free
    assert post(server, "admin", "/swarms", bad, key).status_code == 400
    swarm = httpx.get(
        f"{server.base_url}/swarm", headers=auth(server.keys["admin"]), timeout=30
    ).json()
    assert swarm["name"] == "stub"
    from support.stub_agents import stub_swarms_json

    text = json.dumps(stub_swarms_json("stub")[0])
    load_key = f'"{uuid.uuid4()}"'
    loaded = post(server, "admin", "/swarms/load", {"json": text}, load_key)
    assert loaded.status_code == 200, loaded.text
    replayed = post(server, "admin", "/swarms/load", {"json": text}, load_key)
    assert replayed.json() == loaded.json() and replayed.headers["idempotent-replayed"] == "true"


async def test_a2a_send_repeated_with_one_message_id_makes_one_task(server: ServerProcess) -> None:
    request = message("hello again")
    before = set(tasks_of(server, "alice"))
    async with a2a_client(server.base_url, server.keys["alice"], streaming=False) as client:
        first = (await collect(client, request))[-1].task
        second = (await collect(client, request))[-1].task  # the same messageId
        other = (await collect(client, message("hello again")))[-1].task  # a new messageId
    assert first.status.state == second.status.state == TaskState.TASK_STATE_COMPLETED
    assert second.id == first.id and second.context_id == first.context_id
    assert other.id != first.id
    new = set(tasks_of(server, "alice")) - before
    assert new == {first.context_id, other.context_id}  # MAIL tasks: one per message
    # Streamed, the repeat gets the same task (its final state) rather than a new run.
    streamed = message("stream me")
    async with a2a_client(server.base_url, server.keys["alice"]) as client:
        events = await collect(client, streamed)
        repeat = await collect(client, streamed)
    ids = {e.task.id for e in events if e.HasField("task")} | {
        e.status_update.task_id for e in events if e.HasField("status_update")
    }
    repeat_ids = {e.task.id for e in repeat if e.HasField("task")}
    assert len(ids) == 1 and repeat_ids == ids
    # Another caller's message with the same id is that caller's own message.
    async with a2a_client(server.base_url, server.keys["bob"], streaming=False) as client:
        bobs = (await collect(client, request))[-1].task
    assert bobs.id != first.id


def test_a_repeat_gets_its_own_answer_after_the_task_went_on(server: ServerProcess) -> None:
    key = f'"{uuid.uuid4()}"'
    first = post(server, "bob", "/message", {"body": "COUNT"}, key)
    assert first.status_code == 200 and first.json()["response"] == "turn 1"
    task_id = first.json()["task_id"]
    later = post(
        server,
        "bob",
        "/message",
        {"body": "COUNT", "task_id": task_id, "resume_from": "user_response"},
        f'"{uuid.uuid4()}"',
    )
    assert later.json()["response"] == "turn 2"
    again = post(server, "bob", "/message", {"body": "COUNT"}, key)
    assert again.json()["response"] == "turn 1" and again.content == first.content


def test_an_answer_is_found_among_the_task_events() -> None:
    """A repeat's answer rebuilt from the task: the first stored task_complete after the
    request's first event is its own (the task's latest answer when it is the only one)."""
    from mail.server.message_replay import _answer_text, _answers

    def done(n: int, body: str) -> dict[str, Any]:
        data = json.dumps({"description": f"response: '{body}'", "task_id": "t"})
        return {"event": "task_complete", "data": data, "id": str(n)}

    other = {"event": "new_message", "data": "{}", "id": "1"}
    assert [_answer_text(a) for a in _answers([other, done(2, "first")])] == ["first"]
    found = _answers([other, done(2, "it's first"), other, done(4, "second"), done(5, "x")])
    assert [_answer_text(a) for a in found] == ["it's first", "second"]  # (two at most)
    closing = {"event": "task_complete", "data": "{}", "id": None}  # a stream's closing event
    assert [_answer_text(a) for a in _answers([done(2, "first"), closing])] == ["first"]
    assert _answers([other, closing]) == []
    unreadable = {"event": "task_complete", "data": "{}", "id": "3"}
    assert _answer_text(_answers([unreadable])[0]) is None


@pytest.fixture(scope="module")
def bounded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    extra = "max_idempotency_keys_per_caller = 20"
    with keyed_stub_server(
        tmp_path_factory.mktemp("idem_bound_busy"), {"dave": ("user", "dave")}, extra=extra
    ) as srv:
        yield srv


async def test_a_busy_caller_at_the_bound_is_never_refused(bounded: ServerProcess) -> None:
    """4 requests of one caller always under way at once, 240 in all, each with a new key
    (as MAILClient sends them), with room for 20 keys: every request is answered, the oldest
    answered keys making room. (A recount that saw 19 stored keys plus those being stored
    at that moment refused with 429 and evicted nothing.)"""
    statuses: list[int] = []
    async with httpx.AsyncClient(
        base_url=bounded.base_url, headers=auth(bounded.keys["dave"]), timeout=60
    ) as client:

        async def worker(w: int) -> None:
            for n in range(60):
                r = await client.post(
                    "/message",
                    json={"body": f"w{w} n{n}"},
                    headers={"Idempotency-Key": f'"{uuid.uuid4()}"'},
                )
                statuses.append(r.status_code)
                assert r.status_code == 200, r.text

        await asyncio.gather(*(worker(w) for w in range(4)))
    assert statuses == [200] * 240
