"""MAILRuntime: one instance's mailbox, tasks, agent histories and scheduling loop.

The loop dequeues messages in priority order and hands each delivery to its own agent
turn (an asyncio task), so different tasks, and independent agents of one task, run
concurrently. One agent's history for one task is only touched under that pair's lock.
The loops, delivery, turns, tool handling, resumes and manual mode live in sibling modules.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
from collections.abc import AsyncIterator, Coroutine
from typing import Any

from mail.core.actions import ActionCore, ActionOverrideFunction
from mail.core.agent_wiring import apply_print_flag, attach_recall
from mail.core.agents import AgentCore
from mail.core.events import Description, TaskEvent, closing_event
from mail.core.loop_guard import LoopGuard, end_task
from mail.core.mailbox import Mailbox
from mail.core.memory import AgentMemory, InMemoryAgentMemory
from mail.core.message import MAILMessage, utc_now_iso
from mail.core.observer import RuntimeObserver
from mail.core.review import ReviewPolicy
from mail.core.runtime_batching import AgentInboxes
from mail.core.runtime_delivery import DeliveryMixin
from mail.core.runtime_loops import LoopMixin, RunMode
from mail.core.runtime_manual import ManualMixin
from mail.core.runtime_resume import ResumeMixin, TaskSubmitError
from mail.core.runtime_review import ActionReviewer
from mail.core.runtime_turns import TurnMixin
from mail.core.system_messages import system_task_end, task_error_body, task_timeout_body
from mail.core.tasks import RUNTIME_EVENTS, MAILTask, state_for_answer

logger = logging.getLogger("mail.runtime")

DEFAULT_MAX_MESSAGE_BODY = 1024 * 1024


class MAILRuntime(LoopMixin, DeliveryMixin, TurnMixin, ResumeMixin, ManualMixin):
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
        enable_db_agent_histories: bool | None = None,
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
        self.review = ActionReviewer(self, review_policy)  # human review of actions
        self.team: Any = None  # TeamService when an agent opted into team tools
        # async (history, ratio, model) -> bool; shrinks a history in place (manual_step)
        self.context_compressor: Any = None

        self.this_owner = f"{user_role}:{user_id}@{swarm_name}"
        self.mailbox = Mailbox()
        self.mail_tasks: dict[str, MAILTask] = {}
        self.agent_histories: dict[str, list[dict[str, Any]]] = {}
        self.response_messages: dict[str, MAILMessage] = {}
        self.outstanding_requests: dict[str, dict[str, int]] = {}
        self.last_breakpoint_caller: dict[str, str] = {}
        self.last_breakpoint_tool_calls: dict[str, list[Any]] = {}
        # Events of the runtime itself (shutdown, loop cancelled), not of any task: kept here
        # under the id "*" and never stored, so no pseudo-task exists in memory or a store.
        self.runtime_events: list[TaskEvent] = []
        self.manual_message_buffer: dict[str, list[MAILMessage]] = {}
        self.manual_return_messages: dict[str, asyncio.Future[MAILMessage]] = {}
        # messages delivered to an agent of a task, waiting for its next turn
        self.inboxes = AgentInboxes(batch=batch_delivery)
        # pending work of running tasks, kept while a store is attached (runtime_durable)
        self.journal: Any = None
        # ids of queued agent messages whose recipients a tool handler already checked
        self._prechecked: set[str] = set()
        # agent -> (its function, the tools it was offered); see TurnMixin.offered_tools
        self._offered_tools: dict[str, tuple[Any, frozenset[str], bool]] = {}

        # Longest message body (characters) a caller or an agent may send; None = no cap.
        self.max_message_body: int | None = DEFAULT_MAX_MESSAGE_BODY
        self.max_steps: int | None = None
        self.default_max_steps: int | None = None  # limit of loops started by post_message
        self._step_counts: dict[str, int] = {}
        self._step_limits: dict[str, int | None] = {}
        self.mode: RunMode = "continuous"
        self.action_override: ActionOverrideFunction | None = None
        # Turn bound and repeated-failure stop per task (see core/loop_guard.py).
        self.loop_guard = LoopGuard()

        self._waiters: dict[str, list[asyncio.Future[MAILMessage]]] = {}
        # "{task}::{agent}" -> waiters for that agent's next turn on that task (present = busy)
        self._turn_gates: dict[str, collections.deque[asyncio.Future[None]]] = {}
        self._turns: set[asyncio.Task[Any]] = set()
        self._background: set[asyncio.Task[Any]] = set()  # tasks the runtime started, held
        # task id -> its spawned turns; a turn stays here until its done callback has run
        self._turns_by_task: dict[str, set[asyncio.Task[Any]]] = {}
        self._idle = asyncio.Event()
        self._idle.set()
        self._loop_running = False
        self._stop_serving = False
        self._ephemeral_task: asyncio.Task[None] | None = None
        self._ephemeral_stopping: asyncio.Task[None] | None = None
        self._ephemeral_saved: tuple[int | None, ActionOverrideFunction | None] = (None, None)
        self._ephemeral_users = 0
        self._continuous = False
        self._shutdown = False
        self.print_llm_streams = print_llm_streams
        self.set_print_llm_streams(print_llm_streams)
        for name, agent in self.agents.items():
            attach_recall(agent.function, functools.partial(self.recall, name))

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
            self.observer.task_changed(task)
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
        task.add_event(record)
        if self._observing:
            self._observer.event_added(task, record)
        return record

    def event_count(self, task_id: str) -> int:
        task = self.mail_tasks.get(task_id)
        return len(task.events) if task else 0

    def get_events_by_task_id(self, task_id: str) -> list[TaskEvent]:
        if task_id == RUNTIME_EVENTS:
            return list(self.runtime_events)
        task = self.mail_tasks.get(task_id)
        return list(task.events) if task else []

    def get_task_by_id(self, task_id: str) -> MAILTask | None:
        return self.mail_tasks.get(task_id)

    @property
    def pending_requests(self) -> dict[str, asyncio.Future[MAILMessage]]:
        return {t: futs[0] for t, futs in self._waiters.items() if futs}

    def history_for(self, task_id: str, agent_name: str) -> list[dict[str, Any]]:
        return self.agent_histories.setdefault(f"{task_id}::{agent_name}", [])

    async def _acquire_turn(self, key: str) -> None:
        """Exclusive, FIFO access to one agent's history on one task."""
        waiters = self._turn_gates.get(key)
        if waiters is None:
            self._turn_gates[key] = collections.deque()
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters.append(future)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self._release_turn(key)  # the turn was handed to us as we were cancelled
            raise

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
        stashed = self.mailbox.stash(task_id)
        task.queue_stash(stashed)
        task.mark_complete(state_for_answer(response["message"].get("subject")))
        task.response = response  # type: ignore[assignment]
        self.response_messages[task_id] = response
        self._step_counts.pop(task_id, None)
        self._step_limits.pop(task_id, None)
        self.loop_guard.forget(task_id)
        self.outstanding_requests.pop(task_id, None)
        self.observer.task_changed(task)
        self.observer.response_set(task_id, response)  # type: ignore[arg-type]
        self.observer.queue_stashed(task_id, list(task.task_message_queue))
        for future in self._waiters.pop(task_id, []):
            if not future.done():
                future.set_result(response)
        task.wake()
        logger.debug("task %s completed", task_id)

    # ------------------------------------------------------------------ submission
    def submit(self, message: MAILMessage) -> None:
        """Queue a message (creating its task if new)."""
        self._ensure_task(message["message"]["task_id"])
        self.mailbox.put(message)

    def _add_waiter(self, task_id: str) -> asyncio.Future[MAILMessage]:
        future: asyncio.Future[MAILMessage] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(task_id, []).append(future)
        return future

    def _drop_waiter(self, task_id: str, future: asyncio.Future[MAILMessage]) -> None:
        futures = self._waiters.get(task_id)
        if futures and future in futures:
            futures.remove(future)
            if not futures:
                del self._waiters[task_id]

    async def submit_and_wait(
        self,
        message: MAILMessage,
        timeout: float = 3600.0,
        resume_from: str | None = None,
        **kwargs: Any,
    ) -> MAILMessage:
        """Submit and wait for the task's final response (or a system error response)."""
        task_id = message["message"]["task_id"]
        future = self._add_waiter(task_id)
        try:
            self._submit_for_task(message, resume_from, kwargs)
            async with asyncio.timeout(timeout):
                response = await future
            body = response["message"]["body"]
            self._emit(task_id, "task_complete", lambda: f"response: '{body}'")
            return response
        except TaskSubmitError as exc:
            if exc.status != 409:
                # A refused conflicting submission is not an event of the (running) task.
                self._emit(task_id, "task_error", f"error for task: {exc}")
            return system_task_end(self.swarm_name, task_id, "::task_error::", task_error_body(exc))
        except TimeoutError:
            self._emit(task_id, "task_error", f"timeout for task '{task_id}'")
            response = system_task_end(
                self.swarm_name, task_id, "::task_timeout::", task_timeout_body()
            )
            end_task(self, task_id, response)  # the caller has its answer: stop the task
            return response
        finally:
            self._drop_waiter(task_id, future)

    async def submit_and_stream(
        self,
        message: MAILMessage,
        timeout: float = 3600.0,
        resume_from: str | None = None,
        ping_interval: float = 15.0,
        **kwargs: Any,
    ) -> AsyncIterator[TaskEvent]:
        """Submit, then yield the task's new events as they happen and a final event.

        The final event is `task_complete` with the response body, or `task_error`.
        Heartbeat `ping` events are yielded after `ping_interval` seconds of silence.
        """
        task_id = message["message"]["task_id"]
        existing = self.mail_tasks.get(task_id)
        index = len(existing.events) if existing else 0
        future = self._add_waiter(task_id)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            try:
                self._submit_for_task(message, resume_from, kwargs)
            except TaskSubmitError as exc:
                yield closing_event("task_error", task_id, str(exc))
                return
            task = self.mail_tasks[task_id]
            while True:
                while index < len(task.events):
                    yield task.events[index]
                    index += 1
                if future.done():
                    break
                remaining = deadline - loop.time()
                if remaining <= 0:
                    for event in task.events[index:]:
                        yield event
                    # Recorded on the task; the stream gets one task_error frame, the final one.
                    self._emit(task_id, "task_error", f"timeout for task '{task_id}'")
                    # The caller has its answer: the task stops (is_running false, peers told).
                    end_task(
                        self,
                        task_id,
                        system_task_end(
                            self.swarm_name, task_id, "::task_timeout::", task_timeout_body()
                        ),
                    )
                    yield closing_event("task_error", task_id, task_timeout_body())
                    return
                signal = task.event_signal()
                try:
                    # asyncio.timeout, not wait_for: no extra task per wait (3.11)
                    async with asyncio.timeout(min(ping_interval, remaining)):
                        await signal.wait()
                except TimeoutError:
                    if index >= len(task.events) and not future.done():
                        yield TaskEvent(
                            "ping",
                            task_id,
                            "",
                            raw_payload={"timestamp": utc_now_iso(), "task_id": task_id},
                        )
            while index < len(task.events):
                yield task.events[index]
                index += 1
            response = future.result()
            yield closing_event("task_complete", task_id, response["message"]["body"])
        finally:
            self._drop_waiter(task_id, future)

    def _dispatch(self, message: MAILMessage) -> None:
        task_id = message["message"]["task_id"]
        if message["msg_type"] == "broadcast_complete":
            self._complete_task(task_id, message)
            return
        message = self._apply_step_limit(message)
        self._process_message(message)

    # ------------------------------------------------------------------ turns bookkeeping
    def _spawn(self, task_id: str, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        turn = asyncio.create_task(coro)
        self._turns.add(turn)
        self._turns_by_task.setdefault(task_id, set()).add(turn)
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

    def other_turns_running(self, task_id: str) -> bool:
        """Whether a turn of `task_id` other than the calling one is still running.

        A turn whose coroutine has returned is finished even though its done callback (which
        drops it from the bookkeeping) may run only after the next turn has started; an agent
        that answers at once would otherwise see its own previous turn as work in flight.
        """
        me = asyncio.current_task()
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
        if self._turns:
            _, pending = await asyncio.wait(set(self._turns), timeout=grace_period)
            for turn in pending:
                turn.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
        for futures in self._waiters.values():
            for future in futures:
                if not future.done():
                    future.set_result(
                        system_task_end(
                            self.swarm_name,
                            "null",
                            "::shutdown_requested::",
                            "The runtime was shut down before the task completed.",
                        )
                    )
