"""Repeats of a keyed ``POST /message`` answered by its completed task (SQLite: no outcome row,
the key and the task are the outcome) after the task was continued in ways that store no
``task_complete`` event of their own, against a real `mail server` (stub agents, no model):

- a later message into the task *streamed* (its closing ``task_complete`` is sent, not
  stored): the repeat of the first message was answered with the later message's answer (the
  task's current ``response``), not its own;
- a later message into the task that *timed out* (a ``task_error`` event; the task's answer
  became the timeout message): the repeat was answered with the timeout text.
"""

from __future__ import annotations

import contextlib
import json
import random
import signal
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.support.pg_schema import BASE_URL, scratch_schema, with_search_path

from server_fixtures import ServerProcess, auth, keyed_stub_server, parse_sse_stream

pytestmark = pytest.mark.timeout(180)


def _post(server: ServerProcess, payload: dict[str, Any], key: str | None) -> httpx.Response:
    headers = auth(server.keys["alice"])
    if key is not None:
        headers["Idempotency-Key"] = f'"{key}"'
    return httpx.post(f"{server.base_url}/message", json=payload, headers=headers, timeout=60)


def _stream(server: ServerProcess, payload: dict[str, Any]) -> list[Any]:
    """An unkeyed streamed POST /message read to its closing event."""
    events: list[Any] = []
    body = {**payload, "stream": True}
    with httpx.stream(
        "POST",
        f"{server.base_url}/message",
        json=body,
        headers=auth(server.keys["alice"]),
        timeout=60,
    ) as response:
        assert response.status_code == 200, response.read()
        for event in parse_sse_stream(response):
            if event.event != "ping":
                events.append(event)
            if event.event in ("task_complete", "task_error") and event.id is None:
                break
    return events


def _same(first: httpx.Response, again: httpx.Response) -> None:
    assert again.status_code == first.status_code, again.text
    assert again.headers.get("idempotent-replayed") == "true", again.headers
    assert again.content == first.content, (first.text, again.text)


def test_a_repeat_after_a_streamed_continuation_gets_its_own_answer(tmp_path: Path) -> None:
    with keyed_stub_server(tmp_path, {"alice": ("user", "alice")}) as server:
        key = str(uuid.uuid4())
        payload = {"body": 'first "quoted" ünïcode\nline'}
        first = _post(server, payload, key)
        assert first.status_code == 200, first.text
        task_id = first.json()["task_id"]
        events = _stream(server, {"body": "COUNT later", "task_id": task_id})
        assert events[-1].event == "task_complete", events
        assert events[-1].json()["response"] == "turn 2", events[-1].data
        _same(first, _post(server, payload, key))
        _same(first, _post(server, payload, key))  # (from its outcome row now)
        # The message did not run again: the task saw two caller messages, not three.
        count = _post(server, {"body": "COUNT", "task_id": task_id}, None)
        assert count.json()["response"] == "turn 3", count.text


def test_a_repeat_after_a_timed_out_continuation_gets_its_own_answer(tmp_path: Path) -> None:
    with keyed_stub_server(tmp_path, {"alice": ("user", "alice")}) as server:
        key = str(uuid.uuid4())
        payload = {"body": "first 'answer'"}
        first = _post(server, payload, key)
        assert first.status_code == 200, first.text
        task_id = first.json()["task_id"]
        late = _post(server, {"body": "SLEEP 3 late", "task_id": task_id, "timeout": 0.5}, None)
        assert late.status_code == 200, late.text
        assert late.json()["response"] != first.json()["response"]
        _same(first, _post(server, payload, key))


def _keyed_stream(server: ServerProcess, payload: dict[str, Any], key: str) -> tuple[str, bool]:
    """A keyed streamed POST /message: (its closing event's data, whether replayed)."""
    headers = {**auth(server.keys["alice"]), "Idempotency-Key": f'"{key}"'}
    with httpx.stream(
        "POST",
        f"{server.base_url}/message",
        json={**payload, "stream": True},
        headers=headers,
        timeout=60,
    ) as response:
        assert response.status_code == 200, response.read()
        for event in parse_sse_stream(response):
            if event.event in ("task_complete", "task_error") and event.id is None:
                return event.data, response.headers.get("idempotent-replayed") == "true"
    raise AssertionError("the stream ended without its closing event")


def _untimed(data: str) -> dict[str, Any]:
    record = json.loads(data)
    record.pop("timestamp", None)
    return dict(record)


