"""An outside agent's inbox over MCP: long-polls, reads, and notices when it changes."""

from __future__ import annotations

from typing import Any

from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, EmptyResult, SubscribeRequestParams, UnsubscribeRequestParams

from mail.mcp_face import replies
from mail.mcp_face.face import Face
from mail.mcp_face.members import FaceError, Member

INBOX_URI = "mail://inbox"
SUBSCRIBED = "mail_inbox_subscribed"  # connection state: the client asked for inbox notices
_PUBLIC = ("entry_id", "kind", "thread_id", "sender", "subject", "body", "task_id", "timestamp")


def public(entry: dict[str, Any], *, with_read: bool = False) -> dict[str, Any]:
    out = {k: entry.get(k) for k in _PUBLIC}
    if with_read:
        out["was_read"] = bool(entry.get("read"))
    if entry.get("attachments"):
        out["attachments"] = entry["attachments"]
    return out


def register(face: Face) -> None:  # noqa: C901 - one closure per tool, each short
    tool = face.tool
    budget = replies.text_budget(face.settings.max_reply_bytes)

    def packer(shell: dict[str, Any], *, with_read: bool = False) -> Any:
        def pack(entries: list[Any]) -> tuple[dict[str, Any], int]:
            items = [public(e, with_read=with_read) for e in entries]
            return replies.pack(
                {**shell, "more": replies.WIDEST_COUNT},
                "messages",
                items,
                budget,
                replies.cut_message,
            )

        return pack

    async def take(
        member: Member, timeout: float, sender: str | None = None, task_id: str | None = None
    ) -> str:
        try:
            answer, timed_out = await member.take(
                timeout, packer({"timed_out": False}), sender=sender, task_id=task_id
            )
        except FaceError as exc:
            raise ToolError(str(exc)) from None
        answer["timed_out"] = timed_out
        answer["more"] = await member.unread_total()
        return replies.dumps(answer)

    @tool(
        description=(
            "Wait up to timeout_seconds for a message from agent `sender` (optionally on one "
            "task) that you have not read yet, and return it (marked read). Use after "
            'send_request without wait_for_reply. Returns {"messages", "timed_out", '
            '"more"}: "more" counts the unread messages still waiting in your inbox.'
        )
    )
    async def wait_for_reply(
        ctx: Context[Any, Any],
        sender: str,
        task_id: str | None = None,
        timeout_seconds: float | None = None,
    ) -> str:
        member = face.member(ctx)
        timeout = face.clamp_wait(timeout_seconds, face.state.config.team_tools.reply_timeout)
        return await take(member, timeout, sender=sender, task_id=task_id)

    @tool(
        description=(
            "Block until at least one unread message is in your inbox, at most "
            "timeout_seconds (0 checks and returns at once), then return the unread messages "
            '(oldest first, marked read) as {"messages", "timed_out", "more"}. An '
            'answer holds as many whole messages as fit; "more" counts the unread ones '
            "still waiting (call again). A message with truncated=true was too long for one "
            "answer: read_message(entry_id, offset=next_offset) returns the rest of its body. "
            "Call it in a loop to serve the swarm's requests."
        )
    )
    async def wait_for_messages(ctx: Context[Any, Any], timeout_seconds: float = 30.0) -> str:
        member = face.member(ctx)
        return await take(member, face.clamp_wait(timeout_seconds, 30.0))

    @tool(
        description=(
            "Read your inbox, newest first (default 10, at most 100), optionally only unread "
            "messages, one thread or entries since an ISO 8601 time. Returned entries are "
            'marked read. Returns {"messages", "more", "omitted"}: "omitted" counts entries '
            'of this page that did not fit in one answer, "more" the unread messages still '
            "waiting."
        )
    )
    async def get_messages(
        ctx: Context[Any, Any],
        limit: int = 10,
        thread_id: str | None = None,
        since: str | None = None,
        unread_only: bool = False,
    ) -> str:
        member = face.member(ctx)
        if isinstance(limit, bool) or limit < 1:
            raise ToolError("limit must be a positive number")
        if since is not None:
            from mail.store.base import normalize_start_time

            try:
                since = normalize_start_time(since)
            except ValueError as exc:
                raise ToolError(str(exc)) from None
        entries = await member.team.store.inbox(
            member.team.key,
            member.name,
            thread_id=thread_id or None,
            since=since,
            limit=min(int(limit), 100),
            unread_only=unread_only,
        )
        pack = packer({"omitted": replies.WIDEST_COUNT}, with_read=True)
        answer, count = pack(entries)
        await member.mark_read([e for e in entries[:count] if not e.get("read")])
        answer["omitted"] = len(entries) - count
        answer["more"] = await member.unread_total()
        return replies.dumps(answer)

    @tool(
        description=(
            "The rest of a message too long for one answer (it came with truncated=true): "
            "its body from `offset` (the next_offset it came with), as much as fits. Returns "
            '{"entry_id", "offset", "body", "body_chars", "next_offset"}; next_offset is '
            "null once the end is reached."
        )
    )
    async def read_message(ctx: Context[Any, Any], entry_id: str, offset: int = 0) -> str:
        member = face.member(ctx)
        found = await member.team.store.inbox(member.team.key, member.name, entry_id=entry_id)
        if not found:
            raise ToolError(f"no message '{entry_id}' in your inbox")
        body = str(found[0].get("body") or "")
        if isinstance(offset, bool) or not 0 <= offset <= len(body):
            raise ToolError(f"offset must be between 0 and {len(body)}, the body's length")
        shell = {
            "entry_id": entry_id,
            "offset": offset,
            "body": "",
            "body_chars": len(body),
            "next_offset": replies.WIDEST_COUNT,
        }
        room = budget - replies.wire_bytes(replies.dumps(shell))
        end = offset + replies.fit_prefix(body[offset:], room)
        await member.mark_read(found)
        next_offset = end if end < len(body) else None
        return replies.dumps({**shell, "body": body[offset:end], "next_offset": next_offset})

    @tool(
        description=(
            'How many unread messages you have: {"unread", "direct", "threads", '
            '"threads_not_listed"}. "threads" maps thread ids to their unread counts, most '
            "unread first, at most `max_threads` of them (default 50) and as many as fit in "
            'one answer; "threads_not_listed" counts the threads with unread messages left '
            'out (their messages are in "unread"; get_messages(thread_id=...) reads one).'
        )
    )
    async def check_new_messages(ctx: Context[Any, Any], max_threads: int = 50) -> str:
        member = face.member(ctx)
        shown = _count(max_threads, "max_threads")
        return replies.dumps(await inbox_counts(member, shown, budget))

    # ------------------------------------------------------------------ the inbox resource
    # A template (its one variable is optional) because only templates get the context.
    @face.server.resource(
        INBOX_URI + "{?limit,threads}",
        description=(
            f"{INBOX_URI}: your inbox as the agent you joined as: unread counts (per thread: "
            "`threads` of them, default 20, most unread first) and the newest unread "
            "messages' senders and subjects (`limit` of them, default 20; bodies: "
            "get_messages). What does not fit in one answer is left out and counted "
            f'("threads_not_listed", "omitted"). Subscribe to {INBOX_URI} '
            "(resources/subscribe) to be notified when a message arrives."
        ),
        mime_type="application/json",
    )
    async def inbox(ctx: Context[Any, Any], limit: str = "20", threads: str = "20") -> str:
        member = face.joined(ctx)
        if member is None:
            raise ResourceError("join the swarm first: call join_swarm(name, description)")
        try:
            count = min(_count(limit, "limit"), 100)
            shown = _count(threads, "threads")
        except ToolError as exc:
            raise ResourceError(str(exc)) from None
        latest = []  # (a store reads every entry for limit=0)
        if count:
            latest = await member.team.store.inbox(
                member.team.key, member.name, unread_only=True, limit=count
            )
        heads = [
            {k: e.get(k) for k in ("entry_id", "sender", "subject", "task_id", "timestamp")}
            for e in latest
        ]
        # The counts take at most half of the answer; the newest messages fill the rest.
        counts = await inbox_counts(member, shown, budget // 2)
        shell = {"agent": member.name, **counts, "omitted": replies.WIDEST_COUNT}
        answer, kept = replies.pack(shell, "latest_unread", heads, budget, replies.cut_strings)
        answer["omitted"] = len(heads) - kept
        return replies.dumps(answer)

    async def subscribe(
        ctx: ServerRequestContext[Any, Any], params: SubscribeRequestParams
    ) -> EmptyResult:
        if str(params.uri) != INBOX_URI:
            raise MCPError(INVALID_PARAMS, f"only {INBOX_URI} sends updates")
        ctx.session._connection.state[SUBSCRIBED] = True
        return EmptyResult()

    async def unsubscribe(
        ctx: ServerRequestContext[Any, Any], params: UnsubscribeRequestParams
    ) -> EmptyResult:
        if str(params.uri) == INBOX_URI:
            ctx.session._connection.state.pop(SUBSCRIBED, None)
        return EmptyResult()

    # MCPServer has no decorator for these (it serves the 2026 subscriptions/listen instead,
    # which has no per-session streams); the lowlevel server takes them as handlers.
    lowlevel = face.server._lowlevel_server
    lowlevel.add_request_handler("resources/subscribe", SubscribeRequestParams, subscribe)
    lowlevel.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams, unsubscribe)
    face.on_join.append(_notify_when_subscribed)


