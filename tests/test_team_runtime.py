"""Team tools at the runtime level, over stub agents (fast): reply waits, targeted
broadcasts, threads and their permission rules, quiet vs urgent delivery, inbox read state.

The HTTP end-to-end versions with the scripted LLM are in tests/test_team_e2e.py.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from mail.core.runtime import MAILRuntime
from mail.core.team import TeamService, TeamSettings
from mail.store.base import InstanceKey
from mail.store.team_base import SqliteTeamStore
from support.scripted_agents import (
    AgentSpec,
    ScriptedAgent,
    incoming,
    make_runtime,
    run_task,
    send_request,
    send_response,
    task_complete,
    tool_call,
    tool_results,
    user_message,
)

ALL = ("reply_wait", "threads", "inbox", "files")


def team_runtime(agents: dict[str, AgentSpec], **settings: Any) -> MAILRuntime:
    rt = make_runtime(agents)
    for core in rt.agents.values():
        core.team_tools = ALL
    rt.team = TeamService(
        rt, SqliteTeamStore(), InstanceKey("testswarm", "user", "u1"), TeamSettings(**settings)
    )
    return rt


def trio(lead: Any, a: Any, b: Any, **settings: Any) -> MAILRuntime:
    return team_runtime(
        {
            "supervisor": AgentSpec(lead, ["a", "b"], True),
            "a": AgentSpec(a, ["supervisor", "b"]),
            "b": AgentSpec(b, ["supervisor", "a"]),
        },
        **settings,
    )


def last_result(history: list[dict[str, Any]]) -> str:
    return tool_results(history)[-1]


def wait_request(target: str, body: str, **extra: Any) -> Any:
    args = {"target": target, "subject": "Q", "body": body, "wait_for_reply": True, **extra}
    return tool_call("send_request", args)


def call(name: str, **args: Any) -> Any:
    return tool_call(name, args)


def finish_with_results(history: list[dict[str, Any]], _: Any) -> list[Any]:
    return [task_complete(" || ".join(tool_results(history)))]


# ------------------------------------------------------------------ reply_wait
async def test_wait_for_reply_returns_the_answer_as_the_tool_result() -> None:
    lead = ScriptedAgent(
        "supervisor",
        [[wait_request("a", "what is 6*7?")], lambda h, _: [task_complete(last_result(h))]],
    )
    a = ScriptedAgent("a", [[send_response("supervisor", "42")]])
    rt = trio(lead, a, ScriptedAgent("b"))
    response = await run_task(rt)
    assert response["message"]["body"].startswith("SUCCESS: reply from a")
    assert "<body>42</body>" in response["message"]["body"]
    # The answer never arrived as a message of its own: only as the tool result.
    assert not any("<body>42</body>" in text for text in incoming(lead.calls[1].history))
    assert len(a.calls) == 1 and len(lead.calls) == 2
    assert "reply delivered to supervisor" in last_result(rt.history_for("t1", "a"))


async def test_wait_times_out_and_the_late_reply_arrives_normally() -> None:
    async def slow(history: list[dict[str, Any]], tool_choice: Any) -> Any:
        await asyncio.sleep(0.6)
        return None, [send_response("supervisor", "late answer")]

    lead = ScriptedAgent(
        "supervisor",
        [
            [wait_request("a", "take your time", timeout_seconds=0.1)],
            [call("await_message")],
            lambda h, _: [task_complete(incoming(h)[-1])],
        ],
    )
    rt = trio(lead, slow, ScriptedAgent("b"))
    response = await run_task(rt)
    assert "no reply from a within 0.1 seconds" in tool_results(lead.calls[1].history)[-1]
    assert "<body>late answer</body>" in response["message"]["body"]


async def test_wait_cycle_fails_fast_instead_of_deadlocking() -> None:
    lead = ScriptedAgent(
        "supervisor",
        [[wait_request("a", "question")], lambda h, _: [task_complete(last_result(h))]],
    )
    a = ScriptedAgent(
        "a",
        [
            [wait_request("supervisor", "counter-question")],
            lambda h, _: [send_response("supervisor", f"cycle said: {last_result(h)}")],
        ],
    )
    rt = trio(lead, a, ScriptedAgent("b"), reply_timeout=60)
    started = asyncio.get_running_loop().time()
    response = await run_task(rt, timeout=20)
    assert "waiting would deadlock" in response["message"]["body"]
    assert asyncio.get_running_loop().time() - started < 10  # not the 60 s timeout


async def test_wait_timeout_is_capped_by_the_settings() -> None:
    rt = trio(
        ScriptedAgent("supervisor"), ScriptedAgent("a"), ScriptedAgent("b"), reply_timeout_max=5
    )
    assert rt.team.clamp_timeout(3600) == 5
    assert rt.team.clamp_timeout(None) == 5


# ------------------------------------------------------------------ targeted broadcast
async def test_targeted_broadcast_honours_targets_and_skips_the_sender() -> None:
    lead = ScriptedAgent(
        "supervisor",
        [
            [
                call("send_broadcast", subject="s", body="only for a", targets=["a", "supervisor"]),
                call("send_broadcast", subject="s", body="x", targets=["zed"]),
                call("await_message"),
            ],
        ],
        # The error result earns the supervisor a turn of its own (::action_error::); it
        # finishes once the answer of `a` is there as well.
        default=lambda h, _: (
            finish_with_results(h, _) if "seen" in json.dumps(h) else [call("await_message")]
        ),
    )
    a = ScriptedAgent("a", [[send_response("supervisor", "seen")]])
    b = ScriptedAgent("b", [])
    rt = trio(lead, a, b)
    response = await run_task(rt)
    body = response["message"]["body"]
    assert "SUCCESS: broadcast delivered to: a ||" in body
    assert "ERROR: unknown broadcast targets: zed. Valid names: a, b" in body
    assert len(a.calls) == 1 and "only for a" in a.calls[0].last_content
    assert b.calls == []
    notices = json.dumps([c.history for c in lead.calls[1:]])
    assert "::action_error::" in notices and "unknown broadcast targets: zed" in notices


# ------------------------------------------------------------------ threads
async def create_thread_task(rt: MAILRuntime, lead: ScriptedAgent) -> dict[str, Any]:
    await run_task(rt, "t1")
    result = next(r for r in tool_results(lead.calls[1].history) if "thread created" in r)
    return json.loads(result.split("thread created: ", 1)[1])


async def test_quiet_post_is_a_digest_at_the_next_turn_without_an_extra_call() -> None:
    lead = ScriptedAgent(
        "supervisor",
        [
            [
                call(
                    "create_thread",
                    title="Plan",
                    participants=["a", "b"],
                    initial_message="kickoff",
                )
            ],
            lambda h, _: [send_request("a", "status?")],
            lambda h, _: [task_complete("ok")],
        ],
    )
    a = ScriptedAgent("a", [[send_response("supervisor", "fine")]])
    b = ScriptedAgent("b", [])
    rt = trio(lead, a, b)
    await run_task(rt)
    # a was called once (for the request), b never: posts cost no model call of their own.
    assert len(a.calls) == 1 and b.calls == []
    digest, request = incoming(a.calls[0].history)[-2:]
    assert digest.startswith("Quiet updates since your last turn")
    assert "kickoff" in digest and "created thread 'Plan'" in digest
    assert "status?" in request
    # Shown once: b's entries are still pending for its next turn, a's are not.
    assert await rt.team.store.inbox(rt.team.key, "a", unshown_only=True) == []
    assert len(await rt.team.store.inbox(rt.team.key, "b", unshown_only=True)) == 2
    events = [e.event for e in rt.get_task_events("t1")]
    assert "thread_membership" in events and "thread_post" in events


async def test_urgent_post_wakes_participants_at_once() -> None:
    state: dict[str, str] = {}

    def post(h: list[dict[str, Any]], _: Any) -> list[Any]:
        thread = json.loads(last_result(h).split("thread created: ", 1)[1])
        state["id"] = thread["thread_id"]
        return [call("post_to_thread", thread_id=thread["thread_id"], body="fire!", urgent=True)]

    lead = ScriptedAgent(
        "supervisor",
        [
            [call("create_thread", title="Ops", participants=["a"])],
            post,
            [call("await_message")],
            lambda h, _: [task_complete("done")],
        ],
    )
    a = ScriptedAgent("a", [[send_response("supervisor", "on it")]])
    rt = trio(lead, a, ScriptedAgent("b"))
    await run_task(rt)
    assert len(a.calls) == 1
    assert "fire!" in a.calls[0].last_content and "Urgent post" in a.calls[0].last_content
    # The interrupt itself was the delivery: no digest repeats it.
    assert not any("Quiet updates" in t and "fire!" in t for t in incoming(a.calls[0].history))


async def test_thread_permission_rules() -> None:
    seen: dict[str, str] = {}

    def rules(h: list[dict[str, Any]], _: Any) -> list[Any]:
        tid = json.loads(last_result(h).split("thread created: ", 1)[1])["thread_id"]
        seen["tid"] = tid
        return [
            call("remove_participant_from_thread", thread_id=tid, agent="supervisor"),
            call("add_participant_to_thread", thread_id=tid, agent="nobody"),
            call("get_thread_details", thread_id="th_missing"),
            call("send_request", target="b", subject="go", body=tid),
        ]

    def b_turn(h: list[dict[str, Any]], _: Any) -> list[Any]:
        tid = seen["tid"]
        return [
            call("post_to_thread", thread_id=tid, body="may I?"),
            call("add_participant_to_thread", thread_id=tid, agent="b"),
            call("remove_participant_from_thread", thread_id=tid, agent="a"),
            call("join_thread", thread_id=tid),
            call("join_thread", thread_id=tid),
            call("post_to_thread", thread_id=tid, body="joined"),
            call("remove_participant_from_thread", thread_id=tid, agent="b"),
        ]

    lead = ScriptedAgent(
        "supervisor",
        [
            [call("create_thread", title="T", participants=["a"])],
            rules,
            [call("await_message")],
            finish_with_results,
        ],
    )
    b = ScriptedAgent(
        "b",
        [b_turn, lambda h, _: [send_response("supervisor", " || ".join(tool_results(h)))]],
    )
    rt = trio(lead, ScriptedAgent("a"), b)
    response = await run_task(rt)
    lead_results = tool_results(lead.calls[-1].history)
    joined = " || ".join(lead_results)
    assert "the creator of thread" in joined and "cannot be removed" in joined
    assert "unknown participant 'nobody'. Valid names: supervisor, a, b" in joined
    assert "unknown thread 'th_missing'" in joined
    b_results = response["message"]["body"]
    del b_results
    results = tool_results(rt.history_for("t1", "b"))
    assert results[0].startswith("ERROR: you are not a participant")
    assert results[1].startswith("ERROR: only participants can add")
    assert results[2].startswith("ERROR: only the thread's creator (supervisor) or a itself")
    assert results[3].startswith("SUCCESS: joined thread")
    assert "already a participant" in results[4]
    assert results[5].startswith("SUCCESS: posted")
    assert results[6].startswith("SUCCESS: removed b")
    thread = await rt.team.store.get_thread(rt.team.key, seen["tid"])
    assert thread is not None and thread["participants"] == ["supervisor", "a"]
    posts = await rt.team.store.thread_posts(rt.team.key, seen["tid"])
    assert [p["kind"] for p in posts] == ["membership", "membership", "post", "membership"]


# ------------------------------------------------------------------ inbox
async def test_inbox_read_state_across_tasks() -> None:
    lead = ScriptedAgent(
        "supervisor",
        [
            [call("create_thread", title="Notes", participants=["a"], initial_message="n1")],
            lambda h, _: [task_complete("t1 done")],
            # task 2
            [call("check_new_messages")],
            [call("get_messages")],
            [call("check_new_messages")],
            finish_with_results,
        ],
    )
    a = ScriptedAgent(
        "a",
        [
            [call("check_new_messages"), call("get_messages", limit=1)],
            [call("get_messages", limit=5), call("check_new_messages")],
            finish_with_results,
        ],
    )
    rt = team_runtime(
        {
            "supervisor": AgentSpec(lead, ["a"], True),
            "a": AgentSpec(a, ["supervisor"], True),
        }
    )
    await run_task(rt, "t1")
    # Task 2 (another task, same instance): a's inbox holds the thread's two posts
    # (membership + n1), unread, and the user's message of this task.
    response = await asyncio.wait_for(rt.run_task(user_message("t2", "hi", to="a")), 10)
    results = tool_results(rt.history_for("t2", "a"))
    first = json.loads(results[0].removeprefix("SUCCESS: "))
    assert first["unread"] == 3 and first["direct"] == 1 and len(first["threads"]) == 1
    newest = json.loads(results[1].removeprefix("SUCCESS: "))
    assert [m["body"] for m in newest] == ["hi"]
    rest = json.loads(results[2].removeprefix("SUCCESS: "))
    # Most recent first; the one read before is flagged as such; reading marks them read.
    assert [m["body"] for m in rest][:2] == ["hi", "n1"]
    assert rest[0]["was_read"] is True and rest[1]["was_read"] is False
    assert rest[2]["body"].startswith("supervisor created thread")
    assert json.loads(results[3].removeprefix("SUCCESS: "))["unread"] == 0
    assert response["message"]["subject"] == "::task_complete::"


# ------------------------------------------------------------------ files + mail.stdlib.fs
async def test_files_share_the_stdlib_fs_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # write_file (stdlib) -> transfer_file -> save_attachment -> read_file (stdlib): the team
    # file tools work in the [stdlib.fs] root when [server.team_tools] files_root is unset.
    from mail.stdlib.fs import read_file, write_file

    root = tmp_path / "fsroot"
    monkeypatch.setenv("MAIL_STDLIB_FS_ROOT", str(root))

    def lead_waits_for_a(history: list[dict[str, Any]], _: Any) -> list[Any]:
        answers = [m for m in incoming(history) if "ROUNDTRIP" in m]
        if answers:
            return [task_complete(answers[-1].split("ROUNDTRIP ", 1)[1].split("<", 1)[0])]
        return [call("await_message", reason="waiting for a")]

    def a_saves_and_reads(history: list[dict[str, Any]], _: Any) -> list[Any]:
        att = incoming(history)[-1].split("attachment id ", 1)[1].split(".", 1)[0]
        return [
            call("save_attachment", attachment_id=att, path="from_lead/copy.txt"),
            call("read_file", path="from_lead/copy.txt"),
        ]

    lead = ScriptedAgent(
        "supervisor",
        [
            [
                call("write_file", path="notes/report.txt", content="hello team"),
                call("transfer_file", recipient="a", source_path="notes/report.txt"),
            ]
        ],
        default=lead_waits_for_a,
    )
    a = ScriptedAgent(
        "a",
        [
            a_saves_and_reads,
            lambda h, _: [send_response("supervisor", "ROUNDTRIP " + " | ".join(tool_results(h)))],
        ],
    )
    actions = {"write_file": write_file.function, "read_file": read_file.function}
    rt = make_runtime(
        {
            "supervisor": AgentSpec(lead, ["a"], True, actions=["write_file"]),
            "a": AgentSpec(a, ["supervisor"], actions=["read_file"]),
        },
        actions,
    )
    for core in rt.agents.values():
        core.team_tools = ALL
    rt.team = TeamService(rt, SqliteTeamStore(), InstanceKey("testswarm", "user", "u1"))
    response = await run_task(rt, timeout=10)
    lead_results = tool_results(lead.live_histories[0])
    assert lead_results[0].startswith("SUCCESS: successfully wrote to notes/report.txt")
    assert lead_results[1].startswith("SUCCESS: file sent to a:"), lead_results
    body = response["message"]["body"]
    assert "saved to from_lead/copy.txt" in body, body
    assert body.endswith("SUCCESS: hello team"), body
    # Both live in this instance's own folder of the root (user u1), not in the root itself.
    assert (root / "user-u1" / "from_lead" / "copy.txt").read_text(encoding="utf-8") == (
        "hello team"
    )
    assert not (root / "from_lead").exists()
    assert rt.team.files_root() == (root / "user-u1").resolve()


async def test_files_root_setting_overrides_the_stdlib_fs_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MAIL_STDLIB_FS_ROOT", str(tmp_path / "fsroot"))
    rt = team_runtime({"supervisor": AgentSpec(ScriptedAgent("supervisor"), [], True)})
    assert rt.team is not None
    assert rt.team.files_root() == (tmp_path / "fsroot" / "user-u1").resolve()
    rt = team_runtime(
        {"supervisor": AgentSpec(ScriptedAgent("supervisor"), [], True)},
        files_root=str(tmp_path / "team"),
    )
    # The explicit folder keeps one sub-folder per instance (caller role and id).
    assert rt.team is not None and rt.team.files_root() == (tmp_path / "team" / "user-u1").resolve()
