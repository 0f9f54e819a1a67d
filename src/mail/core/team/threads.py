"""Thread operations: create, join, add/remove participants, details, post (with the rules)."""

from __future__ import annotations

from typing import Any

from mail.core.message import create_agent_address, make_interrupt, make_message, utc_now_iso
from mail.core.stored_bytes import text_bytes
from mail.core.team import limits
from mail.core.team.service import TeamError, TeamService, new_id
from mail.store.team_base import Record

RECENT_POSTS = 20


async def _thread(team: TeamService, thread_id: Any) -> Record:
    if not isinstance(thread_id, str) or not thread_id.strip():
        raise TeamError("thread_id is required")
    thread = await team.store.get_thread(team.key, thread_id.strip())
    if thread is None:
        known = [t["thread_id"] for _, t in await team.store.list_threads(team.key)]
        listing = ", ".join(known[-10:]) or "none yet"
        raise TeamError(f"unknown thread '{thread_id}'. Threads of this swarm: {listing}")
    return thread


async def _post(
    team: TeamService,
    thread: Record,
    sender: str,
    body: str,
    task_id: str,
    *,
    kind: str = "post",
    urgent: bool = False,
    notify: list[str] | None = None,
) -> Record:
    post = {
        "post_id": new_id("post"),
        "thread_id": thread["thread_id"],
        "sender": sender,
        "body": body,
        "kind": kind,
        "urgent": urgent,
        "task_id": task_id,
        "timestamp": utc_now_iso(),
    }
    recipients = [p for p in (notify or thread["participants"]) if p != sender]
    entries = [
        team.inbox_entry(
            agent,
            "thread",
            sender,
            body,
            task_id,
            subject=thread["title"],
            thread_id=thread["thread_id"],
            shown=urgent,
        )
        for agent in recipients
    ]
    team.book(text_bytes(post) + sum(text_bytes(entry) for entry in entries))
    await team.store.add_post(team.key, post)
    if entries:
        await team.deliver_quietly(entries)
    if kind == "post":
        team.rt._emit(
            task_id,
            "thread_post",
            f"agent {sender} posted to thread {thread['thread_id']}"
            + (" (urgent)" if urgent else ""),
            {**post, "title": thread["title"], "recipients": recipients},
        )
    if urgent:
        for entry in entries:
            _wake(team, thread, sender, entry, task_id)
    return post


def _wake(team: TeamService, thread: Record, sender: str, entry: Record, task_id: str) -> None:
    payload = make_interrupt(
        task_id,
        create_agent_address(sender),
        [create_agent_address(entry["agent"])],
        f"Urgent post in thread '{thread['title']}' ({thread['thread_id']})",
        entry["body"],
        routing_info={"thread_id": thread["thread_id"], "inbox_entry": entry["entry_id"]},
    )
    message = make_message(payload, "interrupt")
    team.rt._prechecked.add(message["id"])  # thread membership, not comm_targets, decides
    team.rt.mailbox.put(message)


async def _membership(
    team: TeamService,
    thread: Record,
    action: str,
    agent: str,
    by: str,
    task_id: str,
    text: str,
    notify: list[str] | None = None,
) -> None:
    thread["updated_at"] = utc_now_iso()
    await team.store.save_thread(team.key, thread)
    team.rt._emit(
        task_id,
        "thread_membership",
        f"thread {thread['thread_id']}: {text}",
        {
            "thread_id": thread["thread_id"],
            "action": action,
            "agent": agent,
            "by": by,
            "participants": list(thread["participants"]),
        },
    )
    await _post(team, thread, by, text, task_id, kind="membership", notify=notify)