def _notify_when_subscribed(member: Member, connection: Any) -> None:
    async def notify() -> None:
        if connection.state.get(SUBSCRIBED):
            await connection.send_resource_updated(INBOX_URI)

    member.notify = notify


def _count(value: Any, name: str) -> int:
    """A non-negative count given as a number (a tool argument) or text (a URI's query)."""
    try:
        number = int(value) if not isinstance(value, bool) else -1
    except (TypeError, ValueError):
        number = -1
    if number < 0:
        raise ToolError(f"{name} must be a number, 0 or more")
    return number


async def inbox_counts(member: Member, max_threads: int, room: int) -> dict[str, Any]:
    """Unread counts: in all, direct, and per thread for at most `max_threads` threads (most
    unread first) that fit, with the rest in ``threads_not_listed``, all in `room` bytes."""
    counts = await member.team.unread_for(member.name)
    per_thread = sorted(
        ((k, v) for k, v in counts.items() if k != "direct"), key=lambda kv: (-kv[1], kv[0])
    )
    answer: dict[str, Any] = {
        "unread": sum(counts.values()),
        "direct": counts.get("direct", 0),
        "threads": {},
        "threads_not_listed": replies.WIDEST_COUNT,
    }
    used = replies.wire_bytes(replies.dumps(answer))
    listed: dict[str, int] = {}
    for thread_id, unread in per_thread[:max_threads]:
        # `"id":n` inside the braces, and a comma before all but the first.
        size = replies.wire_bytes(replies.dumps({thread_id: unread})) - 2 + (1 if listed else 0)
        if used + size > room:
            break
        listed[thread_id] = unread
        used += size
    answer["threads"] = listed
    answer["threads_not_listed"] = len(per_thread) - len(listed)
    return answer
