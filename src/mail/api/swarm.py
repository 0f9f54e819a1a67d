"""MAILSwarm: a running swarm instance (agents + actions + its own runtime)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, ParamSpec, TypeVar

from mail.api.actions import MAILAction
from mail.api.agents import MAILAgent, MAILAgentTemplate
from mail.api.instance_wiring import attach_files, connect_interswarm, review_policy_for
from mail.core.actions import ActionOverrideFunction
from mail.core.compat import server_sent_event_stream, server_sent_events
from mail.core.events import TaskEvent, ping_event
from mail.core.message import (
    MAILInterswarmMessage,
    MAILMessage,
    create_address,
    create_agent_address,
    make_broadcast,
    make_message,
    make_request,
    new_task_id,
)
from mail.core.runtime import MAILRuntime
from mail.core.tasks import MAILTask

if TYPE_CHECKING:
    from sse_starlette import ServerSentEvent

# The longest an answer waits for a store that takes writes slowly (it does not wait at all
# while the store reports an outage): a bound for a store that neither commits nor fails.
_MAX_ANSWER_WAIT = 60.0
# Meanwhile `persistence is lagging` is logged at most this often (seconds): a stream's wait
# goes in rounds of its ping interval, as short as 0.5 s.
_LAG_LOG_INTERVAL = 5.0

logger = logging.getLogger("mail.api")

Direction = Literal["forward", "back"]
P = ParamSpec("P")
AgentT = TypeVar("AgentT", MAILAgent, MAILAgentTemplate)

# The settings a swarm template and its instances both hold, under the same names.
_SHARED_SETTINGS = (
    "name",
    "version",
    "entrypoint",
    "enable_interswarm",
    "breakpoint_tools",
    "exclude_tools",
    "task_message_limit",
    "description",
    "keywords",
    "enable_db_agent_histories",
    "review_ignore_ends_task",
)


def swarm_settings(source: Any) -> dict[str, Any]:
    """`source`'s settings that a template hands to its instances and an instance back to
    a template (`MAILSwarmTemplate.instantiate`, `MAILSwarm.get_subswarm`)."""
    return {name: getattr(source, name) for name in _SHARED_SETTINGS}


class WiredAgents(Generic[AgentT]):
    """What a swarm and its template both tell of their agents' wiring."""

    agents: list[AgentT]

    @property
    def agent_names(self) -> list[str]:
        return [a.name for a in self.agents]

    @property
    def supervisors(self) -> list[AgentT]:
        """The agents that can complete tasks (v1.3 stored them; read from the agents now)."""
        return [a for a in self.agents if a.can_complete_tasks]

    @property
    def adjacency_matrix(self) -> list[list[int]]:
        """``adj[i][j]`` is 1 when agent i may message agent j (order of `agent_names`).

        v1.3 stored the matrix once, in the constructor; this one follows
        `update_from_adjacency_matrix` and edits of the agents' `comm_targets`."""
        names = self.agent_names
        return [[1 if other in a.comm_targets else 0 for other in names] for a in self.agents]

    def _rewire(self, adj: list[list[int]]) -> list[AgentT]:
        """Set each agent's `comm_targets` as `adj` gives them (its remote targets kept)."""
        names = self.agent_names
        if len(adj) != len(names) or any(len(row) != len(names) for row in adj):
            raise ValueError(f"adjacency matrix must be {len(names)}x{len(names)}")
        for agent, row in zip(self.agents, adj, strict=True):
            remote = [t for t in agent.comm_targets if "@" in t]
            agent.comm_targets = [
                n for n, flag in zip(names, row, strict=True) if flag and n != agent.name
            ] + remote
        return self.agents