async def create_thread(
    team: TeamService,
    creator: str,
    task_id: str,
    title: Any,
    participants: Any,
    initial_message: Any = None,
) -> Record:
    if not isinstance(title, str) or not title.strip():
        raise TeamError("title is required")
    if not isinstance(participants, list) or not all(isinstance(p, str) for p in participants):
        raise TeamError("participants must be a list of agent names")
    limits.check_title(team, title.strip())
    if isinstance(initial_message, str):
        limits.check_body(team, initial_message, "initial_message")
    members = [creator]
    for name in participants:
        local = team.check_agent(name, "threads", "participant")
        if local not in members:
            members.append(local)
    async with team.quota_lock:
        await limits.check_thread_quota(team)
        now = utc_now_iso()
        thread = {
            "thread_id": new_id("th"),
            "title": title.strip(),
            "creator": creator,
            "participants": members,
            "created_at": now,
            "updated_at": now,
        }
        others = ", ".join(members[1:]) or "nobody else yet"
        await _membership(
            team,
            thread,
            "created",
            creator,
            creator,
            task_id,
            f"{creator} created thread '{thread['title']}' with {others}",
        )
    if isinstance(initial_message, str) and initial_message.strip():
        await _post(team, thread, creator, initial_message, task_id)
    return thread


async def join_thread(team: TeamService, agent: str, task_id: str, thread_id: Any) -> str:
    thread = await _thread(team, thread_id)
    if agent in thread["participants"]:
        return f"you are already a participant of thread {thread['thread_id']}"
    thread["participants"].append(agent)
    await _membership(team, thread, "joined", agent, agent, task_id, f"{agent} joined the thread")
    return f"joined thread {thread['thread_id']} ('{thread['title']}')"


async def add_participant(
    team: TeamService, caller: str, task_id: str, thread_id: Any, agent: Any
) -> str:
    thread = await _thread(team, thread_id)
    if caller not in thread["participants"]:
        raise TeamError(
            f"only participants can add agents to thread {thread['thread_id']}; join it first"
        )
    name = team.check_agent(str(agent or ""), "threads", "participant")
    if name in thread["participants"]:
        return f"{name} is already a participant of thread {thread['thread_id']}"
    thread["participants"].append(name)
    await _membership(
        team, thread, "added", name, caller, task_id, f"{caller} added {name} to the thread"
    )
    return f"added {name} to thread {thread['thread_id']}"


async def remove_participant(
    team: TeamService, caller: str, task_id: str, thread_id: Any, agent: Any
) -> str:
    thread = await _thread(team, thread_id)
    name = str(agent or "").strip()
    if name not in thread["participants"]:
        raise TeamError(
            f"'{name}' is not a participant of thread {thread['thread_id']}. Participants: "
            + ", ".join(thread["participants"])
        )
    if name == thread["creator"]:
        raise TeamError(f"the creator of thread {thread['thread_id']} ({name}) cannot be removed")
    if caller not in (thread["creator"], name):
        raise TeamError(
            f"only the thread's creator ({thread['creator']}) or {name} itself can remove {name}"
        )
    before = list(thread["participants"])
    thread["participants"].remove(name)
    text = f"{name} left the thread" if caller == name else f"{caller} removed {name}"
    await _membership(team, thread, "removed", name, caller, task_id, text, notify=before)
    return f"removed {name} from thread {thread['thread_id']}"


async def thread_details(team: TeamService, thread_id: Any) -> dict[str, Any]:
    thread = await _thread(team, thread_id)
    posts = await team.store.thread_posts(team.key, thread["thread_id"], RECENT_POSTS)
    return {**thread, "recent_posts": posts}


async def post_to_thread(
    team: TeamService, caller: str, task_id: str, thread_id: Any, body: Any, urgent: Any
) -> Record:
    thread = await _thread(team, thread_id)
    if caller not in thread["participants"]:
        raise TeamError(
            f"you are not a participant of thread {thread['thread_id']}; join_thread first"
        )
    if not isinstance(body, str) or not body.strip():
        raise TeamError("body is required")
    limits.check_body(team, body)
    thread["updated_at"] = utc_now_iso()
    await team.store.save_thread(team.key, thread)
    return await _post(team, thread, caller, body, task_id, urgent=bool(urgent))
