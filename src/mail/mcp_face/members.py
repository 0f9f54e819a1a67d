"""Outside agents of a swarm instance, one per MCP session: join, leave, inbox wake-ups."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from mail.core import external_agents
from mail.core.message import MAILMessage
from mail.store.base import InstanceKey
from mail.utils.background import hold

logger = logging.getLogger("mail.mcp")


class FaceError(Exception):
    """A tool call that cannot be carried out; the text is what the client reads."""


UNREAD_PAGE = 100  # unread entries looked at first; a filtered wait looks further if need be

Packer = Callable[[list[Any]], tuple[dict[str, Any], int]]


@dataclass(eq=False)
class Member:
    name: str
    inst: Any  # mail.server.instances.Instance
    team: Any  # mail.core.team.TeamService
    caller_id: str
    core: Any = None  # its ExternalAgentCore in the runtime
    max_waits: int = 4
    waits: int = 0  # long-polls running now
    # The task its messages go to when it names none (a UUID, like every task id, so the
    # caller can look it up with GET /task); a fresh one once that task is completed.
    home_task: str = field(default_factory=lambda: str(uuid.uuid4()))
    # Every home task it used: ended when it leaves if no agent ever worked in them.
    home_tasks: set[str] = field(default_factory=set)
    last_task: str | None = None  # the task of the newest message it got
    # Tells the session's client that its inbox changed (MCP notifications), if it asked.
    notify: Callable[[], Awaitable[None]] | None = None
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _taking: asyncio.Lock = field(default_factory=asyncio.Lock)
    _marks: int = 0  # mark_read calls so far (a wait that read before one looks again)
    _listener: Any = None
    _announcing: bool = False
    _announcements: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def runtime(self) -> Any:
        return self.inst.swarm.runtime

    @property
    def active(self) -> bool:
        """Still this agent of the swarm (not left, replaced, or its instance gone)."""
        return self.core is not None and self.runtime.agents.get(self.name) is self.core

    def task_completed(self, task_id: str) -> bool:
        """Is `task_id` a completed task of its runtime (messages to it would be dropped)?"""
        task = self.runtime.mail_tasks.get(task_id)
        if task is None:  # finished and let go of (its store has it)
            return task_id in self.runtime.forgotten_tasks
        return bool(task.completed)

    def default_task(self) -> str:
        """The task a message that names none goes to: that of the newest message it got,
        else its own; when both are completed, a new task of its own."""
        if self.last_task and not self.task_completed(self.last_task):
            return self.last_task
        if self.task_completed(self.home_task):
            self.home_task = str(uuid.uuid4())
        self.home_tasks.add(self.home_task)
        return self.home_task

    def end_idle_home_tasks(self) -> None:
        """Stop its home tasks that only ever held team work (a thread, a file for the
        user): no agent message entered them, so nothing would ever complete them, and they
        stayed running for good, each counted against the caller's
        max_paused_tasks_per_caller, keeping the instance from idle reclaim and their files
        from retention. Stopped, they are finished tasks (a message continues one)."""
        rt = self.runtime
        for task_id in self.home_tasks:
            task = rt.mail_tasks.get(task_id)
            if task is None or not task.is_running:
                continue
            if any(event.event == "new_message" for event in task.events):
                continue  # agents work in it: it completes as tasks do
            task.stop()
            rt.observer.task_changed(task)
        self.home_tasks.clear()

    def wake(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def changed(self) -> asyncio.Event:
        """The event the next inbox entry sets (take it before looking at the inbox)."""
        return self._changed

    def announce(self) -> None:
        """Notify the client that the inbox changed; a burst of messages makes one notice."""
        if self.notify is None or self._announcing:
            return
        self._announcing = True
        hold(self._announcements, asyncio.create_task(self._announce(self.notify)))

    async def _announce(self, notify: Callable[[], Awaitable[None]]) -> None:
        self._announcing = False  # what arrives while this is sent gets a notice of its own
        try:
            await notify()
        except Exception:  # a client that went away: the notice is best effort
            logger.debug("inbox notice to '%s' not sent", self.name, exc_info=True)

    async def unread(
        self,
        sender: str | None = None,
        task_id: str | None = None,
        kind: str | None = None,
        skip: frozenset[str] = frozenset(),
    ) -> list[Any]:
        """Unread entries matching the filters (and not among the ids in `skip`), oldest
        first."""

        def matching(entries: list[Any]) -> list[Any]:
            return [
                e
                for e in entries
                if (sender is None or e.get("sender") == sender)
                and (task_id is None or e.get("task_id") == task_id)
                and (kind is None or e.get("kind") == kind)
                and e.get("entry_id") not in skip
            ]

        store, key = self.team.store, self.team.key
        entries = await store.inbox(
            key, self.name, unread_only=True, oldest_first=True, limit=UNREAD_PAGE
        )
        found = matching(entries)
        if not found and len(entries) == UNREAD_PAGE and (sender or task_id or kind or skip):
            # Older unread ones from others fill the page: look at every unread entry.
            found = matching(await store.inbox(key, self.name, unread_only=True, oldest_first=True))
        return found

    async def unread_total(self) -> int:
        counts = await self.team.store.unread_counts(self.team.key)
        return sum(counts.get(self.name, {}).values())

    async def mark_read(self, entries: list[Any]) -> None:
        if entries:
            ids = [e["entry_id"] for e in entries]
            await self.team.store.mark(self.team.key, self.name, ids, field="read")
            self._marks += 1  # once stored: a read after it sees them read

    async def take(
        self,
        timeout: float,
        packer: Packer,
        sender: str | None = None,
        task_id: str | None = None,
    ) -> tuple[dict[str, Any], bool]:
        """Wait up to `timeout` s for an unread entry matching the filters, then answer with
        `packer(unread entries)` -> (answer, n) and mark the first n read; the rest stay
        unread. Returns (answer, timed_out). At most `max_waits` run at once, and leaving
        ends them."""
        if timeout > 0 and self.waits >= self.max_waits:
            raise FaceError(
                f"you already have {self.waits} waits running, the limit "
                "([server.mcp] max_waits_per_agent); let one finish first"
            )
        self.waits += 1
        try:
            found, marks = await self._wait_unread(timeout, sender=sender, task_id=task_id)
        finally:
            self.waits -= 1
        async with self._taking:  # two waits never hand out the same entry
            if marks != self._marks:  # another call marked entries since: look again
                found = await self.unread(sender, task_id)
            answer, count = packer(found)
            await self.mark_read(found[:count])
        return answer, not found

    async def arrived(self, timeout: float, **filters: Any) -> list[Any]:
        """The unread entries matching `filters` (those of `unread`), waiting up to
        `timeout` s for the first (one known to be on its way: not counted as a wait of the
        client's)."""
        found, _ = await self._wait_unread(timeout, **filters)
        return found

    async def _wait_unread(self, timeout: float, **filters: Any) -> tuple[list[Any], int]:
        """(the unread entries matching, as soon as there is one or time is up; the count
        of mark_read calls when they were read)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            changed = self.changed()
            marks = self._marks
            found = await self.unread(**filters)
            remaining = deadline - loop.time()
            if found or remaining <= 0 or not self.active:
                return found, marks
            try:
                async with asyncio.timeout(remaining):
                    await changed.wait()
            except TimeoutError:
                pass


def ensure_team(inst: Any, team_store: Any, team_settings: Any, swarm_name: str) -> Any:
    """The instance's TeamService, created for a swarm whose own agents use no team tools."""
    runtime = inst.swarm.runtime
    if runtime.team is None:
        from mail.core.team import TeamService

        key = InstanceKey(swarm_name, inst.kind, inst.id)
        runtime.team = TeamService(runtime, team_store, key, team_settings)
    return runtime.team


async def join(
    inst: Any,
    team: Any,
    name: str,
    description: str,
    caller_id: str,
    settings: Any,
    replace: bool = False,
) -> Member:
    """Join `name` to `inst`; with `replace`, an outside agent of that name leaves first
    (one an earlier session of this caller left behind: every outside agent of an instance
    was joined by its one caller)."""
    runtime = inst.swarm.runtime
    old = external_agents.holder(runtime, name)
    if old is not None and not replace:
        raise FaceError(
            f"the name '{name}' is taken by an outside agent; if it is an earlier session "
            "of yours that did not end (it would leave after [server.mcp] "
            "session_idle_timeout), call join_swarm again with replace=true"
        )
    if old is not None and isinstance(old.member, Member):
        leave(old.member)
    max_agents = settings.max_agents_per_instance
    if len(external_agents.external_agents(runtime)) >= max_agents:
        raise FaceError(
            f"this swarm instance already has {max_agents} outside agents, the limit "
            "([server.mcp] max_agents_per_instance); ask one to leave_swarm first"
        )
    member: Member | None = None

    async def sink(task_id: str, message: MAILMessage) -> None:
        if member is None or message["message"]["sender"]["address_type"] == "system":
            return  # runtime notices to an outside agent have no reader
        member.last_task = task_id
        await team.record_message(member.name, message)

    try:
        core = external_agents.join(runtime, name, description, sink)
    except external_agents.JoinError as exc:
        raise FaceError(str(exc)) from None
    member = Member(core.name, inst, team, caller_id, core, settings.max_waits_per_agent)
    core.member = member

    def listener(agent: str) -> None:
        if member is not None and agent == member.name:
            member.wake()
            member.announce()

    member._listener = listener
    _listed_targets(inst, core.name, add=True)
    team.inbox_listeners.append(listener)
    inst.in_use += 1  # a joined instance is never reclaimed as idle
    logger.info("outside agent '%s' joined %s", member.name, inst.owner)
    return member


def leave(member: Member) -> None:
    if not external_agents.leave(member.runtime, member.name, member.core):
        return
    _listed_targets(member.inst, member.name, add=False)
    member.end_idle_home_tasks()
    if member._listener in member.team.inbox_listeners:
        member.team.inbox_listeners.remove(member._listener)
    member.inst.in_use -= 1
    member.inst.touch()
    member.notify = None
    member.wake()
    logger.info("outside agent '%s' left %s", member.name, member.inst.owner)


def _listed_targets(inst: Any, name: str, *, add: bool) -> None:
    """The instance's agent descriptions (GET /swarm, the console graph) link to `name`."""
    for agent in getattr(inst.swarm, "agents", None) or []:
        targets = getattr(agent, "comm_targets", None)
        if not isinstance(targets, list):
            continue
        if add and name not in targets:
            targets.append(name)
        elif not add and name in targets:
            targets.remove(name)