def _v13_events(
    method: Callable[P, Awaitable[tuple[MAILMessage, list[TaskEvent]]]],
) -> Callable[P, Awaitable[tuple[MAILMessage, list[ServerSentEvent]]]]:
    """v1.3's `post_message` from our `post_message_task_events` (likewise `submit_message`):
    the same arguments, the events as ServerSentEvent objects."""

    @functools.wraps(method)
    async def v13(*args: P.args, **kwargs: P.kwargs) -> tuple[MAILMessage, list[ServerSentEvent]]:
        response, events = await method(*args, **kwargs)
        return response, server_sent_events(events) if events else []

    v13.__name__ = method.__name__.removesuffix("_task_events")
    v13.__qualname__ = method.__qualname__.removesuffix("_task_events")
    v13.__doc__ = (
        f"`{method.__name__}`, with the events as ``sse_starlette.ServerSentEvent`` objects "
        "(``data`` a dict), as v1.3 gave them."
    )
    return v13


class MAILSwarm(WiredAgents[MAILAgent]):
    """One instance of a swarm for one caller; owns a MAILRuntime."""

    # MAILSwarmTemplate, set by mail.api.swarm_template: a template makes instances (it
    # imports this module), so an instance reaches its template class through this slot.
    template_type: ClassVar[Callable[..., Any]]

    def __init__(
        self,
        name: str,
        version: str,
        agents: list[MAILAgent],
        actions: list[MAILAction],
        entrypoint: str,
        user_id: str = "default",
        user_role: Literal["admin", "agent", "user", "swarm"] | str = "user",
        swarm_registry: Any = None,
        enable_interswarm: bool = False,
        breakpoint_tools: list[str] | None = None,
        exclude_tools: list[str] | None = None,
        task_message_limit: int | None = None,
        description: str = "",
        keywords: list[str] | None = None,
        enable_db_agent_histories: bool | None = None,
        print_llm_streams: bool = True,
        base_url: str = "http://localhost:8000",
        review_ignore_ends_task: bool = True,
        batch_delivery: bool = True,
    ) -> None:
        self.name = name
        self.version = version
        self.agents: list[MAILAgent] = list(agents)
        self.actions: list[MAILAction] = list(actions)
        self.entrypoint = entrypoint
        self.user_id = user_id
        self.user_role = user_role
        self.swarm_registry = swarm_registry
        # Peers' answers parked in the store for this instance (`attach_store` reads them).
        self.parked_answers: dict[str, list[dict[str, Any]]] = {}
        # The registry this swarm was built with; `shutdown` stops its health checks. One
        # put in its place later (`mail server` gives every instance the server's own) is
        # shared, and outlives the instance.
        self._built_registry = swarm_registry
        self.enable_interswarm = enable_interswarm
        self.breakpoint_tools = list(breakpoint_tools or [])
        self.exclude_tools = list(exclude_tools or [])
        self.task_message_limit = task_message_limit
        self.description = description
        self.keywords = list(keywords or [])
        self.enable_db_agent_histories = enable_db_agent_histories
        self.base_url = base_url
        self.review_ignore_ends_task = review_ignore_ends_task
        self.runtime = MAILRuntime(
            agents={a.name: a.to_core() for a in agents},
            actions={a.name: a.to_core() for a in actions},
            user_id=user_id,
            user_role=str(user_role),
            swarm_name=name,
            entrypoint=entrypoint,
            swarm_registry=swarm_registry,
            enable_interswarm=enable_interswarm,
            breakpoint_tools=self.breakpoint_tools,
            exclude_tools=self.exclude_tools,
            enable_db_agent_histories=enable_db_agent_histories,
            print_llm_streams=print_llm_streams,
            review_policy=review_policy_for(agents, actions, review_ignore_ends_task),
            batch_delivery=batch_delivery,
        )
        from mail.api.compression import compress_history

        self.runtime.default_max_steps = task_message_limit

        self.runtime.context_compressor = compress_history
        self._loop_task: asyncio.Task[None] | None = None
        self._owned_store: Any = None  # a store `load_tasks_from_db` opened; shutdown closes it
        if any(a.team_tools for a in agents):
            self.attach_team_store(None)

    # ------------------------------------------------------------------ messages
    def build_message(
        self,
        subject: str,
        body: str,
        targets: list[str],
        sender_type: str = "user",
        type: str = "request",
        task_id: str | None = None,
    ) -> MAILMessage:
        """A message from this instance's caller to `targets` (request or broadcast)."""
        task_id = task_id or new_task_id()  # time-ordered: see new_task_id
        sender = create_address(self.user_id, sender_type)  # type: ignore[arg-type]
        if type == "request":
            if len(targets) != 1:
                raise ValueError("a request needs exactly one target")
            payload: Any = make_request(
                task_id,
                sender,
                create_agent_address(targets[0]),
                subject,
                body,
                sender_swarm=self.name,
                recipient_swarm=self.name,
            )
        elif type == "broadcast":
            payload = make_broadcast(
                task_id, sender, [create_agent_address(t) for t in targets], subject, body
            )
        else:
            raise NotImplementedError(f"type '{type}' not implemented for this method")
        return make_message(payload, type)

    def _user_message(
        self,
        body: str,
        subject: str,
        msg_type: str,
        entrypoint: str | None,
        task_id: str | None,
    ) -> MAILMessage:
        entry = (entrypoint or "").strip() or self.entrypoint
        sender_type = self.user_role if self.user_role in ("admin", "user") else "user"
        return self.build_message(subject, body, [entry], sender_type, msg_type, task_id)

    # ------------------------------------------------------------------ posting
    async def post_message_task_events(
        self,
        body: str = "",
        subject: str = "New Message",
        msg_type: str = "request",
        entrypoint: str | None = None,
        show_events: bool = False,
        timeout: float = 3600.0,
        task_id: str | None = None,
        resume_from: str | None = None,
        **kwargs: Any,
    ) -> tuple[MAILMessage, list[TaskEvent]]:
        """Send a message from the caller and wait for the task's final response.

        Works whether or not `run_continuous` is running: without a loop, the task is run
        to completion here. With `show_events`, the events this request added come back as
        TaskEvent records (v1.3's `post_message` gives them as ServerSentEvent objects).
        """
        message = self._user_message(body, subject, msg_type, entrypoint, task_id)
        attach_files(message, kwargs.pop("attachments", None))
        return await self.submit_message_task_events(
            message, timeout, show_events, resume_from, **kwargs
        )

    post_message = _v13_events(post_message_task_events)

    async def post_message_and_run(
        self,
        body: str = "",
        subject: str = "New Message",
        msg_type: str = "request",
        entrypoint: str | None = None,
        show_events: bool = False,
        task_id: str | None = None,
        resume_from: str | None = None,
        max_steps: int | None = None,
        action_override: ActionOverrideFunction | None = None,
        timeout: float = 3600.0,
        **kwargs: Any,
    ) -> tuple[MAILMessage, list[ServerSentEvent]]:
        message = self._user_message(body, subject, msg_type, entrypoint, task_id)
        response, events = await self._run_to_answer(
            message,
            show_events,
            action_override=action_override,
            resume_from=resume_from,
            max_steps=max_steps,
            timeout=timeout,
            **kwargs,
        )
        return response, server_sent_events(events) if events else []

    async def submit_message_task_events(
        self,
        message: MAILMessage,
        timeout: float = 3600.0,
        show_events: bool = False,
        resume_from: str | None = None,
        **kwargs: Any,
    ) -> tuple[MAILMessage, list[TaskEvent]]:
        """Submit a complete MAILMessage and wait for its task's answer (see
        `post_message_task_events`)."""
        return await self._run_to_answer(
            message,
            show_events,
            action_override=None,
            resume_from=resume_from,
            timeout=timeout,
            **kwargs,
        )

    submit_message = _v13_events(submit_message_task_events)

    async def _run_to_answer(
        self, message: MAILMessage, show_events: bool, **run_task: Any
    ) -> tuple[MAILMessage, list[TaskEvent]]:
        """Run `message`'s task until it answers (`runtime.run_task`), make it durable, and
        return the answer with, when `show_events`, the events the task added meanwhile."""
        task_id = message["message"]["task_id"]
        start = self.runtime.event_count(task_id)
        response = await self.runtime.run_task(message, **run_task)
        await self._flush_before_answer()
        if not show_events:
            return response, []
        return response, self.runtime.get_task_events(task_id)[start:]

    async def _flush_before_answer(self, timeout: float = 5.0) -> None:
        """Make a finished (or paused) task durable before its caller hears about it.

        Waits while the store takes writes (logged every `_LAG_LOG_INTERVAL` s, at most
        `_MAX_ANSWER_WAIT` in all); skipped while the store reports an outage or once it has
        stopped: the writes stay queued and land when the database is back, and the caller
        still gets its answer now.
        """
        async for _ in self._flush_rounds(timeout):
            pass

    async def _flush_rounds(self, timeout: float) -> AsyncGenerator[None, None]:
        """`_flush_before_answer` in rounds of `timeout` s, yielding after each round that
        ended with the writes still pending (a stream sends a ping there)."""
        observer = getattr(self, "_store_observer", None)
        if observer is None:
            return
        degraded = getattr(observer.store, "is_degraded", None)
        timeout = max(timeout, 0.5)
        clock = asyncio.get_running_loop().time
        begun = clock()
        logged = 0.0  # the wait last logged, at most every `_LAG_LOG_INTERVAL` s
        while not (callable(degraded) and degraded()):
            started = clock()
            if await observer.flush(timeout):
                return
            waited = clock() - begun
            if waited - logged >= _LAG_LOG_INTERVAL:
                logged = waited
                logger.warning(
                    "persistence is lagging: task data not yet written after %.0fs", waited
                )
            if clock() - started < timeout / 2 or waited >= _MAX_ANSWER_WAIT:
                return  # it did not wait (the store has stopped), or the safety bound
            yield

    async def flush_before_answer(self, timeout: float = 5.0) -> None:
        """`_flush_before_answer` for a caller told of a task some other way than by
        `post_message` or `stream_events` (a server's answer to an interswarm delivery)."""
        await self._flush_before_answer(timeout)

    async def submit_message_nowait(self, message: MAILMessage, **kwargs: Any) -> None:
        """Queue a complete MAILMessage without waiting for its task."""
        self.runtime.submit(message)

    # ------------------------------------------------------------------ streaming
    async def stream_events(
        self,
        body: str = "",
        subject: str = "New Message",
        msg_type: str = "request",
        entrypoint: str | None = None,
        timeout: float = 3600.0,
        task_id: str | None = None,
        resume_from: str | None = None,
        ping_interval: float = 15.0,
        *,
        on_stored: Callable[[], Any] | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[TaskEvent]:
        """The task's events as TaskEvent records, ending with task_complete/task_error.

        See `submit_events` for when events leave and what `on_stored` is."""
        message = self._user_message(body, subject, msg_type, entrypoint, task_id)
        attach_files(message, kwargs.pop("attachments", None))
        async for event in self.submit_events(
            message, timeout, resume_from, ping_interval, on_stored=on_stored, **kwargs
        ):
            yield event

    async def submit_events(
        self,
        message: MAILMessage,
        timeout: float = 3600.0,
        resume_from: str | None = None,
        ping_interval: float = 15.0,
        *,
        on_stored: Callable[[], Any] | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[TaskEvent]:
        """`stream_events` for a complete MAILMessage."""

        acknowledged = False  # the caller was told the message was taken (pings may go out)

        async def submitted() -> None:
            nonlocal acknowledged
            await self._flush_before_answer()
            acknowledged = True
            if on_stored is not None:
                stored = on_stored()
                if inspect.isawaitable(stored):  # (it may wait for more, or refuse: raise)
                    await stored

        async with self.runtime.ephemeral_loop(self.task_message_limit):  # loop-wide default
            async for event in self.runtime.stream_task_events(
                message, timeout, resume_from, ping_interval, on_submitted=submitted, **kwargs
            ):
                if event.event in ("task_complete", "task_error"):
                    rounds = self._flush_rounds(min(ping_interval, 5.0))
                    async with contextlib.aclosing(rounds):
                        async for _ in rounds:
                            if acknowledged:  # (a refused message's task_error goes out alone)
                                yield ping_event(event.task_id)
                yield event

    def stream_message(self, *args: Any, **kwargs: Any) -> AsyncIterator[ServerSentEvent]:
        """Like `stream_events`, as `sse_starlette.ServerSentEvent` objects."""
        return server_sent_event_stream(self.stream_events(*args, **kwargs))

    async def post_message_stream(self, *args: Any, **kwargs: Any) -> Any:
        """An `EventSourceResponse` streaming the task (for use inside a FastAPI route)."""
        from sse_starlette import EventSourceResponse

        return EventSourceResponse(self.stream_message(*args, **kwargs))

    async def submit_message_stream(
        self,
        message: MAILMessage,
        timeout: float = 3600.0,
        resume_from: str | None = None,
        **kwargs: Any,
    ) -> Any:
        from sse_starlette import EventSourceResponse

        return EventSourceResponse(
            server_sent_event_stream(self.submit_events(message, timeout, resume_from, **kwargs))
        )

    # ------------------------------------------------------------------ loop control
    async def run_continuous(
        self,
        max_steps: int | None = None,
        action_override: ActionOverrideFunction | None = None,
        mode: Literal["continuous", "manual"] = "continuous",
    ) -> None:
        limit = max_steps if max_steps is not None else self.task_message_limit
        await self.runtime.run_continuous(limit, action_override, mode)

    async def manual_step(
        self, task_id: str, target: str, *args: Any, **kwargs: Any
    ) -> MAILMessage:
        return await self.runtime.manual_step(task_id, target, *args, **kwargs)

    async def await_queue_empty(self) -> None:
        await self.runtime.await_queue_empty()

    async def shutdown(self) -> None:
        await self.runtime.shutdown()
        observer = getattr(self, "_store_observer", None)
        if observer is not None:
            await observer.close()
        owned, self._owned_store = self._owned_store, None
        if owned is not None:
            await owned.close()
        registry = self.swarm_registry
        if registry is None or registry is not self._built_registry:
            return
        if hasattr(registry, "stop_health_checks"):
            await registry.stop_health_checks()

    # ------------------------------------------------------------------ persistence
    async def attach_store(self, store: Any, key: Any = None, *, load_finished: bool = True) -> int:
        """Restore this instance's tasks from `store` and persist from now on; returns how many.

        `load_finished=False` loads only the running and paused tasks.
        """
        from mail.api.persistence import StoreObserver, restore_snapshot
        from mail.api.stored_tasks import load_open_snapshot
        from mail.core.runtime_durable import TaskJournal
        from mail.store.base import InstanceKey
        from mail.store.lifecycle import PARKED_SUFFIX

        key = key or InstanceKey(self.name, str(self.user_role), self.user_id)
        if load_finished:
            snapshot = await store.load_instance(key)
        else:
            snapshot = await load_open_snapshot(store, key)
        persist_histories = self.enable_db_agent_histories is not False
        observer = StoreObserver(self.runtime, store, key, persist_histories=persist_histories)
        # Running tasks continue after a restart only when their histories are stored too.
        touch = observer.journal_touched if observer.takes_live_journal else None
        journal: TaskJournal | None = None
        if persist_histories:
            journal = TaskJournal(
                self.runtime, observer.journal_changed, touch, self.runtime.delivery.steps
            )
        restored = restore_snapshot(self.runtime, snapshot, journal)
        # Peers' answers that came while this instance was not loaded (a server delivers them
        # once it runs: `mail.server.parked_answers`), by task id.
        self.parked_answers = {
            name[: -len(PARKED_SUFFIX)]: list(items)
            for name, items in snapshot.queues.items()
            if name.endswith(PARKED_SUFFIX) and items
        }
        observer.stored_queues(snapshot.queues)
        observer.start()
        self.runtime.observer = observer
        if journal is not None:
            journal.install()
        self._store_observer: StoreObserver | None = observer
        return restored

    def attach_team_store(self, store: Any = None, settings: Any = None, key: Any = None) -> None:
        """Threads, inboxes and attachments of this instance live in `store`.

        Without a store they are kept in memory. Only swarms with an agent that opted into
        `team_tools` get a team service; for the others this does nothing.
        """
        if not any(a.team_tools for a in self.agents):
            return
        from mail.core.team import TeamService
        from mail.store.base import InstanceKey
        from mail.store.team_base import SqliteTeamStore

        key = key or InstanceKey(self.name, str(self.user_role), self.user_id)
        current = self.runtime.team
        self.runtime.team = TeamService(
            self.runtime,
            store if store is not None else SqliteTeamStore(),
            key,
            settings if settings is not None else (current.settings if current else None),
        )

    @property
    def team(self) -> Any:
        """The instance's `TeamService` (None when no agent uses team tools)."""
        return self.runtime.team

    async def flush_store(self, timeout: float | None = None) -> bool:
        observer = getattr(self, "_store_observer", None)
        return True if observer is None else await observer.flush(timeout)

    # v1.3's server called these right after `instantiate`; here an instance with a store
    # restores everything when the store is attached (`mail server` attaches its store to
    # every instance), so they only attach one when the instance has none and DATABASE_URL
    # names a database, as v1.3 read it.
    async def load_agent_histories_from_db(self) -> None:
        """Restore stored tasks and agent histories (v1.3; see `attach_store`)."""
        await self._load_from_database()

    async def load_tasks_from_db(self) -> None:
        """Restore stored tasks, their events and answers (v1.3; see `attach_store`)."""
        await self._load_from_database()

    async def _load_from_database(self) -> None:
        if self.enable_db_agent_histories is False:
            return  # the swarm keeps its histories out of the database
        if getattr(self, "_store_observer", None) is not None:
            return  # restored when the store was attached
        from mail.store import create_store, database_url_from_env

        url = database_url_from_env()
        if url is None:
            return
        store = create_store(url)
        await store.start()
        self._owned_store = store
        await self.attach_store(store)

    # ------------------------------------------------------------------ interswarm
    async def start_interswarm(self, router: Any = None) -> None:
        """Connect this instance to other swarms (through `router`, or one of its own)."""
        if not self.enable_interswarm or self.runtime.interswarm is not None:
            return
        await connect_interswarm(self.runtime, self.swarm_registry, router)

    async def stop_interswarm(self) -> None:
        await self.runtime.stop_interswarm()

    async def is_interswarm_running(self) -> bool:
        """Whether this instance is connected to other swarms (a coroutine, as in v1.3)."""
        return self.runtime.interswarm is not None

    def accept_interswarm_message(self, envelope: Any, direction: str = "forward") -> str:
        """Accept an envelope from /interswarm/forward or /back; returns the task id.

        (`await receive_interswarm_message(...)` is v1.3's coroutine over this.)
        """
        if self.runtime.interswarm is None:
            raise RuntimeError(f"interswarm is not running for swarm '{self.name}'")
        return self.runtime.interswarm.receive(envelope, direction)  # type: ignore[no-any-return]

    def receive_interswarm_progress(
        self, task_id: str, source_swarm: str, description: str, extra: dict[str, Any]
    ) -> bool:
        """Record a peer's update on its work for `task_id` (`interswarm_message_progress`)."""
        if self.runtime.interswarm is None:
            return False
        return self.runtime.interswarm.receive_progress(  # type: ignore[no-any-return]
            task_id, source_swarm, description, extra
        )

    # v1.3's interswarm methods raise ValueError, as v1.3's did: when interswarm is not
    # running, and for an envelope or a send that fails.
    def _router(self) -> Any:
        router = self.runtime.interswarm_router
        if router is None:
            raise ValueError("interswarm router not available")
        return router

    async def receive_interswarm_message(
        self, message: MAILInterswarmMessage, direction: Direction = "forward"
    ) -> str:
        """Take an envelope from another swarm (``/interswarm/forward`` or ``/back``);
        returns the task id (v1.3 returned None). `accept_interswarm_message` is the same
        without the coroutine and with our error types."""
        self._router()
        if direction not in ("forward", "back"):
            raise ValueError(f"invalid direction: {direction}")
        try:
            return self.accept_interswarm_message(message, direction)
        except Exception as exc:
            raise ValueError(f"error routing interswarm message: {exc}") from exc

    async def send_interswarm_message(
        self, message: MAILInterswarmMessage, direction: Direction = "forward"
    ) -> None:
        """POST an envelope to its target swarm's ``/interswarm/forward`` or ``/back``."""
        router = self._router()
        if direction not in ("forward", "back"):
            raise ValueError(f"invalid direction: {direction}")
        try:
            await router.send_interswarm(message, direction)
        except Exception as exc:
            raise ValueError(f"error sending interswarm message: {exc}") from exc

    async def post_interswarm_user_message(self, message: MAILInterswarmMessage) -> MAILMessage:
        """Send an envelope's request to its target swarm as a user message (the envelope's
        ``auth_token`` is the user's token); returns the remote swarm's answer."""
        return await self._router().post_envelope_as_user_message(message)

    # ------------------------------------------------------------------ wiring
    @property
    def agents_by_name(self) -> dict[str, MAILAgent]:
        """`agents` keyed by name (the documented attribute is the list)."""
        return {a.name: a for a in self.agents}

    @property
    def actions_by_name(self) -> dict[str, MAILAction]:
        """`actions` keyed by name (the documented attribute is the list)."""
        return {a.name: a for a in self.actions}

    def update_from_adjacency_matrix(self, adj: list[list[int]]) -> None:
        for agent in self._rewire(adj):
            self.runtime.agents[agent.name].comm_targets = list(agent.comm_targets)

    def get_subswarm(
        self, names: list[str], name_suffix: str, entrypoint: str | None = None
    ) -> Any:
        """A ``MAILSwarmTemplate`` of some of this instance's agents, as they are wired now."""
        template = self.template_type(
            agents=[a._to_template(self.agent_names) for a in self.agents],
            actions=list(self.actions),
            **swarm_settings(self),
        )
        return template.get_subswarm(names, name_suffix, entrypoint)

    # ------------------------------------------------------------------ inspection
    def get_events(self, task_id: str) -> list[ServerSentEvent]:
        """The task's events as ``sse_starlette.ServerSentEvent`` objects (``data`` a dict)."""
        return self.runtime.get_events_by_task_id(task_id)

    def get_task_events(self, task_id: str) -> list[TaskEvent]:
        """The task's events as TaskEvent records."""
        return self.runtime.get_task_events(task_id)

    def get_response_message(self, task_id: str) -> MAILMessage | None:
        return self.runtime.get_response_message(task_id)

    @property
    def print_llm_streams(self) -> bool:
        """Whether agents print model output as it streams (set on every agent function)."""
        return self.runtime.print_llm_streams

    @print_llm_streams.setter
    def print_llm_streams(self, value: bool) -> None:
        self.runtime.set_print_llm_streams(value)

    def get_all_tasks(self) -> dict[str, MAILTask]:
        return dict(self.runtime.mail_tasks)

    def get_task_by_id(self, task_id: str) -> MAILTask | None:
        return self.runtime.get_task_by_id(task_id)

    def get_pending_requests(self) -> dict[str, asyncio.Future[MAILMessage]]:
        return self.runtime.pending_requests
