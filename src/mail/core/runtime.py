"""MAILRuntime: one instance's mailbox, tasks, agent histories and scheduling loop."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import importlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

from mail.core.actions import ActionCore, ActionOverrideFunction
from mail.core.agent_histories import AgentHistories
from mail.core.agent_wiring import apply_print_flag, attach_recall
from mail.core.agents import AgentCore
from mail.core.compat import (
    DONE,
    RecentQueue,
    run_submitted_task,
    server_sent_event_stream,
    server_sent_events,
)
from mail.core.events import Description, TaskEvent
from mail.core.loop_guard import LoopGuard
from mail.core.mailbox import Mailbox
from mail.core.memory import AgentMemory, InMemoryAgentMemory
from mail.core.message import MAILMessage
from mail.core.observer import RuntimeObserver
from mail.core.review import ReviewPolicy
from mail.core.runtime_batching import AgentInboxes
from mail.core.runtime_delivery import Delivery
from mail.core.runtime_loops import LoopRunner, RunMode
from mail.core.runtime_manual import ManualStepper, manual_routing
from mail.core.runtime_multitask import Multitask
from mail.core.runtime_ports import TurnContext, weakly
from mail.core.runtime_resume import Submissions
from mail.core.runtime_review import ActionReviewer
from mail.core.runtime_turns import TurnRunner
from mail.core.runtime_waiting import TaskWaiters
from mail.core.stored_bytes import StoredBytes
from mail.core.system_messages import system_task_end
from mail.core.tasks import RUNTIME_EVENTS, MAILTask, OpenTasks, TaskState, state_for_answer
from mail.core.tools import AgentToolCall
from mail.telemetry.budget import BUDGET_SUBJECT
from mail.telemetry.meter import TaskMeter
from mail.utils.background import finish

if TYPE_CHECKING:
    from sse_starlette import ServerSentEvent

logger = logging.getLogger("mail.runtime")

DEFAULT_MAX_MESSAGE_BODY = 1024 * 1024

# Builds the interswarm bridge of `start_interswarm` (mail.api sits above the runtime).
INTERSWARM_CONNECTOR = "mail.api.instance_wiring:connect_interswarm"

# The key of one agent's history on one task in `agent_histories` (v1.3's name for it).
AGENT_HISTORY_KEY = "{task_id}::{agent_name}"

# How many answers `response_queue` keeps when nobody reads them.
RESPONSE_QUEUE_SIZE = 1000


class MAILRuntime:
    """The runtime of one swarm instance (one user, admin, or remote swarm)."""

    def __init__(
        self,
        agents: dict[str, AgentCore],
        actions: dict[str, ActionCore],
        user_id: str,
        user_role: str = "user",
        swarm_name: str = "example",
        entrypoint: str = "supervisor",
        swarm_registry: Any = None,
        enable_interswarm: bool = False,
        breakpoint_tools: list[str] | None = None,
        exclude_tools: list[str] | None = None,
        enable_db_agent_histories: bool | None = False,
        print_llm_streams: bool = True,
        memory: AgentMemory | None = None,
        observer: RuntimeObserver | None = None,
        review_policy: ReviewPolicy | None = None,
        batch_delivery: bool = True,
    ) -> None:
        self.agents = agents
        self.actions = actions
        self.user_id = user_id
        self.user_role = user_role
        self.swarm_name = swarm_name
        self.entrypoint = entrypoint
        self.swarm_registry = swarm_registry
        self.enable_interswarm = enable_interswarm
        self.breakpoint_tools = list(breakpoint_tools or [])
        self.exclude_tools = list(exclude_tools or [])
        self.enable_db_agent_histories = enable_db_agent_histories
        self.memory: AgentMemory = memory or InMemoryAgentMemory()
        self._observer: RuntimeObserver = observer or RuntimeObserver()
        self._observing = type(self._observer) is not RuntimeObserver
        self.interswarm: Any = None  # set by the interswarm layer when enabled
        self.team: Any = None  # TeamService when an agent opted into team tools
        # async (history, ratio, model) -> bool; shrinks a history in place (manual_step)
        self.context_compressor: Any = None

        self.this_owner = f"{user_role}:{user_id}@{swarm_name}"
        self.mailbox = Mailbox()
        self.mail_tasks: dict[str, MAILTask] = {}
        self.open_tasks = OpenTasks(weakly(self, type(self)._is_open))  # running or paused
        self.agent_histories: dict[str, list[dict[str, Any]]] = AgentHistories()
        self.response_messages: dict[str, MAILMessage] = {}
        # ids of finished tasks let go of (core/finished_tasks.py): their store has them
        self.forgotten_tasks: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._response_queue: RecentQueue | None = None  # made when response_queue is read
        self.outstanding_requests: dict[str, dict[str, int]] = {}
        self.last_breakpoint_caller: dict[str, str] = {}
        self.last_breakpoint_tool_calls: dict[str, list[Any]] = {}
        # The runtime's own events (shutdown, loop cancelled), under id "*", never stored.
        self.runtime_events: list[TaskEvent] = []
        # messages delivered to an agent of a task, waiting for its next turn
        self.inboxes = AgentInboxes(batch=batch_delivery)
        # pending work of running tasks, kept while a store is attached (runtime_durable)
        self.journal: Any = None

        # Longest message body (characters) a caller or an agent may send; None = no cap.
        self.max_message_body: int | None = DEFAULT_MAX_MESSAGE_BODY
        self.max_steps: int | None = None
        self.default_max_steps: int | None = None  # limit of loops started by post_message
        self.mode: RunMode = "continuous"
        self.action_override: ActionOverrideFunction | None = None
        # Turn bound and repeated-failure stop per task (see core/loop_guard.py).
        self.loop_guard = LoopGuard()
        # What the tasks store, booked into the caller's books (the server sets its ledger).
        self.stored_bytes = StoredBytes()
        # Spans, model calls, budgets (mail.telemetry.meter); callbacks hold the runtime weakly.
        self.meter = TaskMeter(
            weakly(self, type(self)._emit),
            weakly(self, type(self)._pause_for_budget),
            weakly(self, lambda rt, t: rt.mail_tasks.get(t)),
            weakly(self, lambda rt: rt.swarm_name),
        )

        # "{task}::{agent}" -> turns waiting for it (present = busy; None: none waits, no deque)
        self._turn_gates: dict[str, collections.deque[asyncio.Future[None]] | None] = {}
        self._turns: set[asyncio.Task[Any]] = set()
        # task id -> its spawned turns; a turn stays here until its done callback has run
        self._turns_by_task: dict[str, set[asyncio.Task[Any]]] = {}
        self._idle = asyncio.Event()
        self._idle.set()
        self._shutdown = False

        # The components, each given this runtime as the interface it declares.
        self.delivery = Delivery(self, self.inboxes)
        self.turns = TurnRunner(self, self.inboxes, self.delivery.steps)
        self.loops = LoopRunner(self)
        self.submissions = Submissions(self, self.delivery.steps)
        self.manual = ManualStepper(self)
        self.waiters = TaskWaiters(self)  # callers waiting for a task's answer
        self.multitask = Multitask(self)  # messages to a task that is still running
        self.review = ActionReviewer(self, review_policy)  # human review of actions
        # Shared with the components that own them (same objects, no copies).
        self._prechecked = self.delivery.prechecked
        self.manual_message_buffer = self.manual.message_buffer
        self.manual_return_messages = self.manual.return_messages
        self.print_llm_streams = print_llm_streams
        self.set_print_llm_streams(print_llm_streams)
        for name, agent in self.agents.items():
            attach_recall(agent.function, functools.partial(weakly(self, type(self).recall), name))

    @property
    def batch_delivery(self) -> bool:
        """Whether messages waiting for an agent reach it together, in one turn."""
        return self.inboxes.batch

    @batch_delivery.setter
    def batch_delivery(self, value: bool) -> None:
        self.inboxes.batch = value

    @property
    def observer(self) -> RuntimeObserver:
        return self._observer

    @observer.setter
    def observer(self, value: RuntimeObserver) -> None:
        self._observer = value
        self._observing = type(value) is not RuntimeObserver

    # ------------------------------------------------------------------ configuration
    def set_print_llm_streams(self, value: bool) -> None:
        """Apply the switch to every agent function and the wrappers it holds."""
        self.print_llm_streams = value
        for agent in self.agents.values():
            apply_print_flag(agent.function, value)

    async def recall(self, agent_name: str, query: str, limit: int = 5) -> list[str]:
        """Texts from `agent_name`'s memory matching `query` (what it acknowledged)."""
        found = await self.memory.search(agent_name, query, limit)
        texts = []
        for item in found:
            value = item.get("value", item) if isinstance(item, dict) else item
            content = value.get("content") if isinstance(value, dict) else None
            texts.append(str(content if content is not None else value))
        return texts

    # ------------------------------------------------------------------ tasks & events
    def _ensure_task(
        self, task_id: str, owner: str | None = None, contributors: list[str] | None = None
    ) -> MAILTask:
        task = self.mail_tasks.get(task_id)
        if task is None:
            task = MAILTask(task_id, owner or self.this_owner, contributors)
            if self.this_owner not in task.task_contributors and owner is None:
                task.add_contributor(self.this_owner)
            self.mail_tasks[task_id] = task
            self.open_tasks.add(task_id)
            if self._observing:
                self._observer.task_changed(task)
            self.meter.task_started(task_id)
        return task

    def _emit(
        self,
        task_id: str,
        event: str,
        description: Description,
        extra_data: dict[str, Any] | None = None,
    ) -> TaskEvent:
        if task_id == RUNTIME_EVENTS:
            loop_event = TaskEvent(event, task_id, description, extra_data)
            loop_event.id = str(len(self.runtime_events) + 1)
            self.runtime_events.append(loop_event)
            return loop_event
        task = self.mail_tasks.get(task_id) or self._ensure_task(task_id)
        record = TaskEvent(event, task_id, description, extra_data)
        observing, ledger = self._observing, self.stored_bytes.ledger
        if extra_data and (observing or ledger is not None) and event != "tool_call":
            # Its stored text is written or sized: a thread post's body is stored once.
            record.share_arguments(task.events)
        task.add_event(record)
        if observing:
            self._observer.event_added(task, record)
        if ledger is not None:
            self.stored_bytes.event(record)
        return record

    def event_count(self, task_id: str) -> int:
        task = self.mail_tasks.get(task_id)
        return len(task.events) if task else 0

    def get_task_events(self, task_id: str) -> list[TaskEvent]:
        """The task's events as TaskEvent records (``"*"``: the runtime's own events)."""
        if task_id == RUNTIME_EVENTS:
            return list(self.runtime_events)
        task = self.mail_tasks.get(task_id)
        return list(task.events) if task else []

    def history_for(self, task_id: str, agent_name: str) -> list[dict[str, Any]]:
        key = f"{task_id}::{agent_name}"  # get first: setdefault would make a list per turn
        return self.agent_histories.get(key) or self.agent_histories.setdefault(key, [])

    async def _acquire_turn(self, key: str) -> None:
        """Exclusive, FIFO access to one agent's history on one task."""
        gates = self._turn_gates
        if key not in gates:
            gates[key] = None
            return
        waiters = gates[key]
        if waiters is None:
            waiters = gates[key] = collections.deque()
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters.append(future)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self._release_turn(key)  # the turn was handed to us as we were cancelled
            raise

    @contextlib.asynccontextmanager
    async def _in_turn(self, key: str) -> AsyncIterator[None]:
        """`_acquire_turn` .. `_release_turn` around the body."""
        await self._acquire_turn(key)
        try:
            yield
        finally:
            self._release_turn(key)

    def _release_turn(self, key: str) -> None:
        waiters = self._turn_gates[key]
        while waiters:
            future = waiters.popleft()
            if not future.done():
                future.set_result(None)
                return
        del self._turn_gates[key]

    # ------------------------------------------------------------------ completion
    def _complete_task(self, task_id: str, response: MAILMessage) -> None:
        """Mark a task complete with `response`, stash its queue, wake its waiters."""
        task = self._ensure_task(task_id)
        if task.completed and task_id in self.response_messages:
            return
        state = state_for_answer(response["message"].get("subject"))
        if state is TaskState.FAILED and not (
            task.events and task.events[-1].event == "task_error"
        ):
            # Every end on an error is a task_error event (those that say why, with an
            # error_kind, emit their own just before): a stream shows it before it closes.
            self._emit(task_id, "task_error", str(response["message"]["body"]))
        stashed = self.mailbox.stash(task_id)
        task.queue_stash(stashed)
        task.step_limit = None  # a later run has the loop's limit unless it names its own
        task.mark_complete(state)
        task.response = response  # type: ignore[assignment]
        self.response_messages[task_id] = response
        self.delivery.steps.restart(task_id)
        self.loop_guard.forget(task_id)
        self.outstanding_requests.pop(task_id, None)
        self.meter.task_answered(task_id, response["message"].get("subject"), task.state.value)
        if self.stored_bytes.ledger is not None:
            self.stored_bytes.response(task_id, response)
        if self._observing:  # the no-op observer needs no copy of the queue
            self._observer.task_changed(task)
            self._observer.response_set(task_id, response)  # type: ignore[arg-type]
            self._observer.queue_stashed(task_id, list(task.task_message_queue))
        self.waiters.resolve(task_id, response)
        if self._response_queue is not None:
            self._response_queue.put_latest((task_id, response))
        task.wake()
        if self.multitask.waiting(task_id):
            self.multitask.task_answered(task_id)  # the next enqueued message goes in
        logger.debug("task %s completed", task_id)

    def _pause_for_budget(self, task_id: str, why: str) -> None:
        """The task spent its token/cost budget: answer the caller and wait for a raise."""
        body = f"The task was paused: {why}. Continue it with a higher budget."
        self._complete_task(
            task_id, system_task_end(self.swarm_name, task_id, BUDGET_SUBJECT, body)
        )

    # ------------------------------------------------------------------ submission
    def submit(self, message: MAILMessage) -> Awaitable[None]:
        """Queue a message (creating its task if new) before returning; the result may be
        awaited (v1.3 defined ``async def submit``) or ignored."""
        self._ensure_task(message["message"]["task_id"])
        self.mailbox.put(message)
        return DONE

    def _submit_for_task(
        self, message: MAILMessage, resume_from: str | None, kwargs: dict[str, Any]
    ) -> asyncio.Future[MAILMessage] | None:
        return self.submissions.submit_for_task(message, resume_from, kwargs)

    def _new_run(self, task_id: str) -> None:
        """A newer message takes over a running task (an interrupt, a rollback): its step
        count and repeat guard start again, as for a continuation."""
        self.delivery.steps.restart(task_id)
        self.loop_guard.forget(task_id)

    async def submit_and_wait(
        self,
        message: MAILMessage,
        timeout: float = 3600.0,
        resume_from: str | None = None,
        **kwargs: Any,
    ) -> MAILMessage:
        """Submit and wait for the task's final response (or a system error response)."""
        return await self.waiters.submit_and_wait(message, timeout, resume_from, kwargs)

    def stream_task_events(
        self,
        message: MAILMessage,
        timeout: float = 3600.0,
        resume_from: str | None = None,
        ping_interval: float = 15.0,
        *,
        on_submitted: Callable[[], Awaitable[Any]] | None = None,
        detached: bool = False,
        **kwargs: Any,
    ) -> AsyncIterator[TaskEvent]:
        """Submit, then yield the task's new events as they happen and a final event.

        The final event is `task_complete` with the response body, or `task_error`.
        Heartbeat `ping` events are yielded after `ping_interval` seconds of silence.
        `on_submitted` is awaited after the submission, before the first event.
        `detached`: nobody waits for the answer (see `TaskWaiters.submit_and_stream`).
        """
        return self.waiters.submit_and_stream(  # rt=self: the stream holds it, not yet begun
            message,
            timeout,
            resume_from,
            ping_interval,
            kwargs,
            on_submitted,
            rt=self,
            detached=detached,
        )

    def _dispatch(self, message: MAILMessage) -> None:
        task_id = message["message"]["task_id"]
        if message["msg_type"] == "broadcast_complete":
            self._complete_task(task_id, message)
            return
        self.delivery.dispatch(message, self)

    # ------------------------------------------------------------------ turns bookkeeping
    def _spawn(self, task_id: str, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        turn = asyncio.create_task(coro)
        self._turns.add(turn)
        if (running := self._turns_by_task.get(task_id)) is None:
            running = self._turns_by_task[task_id] = set()
        running.add(turn)
        self._idle.clear()
        turn.add_done_callback(functools.partial(self._turn_done, task_id))
        return turn

    def _turn_done(self, task_id: str, turn: asyncio.Task[Any]) -> None:
        self._turns.discard(turn)
        turns = self._turns_by_task.get(task_id)
        if turns is not None:
            turns.discard(turn)
            if not turns:
                del self._turns_by_task[task_id]
        if not self._turns:
            self._idle.set()

    def task_is_busy(self, task_id: str) -> bool:
        return bool(self._turns_by_task.get(task_id)) or self.mailbox.has_task(task_id)

    def other_turns_running(self, task_id: str, me: asyncio.Task[Any] | None = None) -> bool:
        """Whether a turn of `task_id` other than the calling one is still running.

        A turn whose coroutine returned is finished, though its done callback may run after the
        next turn started: an agent answering at once must not see its last turn as running.
        """
        me = me or asyncio.current_task()  # the calling turn's task (`me`, when it knows it)
        return any(t is not me and not t.done() for t in self._turns_by_task.get(task_id, ()))

    async def await_task_idle(self, task_id: str, poll: float = 0.01) -> None:
        """Wait until nothing of `task_id` is queued or running."""
        while True:
            if not self.task_is_busy(task_id):
                await asyncio.sleep(0)
                if not self.task_is_busy(task_id):
                    return
            await asyncio.sleep(poll)

    async def await_idle(self) -> None:
        """Wait until the mailbox is empty and no agent turn is in flight."""
        while True:
            if self.mailbox.empty() and not self._turns:
                await asyncio.sleep(0)
                if self.mailbox.empty() and not self._turns:
                    return
            if self._turns:
                await self._idle.wait()
            else:
                await asyncio.sleep(0.005)

    # ------------------------------------------------------------------ shutdown
    async def shutdown(self, grace_period: float = 5.0) -> None:
        """Stop the loop; give in-flight turns `grace_period` seconds, then cancel them."""
        if self._shutdown:
            return
        self._shutdown = True
        self._emit(RUNTIME_EVENTS, "shutdown_requested", "shutdown requested")
        self.mailbox.close()
        if self.interswarm is not None:
            await self.interswarm.stop()
        await finish(self._turns, grace_period)
        ended = system_task_end(
            self.swarm_name,
            "null",
            "::shutdown_requested::",
            "The runtime was shut down before the task completed.",
        )
        self.waiters.release_all(ended)
        self.multitask.release_all(ended)

    # ------------------------------------------------------------------ loops (self.loops)
    async def run_continuous(
        self,
        max_steps: int | None = None,
        action_override: ActionOverrideFunction | None = None,
        mode: RunMode = "continuous",
    ) -> None:
        """Serve the mailbox until shutdown (see `LoopRunner.run_continuous`)."""
        await self.loops.run_continuous(max_steps, action_override, mode)

    async def run(self, action_override: ActionOverrideFunction | None = None) -> None:
        await self.loops.run_continuous(None, action_override, "continuous")

    async def run_task(
        self,
        message: MAILMessage | str | None = None,
        action_override: ActionOverrideFunction | None = None,
        resume_from: str | None = None,
        max_steps: int | None = None,
        timeout: float = 3600.0,
        *,
        task_id: str | None = None,
        **kwargs: Any,
    ) -> MAILMessage:
        """Run the loop only until `message`'s task completes; return its response.

        `max_steps` limits this task (like a request's `kwargs.max_steps`); without it the
        loop's limit applies (`default_max_steps` for a temporary loop). v1.3's form,
        ``run_task(task_id=...)`` (or the id first), runs a task submitted before.
        """
        if message is None or isinstance(message, str):
            return await run_submitted_task(
                self, task_id or message, action_override, resume_from, max_steps, timeout, kwargs
            )
        if max_steps is not None:
            kwargs["max_steps"] = max_steps
        if self.loops.continuous:
            return await self.submit_and_wait(message, timeout, resume_from, **kwargs)
        async with self.ephemeral_loop(self.default_max_steps, action_override):
            return await self.submit_and_wait(message, timeout, resume_from, **kwargs)

    def ephemeral_loop(
        self,
        max_steps: int | None = None,
        action_override: ActionOverrideFunction | None = None,
    ) -> contextlib.AbstractAsyncContextManager[None]:
        """Serve the mailbox for the duration of the block unless a continuous loop runs."""
        return self.loops.ephemeral_loop(max_steps, action_override, rt=self)

    def _dispatch_pending(self) -> None:
        self.loops.dispatch_pending(self)

    def _open_waiters(self) -> list[asyncio.Future[MAILMessage]]:
        return self.waiters.open()

    @property
    def _loop_running(self) -> bool:
        return self.loops.loop_running

    @property
    def _stop_serving(self) -> bool:
        return self.loops.stop_serving

    @property
    def _ephemeral_task(self) -> asyncio.Task[None] | None:
        return self.loops.ephemeral_task

    @property
    def _ephemeral_users(self) -> int:
        return self.loops.ephemeral_users

    # ------------------------------------------------------------------ delivery
    def _is_local_swarm(self, swarm: str | None) -> bool:
        return swarm is None or swarm == "" or swarm == self.swarm_name

    def disallowed_targets(self, sender: str, targets: list[str]) -> list[str]:
        """Targets that `sender`'s comm_targets do not allow (`all` is always allowed)."""
        return self.delivery.disallowed_targets(sender, targets)

    def _start_turn(self, task_id: str, agent_name: str) -> None:
        """A turn of `agent_name` that takes what waits in its inbox."""
        self.turns.start(task_id, agent_name, self)

    # ------------------------------------------------------------------ turns (self.turns)
    def _run_turn(
        self, task_id: str, agent_name: str, message: MAILMessage | None, tool_choice: Any
    ) -> Coroutine[Any, Any, None]:
        return self.turns.run_turn(task_id, agent_name, message, tool_choice)

    async def _handle_call(self, ctx: TurnContext, call: AgentToolCall) -> None:
        await self.turns.handle_call(ctx, call)

    def _turn_failed(self, ctx: TurnContext, current: AgentToolCall | None, exc: Exception) -> None:
        self.turns.turn_failed(ctx, current, exc)

    def _pause_at_breakpoint(
        self, task_id: str, agent_name: str, calls: list[AgentToolCall]
    ) -> None:
        self.turns.pause_at_breakpoint(task_id, agent_name, calls)

    def _save_history(self, task_id: str, agent_name: str) -> None:
        self.turns.save_history(task_id, agent_name)

    def offered_tools(self, agent_name: str) -> tuple[frozenset[str], bool]:
        """The tools `agent_name` was offered (the tools it may call); True when exact."""
        return self.turns.offered_tools(agent_name)

    def _turn_held(self, key: str) -> bool:
        """Whether a turn holds (or waits for) the lock of `key` ("{task}::{agent}")."""
        return key in self._turn_gates

    # ------------------------------------------------------------------ submissions
    def _resume_task(self, task_id: str) -> None:
        self.submissions.resume_task(task_id)

    def check_submission(
        self, task_id: str, resume_from: str | None, kwargs: dict[str, Any]
    ) -> None:
        """Raise the TaskSubmitError this submission would meet; change nothing."""
        self.submissions.check_submission(task_id, resume_from, kwargs)

    def pending_breakpoints(self, task_id: str) -> list[dict[str, Any]]:
        """The breakpoint calls `task_id` is paused on (empty when it is not paused)."""
        return self.submissions.pending_breakpoints(task_id)

    def _is_open(self, task_id: str) -> bool:
        """Running, or paused on reviews or breakpoints (see `open_tasks`)."""
        task = self.mail_tasks.get(task_id)
        if task is None:
            return False
        return task.is_running or bool(task.pending_reviews or self.pending_breakpoints(task_id))

    # ------------------------------------------------------------------ manual mode
    async def await_queue_empty(self) -> None:
        """Wait until nothing is queued and no turn is running (no race with delivery)."""
        await self.await_idle()

    async def submit_message_nowait(self, message: MAILMessage) -> None:
        self.submit(message)

    async def manual_step(
        self,
        task_id: str,
        target: str,
        response_targets: list[str] | None = None,
        response_type: str = "broadcast",
        payload: str | None = None,
        dynamic_ctx_ratio: float = 0.0,
        _llm: str | None = None,
        _system: str | None = None,
    ) -> MAILMessage:
        """Show `target` its buffered messages (+ payload) and return what it says.

        The text answer goes as a `response_type` message to `response_targets` (default:
        every agent). With `dynamic_ctx_ratio` > 0 and `_llm`, the agent's history is
        compressed first; `_llm` and `_system` replace its model and prompt for this step.
        """
        routing = manual_routing(response_type, response_targets)
        return await self.manual.step(
            task_id, target, routing, payload, dynamic_ctx_ratio, _llm, _system
        )

    # ------------------------------------------------------------------ v1.3's API
    # The sse_starlette shapes of events and streams, the answer queue, and the interswarm
    # bridge's start and stop (built by the API layer's connector: mail.net and mail.stdlib
    # sit above the runtime).
    def get_task_by_id(self, task_id: str) -> MAILTask | None:
        return self.mail_tasks.get(task_id)

    @property
    def pending_requests(self) -> dict[str, asyncio.Future[MAILMessage]]:
        return {t: futs[0] for t, futs in self.waiters.futures.items() if futs}

    def get_response_message(self, task_id: str) -> MAILMessage | None:
        """The answer a task gave its caller (None while it has none)."""
        return self.response_messages.get(task_id)

    def get_events_by_task_id(self, task_id: str) -> list[ServerSentEvent]:
        """The task's events as ``sse_starlette.ServerSentEvent`` objects whose ``data`` is a
        dict (the v1.3 shape); `get_task_events` gives the TaskEvent records."""
        return server_sent_events(self.get_task_events(task_id))

    @property
    def response_queue(self) -> asyncio.Queue[tuple[str, MAILMessage]]:
        """v1.3's queue of answers: ``(task_id, response)`` for every task answered after
        the first time this is read (the newest RESPONSE_QUEUE_SIZE are kept)."""
        if self._response_queue is None:
            self._response_queue = RecentQueue(RESPONSE_QUEUE_SIZE)
        return self._response_queue

    @property
    def interswarm_router(self) -> Any:
        """The InterswarmRouter this instance sends through (None while interswarm is off)."""
        return None if self.interswarm is None else self.interswarm.router

    def submit_and_stream(
        self,
        message: MAILMessage,
        timeout: float = 3600.0,
        resume_from: str | None = None,
        ping_interval: float = 15.0,
        **kwargs: Any,
    ) -> AsyncIterator[ServerSentEvent]:
        """`stream_task_events` as ``sse_starlette.ServerSentEvent`` objects (the v1.3 shape)."""
        return server_sent_event_stream(
            self.stream_task_events(message, timeout, resume_from, ping_interval, **kwargs)
        )

    async def start_interswarm(self) -> None:
        """Connect to other swarms through `swarm_registry` (when `enable_interswarm`).

        The bridge lives in the layers above the runtime (mail.net, with discovery from
        mail.stdlib), so it is built by the API layer's connector, looked up by name.
        """
        if not self.enable_interswarm or self.interswarm is not None:
            return
        module, _, name = INTERSWARM_CONNECTOR.partition(":")
        connect = getattr(importlib.import_module(module), name)
        await connect(self, self.swarm_registry)

    async def stop_interswarm(self) -> None:
        bridge, self.interswarm = self.interswarm, None
        if bridge is not None:
            await bridge.stop()

    async def is_interswarm_running(self) -> bool:
        return self.interswarm is not None
