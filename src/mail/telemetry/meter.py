"""The runtime's meter: task and turn spans, model-call records, budgets.

The runtime holds one `TaskMeter` and calls it at a handful of points (task created, turn
begun and ended, tool call handled, task answered, submission checked). Model calls report
to the turn that is running through a context variable, so agent functions need no
parameter for it (see `mail.telemetry.model_calls`).
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mail.telemetry import metrics, tracing
from mail.telemetry.budget import (
    BUDGET_EVENT,
    BUDGET_KEYS,
    Budget,
    BudgetError,
    default_budget,
)
from mail.telemetry.usage import MODEL_CALL_EVENT, ModelCall, task_usage

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span

Emit = Callable[[str, str, str, dict[str, Any]], Any]
Pause = Callable[[str, str], None]
TaskOf = Callable[[str], Any]


class Turn:
    """One agent turn being measured (what `CURRENT_TURN` holds while it runs)."""

    __slots__ = ("meter", "task_id", "agent", "span", "_token", "_otel_token")

    def __init__(self, meter: TaskMeter, task_id: str, agent: str, span: Span | None) -> None:
        self.meter = meter
        self.task_id = task_id
        self.agent = agent
        self.span = span
        self._token: contextvars.Token[Turn | None] | None = None
        self._otel_token: Any = None

    def record(self, call: ModelCall) -> None:
        """A model call of this turn finished (or failed)."""
        self.meter.emit(
            self.task_id,
            MODEL_CALL_EVENT,
            f"agent {self.agent} called model {call.model}: {call.input_tokens} tokens in, "
            f"{call.output_tokens} out, {call.duration_ms:.0f} ms",
            call.event_data(self.agent),
        )
        metrics.model_call(call)

    def end(self, cancelled: bool = False) -> None:
        if self._otel_token is not None:
            from opentelemetry import context

            context.detach(self._otel_token)
            self._otel_token = None
        if self._token is not None:
            CURRENT_TURN.reset(self._token)
            self._token = None
        tracing.end_span(self.span)
        if not cancelled:
            self.meter.check_budget(self.task_id)


CURRENT_TURN: contextvars.ContextVar[Turn | None] = contextvars.ContextVar(
    "mail_current_turn", default=None
)


class _ToolProbe:
    """A tool call's span (or nothing when tracing is off)."""

    __slots__ = ("span", "_token")

    def __init__(self, span: Span | None) -> None:
        self.span = span
        self._token: Any = None

    def __enter__(self) -> _ToolProbe:
        if self.span is not None:
            from opentelemetry import context, trace

            self._token = context.attach(trace.set_span_in_context(self.span))
        return self

    def result(self, result: Any) -> None:
        if self.span is not None:
            failed = isinstance(result, str) and result.startswith("ERROR")
            self.span.set_attribute("mail.tool.outcome", "error" if failed else "ok")
            if failed:
                self.span.set_attribute("error.type", "tool_error")

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        if self.span is not None:
            from opentelemetry import context

            context.detach(self._token)
            tracing.end_span(self.span, None if exc is None else f"{kind.__name__}: {exc}")


_NO_PROBE = _ToolProbe(None)


