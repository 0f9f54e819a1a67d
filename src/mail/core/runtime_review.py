"""Human review of actions: holding reviewed calls and resuming with decisions."""

from __future__ import annotations

import json
from typing import Any, Protocol

from mail.core.memory import AgentMemory
from mail.core.message import owner_swarm as task_owner_swarm
from mail.core.review import (
    ACTION_REVIEW_SUBJECT,
    RESUME_FROM_ACTION_REVIEW,
    Decision,
    HeldCall,
    ReviewDecisionError,
    ReviewPolicy,
    describe_call,
    edit_history_entry,
    edit_note,
    ignored_result,
    ignored_task_body,
    parse_decisions,
    respond_note,
    review_answer_body,
)
from mail.core.runtime_ports import HostLink, Swarm, TurnContext, TurnLocks
from mail.core.runtime_resume import TaskSubmitError
from mail.core.system_messages import system_broadcast, system_response, system_task_end
from mail.core.tools import AgentToolCall


class ReviewHost(Swarm, TurnLocks, Protocol):
    """What the reviewer uses of the runtime: the task log, turn locks, and running calls."""

    @property
    def breakpoint_tools(self) -> list[str]: ...
    @property
    def memory(self) -> AgentMemory: ...

    async def _handle_call(self, ctx: TurnContext, call: AgentToolCall) -> None: ...
    def _turn_failed(
        self, ctx: TurnContext, current: AgentToolCall | None, exc: Exception
    ) -> None: ...
    def _pause_at_breakpoint(
        self, task_id: str, agent_name: str, calls: list[AgentToolCall]
    ) -> None: ...
    def _resume_task(self, task_id: str) -> None: ...
    def _dispatch_pending(self) -> None: ...


