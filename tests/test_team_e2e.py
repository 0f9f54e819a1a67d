"""Team tools end to end: a real `mail server`, LiteLLM agents answered by the scripted LLM
over HTTP, and HTTP clients: reply waits (answer, timeout + late reply, cycle), targeted
broadcasts, threads with quiet and urgent delivery, GET /threads, inbox across tasks, and
files (user upload -> agent -> agent -> user download; caps; paths; other users' ids)."""

from __future__ import annotations

import asyncio
import base64
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from server_fixtures import auth, create_key, running_server, write_config
from support.scripted_llm import ScriptedLLM, hang, reply, tool_call
from team_e2e_support import (
    body_of,
    incoming_texts,
    is_agent,
    json_result,
    requests_of,
    results,
    team_config_extra,
    write_team_swarm,
)

pytestmark = pytest.mark.timeout(180)

LEAD, A, B = is_agent("lead"), is_agent("a"), is_agent("b")


@pytest.fixture(scope="module")
def llm_and_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One scripted LLM (in its own thread's loop) and one server for the whole module."""
    import threading

    directory = tmp_path_factory.mktemp("team")
    box: dict[str, Any] = {}
    ready = threading.Event()
    stop: asyncio.Event | None = None

    def serve() -> None:
        async def main() -> None:
            nonlocal stop
            stop = asyncio.Event()
            async with ScriptedLLM() as llm:
                box["llm"], box["loop"] = llm, asyncio.get_running_loop()
                ready.set()
                await stop.wait()

        asyncio.run(main())

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert ready.wait(10)
    llm: ScriptedLLM = box["llm"]
    name = f"team-{uuid.uuid4().hex[:6]}"
    write_team_swarm(directory, name, llm.base_url)
    config = write_config(directory, port=0, swarm=name, extra=team_config_extra(directory))
    keys = directory / "registries" / "keys.json"
    alice = create_key(keys, "user", "alice")
    bob = create_key(keys, "user", "bob")
    with running_server(directory, ["-c", str(config)]) as server:
        # Warm up (the server imports LiteLLM on the first model call, slow on a busy box),
        # so each test's timing bounds are about the feature, not the import.
        asyncio.run_coroutine_threadsafe(_queue_warmup(llm), box["loop"]).result(5)
        warm = httpx.post(
            f"{server.base_url}/message",
            json={"body": "warm up"},
            headers=auth(alice),
            timeout=300,
        )
        assert warm.json()["response"] == "warm", warm.text
        llm.requests.clear()
        yield llm, box["loop"], server, directory, alice, bob
    box["loop"].call_soon_threadsafe(stop.set)  # type: ignore[union-attr]
    thread.join(10)


async def _queue_warmup(llm: ScriptedLLM) -> None:
    llm.queue(tool_call("task_complete", {"finish_message": "warm"}), match=LEAD)


class Env:
    def __init__(self, parts: Any) -> None:
        self.llm, self.loop, self.server, self.dir, self.alice, self.bob = parts

    def queue(self, *parts: Any, match: Any) -> None:
        # The scripted LLM lives on another loop: queue through it.
        done = asyncio.run_coroutine_threadsafe(self._queue(parts, match), self.loop)
        done.result(5)

    async def _queue(self, parts: Any, match: Any) -> None:
        if len(parts) == 1 and (callable(parts[0]) or not hasattr(parts[0], "name")):
            self.llm.queue(parts[0], match=match)
        else:
            self.llm.queue(*parts, match=match)

    def post(self, body: str, key: str | None = None, **extra: Any) -> httpx.Response:
        return httpx.post(
            f"{self.server.base_url}/message",
            json={"body": body, **extra},
            headers=auth(key or self.alice),
            timeout=180,
        )

    def get(self, path: str, key: str | None = None, **params: Any) -> httpx.Response:
        return httpx.get(
            f"{self.server.base_url}{path}",
            headers=auth(key or self.alice),
            params=params,
            timeout=20,
        )

    def count(self, match: Any) -> int:
        return sum(1 for r in list(self.llm.requests) if match(r))

    def wait_for(self, match: Any, n: int, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while self.count(match) < n:
            assert time.monotonic() < deadline, f"only {self.count(match)} of {n} requests"
            time.sleep(0.02)

    def reset(self) -> None:
        assert self.llm.pending == 0, "unused scripted replies"
        self.llm.requests.clear()


@pytest.fixture
def env(llm_and_server: Any) -> Iterator[Env]:
    e = Env(llm_and_server)
    e.llm.requests.clear()
    yield e
    e.llm.requests.clear()


def request_call(target: str, body: str, **extra: Any) -> Any:
    return tool_call("send_request", {"target": target, "subject": "Q", "body": body, **extra})


def respond(target: str, body: str) -> Any:
    return tool_call("send_response", {"target": target, "subject": "Re", "body": body})


def complete(text: str) -> Any:
    return tool_call("task_complete", {"finish_message": text})


# ------------------------------------------------------------------ reply_wait
def test_wait_for_reply_answer_is_the_tool_result(env: Env) -> None:
    env.queue(request_call("a", "6*7?", wait_for_reply=True), match=LEAD)
    env.queue(respond("lead", "42"), match=A)
    env.queue(lambda r: reply(complete(results(r)[-1])), match=LEAD)
    r = env.post("compute")
    assert r.status_code == 200, r.text
    answer = r.json()["response"]
    assert answer.startswith("SUCCESS: reply from a") and "<body>42</body>" in answer
    lead = requests_of(env.llm, "lead")
    assert len(lead) == 2 and env.count(A) == 1
    # The answer was never delivered to the lead as a message.
    assert not any("<body>42</body>" in t for t in incoming_texts(lead[1]))
    # The tool offered to the model has the new parameters.
    props = lead[0].tool("send_request")["function"]["parameters"]["properties"]
    assert {"wait_for_reply", "timeout_seconds"} <= set(props)


def test_wait_timeout_then_late_reply_arrives_as_a_message(env: Env) -> None:
    env.queue(request_call("a", "slow one", wait_for_reply=True, timeout_seconds=0.5), match=LEAD)
    env.queue(hang(2.0, reply(respond("lead", "late answer"))), match=A)
    env.queue(tool_call("await_message", {}), match=LEAD)
    env.queue(lambda r: reply(complete(incoming_texts(r)[-1])), match=LEAD)
    r = env.post("ask slowly")
    assert r.status_code == 200, r.text
    assert "<body>late answer</body>" in r.json()["response"]
    lead = requests_of(env.llm, "lead")
    assert "no reply from a within 0.5 seconds" in results(lead[1])[-1]


def test_wait_cycle_is_detected(env: Env) -> None:
    env.queue(request_call("a", "question", wait_for_reply=True), match=LEAD)
    env.queue(request_call("lead", "counter-question", wait_for_reply=True), match=A)
    env.queue(lambda r: reply(respond("lead", results(r)[-1])), match=A)
    env.queue(lambda r: reply(complete(results(r)[-1])), match=LEAD)
    started = time.monotonic()
    r = env.post("cycle")
    assert "waiting would deadlock" in r.json()["response"]
    assert time.monotonic() - started < 15  # fails fast, not after the 20 s reply timeout


# ------------------------------------------------------------------ targeted broadcast
def test_targeted_broadcast(env: Env) -> None:
    env.queue(
        tool_call(
            "send_broadcast", {"subject": "s", "body": "for a only", "targets": ["a", "lead"]}
        ),
        tool_call("await_message", {}),
        match=LEAD,
    )
    env.queue(respond("lead", "got it"), match=A)
    env.queue(
        tool_call("send_broadcast", {"subject": "s", "body": "x", "targets": ["zed"]}), match=LEAD
    )
    # The error result earns the lead another turn (::action_error::), in which it finishes.
    env.queue(lambda r: reply(complete(" | ".join(results(r)))), match=LEAD)
    r = env.post("announce")
    text = r.json()["response"]
    assert "SUCCESS: broadcast delivered to: a |" in text
    assert "ERROR: unknown broadcast targets: zed. Valid names: a, b" in text
    assert "::action_error::" in incoming_texts(requests_of(env.llm, "lead")[-1])[-1]
    assert env.count(B) == 0
    assert "for a only" in incoming_texts(requests_of(env.llm, "a")[0])[-1]


# ------------------------------------------------------------------ threads + inbox
def test_threads_quiet_and_urgent_delivery_inbox_and_http(env: Env) -> None:
    state: dict[str, str] = {}

    def lead_second(r: Any) -> Any:
        thread = json_result(results(r)[-1])
        state["tid"] = thread["thread_id"]
        return reply(
            tool_call("post_to_thread", {"thread_id": state["tid"], "body": "quiet note"}),
            request_call("a", "status?"),
        )

    env.queue(
        tool_call(
            "create_thread",
            {"title": "Plan", "participants": ["a", "b"], "initial_message": "kickoff"},
        ),
        match=LEAD,
    )
    env.queue(lead_second, match=LEAD)
    # a: sees the digest with its request; breaks two rules; then answers.
    env.queue(
        lambda r: reply(
            tool_call(
                "remove_participant_from_thread", {"thread_id": state["tid"], "agent": "lead"}
            ),
            tool_call("add_participant_to_thread", {"thread_id": state["tid"], "agent": "nobody"}),
            tool_call("join_thread", {"thread_id": state["tid"]}),
        ),
        match=A,
    )
    env.queue(lambda r: reply(respond("lead", " | ".join(results(r)[-3:]))), match=A)
    # lead: action_complete after its post (a's answer may come first or second).
    env.queue(tool_call("await_message", {}), match=LEAD)
    env.queue(
        lambda r: reply(
            tool_call(
                "post_to_thread", {"thread_id": state["tid"], "body": "wake up b", "urgent": True}
            )
        ),
        match=LEAD,
    )
    env.queue(lambda r: reply(complete("t1 done")), match=LEAD)
    # b, woken by the urgent post, tries the rules a plain participant is bound by.
    env.queue(
        lambda r: reply(
            tool_call("remove_participant_from_thread", {"thread_id": state["tid"], "agent": "a"}),
            tool_call("get_thread_details", {"thread_id": state["tid"]}),
            tool_call("remove_participant_from_thread", {"thread_id": state["tid"], "agent": "b"}),
            tool_call("post_to_thread", {"thread_id": state["tid"], "body": "still here?"}),
            tool_call("add_participant_to_thread", {"thread_id": state["tid"], "agent": "b"}),
        ),
        match=B,
    )
    r = env.post("start a thread")
    assert r.json()["response"] == "t1 done", r.text
    env.wait_for(B, 1)

    a_first = requests_of(env.llm, "a")[0]
    digest = incoming_texts(a_first)[-2]
    assert digest.startswith("Quiet updates since your last turn")
    assert "kickoff" in digest and "quiet note" in digest
    rules = " | ".join(results(requests_of(env.llm, "a")[1]))
    assert "the creator of thread" in rules and "cannot be removed" in rules
    assert "unknown participant 'nobody'" in rules
    assert "already a participant" in rules
    # b was not called for the quiet posts; the urgent one woke it, with the rest as digest.
    b_first = requests_of(env.llm, "b")[0]
    assert "wake up b" in incoming_texts(b_first)[-1]
    assert "kickoff" in incoming_texts(b_first)[-2]
    assert env.count(B) == 1

    # b's rule checks ran in its turn (the task had ended, so it is not called again); each
    # refused call left an agent_error event naming the rule.
    task_id = r.json()["task_id"]
    deadline = time.monotonic() + 30
    while True:
        task = env.get("/task", task_id=task_id).json()
        errors = [
            e["data"] for e in task["events"] if e["event"] == "agent_error" and "b " in e["data"]
        ]
        if any("add_participant_to_thread" in e for e in errors) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    refused = " | ".join(errors)
    assert "only the thread's creator (lead) or a itself can remove a" in refused
    assert "you are not a participant of thread" in refused
    assert "only participants can add agents" in refused

    # HTTP: the thread, its posts, participants and unread counts.
    listing = env.get("/threads").json()["threads"]
    assert [t["thread_id"] for t in listing] == [state["tid"]]
    detail = env.get(f"/threads/{state['tid']}").json()
    assert detail["participants"] == ["lead", "a"]
    bodies = [m["body"] for m in detail["messages"]]
    assert bodies[1:] == ["kickoff", "quiet note", "wake up b", "b left the thread"]
    assert detail["unread"] == {"lead": 1, "a": 5}
    assert env.get(f"/threads/{state['tid']}", env.bob).status_code == 404
    assert env.get("/threads", env.bob).json()["threads"] == []
    task = env.get("/task", task_id=r.json()["task_id"]).json()
    names = [e["event"] for e in task["events"]]
    assert "thread_post" in names and "thread_membership" in names

    # Inbox across tasks: a new task; the lead reads what it got in the first one.
    env.reset()
    env.queue(tool_call("check_new_messages", {}), match=LEAD)
    env.queue(tool_call("get_messages", {"limit": 100}), match=LEAD)
    env.queue(tool_call("check_new_messages", {}), match=LEAD)
    env.queue(lambda r: reply(complete(json.dumps(results(r)[-3:]))), match=LEAD)
    second = json.loads(env.post("what did you get?").json()["response"])
    before = json_result(second[0])
    assert before["direct"] >= 3  # both user messages and a's answer
    messages = json_result(second[1])
    senders = {m["sender"] for m in messages}
    assert {"a", "alice"} <= senders
    assert any(m["body"].startswith("SUCCESS") or "|" in m["body"] for m in messages)
    assert json_result(second[2])["unread"] == 0


# ------------------------------------------------------------------ files
def test_files_user_to_agent_to_agent_to_user(env: Env) -> None:
    root = env.dir / "files" / "user-alice"
    root.mkdir(parents=True, exist_ok=True)
    (root / "report.txt").write_text("report body", encoding="utf-8")
    (root / "big.bin").write_bytes(b"x" * 2000)
    (env.dir / "files" / "secret.txt").write_text("not yours", encoding="utf-8")
    state: dict[str, str] = {}

    def lead_first(r: Any) -> Any:
        text = incoming_texts(r)[-1]
        state["upload"] = text.split("attachment id ", 1)[1].split(",", 1)[0]
        return reply(tool_call("read_attachment", {"attachment_id": state["upload"]}))

    def a_first(r: Any) -> Any:
        text = incoming_texts(r)[-1]
        att = text.split("attachment id ", 1)[1].split(".", 1)[0]
        state["att"] = att
        return reply(
            tool_call("read_attachment", {"attachment_id": att}),
            tool_call("save_attachment", {"attachment_id": att, "path": "inbox/copy.txt"}),
            tool_call("save_attachment", {"attachment_id": att, "path": "../escape.txt"}),
            tool_call(
                "transfer_file",
                {"recipient": "user", "source_path": "inbox/copy.txt", "description": "for you"},
            ),
        )

    env.queue(lead_first, match=LEAD)
    env.queue(
        tool_call("transfer_file", {"recipient": "a", "source_path": "report.txt"}),
        tool_call("transfer_file", {"recipient": "a", "source_path": "../secret.txt"}),
        tool_call("transfer_file", {"recipient": "a", "source_path": "big.bin"}),
        tool_call("transfer_file", {"recipient": "zed", "source_path": "report.txt"}),
        match=LEAD,
    )
    env.queue(tool_call("await_message", {}), match=LEAD)
    env.queue(a_first, match=A)
    env.queue(lambda r: reply(respond("lead", " | ".join(results(r)[-4:]))), match=A)
    env.queue(
        lambda r: reply(complete(json.dumps([*results(r), body_of(incoming_texts(r)[-1])]))),
        match=LEAD,
    )
    upload = {"filename": "notes.txt", "content": "hello file", "description": "from alice"}
    r = env.post("read my file", attachments=[upload])
    assert r.status_code == 200, r.text
    out = json.loads(r.json()["response"])
    assert "SUCCESS: hello file" in out
    assert any(t.startswith("SUCCESS: file sent to a:") for t in out)
    assert any("outside your working folder" in t for t in out)
    assert any("attachments are limited to 1000" in t for t in out)
    assert any("unknown recipient 'zed'. Valid names: a, b, user" in t for t in out)
    a_report = out[-1]
    assert "SUCCESS: report body" in a_report
    assert "saved to inbox/copy.txt" in a_report
    assert "outside your working folder" in a_report
    assert (root / "inbox" / "copy.txt").read_text() == "report body"
    assert not (env.dir / "files" / "escape.txt").exists()

    task = env.get("/task", task_id=r.json()["task_id"]).json()
    sent = [json.loads(e["data"]) for e in task["events"] if e["event"] == "attachment"]
    to_user = [e["extra_data"] for e in sent if e["extra_data"]["recipient"] == "user"]
    assert len(to_user) == 1 and len(sent) == 2
    meta = to_user[0]["attachment"]
    download = env.get(f"/attachments/{meta['id']}")
    assert download.status_code == 200 and download.content == b"report body"
    assert download.headers["x-content-sha256"] == meta["sha256"]
    assert "copy.txt" in download.headers["content-disposition"]
    # Someone else's attachment id is not found; so is the user's own upload for bob.
    assert env.get(f"/attachments/{meta['id']}", env.bob).status_code == 404
    assert env.get(f"/attachments/{state['upload']}", env.bob).status_code == 404
    assert env.get(f"/attachments/{state['upload']}").content == b"hello file"


def test_upload_limits_and_malformed_bodies(env: Env) -> None:
    big = base64.b64encode(b"y" * 1500).decode()
    r = env.post("x", attachments=[{"filename": "big.bin", "content_base64": big}])
    assert r.status_code == 413 and "limit is 1000" in r.json()["detail"]
    r = env.post("x", attachments=[{"filename": "a.txt"}])
    assert r.status_code == 400 and "exactly one of content_base64, content" in r.json()["detail"]
    r = env.post("x", attachments=[{"filename": "a.txt", "content_base64": "***"}])
    assert r.status_code == 400 and "not base64" in r.json()["detail"]
    r = env.post("x", attachments="nope")
    assert r.status_code == 400
    assert env.get("/attachments/att_missing").status_code == 404
    assert env.get("/threads/th_missing").status_code == 404
    assert env.count(LEAD) == 0