def _kill_and_restart(server: ServerProcess) -> None:
    assert server.proc is not None
    server.proc.send_signal(signal.SIGKILL)
    assert server.wait_exit(60) == -signal.SIGKILL
    server.start()


@pytest.mark.parametrize("seed", [1, 2])
def test_continuations_repeated_in_any_order_after_a_kill_9(tmp_path: Path, seed: int) -> None:
    """Several keyed messages into one task (plain, streamed, a pause and its resume, one
    with its events), the server killed right after the last answer and started again: each
    repeat gets its own first answer, in any order, and nothing runs again."""
    rng = random.Random(seed)
    with keyed_stub_server(tmp_path, {"alice": ("user", "alice")}) as server:
        first_key, first_payload = str(uuid.uuid4()), {"body": "COUNT 'a' \"ü\"\n" + "x" * 5000}
        first = _post(server, first_payload, first_key)
        assert first.status_code == 200, first.text
        task_id = first.json()["task_id"]
        plain: list[tuple[dict[str, Any], str, httpx.Response]] = [
            (first_payload, first_key, first)
        ]
        streamed_key = str(uuid.uuid4())
        streamed_payload = {"body": "COUNT streamed", "task_id": task_id}
        closing, replayed = _keyed_stream(server, streamed_payload, streamed_key)
        assert not replayed
        for payload in (
            {"body": "COUNT c", "task_id": task_id, "show_events": True},
            {"body": "BREAKPOINT stop?", "task_id": task_id},
            {
                "body": "",
                "task_id": task_id,
                "resume_from": "breakpoint_tool_call",
                "kwargs": {"breakpoint_tool_call_result": {"content": "ok"}},
            },
            {"body": "COUNT e", "task_id": task_id},
        ):
            key = str(uuid.uuid4())
            answer = _post(server, payload, key)
            assert answer.status_code == 200, answer.text
            plain.append((payload, key, answer))
        _kill_and_restart(server)
        # The repeats come while a later message runs the task again.
        later: list[httpx.Response] = []
        runner = threading.Thread(
            target=lambda: later.append(
                _post(server, {"body": "SLEEP 3 COUNT", "task_id": task_id}, None)
            ),
            daemon=True,
        )
        runner.start()
        deadline = time.monotonic() + 60
        while True:
            listed = httpx.get(f"{server.base_url}/tasks", headers=auth(server.keys["alice"]))
            if (listed.json().get(task_id) or {}).get("is_running"):
                break
            assert time.monotonic() < deadline, listed.text
            time.sleep(0.05)
        checks: list[Any] = [*plain, "stream"]
        rng.shuffle(checks)
        for check in checks:
            if check == "stream":
                again, replayed = _keyed_stream(server, streamed_payload, streamed_key)
                # (A stream's repeat is attached to the task: its closing event is new.)
                assert replayed and _untimed(again) == _untimed(closing), (closing, again)
            else:
                payload, key, answer = check
                _same(answer, _post(server, payload, key))
        runner.join(60)
        # Nothing ran again: the later message is the task's next caller message after the
        # last keyed one, and the next one after it.
        last = int(plain[-1][2].json()["response"].split()[1])
        assert later[0].json()["response"] == f"turn {last + 1}", later[0].text
        after = _post(server, {"body": "COUNT", "task_id": task_id}, None)
        assert after.json()["response"] == f"turn {last + 2}", after.text


BOUND = 4


def _eventually(server: ServerProcess, payload: dict[str, Any], key: str) -> httpx.Response:
    """A keyed repeat asked again while it is told 409 with Retry-After (still running)."""
    deadline = time.monotonic() + 90
    while True:
        answer = _post(server, payload, key)
        if answer.status_code != 409 or "retry-after" not in answer.headers:
            return answer
        assert time.monotonic() < deadline, answer.text
        time.sleep(0.2)


def _post_lost(server: ServerProcess, payload: dict[str, Any], key: str) -> None:
    """A first request whose server is killed under it."""
    with contextlib.suppress(httpx.HTTPError):
        _post(server, payload, key)