class ActionReviewer(HostLink[ReviewHost]):
    """Holds reviewed action calls and applies a person's decisions to them."""

    def __init__(self, runtime: ReviewHost, policy: ReviewPolicy | None = None) -> None:
        self._link(runtime)
        self.policy = policy or ReviewPolicy()

    # ------------------------------------------------------------------ turn side
    def select(self, agent_name: str, calls: list[AgentToolCall]) -> list[AgentToolCall]:
        """The calls of this turn that must wait for a person (breakpoint tools excepted)."""
        if not self.policy.reviewed:
            return []
        breakpoints = self.host.breakpoint_tools
        return [
            c
            for c in calls
            if c.tool_name not in breakpoints and self.policy.allowed(agent_name, c.tool_name)
        ]

    def refuse_in_peer_task(
        self, ctx: TurnContext, calls: list[AgentToolCall], *, breakpoint: bool = False
    ) -> bool:
        """In a task this swarm runs for another swarm, refuse reviewed calls; True if it did.

        Nobody can decide them: this swarm's people cannot see the other swarm's task, and
        the caller waiting in the other swarm cannot resume a task here. So each call gets an
        error result now (nothing runs), the agent gets an `::action_error::` turn to tell
        its caller, and the task goes on instead of waiting forever. With `breakpoint`, the
        calls are breakpoint tools, refused for the same reason (a pause nobody can resume).
        """
        rt = self.host
        task = rt.mail_tasks.get(ctx.task_id)
        if not calls or task is None:
            return False
        owner_swarm = task_owner_swarm(task.task_owner)
        if owner_swarm in ("", rt.swarm_name):
            return False
        for call in calls:
            why = (breakpoint_refusal if breakpoint else peer_task_refusal)(
                call.tool_name, owner_swarm
            )
            ctx.history.append(call.create_response_msg(f"ERROR: {why}"))
            ctx.action_errors.append((call.tool_name, why))
            rt._emit(
                ctx.task_id,
                "action_error",
                f"agent {ctx.agent_name} called "
                f"{'breakpoint tool' if breakpoint else 'reviewed action'} {call.tool_name} in "
                f"a task run for swarm '{owner_swarm}': refused, nobody can "
                f"{'resume' if breakpoint else 'review'} it here",
                {
                    "tool_call_id": call.tool_call_id,
                    "caller": ctx.agent_name,
                    "action": call.tool_name,
                    "task_owner": task.task_owner,
                },
            )
        return True

    def hold(
        self,
        ctx: TurnContext,
        calls: list[AgentToolCall],
        breakpoint_calls: list[AgentToolCall] | None = None,
    ) -> None:
        """Pause the task with `calls` waiting for review (end of the caller's turn).

        `breakpoint_calls` of the same turn are kept with the review: once the decisions are
        applied the task pauses at them (see `_apply`), so neither pause is lost.
        """
        rt = self.host
        task = rt._ensure_task(ctx.task_id)
        if task.completed and not task.pending_reviews:
            # The same turn completed the task: nothing will continue, so nothing is held.
            for call in calls:
                ctx.history.append(
                    call.create_response_msg("ERROR: not run: the task completed in this turn")
                )
            if breakpoint_calls:
                rt._pause_at_breakpoint(ctx.task_id, ctx.agent_name, breakpoint_calls)
            return
        state = task.review_state
        if breakpoint_calls:
            dumps = [c.model_dump() for c in breakpoint_calls]
            waiting = state.get("breakpoint")
            if waiting and waiting["caller"] == ctx.agent_name:
                dumps = [*waiting["calls"], *dumps]
            state["breakpoint"] = {"caller": ctx.agent_name, "calls": dumps}
        stored_calls: dict[str, Any] = state.setdefault("calls", {})
        carry: dict[str, Any] = state.setdefault("carry", {})
        previous = carry.get(ctx.agent_name) or {"errors": [], "ran": False}
        carry[ctx.agent_name] = {
            "errors": [*previous["errors"], *map(list, ctx.action_errors)],
            "ran": bool(previous["ran"] or ctx.actions_ran),
        }
        for call in calls:
            allowed = self.policy.allowed(ctx.agent_name, call.tool_name) or ()
            description = self.policy.descriptions.get(call.tool_name, "")
            entry = HeldCall(
                call.tool_call_id,
                ctx.agent_name,
                call.tool_name,
                dict(call.tool_args),
                list(allowed),
                describe_call(call.tool_name, description, call.tool_args),
            )
            stored_calls[call.tool_call_id] = call.model_dump()
            task.pending_reviews.append(entry.to_public())
            rt._emit(
                ctx.task_id,
                "action_review",
                f"agent {ctx.agent_name} called {call.tool_name}; waiting for review",
                entry.to_public(),
            )
        held = [HeldCall.from_public(p) for p in task.pending_reviews]
        body = review_answer_body(held)
        if task.completed:
            # Already paused for another agent's calls: the answer grows, the pause stays.
            response = system_task_end(rt.swarm_name, ctx.task_id, ACTION_REVIEW_SUBJECT, body)
            task.response = response  # type: ignore[assignment]
            rt.response_messages[ctx.task_id] = response
            rt.observer.task_changed(task)
            rt.observer.response_set(ctx.task_id, response)  # type: ignore[arg-type]
            return
        rt._complete_task(
            ctx.task_id, system_task_end(rt.swarm_name, ctx.task_id, ACTION_REVIEW_SUBJECT, body)
        )

    # ------------------------------------------------------------------ submit side
    def check_submit(self, task_id: str, resume_from: str | None) -> None:
        """A task waiting for review only continues through `resume_from: action_review`."""
        if resume_from == RESUME_FROM_ACTION_REVIEW:
            return
        task = self.host.mail_tasks.get(task_id)
        if task is not None and task.pending_reviews:
            ids = ", ".join(p["tool_call_id"] for p in task.pending_reviews)
            raise ReviewPending(
                f"task '{task_id}' is waiting for review of call(s) {ids}; resume it with "
                "resume_from 'action_review' and kwargs.decisions"
            )

    def validate(self, task_id: str, raw_decisions: Any) -> list[Decision]:
        """The decisions for `task_id`'s held calls, or ReviewDecisionError (changes nothing)."""
        task = self.host.mail_tasks.get(task_id)
        if task is None:
            raise ReviewDecisionError(f"parameter 'task_id': task '{task_id}' not found")
        held = [HeldCall.from_public(p) for p in task.pending_reviews]
        return parse_decisions(
            raw_decisions,
            held,
            task.review_state.get("decided", []),
            self.policy.parameters,
        )

    def resume(self, task_id: str, kwargs: dict[str, Any]) -> None:
        """Apply the decisions in `kwargs['decisions']` and continue the task."""
        rt = self.host
        try:
            decisions = self.validate(task_id, kwargs.get("decisions"))
        except ReviewDecisionError as exc:
            raise TaskSubmitError(str(exc)) from exc
        task = rt.mail_tasks[task_id]
        held = {p["tool_call_id"]: HeldCall.from_public(p) for p in task.pending_reviews}
        state = task.review_state
        calls = {
            call_id: AgentToolCall.model_validate(dump)
            for call_id, dump in (state.get("calls") or {}).items()
        }
        carry = dict(state.get("carry") or {})
        waiting = state.pop("breakpoint", None)
        breakpoint = (
            (waiting["caller"], [AgentToolCall.model_validate(d) for d in waiting["calls"]])
            if waiting
            else None
        )
        task.pending_reviews = []
        state["decided"] = [*state.get("decided", []), *held]
        state["calls"] = {}
        state["carry"] = {}
        plan = [(held[d.tool_call_id], calls[d.tool_call_id], d) for d in decisions]
        rt._spawn(task_id, self._apply(task_id, plan, carry, breakpoint))
        rt._resume_task(task_id)

    # ------------------------------------------------------------------ applying decisions
    async def _apply(
        self,
        task_id: str,
        plan: list[tuple[HeldCall, AgentToolCall, Decision]],
        carry: dict[str, Any],
        breakpoint: tuple[str, list[AgentToolCall]] | None = None,
    ) -> None:
        rt = self.host
        callers: list[str] = []
        for entry, _call, _d in plan:
            if entry.caller not in callers:
                callers.append(entry.caller)
        ignored: list[HeldCall] = []
        outcome: dict[str, tuple[list[list[str]], bool]] = {}
        for caller in callers:
            errors, ran = await self._apply_for_caller(
                task_id, caller, [p for p in plan if p[0].caller == caller], ignored
            )
            before = carry.get(caller) or {"errors": [], "ran": False}
            outcome[caller] = ([*before["errors"], *errors], bool(before["ran"] or ran))
        task = rt.mail_tasks.get(task_id)
        if task is None or task.completed:
            if breakpoint is not None:
                await self._drop_breakpoint(task_id, *breakpoint, "the task already ended")
            return
        if ignored and self.policy.ignore_ends_task:
            if breakpoint is not None:
                why = "the reviewer's ignore ended the task"
                await self._drop_breakpoint(task_id, *breakpoint, why)
            response = system_task_end(
                rt.swarm_name, task_id, "::task_complete::", ignored_task_body(ignored)
            )
            rt._complete_task(task_id, response)
            if rt.interswarm is not None:
                rt.interswarm.task_completed(task_id, response)
            return
        for caller, (errors, ran) in outcome.items():
            rt.mailbox.put(_wake_message(rt.swarm_name, task_id, caller, errors, ran))
        if breakpoint is not None:
            # The same turn also called a breakpoint tool: pause there now. The wake-up
            # notices above are stashed with the task and delivered on the breakpoint resume.
            rt._pause_at_breakpoint(task_id, *breakpoint)
            return
        rt._dispatch_pending()

    async def _drop_breakpoint(
        self, task_id: str, caller: str, calls: list[AgentToolCall], why: str
    ) -> None:
        """Give breakpoint calls that will never be asked a result, so the history stays whole."""
        rt = self.host
        key = f"{task_id}::{caller}"
        async with rt._in_turn(key):
            history = rt.history_for(task_id, caller)
            for call in calls:
                history.append(call.create_response_msg(f"ERROR: not asked: {why}"))
            rt._save_history(task_id, caller)

    async def _apply_for_caller(
        self,
        task_id: str,
        caller: str,
        plan: list[tuple[HeldCall, AgentToolCall, Decision]],
        ignored: list[HeldCall],
    ) -> tuple[list[list[str]], bool]:
        rt = self.host
        key = f"{task_id}::{caller}"
        async with rt._in_turn(key):
            history = rt.history_for(task_id, caller)
            trigger = system_response(rt.swarm_name, task_id, caller, ACTION_REVIEW_SUBJECT, "")
            ctx = TurnContext(task_id, caller, trigger, history)
            current: AgentToolCall | None = None
            try:
                for entry, call, decision in plan:
                    self._emit_decision(task_id, entry, decision)
                    if decision.type == "accept":
                        current = call
                        await rt._handle_call(ctx, call)
                    elif decision.type == "edit":
                        args = decision.args or {}
                        history[:] = [
                            edit_history_entry(h, call.tool_call_id, args) for h in history
                        ]
                        current = call.model_copy(update={"tool_args": args})
                        await rt._handle_call(ctx, current)
                        await self._remember(
                            task_id, caller, call, edit_note(call.tool_name, call.tool_args, args)
                        )
                    elif decision.type == "respond":
                        message = decision.message or ""
                        history.append(call.create_response_msg(message))
                        await self._remember(
                            task_id,
                            caller,
                            call,
                            respond_note(call.tool_name, call.tool_args, message),
                        )
                    else:
                        history.append(call.create_response_msg(ignored_result(decision.message)))
                        ignored.append(entry)
                    current = None
            except Exception as exc:  # noqa: BLE001 - same policy as a failing turn
                rt._turn_failed(ctx, current, exc)
            finally:
                rt._save_history(task_id, caller)
            return [list(e) for e in ctx.action_errors], ctx.actions_ran

    def _emit_decision(self, task_id: str, entry: HeldCall, decision: Decision) -> None:
        extra: dict[str, Any] = {
            "tool_call_id": entry.tool_call_id,
            "caller": entry.caller,
            "action": entry.action,
            "type": decision.type,
        }
        if decision.args is not None:
            extra["args"] = decision.args
            extra["original_args"] = entry.args
        if decision.message is not None:
            extra["message"] = decision.message
        detail = f" with args: {json.dumps(decision.args)}" if decision.args is not None else ""
        self.host._emit(
            task_id,
            "action_review_decision",
            f"reviewer chose '{decision.type}' for {entry.action} "
            f"(call {entry.tool_call_id}, agent {entry.caller}){detail}",
            extra,
        )

    async def _remember(self, task_id: str, caller: str, call: AgentToolCall, note: str) -> None:
        if caller not in self.policy.memory_agents:
            return
        rt = self.host
        try:
            await rt.memory.put(
                caller,
                f"review-{call.tool_call_id}",
                {"role": "user", "content": note, "task_id": task_id, "kind": "action_review"},
            )
        except Exception as exc:  # noqa: BLE001 - memory trouble is reported, not fatal
            rt._emit(task_id, "agent_error", f"could not store review note for {caller}: {exc}")


