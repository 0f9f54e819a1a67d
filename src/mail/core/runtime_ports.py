"""The interfaces the runtime's components are given, and the context of one agent turn."""

from __future__ import annotations

import asyncio
import uuid
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from typing import Any, Concatenate, Generic, ParamSpec, Protocol, TypeVar, cast

from mail.core.actions import ActionCore, ActionOverrideFunction
from mail.core.agents import AgentCore
from mail.core.events import Description, TaskEvent
from mail.core.mailbox import Mailbox
from mail.core.memory import AgentMemory
from mail.core.message import MAILMessage
from mail.core.observer import RuntimeObserver
from mail.core.stored_bytes import StoredBytes
from mail.core.tasks import MAILTask, OpenTasks
from mail.core.tools import AgentToolCall


class TurnContext:
    """What the tool handlers of one turn share.

    A plain class (one is made per turn): `batch` is every message shown to the agent this
    turn (batched delivery), `message` the first of them; `notices` counts the runtime
    notices the turn's handlers queued for the agent (see `tool_handlers.notify`);
    `step_ids` what the ids of the messages its calls send derive from when the answer was
    kept before the turn acted on it (`sent_id`), None when they are new ones.
    """

    __slots__ = (
        "task_id",
        "agent_name",
        "message",
        "history",
        "action_errors",
        "actions_ran",
        "breakpoint_hit",
        "batch",
        "notices",
        "step_ids",
    )

    def __init__(
        self,
        task_id: str,
        agent_name: str,
        message: MAILMessage,
        history: list[dict[str, Any]],
        action_errors: list[tuple[str, str]] | None = None,
        actions_ran: bool = False,
        breakpoint_hit: bool = False,
        batch: list[MAILMessage] | None = None,
        notices: int = 0,
    ) -> None:
        self.task_id = task_id
        self.agent_name = agent_name
        self.message = message
        self.history = history
        self.action_errors: list[tuple[str, str]] = [] if action_errors is None else action_errors
        self.actions_ran = actions_ran
        self.breakpoint_hit = breakpoint_hit
        self.batch: list[MAILMessage] = batch if batch else [message]
        self.notices = notices
        self.step_ids: tuple[uuid.UUID, dict[int, int]] | None = None

    def keep_step(self, step: str | None, calls: list[AgentToolCall]) -> None:
        """The answer `calls` was kept as step `step`: what the i-th call sends gets ids
        derived from both (`sent_id`), so a re-run of the step after a crash sends it again
        under the same ids (a peer keeps one copy)."""
        if step is not None:
            self.step_ids = (uuid.UUID(step), {id(c): i for i, c in enumerate(calls)})

    def sent_id(self, call: AgentToolCall, what: str = "message") -> str | None:
        """The id (`what`: "message", or the payload's "request", "broadcast", "interrupt")
        of what `call` sends: derived from the step (`keep_step`), or None (a new one)."""
        if self.step_ids is None or (i := self.step_ids[1].get(id(call))) is None:
            return None
        return str(uuid.uuid5(self.step_ids[0], f"{what} {i}"))

    def __repr__(self) -> str:
        return f"TurnContext({self.task_id!r}, {self.agent_name!r})"


class TaskLog(Protocol):
    """Tasks and their events: what every component records into."""

    @property
    def swarm_name(self) -> str: ...
    @property
    def mail_tasks(self) -> dict[str, MAILTask]: ...
    @property
    def open_tasks(self) -> OpenTasks: ...
    @property
    def observer(self) -> RuntimeObserver: ...
    @property
    def interswarm(self) -> Any: ...
    @property
    def stored_bytes(self) -> StoredBytes: ...
    @property
    def last_breakpoint_caller(self) -> dict[str, str]: ...
    @property
    def last_breakpoint_tool_calls(self) -> dict[str, list[Any]]: ...
    @property
    def response_messages(self) -> dict[str, MAILMessage]: ...
    @property
    def max_message_body(self) -> int | None: ...

    def _emit(
        self,
        task_id: str,
        event: str,
        description: Description,
        extra_data: dict[str, Any] | None = None,
    ) -> TaskEvent: ...

    def _ensure_task(
        self, task_id: str, owner: str | None = None, contributors: list[str] | None = None
    ) -> MAILTask: ...

    def _complete_task(self, task_id: str, response: MAILMessage) -> None: ...


class TaskQueues(TaskLog, Protocol):
    """Where a task's pending messages wait (the journal, the mailbox) and the histories
    they end in: the journal's and the multitask strategies' view, with `inboxes`."""

    journal: Any

    @property
    def mailbox(self) -> Mailbox: ...
    @property
    def agent_histories(self) -> Any: ...