def test_keys_of_tasks_continued_after_a_kill_9_survive_a_burst_at_the_bound(
    tmp_path: Path,
) -> None:
    """Two keyed tasks running when the server is killed; the restarted server continues
    them (no request holds their keys now). A burst of new keys at the bound, from alice and
    from bob, must not forget them: their repeats get the answers once the tasks end, and the
    tasks ran to one answer each."""
    extra = f"max_idempotency_keys_per_caller = {BOUND}\n"
    with keyed_stub_server(
        tmp_path, {"alice": ("user", "alice"), "bob": ("user", "bob")}, extra=extra
    ) as server:
        slow = [(str(uuid.uuid4()), {"body": f"SLEEP 4 slow {n}"}) for n in range(2)]
        threads = [
            threading.Thread(target=_post_lost, args=(server, payload, key), daemon=True)
            for key, payload in slow
        ]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 60
        while True:  # both tasks run
            listed = httpx.get(f"{server.base_url}/tasks", headers=auth(server.keys["alice"]))
            if sum(bool(t.get("is_running")) for t in listed.json().values()) == 2:
                break
            assert time.monotonic() < deadline, listed.text
            time.sleep(0.05)
        told = [_post(server, payload, key) for key, payload in slow]  # (stored: told of)
        assert all(t.status_code == 409 for t in told), [t.text for t in told]
        task_ids = [t.json()["task_id"] for t in told]
        _kill_and_restart(server)
        for thread in threads:
            thread.join(10)
        for n in range(3 * BOUND):  # a burst of new keys, one after the other, and bob's
            answer = _post(server, {"body": f"quick {n}"}, str(uuid.uuid4()))
            assert answer.status_code == 200, answer.text
            bob = httpx.post(
                f"{server.base_url}/message",
                json={"body": f"bob {n}"},
                headers={**auth(server.keys["bob"]), "Idempotency-Key": f'"{uuid.uuid4()}"'},
                timeout=60,
            )
            assert bob.status_code == 200, bob.text
        for (key, payload), task_id in zip(slow, task_ids, strict=True):
            again = _eventually(server, payload, key)
            assert again.status_code == 200, again.text
            assert again.json()["task_id"] == task_id, again.text
            assert again.json()["response"] == f"echo[alice]: slow {task_ids.index(task_id)}"
            _same(again, _post(server, payload, key))


def test_every_kind_of_first_answer_is_repeated_after_a_clean_stop(tmp_path: Path) -> None:
    """An error, a timeout, an answer with its events, and answers with quotes, backslashes,
    line separators, emoji and a trailing quote: each repeat (before and after a clean stop)
    gets the first answer's bytes, and nothing runs again."""
    with keyed_stub_server(tmp_path, {"alice": ("user", "alice")}) as server:
        payloads = [
            {"body": "FAIL now"},
            {"body": "SLEEP 3 late", "timeout": 0.5},
            {"body": "with events", "show_events": True},
            {"body": "quote' \\ \u2028 \U0001f600 \"end'"},
            {"body": "'"},
            {"body": "y" * 200_000},
        ]
        firsts = []
        for payload in payloads:
            key = str(uuid.uuid4())
            first = _post(server, payload, key)
            assert first.status_code == 200, first.text
            firsts.append((payload, key, first))
            _same(first, _post(server, payload, key))
        assert server.stop(timeout=60) == 0, server.logs()
        server.start()
        for payload, key, first in reversed(firsts):
            _same(first, _post(server, payload, key))
        for _payload, _key, first in firsts:  # one caller message per task: none ran again
            count = _post(server, {"body": "COUNT", "task_id": first.json()["task_id"]}, None)
            assert count.json()["response"] == "turn 2", (first.text[:200], count.text)


def _keep_sending(
    server: ServerProcess, sent: list[tuple[dict[str, Any], str, httpx.Response | None]]
) -> None:
    """Keyed messages one after the other until the server dies under one."""
    n = 0
    while True:
        payload, key = {"body": f"burst {n} 'q'"}, str(uuid.uuid4())
        sent.append((payload, key, None))
        try:
            answer = _post(server, payload, key)
        except httpx.HTTPError:
            return
        sent[-1] = (payload, key, answer)
        n += 1


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_a_kill_9_at_a_random_moment_of_a_burst(tmp_path: Path, seed: int) -> None:
    """Keyed messages one after the other, the server killed at a random moment (right after
    an answer, or under a request) and started again: every key's repeat gets the first
    answer (or, for the one under way, its answer once), and each message ran in one task."""
    rng = random.Random(seed)
    with keyed_stub_server(tmp_path, {"alice": ("user", "alice")}) as server:
        sent: list[tuple[dict[str, Any], str, httpx.Response | None]] = []
        sender = threading.Thread(target=_keep_sending, args=(server, sent), daemon=True)
        sender.start()
        deadline = time.monotonic() + 60
        while len(sent) < 3:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        time.sleep(rng.uniform(0, 0.3))  # (the random moment)
        _kill_and_restart(server)
        sender.join(30)
        for payload, key, first in rng.sample(sent, len(sent)):
            again = _eventually(server, payload, key)
            assert again.status_code == 200, again.text
            if first is not None:
                _same(first, again)
            assert again.json()["response"] == f"echo[alice]: {payload['body']}"
            count = _post(server, {"body": "COUNT", "task_id": again.json()["task_id"]}, None)
            assert count.json()["response"] == "turn 2", (payload, count.text)