def peer_task_refusal(action: str, owner_swarm: str) -> str:
    """The result a reviewed call gets in a task run for `owner_swarm` (see docs/review.md)."""
    return (
        f"the action '{action}' needs a person's review before it runs, and this task is run "
        f"for swarm '{owner_swarm}', whose people cannot review calls made here; it was not "
        "run. Tell your caller what you wanted to do and why, so they can do it themselves."
    )


def breakpoint_refusal(tool: str, owner_swarm: str) -> str:
    """The result a breakpoint tool call gets in a task run for `owner_swarm`."""
    return (
        f"the tool '{tool}' pauses the task until a person answers it, and this task is run "
        f"for swarm '{owner_swarm}', whose people cannot answer calls made here; it was not "
        "run. Tell your caller what you wanted to ask, so they can answer in their reply."
    )


class ReviewPending(TaskSubmitError):
    """A plain message or another resume form arrived for a task waiting for review."""

    status = 409


def _wake_message(swarm: str, task_id: str, caller: str, errors: list[list[str]], ran: bool) -> Any:
    """What the caller is shown next: action errors, a completion notice, or nothing."""
    if errors:
        body = "\n".join(f"Error: {tool}\n{why}" for tool, why in errors)
        return system_response(swarm, task_id, caller, "::action_error::", body)
    if ran:
        return system_broadcast(
            swarm, task_id, [caller], "::action_complete::", "Action completed successfully"
        )
    # Only ignored/answered calls: the tool results are in the history; just give a turn.
    return system_broadcast(swarm, task_id, [caller], "::action_complete_broadcast::", "")
