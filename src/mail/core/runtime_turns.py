"""One agent turn: show the agent a message, call it, handle its tool calls."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Protocol

import mail.core.team.handlers  # noqa: F401 - the team tools register into TOOL_HANDLERS
from mail.core.events import MessageText
from mail.core.loop_guard import NO_TOOL_CALL, NO_TOOL_CALL_HINT, LoopGuard, stop_task
from mail.core.message import MAILMessage, build_mail_xml, parse_agent_address
from mail.core.runtime_batching import AgentInboxes
from mail.core.runtime_delivery import MAX_STEPS_SUBJECT, StepBudget
from mail.core.runtime_ports import HostLink, ToolHost, TurnContext, TurnLocks
from mail.core.runtime_resume import message_too_large
from mail.core.runtime_review import ActionReviewer
from mail.core.system_messages import system_broadcast, system_response, system_task_end
from mail.core.tool_handlers import TOOL_HANDLERS, handle_action
from mail.core.tool_rights import (
    SYNTHETIC_TOOL_NAMES,
    TEXT_OUTPUT,
    offered_tool_names,
    refusal_reason,
)
from mail.core.tools import AgentToolCall, normalize_breakpoint_tool_call
from mail.telemetry.meter import TaskMeter

__all__ = ["TurnContext", "TurnHost", "TurnRunner", "breakpoint_entry"]

logger = logging.getLogger("mail.runtime")

ACTION_COMPLETE_BROADCAST = "::action_complete_broadcast::"
AGENT_ERROR = "::agent_error::"
# The argument holding the message text of each MAIL tool that sends one.
_MESSAGE_TEXT_FIELDS = {
    "send_request": "body",
    "send_response": "body",
    "send_interrupt": "body",
    "send_broadcast": "body",
    "task_complete": "finish_message",
}
# MAIL tools whose handler waits on other servers (registries): traced as spans, like actions.
_NETWORK_TOOLS = frozenset({"discover_swarms"})


class TurnHost(ToolHost, TurnLocks, Protocol):
    """What agent turns use of the runtime (it is also the tool handlers' host)."""

    @property
    def meter(self) -> TaskMeter: ...

    @property
    def breakpoint_tools(self) -> list[str]: ...
    @property
    def exclude_tools(self) -> list[str]: ...
    @property
    def review(self) -> ActionReviewer: ...
    @property
    def loop_guard(self) -> LoopGuard: ...
    @property
    def journal(self) -> Any: ...
    @property
    def mode(self) -> str: ...
    @property
    def _observing(self) -> bool: ...

    def _dispatch_pending(self) -> None: ...


class TurnRunner(HostLink[TurnHost]):
    """Agent turns: show an agent its messages, call it, handle its tool calls."""

    def __init__(self, host: TurnHost, inboxes: AgentInboxes, steps: StepBudget) -> None:
        self._link(host)
        self.inboxes = inboxes
        self.steps = steps  # every model request of a turn counts toward max_steps
        # agent -> (its function, the tools it was offered); see `offered_tools`
        self._offered_tools: dict[str, tuple[Any, frozenset[str], bool]] = {}
        # While a turn of `run_turns` dispatches what it sent: where the next turn goes
        self._handover: _Handover | None = None
        self._clock = _LoopClock()  # tells a turn whether the loop ran since it began

    @staticmethod
    def _tool_choice_for(rt: TurnHost, messages: list[MAILMessage]) -> Any:
        """What the agent must do this turn: anything, a tool, or task_complete (the step
        limit's notice is among its messages)."""
        if rt.mode == "manual":
            return "auto"
        for message in messages:
            if message["message"]["subject"] == MAX_STEPS_SUBJECT:
                return dict(_FINISH)
        return "required"

    def start(self, task_id: str, agent_name: str, rt: TurnHost | None = None) -> None:
        """Start a turn of `agent_name` from its inbox: the ending turn of `run_turns` that
        is dispatching this task's messages takes the first such turn over, else a new
        asyncio task runs it. Not while other turns of the task run: they may yet send to
        the same agent, and a turn queued behind them takes their messages in one batch."""
        rt = rt or self.host  # the runtime, when it calls (one weak reference less)
        handover = self._handover
        if (
            handover is not None
            and handover.task_id == task_id
            and handover.next is None
            and not rt.other_turns_running(task_id, handover.me)
        ):
            handover.next = agent_name
            return
        rt._spawn(task_id, self.run_turns(task_id, agent_name))

    async def run_turns(self, task_id: str, agent_name: str) -> None:
        """`agent_name`'s turn from its inbox, then each turn of the task it hands over.

        A turn that waited (a model call) and whose messages start a turn of the same task
        (the worker its request goes to, the supervisor its answer goes to) runs that turn
        itself as soon as it ends: the next model call starts at once, not after every other
        ready callback of the loop has run (with 200 tasks whose model calls end together,
        after 200 turn ends), and no asyncio task is made and torn down per hop. A turn that
        never waited starts its next turns as new tasks, so the loop runs others in between.
        """
        loop = asyncio.get_running_loop()
        clock = self._clock
        # This chain's asyncio task, asked for once.
        handover = _Handover(task_id, agent_name, asyncio.current_task())
        while (agent := handover.take(clock.mark(loop))) is not None:
            try:
                await self.run_turn(task_id, agent, None, None, handover=handover)
            except BaseException:
                if handover.next is not None:  # never lose a turn that was handed over
                    self.host._spawn(task_id, self.run_turns(task_id, handover.next))
                raise

    async def run_turn(
        self,
        task_id: str,
        agent_name: str,
        message: MAILMessage | None,
        tool_choice: Any,
        *,
        handover: _Handover | None = None,
    ) -> None:
        """One turn of `agent_name` on `task_id`.

        With `message` None the turn shows the agent what waits in its inbox (every message
        delivered since its last turn, or one of them without batched delivery). With
        `handover` (from `run_turns`), the first turn of this task that the turn's messages
        start is handed over instead of started, when the turn waited.
        """
        rt = self.host
        cancelled: bool | None = None  # whether shutdown cut this turn short, once known
        me = handover.me if handover is not None else asyncio.current_task()
        key = f"{task_id}::{agent_name}"
        await rt._acquire_turn(key)
        try:
            room = rt.observer.room()
            if room is not None:  # the store is behind (an outage): wait for it, not grow
                await room
            if message is None:
                batch = self.inboxes.take(key)
                if not batch:
                    return
                if self.inboxes.left(key):  # after a restart: the rest gets a turn of its own
                    rt._spawn(task_id, self.run_turns(task_id, agent_name))
                message, tool_choice = batch[0], self._tool_choice_for(rt, batch)
            else:
                batch = [message]
            taken = [m["id"] for m in batch]  # what an answer kept for a re-run is matched by
            notice = self.steps.finish_notice(task_id, batch)
            if notice is not None:  # the last call the step limit leaves: finish with it
                batch = [*batch, notice]
                if rt.mode != "manual":
                    tool_choice = dict(_FINISH)
                text = MessageText("sending message:\n", notice)
                rt._emit(task_id, "new_message", text, {"full_message": notice})
            task = rt.mail_tasks.get(task_id)
            if task is not None and task.completed:
                # The task ended while this turn waited for the agent: no new work starts.
                for incoming in batch:
                    self._hold_for_continuation(task, incoming)
                return
            stored = rt.stored_bytes
            sizing = stored.ledger is not None  # a byte bound: what the turn records is booked
            guard = rt.loop_guard
            stop = guard.begin_turn(task_id) or (stored.over_bound() if sizing else None)
            if stop is not None:
                stop_task(rt, task_id, stop)
                return
            history = rt.history_for(task_id, agent_name)
            began = len(history)
            if sizing:
                stored.begin_turn(task_id, agent_name, history)
            ctx = TurnContext(task_id, agent_name, message, history, batch=batch)
            current: AgentToolCall | None = None
            measured = rt.meter.begin_turn(task_id, agent_name)  # spans, usage, budget
            finishing = tool_choice == _FINISH
            measured.gate = lambda first: self.steps.admit_call(task_id, first, finishing)
            try:
                for incoming in batch:
                    if rt.team is not None:  # inbox filing + quiet digest (mail.core.team)
                        await rt.team.before_turn(task_id, agent_name, incoming, history)
                    self._append_incoming(history, incoming)
                calls = await self._ask(rt, ctx, key, taken, tool_choice)
                if calls:
                    self._append_agent_output(history, calls[0])
                    if sizing:  # booked before its calls store more
                        stored.history(task_id, agent_name, history)
                    self._emit_tool_calls(rt, task_id, agent_name, calls)
                # The common answer, a tool call where any will do, needs no closer look.
                if not calls or tool_choice != "required" or calls[0].tool_name == TEXT_OUTPUT:
                    missing = _missing_call(tool_choice, calls)
                    if missing is not None:
                        last = isinstance(tool_choice, dict)
                        self._refuse_answer(ctx, calls, *missing, last=last)
                        return
                refusals: dict[int, str] = {}
                for c in calls:
                    if (why := self._refusal(rt, agent_name, c)) is not None:
                        refusals[id(c)] = why
                stops = rt.breakpoint_tools
                permitted = [c for c in calls if id(c) not in refusals] if refusals else calls
                breakpoint_calls = [c for c in permitted if c.tool_name in stops] if stops else []
                held = rt.review.select(agent_name, permitted)
                for call in calls:
                    if refusals and id(call) in refusals:
                        self._refuse_call(ctx, call, refusals[id(call)])
                        continue
                    if (stops and call.tool_name in stops) or (held and call in held):
                        continue
                    current = call
                    await self._handle_call(rt, ctx, call)
                current = None
                if breakpoint_calls and rt.review.refuse_in_peer_task(
                    ctx, breakpoint_calls, breakpoint=True
                ):
                    breakpoint_calls = []  # a peer's task: nobody here could resume the pause
                if held and rt.review.refuse_in_peer_task(ctx, held):
                    held = []  # a peer's task: refused with an error result, never held
                if held:
                    # Pauses the task; notices wait for the resume, and a breakpoint of this
                    # turn pauses the task again once the review is decided.
                    rt.review.hold(ctx, held, breakpoint_calls)
                else:
                    self._send_action_notices(rt, ctx)
                    if breakpoint_calls:
                        self.pause_at_breakpoint(task_id, agent_name, breakpoint_calls)
                # A turn whose every call was refused made no valid call either.
                if refusals or guard.answers_in_a_row:  # else nothing to count nor reset
                    problem = _ONLY_REFUSED if len(refusals) == len(calls) else None
                    stop = guard.record_answer(task_id, agent_name, problem)
                    if stop is not None:
                        stop_task(rt, task_id, stop, NO_TOOL_CALL)
            except Exception as exc:  # noqa: BLE001 - a failing agent must not kill the runtime
                self.turn_failed(ctx, current, exc)
            finally:
                cancelled = _cancelling(me)
                measured.end(cancelled=cancelled)
                if cancelled:
                    # Cut back to where it began (a cancel, an interrupt, a shutdown): what it
                    # took and half did leaves no trace (a call without its result would
                    # make the agent's next model call fail); after a restart it runs again.
                    del history[began:]
                elif sizing or rt._observing:
                    self.save_history(task_id, agent_name)
        finally:
            rt._release_turn(key)
            if cancelled is None:
                cancelled = _cancelling(me)
            if rt.journal is not None:
                rt.journal.turn_finished(cancelled)
            if handover is None or cancelled or not handover.waited(self._clock):
                rt._dispatch_pending()
            else:
                self._handover = handover
                try:
                    rt._dispatch_pending()
                finally:
                    self._handover = None

    async def _ask(
        self, rt: TurnHost, ctx: TurnContext, key: str, taken: list[str], tool_choice: Any
    ) -> list[AgentToolCall]:
        """The agent's answer. A model-backed agent's (`calls_model`) waits first for the
        commit of the task's earlier steps, so a finished step's model call is not made again
        after a crash. An answer with outside effects (an action, a message to another swarm)
        is committed before the turn acts on it, and a turn re-run after a crash takes it
        from the journal: the same tool-call ids, so the same step ids
        (`mail.core.actions.current_step_id`), and the same ids for the messages it sends."""
        agent = rt.agents[ctx.agent_name]
        journal = rt.journal if getattr(agent.function, "calls_model", False) else None
        if journal is None:
            _text, calls = await agent.function(ctx.history, tool_choice)
            return calls
        step = None
        if (kept := journal.kept_answer(key, taken)) is not None:
            calls, step = [AgentToolCall.model_validate(c) for c in kept[0]], kept[1]
        else:
            if (committed := rt.observer.committed()) is not None:
                await committed
            _text, calls = await agent.function(ctx.history, tool_choice)
        if (
            kept is not None
            or any(c.tool_name in rt.actions for c in calls)
            or (rt.interswarm is not None and rt.interswarm.sends_out(ctx.task_id, calls))
        ):
            step = journal.answered(taken, [c.model_dump(mode="json") for c in calls], step)
            ctx.keep_step(step, calls)
            if (committed := rt.observer.committed()) is not None:
                await committed
        return calls

    def _hold_for_continuation(self, task: Any, message: MAILMessage) -> None:
        """A message whose turn would start after its task ended: keep runtime notices with
        the task's stashed queue (a continuation delivers them), drop agent chatter."""
        if message["message"]["sender"]["address_type"] == "system":
            task.queue_stash([{"priority": 1, "seq": 0, "message": message}])
            self.host.observer.queue_stashed(task.task_id, list(task.task_message_queue))
        else:
            logger.debug("no turn for %s: task %s already completed", message["id"], task.task_id)

    # ------------------------------------------------------------------ history
    def _append_incoming(self, history: list[dict[str, Any]], message: MAILMessage) -> None:
        payload: Any = message["message"]
        if payload["subject"].startswith(ACTION_COMPLETE_BROADCAST):
            return
        if message["msg_type"] == "buffered":
            history.append({"role": "user", "content": payload["body"]})
        else:
            history.append(build_mail_xml(message))

    @staticmethod
    def _append_agent_output(history: list[dict[str, Any]], first: AgentToolCall) -> None:
        if first.completion:
            history.append(first.completion)
        else:
            history.extend(first.responses)

    def save_history(self, task_id: str, agent_name: str) -> None:
        rt = self.host
        if rt.stored_bytes.ledger is not None:
            rt.stored_bytes.history(task_id, agent_name, rt.history_for(task_id, agent_name))
        if not rt._observing:
            return
        agent = rt.agents.get(agent_name)
        tool_format = agent.tool_format if agent else "responses"
        rt.observer.history_changed(
            task_id, agent_name, tool_format, rt.history_for(task_id, agent_name)
        )

    # ------------------------------------------------------------------ events
    @staticmethod
    def _emit_tool_calls(
        rt: TurnHost, task_id: str, agent_name: str, calls: list[AgentToolCall]
    ) -> None:
        last_with_reasoning: str | None = None
        for call in calls:
            extra: dict[str, Any] = {
                "tool_name": call.tool_name,
                "tool_args": call.tool_args,
                "tool_call_id": call.tool_call_id,
            }
            blocks = [b for b in call.reasoning if b and b.strip()] if call.reasoning else None
            if blocks:
                extra["reasoning"] = "\n\n".join(blocks)
                last_with_reasoning = call.tool_call_id
            elif last_with_reasoning is not None:
                extra["reasoning_ref"] = last_with_reasoning
            if call.preamble:
                extra["preamble"] = call.preamble
            rt._emit(task_id, "tool_call", f"agent {agent_name} called {call.tool_name}", extra)

    # ------------------------------------------------------------------ tool rights
    def forget_agent(self, agent_name: str) -> None:
        """Drop what is cached of an agent that left the swarm (core/external_agents.py)."""
        self._offered_tools.pop(agent_name, None)

    def offered_tools(self, agent_name: str) -> tuple[frozenset[str], bool]:
        """The tools `agent_name` was offered (the tools it may call); True when exact."""
        return self._offered(self.host, agent_name)

    def _offered(self, rt: TurnHost, agent_name: str) -> tuple[frozenset[str], bool]:
        agent = rt.agents[agent_name]
        cached = self._offered_tools.get(agent_name)
        if cached is None or cached[0] is not agent.function:
            cached = (agent.function, *offered_tool_names(agent, rt.exclude_tools))
            self._offered_tools[agent_name] = cached
        return cached[1], cached[2]

    def _refusal(self, rt: TurnHost, agent_name: str, call: AgentToolCall) -> str | None:
        """Why `call` is refused, or None. Actions are checked by `handle_action`."""
        name = call.tool_name
        if name in SYNTHETIC_TOOL_NAMES:
            return None
        if name not in TOOL_HANDLERS and name not in rt.breakpoint_tools:
            return None
        agent = rt.agents[agent_name]
        if name == "task_complete" and not agent.can_complete_tasks:
            return None  # the handler refuses it with the original's words
        offered, exact = self._offered(rt, agent_name)
        if name in offered or (not exact and name not in TOOL_HANDLERS):
            return None
        return refusal_reason(name, agent, offered)

    def _refuse_call(self, ctx: TurnContext, call: AgentToolCall, why: str) -> None:
        """A call to a tool the agent was not offered: an error result and another turn."""
        rt = self.host
        rt._emit(
            ctx.task_id,
            "agent_error",
            f"agent {ctx.agent_name} called {call.tool_name}, which it was not offered",
            {"tool_name": call.tool_name},
        )
        result = f"ERROR: {why}"
        ctx.history.append(call.create_response_msg(result))
        ctx.action_errors.append((call.tool_name, why))
        stop = rt.loop_guard.record_call(ctx.task_id, ctx.agent_name, call, result)
        if stop is not None:
            stop_task(rt, ctx.task_id, stop)

    # ------------------------------------------------------------------ tool calls
    async def handle_call(self, ctx: TurnContext, call: AgentToolCall) -> None:
        await self._handle_call(self.host, ctx, call)

    async def _handle_call(self, rt: TurnHost, ctx: TurnContext, call: AgentToolCall) -> None:
        oversized = _oversized(rt.max_message_body, call)
        if oversized is not None:
            rt._emit(
                ctx.task_id,
                "agent_error",
                f"agent {ctx.agent_name} called {call.tool_name} with {oversized}",
            )
            ctx.history.append(call.create_response_msg(f"ERROR: not sent: {oversized}"))
            ctx.action_errors.append((call.tool_name, f"not sent: {oversized}"))  # re-prompts
            return
        handler = TOOL_HANDLERS.get(call.tool_name)
        # A MAIL tool answered on the spot is an event on the turn's span, not a span of
        # its own; actions and the tools that wait on the network get spans.
        instant = handler is not None and call.tool_name not in _NETWORK_TOOLS
        handler = handler or handle_action
        notices, errors, ran = ctx.notices, len(ctx.action_errors), ctx.actions_ran
        with rt.meter.tool_call(
            call.tool_name, call.tool_call_id, call.tool_args, instant=instant
        ) as probe:
            result = await handler(rt, ctx, call)
            probe.result(result)
        if result is not None:
            ctx.history.append(call.create_response_msg(result))
        if (
            isinstance(result, str)
            and result.startswith("ERROR")
            and (ctx.notices, len(ctx.action_errors), ctx.actions_ran) == (notices, errors, ran)
        ):
            # One rule for results: an error nothing else tells the agent about gets it
            # another turn (the ::action_error:: notice), so the task never idles on it.
            ctx.action_errors.append((call.tool_name, result.removeprefix("ERROR:").strip()))
        stop = rt.loop_guard.record_call(ctx.task_id, ctx.agent_name, call, result)
        if stop is not None:
            stop_task(rt, ctx.task_id, stop)

    def oversized_text(self, call: AgentToolCall) -> str | None:
        """Why a message tool call carries too much text, or None (max_message_body)."""
        return _oversized(self.host.max_message_body, call)

    @staticmethod
    def _send_action_notices(rt: TurnHost, ctx: TurnContext) -> None:
        task = rt.mail_tasks.get(ctx.task_id)
        if task is not None and task.completed:
            # The batch completed the task; re-prompting the agent would be a wasted call.
            return
        if ctx.action_errors:
            body = "\n".join(f"Error: {tool}\n{why}" for tool, why in ctx.action_errors)
            rt.mailbox.put(
                system_response(
                    rt.swarm_name, ctx.task_id, ctx.agent_name, "::action_error::", body
                )
            )
        elif ctx.actions_ran:
            rt.mailbox.put(
                system_broadcast(
                    rt.swarm_name,
                    ctx.task_id,
                    [ctx.agent_name],
                    "::action_complete::",
                    "Action completed successfully",
                )
            )

    def _refuse_answer(
        self,
        ctx: TurnContext,
        calls: list[AgentToolCall],
        problem: str,
        notice: str,
        *,
        last: bool,
    ) -> None:
        """A model answer without the tool call the turn needed (plain text, nothing, not
        the required tool): nothing of it runs; the agent is told and called again, until
        `task_no_tool_call_limit` such answers in a row stop the task. The `last` turn the
        step limit left (task_complete forced) stops it at once."""
        rt = self.host
        task_id, agent_name = ctx.task_id, ctx.agent_name
        for call in calls:
            if call.tool_name != TEXT_OUTPUT:  # every call in the history gets its result
                ctx.history.append(call.create_response_msg(f"ERROR: not run: {notice}"))
        rt._emit(
            task_id,
            "agent_error",
            f"agent {agent_name} answered {problem}",
            {"error_kind": NO_TOOL_CALL, "agent": agent_name},
        )
        task = rt.mail_tasks.get(task_id)
        if task is None or task.completed:
            return
        stop = rt.loop_guard.record_answer(task_id, agent_name, problem)
        if last:
            stop = (
                f"Task stopped: it reached its step limit (max_steps) and agent "
                f"'{agent_name}', told to finish it, answered {problem}. {NO_TOOL_CALL_HINT}"
            )
        if stop is not None:
            stop_task(rt, task_id, stop, NO_TOOL_CALL)
            return
        rt.mailbox.put(
            system_response(rt.swarm_name, task_id, agent_name, "::tool_call_error::", notice)
        )

    # ------------------------------------------------------------------ breakpoints
    def pause_at_breakpoint(
        self, task_id: str, agent_name: str, calls: list[AgentToolCall]
    ) -> None:
        rt = self.host
        names = ", ".join(c.tool_name for c in calls)
        args = ", ".join(json.dumps(c.tool_args) for c in calls)
        rt._emit(
            task_id,
            "breakpoint_tool_call",
            f"agent {agent_name} used breakpoint tools {names} with args: {args}",
        )
        rt.last_breakpoint_caller[task_id] = agent_name
        rt.last_breakpoint_tool_calls[task_id] = list(calls)
        rt.meter.breakpoint(task_id, [c.tool_name for c in calls])
        body = json.dumps([breakpoint_entry(c) for c in calls], separators=(",", ":"))
        rt._complete_task(
            task_id,
            system_task_end(rt.swarm_name, task_id, "::breakpoint_tool_call::", body),
        )

    # ------------------------------------------------------------------ failures
    def turn_failed(self, ctx: TurnContext, current: AgentToolCall | None, exc: Exception) -> None:
        rt = self.host
        logger.warning("agent %s failed on task %s: %s", ctx.agent_name, ctx.task_id, exc)
        if current is not None:
            ctx.history.append(
                current.create_response_msg(f"ERROR: failed to schedule message: {exc}")
            )
        # Agent functions may say what kind of failure this is (e.g. missing_api_key): a
        # program can act on the word without parsing the text.
        kind = getattr(exc, "kind", None)
        rt._emit(
            ctx.task_id,
            "agent_error",
            f"error scheduling message for agent {ctx.agent_name}: {exc}",
            {"error_kind": kind, "agent": ctx.agent_name} if isinstance(kind, str) else None,
        )
        body = f"Agent '{ctx.agent_name}' failed while handling your message: {exc}"
        notify: list[str] = []
        for incoming in ctx.batch:
            payload: Any = incoming["message"]
            sender_type = payload["sender"]["address_type"]
            sender_name, sender_swarm = parse_agent_address(payload["sender"]["address"])
            if (
                sender_type == "agent"
                and sender_name in rt.agents
                and sender_name != ctx.agent_name
                and rt._is_local_swarm(sender_swarm)
            ):
                if sender_name not in notify:
                    notify.append(sender_name)
                continue
            # Nobody else can react (the user, the system, the agent itself, a remote
            # swarm): end the task with the error so the caller gets an answer, not a hang.
            stop_task(rt, ctx.task_id, body, kind if isinstance(kind, str) else None, AGENT_ERROR)
            return
        for sender_name in notify:
            rt.mailbox.put(
                system_response(rt.swarm_name, ctx.task_id, sender_name, AGENT_ERROR, body)
            )


class _LoopClock:
    """Counts the event loop's passes, for turns asking whether the loop ran since they
    began (they waited, e.g. for their model). One callback per pass of the loop, shared
    by every turn that begins in it, instead of a callback (and its cancellation) per turn:
    `tick` runs in the loop's next pass after `mark` scheduled it, as a turn's own would."""

    __slots__ = ("passes", "_armed")

    def __init__(self) -> None:
        self.passes = 0
        self._armed: asyncio.AbstractEventLoop | None = None  # the loop a tick is due in

    def mark(self, loop: asyncio.AbstractEventLoop) -> int:
        """The count now; the next pass of `loop` will change it."""
        if self._armed is not loop:  # a tick due in a loop that ended never comes: rearm
            self._armed = loop
            loop.call_soon(self.tick)
        return self.passes

    def tick(self) -> None:
        self.passes += 1
        self._armed = None


class _Handover:
    """The turns of one `run_turns`: the turn handed over to it, and the loop's pass count
    when the current turn began (`waited`: the loop ran while it went on)."""

    __slots__ = ("task_id", "next", "began", "me")

    def __init__(self, task_id: str, first: str, me: asyncio.Task[Any] | None) -> None:
        self.task_id = task_id
        self.me = me  # the asyncio task running these turns
        self.next: str | None = first
        self.began = -1

    def take(self, now: int) -> str | None:
        agent, self.next, self.began = self.next, None, now
        return agent

    def waited(self, clock: _LoopClock) -> bool:
        return clock.passes != self.began


_FINISH = {"type": "function", "name": "task_complete"}
_ONLY_REFUSED = "only with tools it was not offered"
_CALL_A_TOOL = "answer by calling one of your tools (for example send_response or task_complete)."


def _missing_call(tool_choice: Any, calls: list[AgentToolCall]) -> tuple[str, str] | None:
    """(what the model did, the notice it gets) when its answer lacks the tool call the
    turn needed: any call (`required`), the one named (a forced tool); plain text is an
    answer only where the runtime asked for `auto` (manual steps). None: it has one."""
    if not calls:
        return "with nothing (no text, no tool call)", f"Your reply was empty: {_CALL_A_TOOL}"
    if isinstance(tool_choice, dict):
        named = tool_choice.get("name") or (tool_choice.get("function") or {}).get("name")
        if named and not any(call.tool_name == named for call in calls):
            return (
                f"without calling {named}, which this turn required",
                f"This turn had to call `{named}`, and your reply did not; call it now.",
            )
        return None
    if tool_choice != "auto" and all(call.tool_name == TEXT_OUTPUT for call in calls):
        return "in plain text", f"Your reply was plain text, which reaches nobody: {_CALL_A_TOOL}"
    return None


def _oversized(limit: int | None, call: AgentToolCall) -> str | None:
    field_name = _MESSAGE_TEXT_FIELDS.get(call.tool_name)
    if not limit or field_name is None:
        return None
    text = call.tool_args.get(field_name)
    if isinstance(text, str) and len(text) > limit:
        return message_too_large(len(text), limit) + "; send a shorter message"
    return None


def _cancelling(current: asyncio.Task[Any] | None) -> bool:
    return current is not None and current.cancelling() > 0


def breakpoint_entry(call: AgentToolCall) -> dict[str, Any]:
    """One element of the `::breakpoint_tool_call::` body (OpenAI function_call layout)."""
    return normalize_breakpoint_tool_call(call)