def test_an_answer_with_its_events_repeated_after_a_kill_9_right_after_it(
    tmp_path: Path,
) -> None:
    """``show_events: true``: its outcome row is written a moment after the answer; a server
    killed in between left the repeat to rebuild it from the task, which gave the events in
    another shape (``data`` before ``id``) and, once a later message continued the task, that
    message's events too."""
    with keyed_stub_server(tmp_path, {"alice": ("user", "alice")}) as server:
        for n in range(3):
            key, payload = str(uuid.uuid4()), {"body": f"events {n}", "show_events": True}
            first = _post(server, payload, key)
            assert first.status_code == 200, first.text
            _kill_and_restart(server)  # (at once: before its outcome row is written)
            if n:  # a later message continues the task first
                later = {"body": "later", "task_id": first.json()["task_id"]}
                assert _post(server, later, None).status_code == 200
            _same(first, _post(server, payload, key))


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_a_dropped_streams_key_is_kept_at_the_bound_while_its_task_runs(
    tmp_path: Path, store: str
) -> None:
    """A keyed stream whose client went away after the first event (its key recorded as
    answered, ``STREAMED_OUTCOME``) while its task runs on; then a burst of new keys at the
    bound. The key was forgotten, and its repeat started a second task next to the first
    (both running); it must attach to the first task. SQLite (the default file) and
    PostgreSQL (a schema of this test's own)."""
    extra = f"max_idempotency_keys_per_caller = {BOUND}\n"
    with contextlib.ExitStack() as stack:
        env = None
        if store == "postgres":
            schema = stack.enter_context(scratch_schema("mail_dropped_stream_key", BASE_URL))
            env = {"DATABASE_URL": with_search_path(BASE_URL, schema)}
        server = stack.enter_context(
            keyed_stub_server(tmp_path, {"alice": ("user", "alice")}, extra=extra, env=env)
        )
        _dropped_stream_then_burst(server)


def _dropped_stream_then_burst(server: ServerProcess) -> None:
    key, payload = str(uuid.uuid4()), {"body": "SLEEP 4 slow", "stream": True}
    headers = {**auth(server.keys["alice"]), "Idempotency-Key": f'"{key}"'}
    url = f"{server.base_url}/message"
    with httpx.stream("POST", url, json=payload, headers=headers, timeout=60) as response:
        assert response.status_code == 200
        task_id = next(iter(parse_sse_stream(response))).json()["task_id"]
    for n in range(2 * BOUND):
        answer = _post(server, {"body": f"quick {n}"}, str(uuid.uuid4()))
        assert answer.status_code == 200, answer.text
    with httpx.stream("POST", url, json=payload, headers=headers, timeout=60) as response:
        assert response.status_code == 200
        assert response.headers.get("idempotent-replayed") == "true"
        events = [e for e in parse_sse_stream(response) if e.event != "ping"]
    assert events[-1].event == "task_complete", events
    assert events[-1].json()["task_id"] == task_id
    assert events[-1].json()["response"] == "echo[alice]: slow"
    listed = httpx.get(f"{server.base_url}/tasks", headers=auth(server.keys["alice"]))
    assert len(listed.json()) == 2 * BOUND + 1  # the slow task and the quick ones: no other


def test_a_key_alice_used_is_bobs_own_key(tmp_path: Path) -> None:
    """The same key and body from another caller: a request of their own (their task, their
    answer, not a replay), before and after alice's key is answered from her task."""
    with keyed_stub_server(
        tmp_path, {"alice": ("user", "alice"), "bob": ("user", "bob")}
    ) as server:
        key, payload = str(uuid.uuid4()), {"body": "shared"}
        alice = _post(server, payload, key)
        headers = {**auth(server.keys["bob"]), "Idempotency-Key": f'"{key}"'}
        url = f"{server.base_url}/message"
        bob = httpx.post(url, json=payload, headers=headers, timeout=60)
        assert bob.status_code == 200, bob.text
        assert "idempotent-replayed" not in bob.headers
        assert bob.json()["response"] == "echo[bob]: shared"
        assert bob.json()["task_id"] != alice.json()["task_id"]
        _same(alice, _post(server, payload, key))
        _same(bob, httpx.post(url, json=payload, headers=headers, timeout=60))