class Swarm(TaskLog, Protocol):
    """Who is who in this swarm, and the queue messages to them go into."""

    @property
    def agents(self) -> dict[str, AgentCore]: ...
    @property
    def user_id(self) -> str: ...
    @property
    def mailbox(self) -> Mailbox: ...
    @property
    def _prechecked(self) -> set[str]: ...

    def _is_local_swarm(self, swarm: str | None) -> bool: ...


class TurnLocks(Protocol):
    """One agent's history on one task: its lock, and the turns spawned for the task."""

    async def _acquire_turn(self, key: str) -> None: ...
    def _release_turn(self, key: str) -> None: ...
    def _in_turn(self, key: str) -> AbstractAsyncContextManager[None]: ...
    def history_for(self, task_id: str, agent_name: str) -> list[dict[str, Any]]: ...
    def _save_history(self, task_id: str, agent_name: str) -> None: ...
    def _spawn(self, task_id: str, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]: ...


class ToolHost(Swarm, Protocol):
    """What a tool handler (core/tool_handlers.py, core/team/handlers.py) may use."""

    @property
    def actions(self) -> dict[str, ActionCore]: ...
    @property
    def user_role(self) -> str: ...
    @property
    def memory(self) -> AgentMemory: ...
    @property
    def enable_interswarm(self) -> bool: ...
    @property
    def outstanding_requests(self) -> dict[str, dict[str, int]]: ...
    @property
    def manual_return_messages(self) -> dict[str, asyncio.Future[MAILMessage]]: ...
    @property
    def action_override(self) -> ActionOverrideFunction | None: ...
    @property
    def team(self) -> Any: ...

    def disallowed_targets(self, sender: str, targets: list[str]) -> list[str]: ...
    def other_turns_running(self, task_id: str, me: asyncio.Task[Any] | None = None) -> bool: ...


# A tool handler: the result text the agent sees (`SUCCESS: ...` / `ERROR: ...`) or None.
Handler = Callable[[ToolHost, TurnContext, AgentToolCall], Awaitable[str | None]]


HostT = TypeVar("HostT")
P = ParamSpec("P")
R = TypeVar("R")


class HostLink(Generic[HostT]):
    """A component's link to the runtime it works for, held as a weak reference.

    The runtime holds its components; were each to hold the runtime as well, every runtime
    would be a reference cycle, and one let go of (a swarm dropped, an idle instance
    reclaimed) would stay in memory with every task it kept until the cyclic collector's
    next pass, which then walks all of it. Held weakly, a runtime nobody uses any more is
    freed at once by reference counting. The runtime outlives its components' work: whoever
    runs them (a loop, a turn, a caller waiting) holds the runtime, or a component method
    that took it into a local (``rt = self.host``) before it awaits.
    """

    __slots__ = ("_host_ref",)
    _host_ref: Callable[[], HostT | None]

    def _link(self, host: HostT) -> None:
        self._host_ref = weakref.ref(host)

    @property
    def host(self) -> HostT:
        host = self._host_ref()
        if host is None:
            raise RuntimeError("the runtime this component belongs to is gone")
        return host

    # A copy (copy.copy, copy.deepcopy, pickle) links to the copy of the runtime: the state
    # names the runtime itself, which a deep copy maps to the runtime's copy, and the link is
    # made weak again when the state is set (a weak reference would be copied as it is, and
    # a copied swarm's components would serve the original runtime).
    def __getstate__(self) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        return getattr(self, "__dict__", None), {"host": self._host_ref()}

    def __setstate__(self, state: tuple[dict[str, Any] | None, dict[str, Any]]) -> None:
        attrs, link = state
        if attrs:
            self.__dict__.update(attrs)
        host = link["host"]
        if host is None:  # copied after its runtime was gone: stays gone
            self._host_ref = _gone
        else:
            self._link(host)


def weakly(host: HostT, call: Callable[Concatenate[HostT, P], R]) -> Callable[P, R]:
    """`call` with `host` as its first argument, holding `host` by a weak reference: a
    callback the runtime hands to what it owns (a bound method would be a reference cycle)."""
    return cast("Callable[P, R]", _WeakCall(host, call))


def _gone() -> None:
    return None


class _WeakCall:
    """What `weakly` returns; a copy (copy.deepcopy) calls with the copy of its host."""

    __slots__ = ("_ref", "_call")

    def __init__(self, host: Any, call: Callable[..., Any]) -> None:
        self._ref: Callable[[], Any] = weakref.ref(host) if host is not None else _gone
        self._call = call

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        host = self._ref()
        if host is None:
            raise RuntimeError("the runtime this callback belongs to is gone")
        return self._call(host, *args, **kwargs)

    def __reduce__(self) -> tuple[Any, ...]:
        return _WeakCall, (self._ref(), self._call)