class TaskMeter:
    """Per runtime: budgets of its tasks and the spans of their runs."""

    def __init__(self, emit: Emit, pause: Pause, task_of: TaskOf, swarm: Callable[[], str]):
        self.emit = emit
        self._pause = pause
        self._task_of = task_of
        self._swarm = swarm
        # task id -> the budget its caller set (None: looked, none set; the defaults apply)
        self.budgets: dict[str, Budget | None] = {}
        self._runs: dict[str, Span] = {}

    # -- budgets --------------------------------------------------------------------------
    def budget_for(self, task_id: str) -> Budget:
        if task_id not in self.budgets:
            # Not set since this runtime started: the last `budget_set` event of the task
            # (a budget survives a restart the way the task's events do).
            task = self._task_of(task_id)
            found = None
            for event in reversed(task.events if task is not None else []):
                if event.event == BUDGET_EVENT:
                    found = Budget().merged(event.extra_data)
                    break
            self.budgets[task_id] = found
        return self.budgets[task_id] or default_budget()

    def check_submission(self, task_id: str, kwargs: dict[str, Any], continuing: bool) -> None:
        """Raise BudgetError for a malformed budget, or for a continuation of a task whose
        budget is spent and not raised (it would pause again at once)."""
        budget = self.budget_for(task_id)
        if any(key in kwargs for key in BUDGET_KEYS):
            budget = budget.merged(kwargs)
        task = self._task_of(task_id) if continuing else None
        # Any finished task, not only one paused over its budget: a new message on a
        # completed task whose budget is spent would run one more turn past it.
        if task is None or task.is_running:
            return
        why = budget.exceeded(task_usage(task).total)
        if why is not None:
            raise BudgetError(
                f"task '{task_id}' has spent its budget: {why}; continue it with a higher "
                "kwargs.max_tokens_total / kwargs.max_cost",
                409,
            )

    def submitted(self, task_id: str, kwargs: dict[str, Any]) -> None:
        if any(key in kwargs for key in BUDGET_KEYS):
            budget = self.budgets[task_id] = self.budget_for(task_id).merged(kwargs)
            self.emit(
                task_id,
                BUDGET_EVENT,
                f"budget: max_tokens_total {budget.max_tokens_total}, max_cost {budget.max_cost}",
                {"max_tokens_total": budget.max_tokens_total, "max_cost": budget.max_cost},
            )

    def check_budget(self, task_id: str) -> None:
        budget = self.budget_for(task_id)
        if budget.max_tokens_total is None and budget.max_cost is None:
            return
        task = self._task_of(task_id)
        if task is None or not task.is_running:
            return
        why = budget.exceeded(task_usage(task).total)
        if why is not None:
            self._pause(task_id, why)

    # -- task runs ------------------------------------------------------------------------
    def task_started(self, task_id: str) -> None:
        """A task was created here; the caller's trace context (if any) is its parent."""
        if tracing.tracer() is not None and task_id not in self._runs:
            self._start_run(task_id, None)

    def _start_run(self, task_id: str, parent: Context | None) -> Span | None:
        root = tracing.task_root(task_id)
        span = tracing.start_span(
            "mail.task",
            parent=root if root is not None else parent,
            attributes={"mail.task_id": task_id, "mail.swarm": self._swarm()},
        )
        if span is not None:
            self._runs[task_id] = span
            if root is None:
                tracing.remember_task_root(task_id, span)
        return span

    def task_answered(self, task_id: str, subject: str | None, state: str) -> None:
        metrics.task_answered(state)
        span = self._runs.pop(task_id, None)
        if span is not None:
            span.set_attribute("mail.task.state", state)
            if subject:
                span.set_attribute("mail.task.answer_subject", subject)
            error = subject if subject in ("::task_error::", "::agent_error::") else None
            tracing.end_span(span, error)

    def forget(self, task_id: str) -> None:
        self.budgets.pop(task_id, None)
        tracing.end_span(self._runs.pop(task_id, None))

    # -- turns ----------------------------------------------------------------------------
    def begin_turn(self, task_id: str, agent: str) -> Turn:
        metrics.agent_call(agent)
        span = None
        if tracing.tracer() is not None:
            run = self._runs.get(task_id) or self._start_run(task_id, None)
            from opentelemetry import trace

            span = tracing.start_span(
                f"invoke_agent {agent}",
                parent=trace.set_span_in_context(run) if run is not None else None,
                attributes={
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.agent.name": agent,
                    "mail.task_id": task_id,
                },
            )
        turn = Turn(self, task_id, agent, span)
        turn._token = CURRENT_TURN.set(turn)
        if span is not None:
            from opentelemetry import context, trace

            turn._otel_token = context.attach(trace.set_span_in_context(span))
        return turn

    def tool_call(self, tool_name: str, call_id: str, args: Any) -> _ToolProbe:
        if tracing.tracer() is None:
            return _NO_PROBE
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool_name,
            "gen_ai.tool.call.id": call_id,
        }
        if tracing.capture_content():
            attributes["gen_ai.tool.call.arguments"] = str(args)
        return _ToolProbe(tracing.start_span(f"execute_tool {tool_name}", attributes=attributes))

    def breakpoint(self, task_id: str, tool_names: list[str]) -> None:
        """The task paused on breakpoint tools: a span marks it in the trace."""
        if tracing.tracer() is None:
            return
        span = tracing.start_span(
            "mail.breakpoint",
            attributes={"mail.task_id": task_id, "mail.breakpoint.tools": tool_names},
        )
        tracing.end_span(span)


def monotonic_ms() -> float:
    return time.perf_counter() * 1000.0
