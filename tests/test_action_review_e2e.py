"""Action review over real HTTP: a server on 127.0.0.1 whose LiteLLM agents are answered by
the scripted provider. Every decision type in both tool formats, mixed batches, several held
calls at once, every 400, the edit in the history the model is sent next, streaming events,
and memory of an edit recalled on a later task."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from mail.factories import LiteLLMAgentFunction, RetryPolicy
from server_fixtures import aparse_sse_stream, auth, create_key
from support.review_swarm import review_swarms_json, serve_swarm
from support.scripted_llm import ScriptedLLM, ScriptedRequest, reply, tool_call

# Generous: the first test also pays for importing LiteLLM, which takes long on a busy machine.
pytestmark = pytest.mark.timeout(300)
HTTP_TIMEOUT = 180


@pytest.fixture(scope="module", autouse=True)
def litellm_loaded() -> None:
    # Import LiteLLM before any request, so no request's timeout includes the import.
    from mail.factories._litellm import load_litellm

    load_litellm()


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        LiteLLMAgentFunction, "retry_policy", RetryPolicy(max_attempts=1, base_delay=0.01)
    )


@pytest.fixture
async def llm():
    async with ScriptedLLM() as server:
        yield server


# ---------------------------------------------------------------------------- helpers
def sent_call_args(request: ScriptedRequest, call_id: str) -> dict[str, Any]:
    """The arguments of `call_id` as the model was shown them (either wire format)."""
    for item in request.messages:
        if item.get("type") == "function_call" and item.get("call_id") == call_id:
            return json.loads(item["arguments"])
        for call in item.get("tool_calls") or []:
            if call.get("id") == call_id:
                return json.loads(call["function"]["arguments"])
    raise AssertionError(f"call {call_id} not in the request")


def sent_results(request: ScriptedRequest) -> dict[str, str]:
    results = {}
    for item in request.messages:
        if item.get("role") == "tool":
            results[item["tool_call_id"]] = item["content"]
        elif item.get("type") == "function_call_output":
            results[item["call_id"]] = item["output"]
    return results


def echo(**args: str) -> str:
    return "SUCCESS: echo: " + json.dumps(args, sort_keys=True)


class Session:
    def __init__(self, client: httpx.AsyncClient, key: str) -> None:
        self.client = client
        self.headers = auth(key)

    async def post(self, **body: Any) -> httpx.Response:
        return await self.client.post("/message", json=body, headers=self.headers)

    async def start(self, text: str) -> tuple[str, list[dict[str, Any]]]:
        task_id = str(uuid.uuid4())
        r = await self.post(body=text, task_id=task_id)
        assert r.status_code == 200, r.text
        return task_id, json.loads(r.json()["response"])

    async def decide(self, task_id: str, decisions: list[dict[str, Any]]) -> httpx.Response:
        return await self.post(
            task_id=task_id, resume_from="action_review", kwargs={"decisions": decisions}
        )

    async def task(self, task_id: str) -> dict[str, Any]:
        r = await self.client.get("/task", params={"task_id": task_id}, headers=self.headers)
        assert r.status_code == 200, r.text
        return r.json()


def finish(text: str) -> Any:
    return reply(tool_call("task_complete", {"finish_message": text}))


async def _session(tmp_path: Path, llm: ScriptedLLM, tool_format: str, **options: Any) -> Any:
    name = f"review-{uuid.uuid4().hex[:6]}"
    key = create_key(tmp_path / "keys.json", "user", "alice")
    return serve_swarm(
        tmp_path, review_swarms_json(name, llm.base_url, tool_format, **options)
    ), key


# ---------------------------------------------------------------------------- decisions
@pytest.mark.parametrize("tool_format", ["completions", "responses"])
async def test_each_decision_type(tmp_path: Path, llm: ScriptedLLM, tool_format: str) -> None:
    served, key = await _session(tmp_path, llm, tool_format)
    async with served as url, httpx.AsyncClient(base_url=url, timeout=HTTP_TIMEOUT) as client:
        s = Session(client, key)

        # accept: runs with the agent's arguments
        llm.queue(tool_call("send_email", {"to": "bob@x.org", "body": "Hi Bob"}, "a1"))
        task_id, held = await s.start("email bob")
        assert held == [
            {
                "tool_call_id": "a1",
                "caller": "assistant",
                "action": "send_email",
                "args": {"to": "bob@x.org", "body": "Hi Bob"},
                "allowed_decisions": ["accept", "edit", "ignore", "respond"],
                "description": held[0]["description"],
            }
        ]
        assert "Send an email." in held[0]["description"] and "Hi Bob" in held[0]["description"]
        record = await s.task(task_id)
        assert record["pending_reviews"] == held and record["is_running"] is False
        llm.queue(finish("accepted"))
        r = await s.decide(task_id, [{"tool_call_id": "a1", "type": "accept"}])
        assert r.status_code == 200, r.text
        assert r.json()["response"] == "accepted"
        assert sent_results(llm.requests[-1])["a1"] == echo(to="bob@x.org", body="Hi Bob")
        record = await s.task(task_id)
        assert record["pending_reviews"] == []
        decisions = [e for e in record["events"] if e["event"] == "action_review_decision"]
        assert len(decisions) == 1 and '"type":"accept"' in decisions[0]["data"].replace(" ", "")

        # edit: the model's own history shows the edited call, and it ran edited
        llm.queue(tool_call("send_email", {"to": "bob@x.org", "body": "yo"}, "b1"))
        task_id, _ = await s.start("email bob again")
        llm.queue(finish("edited"))
        edited = {"to": "bob@x.org", "body": "Dear Bob, kind regards"}
        r = await s.decide(task_id, [{"tool_call_id": "b1", "type": "edit", "args": edited}])
        assert r.json()["response"] == "edited"
        nxt = llm.requests[-1]
        assert sent_call_args(nxt, "b1") == edited
        assert sent_results(nxt)["b1"] == echo(**edited)

        # respond: not run; the person's words are the result and the agent continues
        llm.queue(tool_call("ask_question", {"question": "Which day?"}, "c1"))
        task_id, held = await s.start("set up a meeting")
        assert held[0]["allowed_decisions"] == ["respond", "ignore"]
        llm.queue(finish("responded"))
        r = await s.decide(
            task_id, [{"tool_call_id": "c1", "type": "respond", "message": "Friday"}]
        )
        assert r.json()["response"] == "responded"
        assert sent_results(llm.requests[-1])["c1"] == "Friday"

        # ignore: not run, and the task ends naming the call (no further model call)
        llm.queue(tool_call("send_email", {"to": "eve@x.org", "body": "spam"}, "d1"))
        task_id, _ = await s.start("email eve")
        calls_before = len(llm.requests)
        r = await s.decide(task_id, [{"tool_call_id": "d1", "type": "ignore"}])
        body = r.json()["response"]
        assert "send_email" in body and "d1" in body
        assert len(llm.requests) == calls_before
        record = await s.task(task_id)
        assert record["completed"] is True
        assert llm.unanswered == [] and llm.pending == 0


async def test_ignore_can_let_the_agent_continue(tmp_path: Path, llm: ScriptedLLM) -> None:
    served, key = await _session(tmp_path, llm, "completions", ignore_ends_task=False)
    async with served as url, httpx.AsyncClient(base_url=url, timeout=HTTP_TIMEOUT) as client:
        s = Session(client, key)
        llm.queue(tool_call("send_email", {"to": "eve@x.org", "body": "spam"}, "d1"))
        task_id, _ = await s.start("email eve")
        llm.queue(finish("fine, not sending"))
        r = await s.decide(task_id, [{"tool_call_id": "d1", "type": "ignore", "message": "no"}])
        assert r.json()["response"] == "fine, not sending"
        assert "rejected" in sent_results(llm.requests[-1])["d1"]
        assert "no" in sent_results(llm.requests[-1])["d1"]


@pytest.mark.parametrize("tool_format", ["completions", "responses"])
async def test_mixed_batch_and_several_held_calls(
    tmp_path: Path, llm: ScriptedLLM, tool_format: str
) -> None:
    served, key = await _session(tmp_path, llm, tool_format)
    async with served as url, httpx.AsyncClient(base_url=url, timeout=HTTP_TIMEOUT) as client:
        s = Session(client, key)
        llm.queue(
            tool_call("lookup", {"query": "bob's address"}, "l1"),
            tool_call("send_email", {"to": "bob@x.org", "body": "draft"}, "e1"),
            tool_call("ask_question", {"question": "Sign as whom?"}, "e2"),
        )
        task_id, held = await s.start("email bob")
        assert [h["tool_call_id"] for h in held] == ["e1", "e2"]
        record = await s.task(task_id)
        names = [e["event"] for e in record["events"]]
        # The unreviewed lookup ran in the same turn; the reviewed calls did not.
        assert names.count("action_complete") == 1
        assert names.count("action_review") == 2
        assert [p["tool_call_id"] for p in record["pending_reviews"]] == ["e1", "e2"]

        llm.queue(finish("all done"))
        edited = {"to": "bob@x.org", "body": "final text"}
        r = await s.decide(
            task_id,
            [
                {"tool_call_id": "e2", "type": "respond", "message": "Sign as Alice"},
                {"tool_call_id": "e1", "type": "edit", "args": edited},
            ],
        )
        assert r.json()["response"] == "all done"
        nxt = llm.requests[-1]
        assert len(llm.requests) == 2  # one model call after the resume, not one per call
        results = sent_results(nxt)
        assert results == {
            "l1": echo(query="bob's address"),
            "e1": echo(**edited),
            "e2": "Sign as Alice",
        }
        assert sent_call_args(nxt, "e1") == edited
        assert sent_call_args(nxt, "e2") == {"question": "Sign as whom?"}


# ---------------------------------------------------------------------------- 400s
async def test_every_bad_resume_is_a_400_that_changes_nothing(
    tmp_path: Path, llm: ScriptedLLM
) -> None:
    served, key = await _session(tmp_path, llm, "completions")
    async with served as url, httpx.AsyncClient(base_url=url, timeout=HTTP_TIMEOUT) as client:
        s = Session(client, key)
        llm.queue(
            tool_call("send_email", {"to": "bob@x.org", "body": "draft"}, "e1"),
            tool_call("ask_question", {"question": "Which day?"}, "e2"),
        )
        task_id, _ = await s.start("email bob")
        ok_e2 = {"tool_call_id": "e2", "type": "respond", "message": "Monday"}
        cases: list[tuple[Any, list[str]]] = [
            (
                [{"tool_call_id": "nope", "type": "accept"}, ok_e2],
                ["decisions[0].tool_call_id", "nope"],
            ),
            (
                [
                    {"tool_call_id": "e1", "type": "accept"},
                    {"tool_call_id": "e2", "type": "accept"},
                ],
                ["decisions[1].type", "e2", "accept"],
            ),
            ([{"tool_call_id": "e1", "type": "accept"}], ["kwargs.decisions", "e2"]),
            ([{"tool_call_id": "e1", "type": "edit"}, ok_e2], ["decisions[0].args", "e1"]),
            (
                [
                    {"tool_call_id": "e1", "type": "accept"},
                    {"tool_call_id": "e2", "type": "respond"},
                ],
                ["decisions[1].message", "e2"],
            ),
            ([{"tool_call_id": "e1", "type": "approve"}, ok_e2], ["decisions[0].type", "e1"]),
            ("accept", ["kwargs.decisions"]),
        ]
        for decisions, words in cases:
            r = await s.decide(task_id, decisions)
            assert r.status_code == 400, (decisions, r.text)
            for word in words:
                assert word in r.json()["detail"], (word, r.json()["detail"])
        r = await s.post(task_id=task_id, resume_from="action_review")
        assert r.status_code == 400 and "kwargs.decisions" in r.json()["detail"]
        # A plain message (or a breakpoint resume) can't skip the review.
        r = await s.post(body="hello?", task_id=task_id)
        assert r.status_code == 409 and "e1" in r.json()["detail"]
        record = await s.task(task_id)
        assert [p["tool_call_id"] for p in record["pending_reviews"]] == ["e1", "e2"]
        assert not any(e["event"] == "action_review_decision" for e in record["events"])
        assert len(llm.requests) == 1

        llm.queue(finish("ok"))
        good = [{"tool_call_id": "e1", "type": "accept"}, ok_e2]
        assert (await s.decide(task_id, good)).status_code == 200
        r = await s.decide(task_id, good)
        assert r.status_code == 400
        assert "already decided" in r.json()["detail"] and "e1" in r.json()["detail"]
        r = await s.decide(str(uuid.uuid4()), good)
        assert r.status_code == 404


# ---------------------------------------------------------------------------- streaming
async def test_streamed_review_events(tmp_path: Path, llm: ScriptedLLM) -> None:
    served, key = await _session(tmp_path, llm, "responses")
    async with served as url, httpx.AsyncClient(base_url=url, timeout=HTTP_TIMEOUT) as client:
        task_id = str(uuid.uuid4())
        llm.queue(tool_call("send_email", {"to": "bob@x.org", "body": "hi"}, "s1"))
        events = []
        async with client.stream(
            "POST",
            "/message",
            json={"body": "email bob", "task_id": task_id, "stream": True},
            headers=auth(key),
        ) as response:
            async for event in aparse_sse_stream(response):
                events.append(event)
        review = [e for e in events if e.event == "action_review"]
        assert len(review) == 1
        assert review[0].json()["extra_data"] == {
            "tool_call_id": "s1",
            "caller": "assistant",
            "action": "send_email",
            "args": {"to": "bob@x.org", "body": "hi"},
            "allowed_decisions": ["accept", "edit", "ignore", "respond"],
            "description": review[0].json()["extra_data"]["description"],
        }
        final = events[-1]
        assert final.event == "task_complete"
        assert json.loads(final.json()["response"])[0]["tool_call_id"] == "s1"

        llm.queue(finish("sent"))
        events = []
        async with client.stream(
            "POST",
            "/message",
            json={
                "task_id": task_id,
                "stream": True,
                "resume_from": "action_review",
                "kwargs": {"decisions": [{"tool_call_id": "s1", "type": "accept"}]},
            },
            headers=auth(key),
        ) as response:
            async for event in aparse_sse_stream(response):
                events.append(event)
        names = [e.event for e in events]
        decided = [e for e in events if e.event == "action_review_decision"]
        assert decided[0].json()["extra_data"]["type"] == "accept"
        assert names.index("action_review_decision") < names.index("action_complete")
        assert events[-1].json()["response"] == "sent"


# ---------------------------------------------------------------------------- memory
async def test_an_edit_is_remembered_on_a_later_task(tmp_path: Path, llm: ScriptedLLM) -> None:
    served, key = await _session(tmp_path, llm, "completions", memory=True)
    async with served as url, httpx.AsyncClient(base_url=url, timeout=HTTP_TIMEOUT) as client:
        s = Session(client, key)
        llm.queue(tool_call("send_email", {"to": "bob@x.org", "body": "hey bob"}, "m1"))
        task_id, _ = await s.start("write the launch email to bob")
        llm.queue(finish("sent"))
        edited = {"to": "bob@x.org", "body": "Dear Bob, the launch is on Monday. Best, Alice"}
        r = await s.decide(task_id, [{"tool_call_id": "m1", "type": "edit", "args": edited}])
        assert r.status_code == 200

        # A later task about the same thing: the note is in the prompt the model gets.
        llm.queue(finish("noted"))
        r = await s.post(body="write another launch email to bob")
        assert r.json()["response"] == "noted"
        system = llm.requests[-1].system_text
        assert "Notes from your memory" in system
        assert "Dear Bob, the launch is on Monday. Best, Alice" in system
        assert "hey bob" in system  # the original is part of the note too


# ---------------------------------------------------------------------------- client + REPL
async def test_client_method_and_repl_review_command(tmp_path: Path, llm: ScriptedLLM) -> None:
    import asyncio
    import io

    from rich.console import Console

    from mail.client import MAILClient, MAILClientError
    from mail.client_config import ClientConfig
    from mail.repl import MAILREPL

    served, key = await _session(tmp_path, llm, "completions")
    async with served as url:
        # MAILClient: a bad decision raises with the server's 400; a good one answers.
        llm.queue(tool_call("send_email", {"to": "bob@x.org", "body": "v1"}, "p1"))
        async with MAILClient(url, api_key=key, config=ClientConfig()) as client:
            t_client = str(uuid.uuid4())  # task ids are UUIDs (400 otherwise)
            first = await client.post_message("email bob", task_id=t_client)
            assert json.loads(first["response"])[0]["tool_call_id"] == "p1"
            assert [h["tool_call_id"] for h in await client.get_pending_reviews(t_client)] == ["p1"]
            with pytest.raises(MAILClientError) as caught:
                await client.review_actions(t_client, [{"tool_call_id": "p1", "type": "nope"}])
            assert caught.value.status == 400
            llm.queue(finish("client done"))
            done = await client.review_actions(
                t_client, [{"tool_call_id": "p1", "type": "accept"}], show_events=True
            )
            assert done["response"] == "client done"
            assert any(e["event"] == "action_review_decision" for e in done["events"])

        # REPL: `message` says calls wait; `review ID` lists them; `review ID CALL=...` decides.
        llm.queue(
            tool_call("send_email", {"to": "bob@x.org", "body": "v1"}, "q1"),
            tool_call("ask_question", {"question": "Which day?"}, "q2"),
        )
        llm.queue(finish("repl done"))

        def drive(lines: list[str]) -> list[str]:
            out = io.StringIO()
            console = Console(file=out, width=200, color_system=None, force_terminal=False)
            outputs = []
            with asyncio.Runner() as runner:
                repl = MAILREPL(url, api_key=key, config=ClientConfig(), console=console)
                runner.run(repl.client.login(key))
                for line in lines:
                    start = out.tell()
                    repl.execute(runner, line)
                    out.seek(start)
                    outputs.append(out.read())
                runner.run(repl.client.aclose())
            return outputs

        t_repl = str(uuid.uuid4())
        shown_after_message, listed, refused, decided = await asyncio.to_thread(
            drive,
            [
                f"message 'email bob' -tid {t_repl}",
                f"review {t_repl}",
                f"review {t_repl} q1=accept q2=accept",
                f'review {t_repl} q1=edit:\'{{"to": "bob@x.org", "body": "v2"}}\' '
                "q2=respond:'Tuesday please'",
            ],
        )
        assert f"2 call(s) wait for your review: review {t_repl}" in shown_after_message
        assert "q1" in listed and "send_email" in listed and "respond, ignore" in listed
        assert "400" in refused and "q2" in refused
        assert "repl done" in decided
        nxt = llm.requests[-1]
        assert sent_call_args(nxt, "q1") == {"to": "bob@x.org", "body": "v2"}
        assert sent_results(nxt)["q2"] == "Tuesday please"
