"""The runtime's meter: task and turn spans, model-call records, budgets."""

from __future__ import annotations

import contextvars
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

TIMEOUT_SUBJECT = "::task_timeout::"

Emit = Callable[[str, str, str, dict[str, Any]], Any]
Pause = Callable[[str, str], None]
TaskOf = Callable[[str], Any]


class Turn:
    """One agent turn being measured (what `CURRENT_TURN` holds while it runs)."""

    __slots__ = (
        "meter",
        "task_id",
        "agent",
        "span",
        "calls",
        "requests",
        "gate",
        "_token",
        "_otel_token",
    )

    def __init__(self, meter: TaskMeter, task_id: str, agent: str, span: Span | None) -> None:
        self.meter = meter
        self.task_id = task_id
        self.agent = agent
        self.span = span
        self.calls = 0  # model calls recorded (a refused or retried request is one too)
        self.requests = 0  # model requests let out (`admit`)
        # Asked before each request (`first`: the turn's first): raises to refuse it (the
        # runtime's step limit); None lets every request out.
        self.gate: Callable[[bool], None] | None = None
        self._token: contextvars.Token[Turn | None] | None = None
        self._otel_token: Any = None

    def record(self, call: ModelCall) -> None:
        """A model call of this turn finished (or failed)."""
        self.calls += 1
        self.meter.emit(
            self.task_id,
            MODEL_CALL_EVENT,
            f"agent {self.agent} called model {call.model}: {call.input_tokens} tokens in, "
            f"{call.output_tokens} out, {call.duration_ms:.0f} ms",
            call.event_data(self.agent),
        )
        metrics.model_call(call)

    def admit(self) -> None:
        """A model request of this turn is about to go out: the gate may refuse it."""
        self.requests += 1
        if self.gate is not None:
            self.gate(self.requests == 1)

    def call_started(self, call: Any) -> None:
        """A model call (with a ``cut(reason)`` method) of this turn is in flight."""
        self.meter.in_flight.setdefault(self.task_id, set()).add(call)

    def call_ended(self, call: Any) -> None:
        calls = self.meter.in_flight.get(self.task_id)
        if calls is not None:
            calls.discard(call)
            if not calls:
                del self.meter.in_flight[self.task_id]

    def end(self, cancelled: bool = False) -> None:
        if self._otel_token is not None:
            tracing.detach(self._otel_token)
            self._otel_token = None
        if self._token is not None:
            CURRENT_TURN.reset(self._token)
            self._token = None
        if self.span is not None:
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
            self._token = tracing.attach(self.span)
        return self

    def result(self, result: Any) -> None:
        span = self.span
        if span is not None and span.is_recording():
            span.set_attributes(_outcome(result))

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        if self.span is not None:
            tracing.detach(self._token)
            tracing.end_span(self.span, None if exc is None else f"{kind.__name__}: {exc}")


def _outcome(result: Any) -> dict[str, str]:
    if isinstance(result, str) and result.startswith("ERROR"):
        return {"mail.tool.outcome": "error", "error.type": "tool_error"}
    return _OK


_OK = {"mail.tool.outcome": "ok"}


