"""TeamService: one swarm instance's team messaging (reply waits, inboxes, digests)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mail.core.message import MAILMessage, parse_agent_address, utc_now_iso
from mail.core.runtime_ports import HostLink
from mail.core.stored_bytes import text_bytes
from mail.store.base import InstanceKey
from mail.store.team_base import Record, TeamStore

if TYPE_CHECKING:
    from mail.core.runtime_ports import Swarm

logger = logging.getLogger("mail.runtime.team")

DIGEST_LIMIT = 50
DIGEST_PREFIX = "Quiet updates since your last turn"


class TeamError(Exception):
    """A team tool call that cannot be carried out; the text is the tool result."""


@dataclass
class TeamSettings:
    """Limits and folders of the team tools (``[server.team_tools]`` in mail.toml)."""

    reply_timeout: float = 120.0  # default wait of send_request(wait_for_reply=true)
    reply_timeout_max: float = 600.0  # cap on timeout_seconds
    max_attachment_bytes: int = 10 * 1024 * 1024
    max_read_bytes: int = 256 * 1024  # read_attachment refuses larger files
    files_root: str | None = None  # agents' working folders; None = the [stdlib.fs] root
    max_body_chars: int = (
        1024 * 1024
    )  # a post / initial message ([server.settings] max_message_body)
    max_title_chars: int = 200
    max_description_chars: int = 2000
    max_filename_chars: int = 255
    max_threads: int = 1000  # per instance
    max_attachment_bytes_per_instance: int = 1024 * 1024 * 1024


@dataclass
class ReplyWait:
    task_id: str
    waiter: str
    target: str
    future: asyncio.Future[MAILMessage]


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:16]}"


class TeamService(HostLink["Swarm"]):
    @property
    def rt(self) -> Swarm:
        return self.host

    def __init__(
        self,
        runtime: Swarm,
        store: TeamStore,
        key: InstanceKey,
        settings: TeamSettings | None = None,
    ) -> None:
        # Weakly: the runtime holds its team service (see mail.core.runtime_ports.HostLink).
        self._link(runtime)
        self.store = store
        self.key = key
        self.settings = settings or TeamSettings()
        self._waits: dict[tuple[str, str], ReplyWait] = {}
        # Agents known to have no unshown inbox entries (saves a store read per turn).
        self._nothing_pending: set[str] = set()
        # Held from a quota check to the write it allows (threads, attachment bytes), so
        # concurrent tasks of one instance cannot all pass the check before any of them
        # stores (with PostgreSQL, 12 concurrent creates made 10 threads of a quota of 3).
        self.quota_lock = asyncio.Lock()
        # Called with an agent's name whenever an entry lands in its inbox (external agents'
        # long-polls wait on it; see mail.mcp_face).
        self.inbox_listeners: list[Callable[[str], None]] = []

    # ------------------------------------------------------------------ stored bytes
    def book(self, size: int) -> None:
        """Count `size` bytes of team data about to be stored in the caller's books at once
        (writes under way see each other), or a TeamError when they would pass its bound
        ([server.store] max_stored_bytes_per_caller): then nothing is stored."""
        stored = self.rt.stored_bytes
        why = stored.refusal(size)
        if why is not None:
            raise TeamError(f"not stored: {why}")
        stored.book_team(size)

    # ------------------------------------------------------------------ who is who
    def groups(self, agent: str) -> frozenset[str]:
        core = self.rt.agents.get(agent)
        return frozenset(getattr(core, "team_tools", ()) or ()) if core is not None else frozenset()

    def agents_with(self, group: str) -> list[str]:
        return [name for name in self.rt.agents if group in self.groups(name)]

    def check_agent(self, name: str, group: str, what: str = "agent") -> str:
        """A local agent name that has `group` enabled, or TeamError listing valid names."""
        local, swarm = parse_agent_address(str(name).strip())
        valid = self.agents_with(group)
        if swarm and not self.rt._is_local_swarm(swarm):
            raise TeamError(
                f"{what} '{name}' is in another swarm; only agents of this swarm can take "
                f"part. Valid names: {', '.join(valid)}"
            )
        if local not in valid:
            raise TeamError(f"unknown {what} '{name}'. Valid names: {', '.join(valid) or 'none'}")
        return local

    # ------------------------------------------------------------------ files root
    def files_root(self) -> Path:
        """This instance's working folder for file tools (created on first use).

        By default it is this instance's folder of the `mail.stdlib` filesystem root
        (`<[stdlib.fs] root>/<role>-<id>`, or the root itself with `[stdlib.fs] shared`), so
        files an agent wrote with `write_file` can be sent with `transfer_file`, and a saved
        attachment can be read with `read_file`. `[server.team_tools] files_root` overrides
        it with a folder that has one sub-folder per instance (`<role>-<id>`).
        """
        from mail.core.instance_context import instance_folder_name

        base = self.settings.files_root
        if base:
            folder = instance_folder_name(self.key.caller_role, self.key.caller_id)
            root = Path(base).expanduser() / folder
            root.mkdir(parents=True, exist_ok=True)
            return root.resolve()
        from mail.config import current_stdlib_config
        from mail.core.file_root import file_root

        # The same effective settings the stdlib actions read (mail.toml, MAIL_STDLIB_*).
        settings = current_stdlib_config().with_env_overrides()
        return file_root(settings, (self.key.caller_role, self.key.caller_id))

    # ------------------------------------------------------------------ reply waits
    def register_wait(self, task_id: str, waiter: str, target: str) -> ReplyWait:
        """Record that `waiter` blocks on `target`'s reply; TeamError on a wait cycle."""
        if target == waiter:
            raise TeamError("you cannot wait for a reply from yourself")
        chain = [waiter, target]
        current = target
        while (task_id, current) in self._waits:
            current = self._waits[(task_id, current)].target
            chain.append(current)
            if current == waiter:
                raise TeamError(
                    "waiting would deadlock: " + " -> ".join(chain) + " are all waiting on "
                    f"each other. '{target}' is waiting for you: answer it with send_response "
                    "(or send the request without wait_for_reply)."
                )
            if len(chain) > len(self.rt.agents) + 1:
                break
        future: asyncio.Future[MAILMessage] = asyncio.get_running_loop().create_future()
        wait = ReplyWait(task_id, waiter, target, future)
        self._waits[(task_id, waiter)] = wait
        return wait

    def drop_wait(self, wait: ReplyWait) -> None:
        if self._waits.get((wait.task_id, wait.waiter)) is wait:
            del self._waits[(wait.task_id, wait.waiter)]

    def waiting_for(self, task_id: str, waiter: str, responder: str) -> ReplyWait | None:
        wait = self._waits.get((task_id, waiter))
        if wait is None or wait.target != responder or wait.future.done():
            return None
        return wait

    def clamp_timeout(self, value: Any) -> float:
        settings = self.settings
        if value is None:
            return min(settings.reply_timeout, settings.reply_timeout_max)
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            raise TeamError(f"timeout_seconds must be a number, got {value!r}") from None
        if seconds <= 0:
            raise TeamError("timeout_seconds must be positive")
        return min(seconds, settings.reply_timeout_max)

    # ------------------------------------------------------------------ inbox
    def inbox_entry(
        self,
        agent: str,
        kind: str,
        sender: str,
        body: str,
        task_id: str,
        *,
        subject: str = "",
        thread_id: str | None = None,
        shown: bool = False,
        attachments: list[Record] | None = None,
        entry_id: str | None = None,
    ) -> Record:
        return {
            "entry_id": entry_id or new_id("msg"),
            "agent": agent,
            "kind": kind,
            "thread_id": thread_id,
            "sender": sender,
            "subject": subject,
            "body": body,
            "task_id": task_id,
            "timestamp": utc_now_iso(),
            "read": False,
            "shown": shown,
            "attachments": list(attachments or []),
        }

    async def deliver_quietly(self, entries: list[Record]) -> None:
        """Put entries in inboxes; unshown ones appear in the recipient's next digest."""
        await self.store.add_inbox_entries(self.key, entries)
        for entry in entries:
            if not entry["shown"]:
                self._nothing_pending.discard(entry["agent"])
        self._tell_listeners({entry["agent"] for entry in entries})

    def _tell_listeners(self, agents: set[str]) -> None:
        for listener in self.inbox_listeners:
            for agent in agents:
                listener(agent)

    async def record_message(self, agent: str, message: MAILMessage, kind: str = "") -> None:
        """Keep a message an agent is being shown in its inbox (agents with `inbox`)."""
        if "inbox" not in self.groups(agent):
            return
        payload: Any = message["message"]
        sender = payload["sender"]
        if sender["address_type"] == "system":
            return
        routing = payload.get("routing_info") or {}
        if routing.get("inbox_entry"):
            return  # already in the inbox (an urgent thread post)
        entry = self.inbox_entry(
            agent,
            kind or ("broadcast" if message["msg_type"] == "broadcast" else "direct"),
            sender["address"],
            str(payload.get("body", "")),
            payload["task_id"],
            subject=str(payload.get("subject", "")),
            shown=True,
            attachments=list(routing.get("attachments") or []),
        )
        # Filed whatever the caller's bound: the message reached the agent already.
        stored = self.rt.stored_bytes
        if stored.ledger is not None:  # no bound, nothing to size
            stored.book_team(text_bytes(entry))
        await self.store.add_inbox_entries(self.key, [entry])
        self._tell_listeners({agent})

    async def before_turn(
        self, task_id: str, agent: str, message: MAILMessage, history: list[dict[str, Any]]
    ) -> None:
        """Runtime hook: file the incoming message, then show pending quiet posts as a digest."""
        groups = self.groups(agent)
        if not groups:
            return
        try:
            await self.record_message(agent, message)
            if agent in self._nothing_pending or not ({"threads", "inbox"} & groups):
                return
            pending = await self.store.inbox(self.key, agent, unshown_only=True)
            if not pending:
                self._nothing_pending.add(agent)
                return
            pending.reverse()  # oldest first reads naturally
            shown = pending[-DIGEST_LIMIT:]
            history.append({"role": "user", "content": digest_text(shown, len(pending))})
            await self.store.mark(self.key, agent, [e["entry_id"] for e in pending], field="shown")
            self._nothing_pending.add(agent)
        except Exception:  # noqa: BLE001 - a store hiccup must not cost the turn
            logger.exception("team inbox update failed for %s on task %s", agent, task_id)

    async def get_messages(
        self, agent: str, thread_id: str | None, limit: int, since: str | None
    ) -> list[Record]:
        entries = await self.store.inbox(
            self.key, agent, thread_id=thread_id, since=since, limit=limit
        )
        unread = [e["entry_id"] for e in entries if not e.get("read")]
        if unread:
            await self.store.mark(self.key, agent, unread, field="read")
        return entries

    async def unread_for(self, agent: str) -> dict[str, int]:
        counts = await self.store.unread_counts(self.key)
        return counts.get(agent, {})


def digest_text(entries: list[Record], total: int) -> str:
    lines = [
        f"{DIGEST_PREFIX} ({total} new; use get_messages for details when you have the "
        "inbox tools):"
    ]
    if total > len(entries):
        lines.append(f"(showing the latest {len(entries)})")
    for entry in entries:
        where = f"thread {entry['thread_id']}" if entry.get("thread_id") else entry["kind"]
        title = entry.get("subject") or ""
        head = f"[{where}{(' ' + repr(title)) if title else ''}] {entry['sender']}"
        lines.append(f"- {head} at {entry['timestamp']}: {entry['body']}")
    return "\n".join(lines)