class _ToolEvent:
    """An instant MAIL tool call: an ``execute_tool <name>`` event on its turn's span."""

    __slots__ = ("span", "name", "attributes")

    def __init__(self, span: Span, name: str, attributes: dict[str, Any]) -> None:
        self.span = span
        self.name = name
        self.attributes = attributes

    def __enter__(self) -> _ToolEvent:
        return self

    def result(self, result: Any) -> None:
        self.attributes.update(_outcome(result))

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        if exc is not None:
            self.attributes["mail.tool.outcome"] = "error"
            self.attributes["error.type"] = kind.__name__
        self.span.add_event(self.name, self.attributes)


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
        # task id -> its run's span and the context holding it (the parent of its turns)
        self._runs: dict[str, tuple[Span, Context]] = {}
        self._turn_attributes: dict[str, dict[str, str]] = {}  # per agent, made once
        # task id -> its model calls in flight (see `cut_calls`)
        self.in_flight: dict[str, set[Any]] = {}

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
        budgeted = bool(kwargs) and any(key in kwargs for key in BUDGET_KEYS)
        task = self._task_of(task_id) if continuing else None
        # Any finished task, not only one paused over its budget: a new message on a
        # completed task whose budget is spent would run one more turn past it.
        if task is None or task.is_running:
            if budgeted:
                self.budget_for(task_id).merged(kwargs)  # raises for a malformed budget
            return
        budget = self.budget_for(task_id)
        if budgeted:
            budget = budget.merged(kwargs)
        why = budget.exceeded(task_usage(task).total)
        if why is not None:
            raise BudgetError(
                f"task '{task_id}' has spent its budget: {why}; continue it with a higher "
                "kwargs.max_tokens_total / kwargs.max_cost",
                409,
            )

    def submitted(self, task_id: str, kwargs: dict[str, Any]) -> None:
        if kwargs and any(key in kwargs for key in BUDGET_KEYS):
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
            self._start_run(task_id)

    def _start_run(self, task_id: str) -> tuple[Span, Context] | None:
        root = tracing.task_root(task_id)
        span = tracing.start_span(
            "mail.task",
            parent=root,  # None: the current context (the request that created the task)
            attributes={"mail.task_id": task_id, "mail.swarm": self._swarm()},
        )
        if span is None:
            return None
        run = self._runs[task_id] = (span, tracing.context_of(span))
        if root is None:
            tracing.remember_task_root(task_id, span)
        return run

    def cut_calls(self, task_id: str, reason: str) -> None:
        """Stop the task's model calls in flight: each is recorded as cut, and cancelled."""
        for call in list(self.in_flight.pop(task_id, ())):
            call.cut(reason)

    def task_answered(self, task_id: str, subject: str | None, state: str) -> None:
        if subject == TIMEOUT_SUBJECT:
            # The caller has its answer and the task is over: its calls would generate for
            # nobody (and, with no max_tokens, for a long time).
            self.cut_calls(task_id, "the task timed out")
        metrics.task_answered(state)
        run = self._runs.pop(task_id, None)
        if run is not None:
            span = run[0]
            if span.is_recording():
                span.set_attribute("mail.task.state", state)
                if subject:
                    span.set_attribute("mail.task.answer_subject", subject)
            error = subject if subject in ("::task_error::", "::agent_error::") else None
            tracing.end_span(span, error)

    def forget(self, task_id: str) -> None:
        self.budgets.pop(task_id, None)
        run = self._runs.pop(task_id, None)
        if run is not None:
            tracing.end_span(run[0])

    # -- turns ----------------------------------------------------------------------------
    def begin_turn(self, task_id: str, agent: str) -> Turn:
        metrics.agent_call(agent)
        span = None
        if tracing.tracer() is not None:
            run = self._runs.get(task_id) or self._start_run(task_id)
            attributes = self._turn_attributes.get(agent)
            if attributes is None:
                if len(self._turn_attributes) >= 1024:  # agents come and go: bounded
                    self._turn_attributes.clear()
                attributes = self._turn_attributes[agent] = {
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.agent.name": agent,
                }
            span = tracing.start_span(
                f"invoke_agent {agent}",
                parent=run[1] if run is not None else None,
                attributes=attributes,
            )
        turn = Turn(self, task_id, agent, span)
        turn._token = CURRENT_TURN.set(turn)
        if span is not None:
            turn._otel_token = tracing.attach(span)
        return turn

    def tool_call(
        self, tool_name: str, call_id: str, args: Any, instant: bool = False
    ) -> _ToolProbe | _ToolEvent:
        """Measure one tool call: a span, or for an `instant` MAIL tool an event on the
        turn's span."""
        if tracing.tracer() is None:
            return _NO_PROBE
        turn_span = None
        if instant:
            turn = CURRENT_TURN.get()
            turn_span = turn.span if turn is not None else None
            if turn_span is None or not turn_span.is_recording():
                return _NO_PROBE
        attributes: dict[str, Any] = {"gen_ai.tool.name": tool_name, "gen_ai.tool.call.id": call_id}
        if tracing.capture_content():
            attributes["gen_ai.tool.call.arguments"] = str(args)
        if turn_span is not None:  # the event's name says the operation
            return _ToolEvent(turn_span, f"execute_tool {tool_name}", attributes)
        attributes["gen_ai.operation.name"] = "execute_tool"
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
