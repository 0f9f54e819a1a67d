"""Scripted stub agents for runtime and API tests.

A `ScriptedAgent` is an agent function (`await agent(history, tool_choice)`) that plays a
fixed script: step *n* of the script answers the agent's *n*-th call. Every call is recorded
(a copy of the history it saw, the tool_choice, enter/exit times), so tests can assert what
the runtime showed the agent and that turns of one agent never overlapped.

Script steps may be:
- a list of `AgentToolCall` (or dicts `{"tool": name, "args": {...}}`, the JSON-friendly form
  used from swarms.json `agent_params`);
- a callable `(history, tool_choice) -> list[...]` for replies that depend on the input;
- an exception instance, which the call raises.

`scripted_factory(**kwargs)` is a factory in the original's calling convention: it records
the keyword arguments it was given and returns a `ScriptedAgent` built from `script=`.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mail.core.actions import ActionCore
from mail.core.agents import AgentCore
from mail.core.message import MAILMessage, create_user_address, make_message, make_request
from mail.core.runtime import MAILRuntime
from mail.core.tools import AgentToolCall

_ids = itertools.count(1)

# --------------------------------------------------------------------------------- tool calls


def tool_call(
    tool_name: str,
    args: dict[str, Any] | None = None,
    *,
    call_id: str | None = None,
    style: str = "completions",
    reasoning: list[str] | None = None,
    preamble: str | None = None,
) -> AgentToolCall:
    """One AgentToolCall carrying a realistic provider output in the chosen style."""
    args = dict(args or {})
    cid = call_id or f"call_{next(_ids)}"
    arguments = json.dumps(args)
    if style == "completions":
        return AgentToolCall(
            tool_name=tool_name,
            tool_args=args,
            tool_call_id=cid,
            completion={
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": cid,
                        "type": "function",
                        "function": {"name": tool_name, "arguments": arguments},
                    }
                ],
            },
            reasoning=reasoning,
            preamble=preamble,
        )
    return AgentToolCall(
        tool_name=tool_name,
        tool_args=args,
        tool_call_id=cid,
        responses=[
            {
                "type": "function_call",
                "id": f"fc_raw_{cid}",
                "call_id": cid,
                "name": tool_name,
                "arguments": arguments,
                "status": "completed",
            }
        ],
        reasoning=reasoning,
        preamble=preamble,
    )


def send_request(target: str, body: str = "hi", subject: str = "Req", **kw: Any) -> AgentToolCall:
    return tool_call("send_request", {"target": target, "subject": subject, "body": body}, **kw)


def send_response(target: str, body: str = "done", subject: str = "Re", **kw: Any) -> AgentToolCall:
    return tool_call("send_response", {"target": target, "subject": subject, "body": body}, **kw)


def send_interrupt(
    target: str, body: str = "stop", subject: str = "Int", **kw: Any
) -> AgentToolCall:
    return tool_call("send_interrupt", {"target": target, "subject": subject, "body": body}, **kw)


def send_broadcast(body: str = "news", subject: str = "Bc", **kw: Any) -> AgentToolCall:
    return tool_call("send_broadcast", {"subject": subject, "body": body, "targets": ["all"]}, **kw)


def task_complete(finish_message: str | None = "finished", **kw: Any) -> AgentToolCall:
    args = {} if finish_message is None else {"finish_message": finish_message}
    return tool_call("task_complete", args, **kw)


def _from_spec(spec: Any) -> AgentToolCall:
    if isinstance(spec, AgentToolCall):
        return spec
    if isinstance(spec, dict) and "tool" in spec:
        return tool_call(spec["tool"], spec.get("args") or {}, call_id=spec.get("call_id"))
    raise TypeError(f"not a tool call spec: {spec!r}")


def _merge_completions(calls: list[AgentToolCall]) -> list[AgentToolCall]:
    """Give a multi-call batch one assistant message listing all completions-style calls.

    The runtime appends only the first call's provider output to the history, as a real
    provider message would carry every call of the batch.
    """
    if len(calls) < 2 or not calls[0].completion:
        return calls
    tool_calls = []
    for call in calls:
        tool_calls.extend((call.completion or {}).get("tool_calls") or [])
    first = calls[0].model_copy(
        update={"completion": {**calls[0].completion, "tool_calls": tool_calls}}
    )
    return [first, *calls[1:]]


# --------------------------------------------------------------------------------- agents


@dataclass
class CallRecord:
    """What one call of a scripted agent received, and when it ran."""

    history: list[dict[str, Any]]
    tool_choice: Any
    enter: float
    exit: float = 0.0

    @property
    def last(self) -> dict[str, Any]:
        return self.history[-1]

    @property
    def last_content(self) -> str:
        return str(self.history[-1].get("content", ""))


Step = list[Any] | Callable[[list[dict[str, Any]], Any], list[Any]] | BaseException


@dataclass
class ScriptedAgent:
    """An agent function that replays `script`, one step per call."""

    name: str = "agent"
    script: list[Step] = field(default_factory=list)
    sleep: float = 0.0
    default: Step | None = None
    text: str | None = None
    calls: list[CallRecord] = field(default_factory=list)
    factory_kwargs: dict[str, Any] = field(default_factory=dict)
    live_histories: list[list[dict[str, Any]]] = field(default_factory=list)

    async def __call__(
        self, history: list[dict[str, Any]], tool_choice: Any
    ) -> tuple[str | None, list[AgentToolCall]]:
        record = CallRecord(copy.deepcopy(history), tool_choice, time.monotonic())
        self.calls.append(record)
        self.live_histories.append(history)
        index = len(self.calls) - 1
        try:
            if self.sleep:
                await asyncio.sleep(self.sleep)
            if index < len(self.script):
                step = self.script[index]
            elif self.default is not None:
                step = self.default
            else:
                raise RuntimeError(
                    f"scripted agent '{self.name}' has no step {index + 1} "
                    f"(script has {len(self.script)})"
                )
            if isinstance(step, BaseException):
                raise step
            items = step(history, tool_choice) if callable(step) else step
            return self.text, _merge_completions([_from_spec(i) for i in items])
        finally:
            record.exit = time.monotonic()

    @property
    def tool_choices(self) -> list[Any]:
        return [c.tool_choice for c in self.calls]


class PromptedScriptedAgent(ScriptedAgent):
    """A scripted agent with a `.system` prompt (what system-prompt augmentation edits)."""

    system: str = ""


def scripted_factory(
    *,
    name: str,
    comm_targets: list[str],
    tools: list[dict[str, Any]],
    enable_entrypoint: bool = False,
    enable_interswarm: bool = False,
    tool_format: str = "responses",
    can_complete_tasks: bool = False,
    exclude_tools: list[str] | None = None,
    script: list[Any] | None = None,
    sleep: float = 0.0,
    system: str | None = None,
    **extra: Any,
) -> ScriptedAgent:
    """A factory in the original's convention; JSON-friendly `script` for swarms.json use."""
    kwargs = {
        "name": name,
        "comm_targets": comm_targets,
        "tools": tools,
        "enable_entrypoint": enable_entrypoint,
        "enable_interswarm": enable_interswarm,
        "tool_format": tool_format,
        "can_complete_tasks": can_complete_tasks,
        "exclude_tools": exclude_tools,
        "script": script,
        "sleep": sleep,
        "system": system,
        **extra,
    }
    steps: list[Step] = [list(step) for step in (script or [])]
    if system is not None:
        agent: ScriptedAgent = PromptedScriptedAgent(name=name, script=steps, sleep=sleep)
        agent.system = system  # type: ignore[attr-defined]
    else:
        agent = ScriptedAgent(name=name, script=steps, sleep=sleep)
    agent.factory_kwargs = kwargs
    return agent


def complete_immediately_factory(**kwargs: Any) -> ScriptedAgent:
    """Factory whose agent completes every task at once (finish message = agent name)."""
    agent = ScriptedAgent(name=kwargs["name"], default=[task_complete(f"done by {kwargs['name']}")])
    agent.factory_kwargs = dict(kwargs)
    return agent


# --------------------------------------------------------------------------------- runtimes


@dataclass
class AgentSpec:
    """Wiring of one agent for `make_runtime`."""

    function: Any
    comm_targets: list[str] = field(default_factory=list)
    can_complete_tasks: bool = False
    enable_entrypoint: bool = False
    actions: list[str] = field(default_factory=list)


def make_runtime(
    agents: dict[str, AgentSpec],
    actions: dict[str, Any] | None = None,
    *,
    entrypoint: str = "supervisor",
    swarm_name: str = "testswarm",
    user_id: str = "u1",
    breakpoint_tools: list[str] | None = None,
    batch_delivery: bool = True,
) -> MAILRuntime:
    """A MAILRuntime over stub agents; `actions` maps name -> async fn(args) -> str."""
    cores = {
        name: AgentCore(
            function=spec.function,
            comm_targets=list(spec.comm_targets),
            actions=list(spec.actions),
            enable_entrypoint=spec.enable_entrypoint or name == entrypoint,
            can_complete_tasks=spec.can_complete_tasks,
        )
        for name, spec in agents.items()
    }
    action_cores = {
        name: ActionCore(fn, name, {"type": "object", "properties": {}})
        for name, fn in (actions or {}).items()
    }
    return MAILRuntime(
        cores,
        action_cores,
        user_id=user_id,
        swarm_name=swarm_name,
        entrypoint=entrypoint,
        breakpoint_tools=breakpoint_tools,
        batch_delivery=batch_delivery,
    )


def user_message(
    task_id: str,
    body: str = "hello",
    *,
    to: str = "supervisor",
    user_id: str = "u1",
    subject: str = "New Message",
    swarm: str | None = "testswarm",
) -> MAILMessage:
    """A request from the user `user_id` to agent `to`."""
    from mail.core.message import create_agent_address

    payload = make_request(
        task_id,
        create_user_address(user_id),
        create_agent_address(to),
        subject,
        body,
        sender_swarm=swarm,
        recipient_swarm=swarm,
    )
    return make_message(payload, "request")


def event_names(runtime: MAILRuntime, task_id: str) -> list[str]:
    return [e.event for e in runtime.get_task_events(task_id)]


def events_named(runtime: MAILRuntime, task_id: str, name: str) -> list[Any]:
    return [e for e in runtime.get_task_events(task_id) if e.event == name]


def tool_results(history: list[dict[str, Any]]) -> list[str]:
    """The tool-result texts in a history (both completions and responses styles)."""
    out = []
    for entry in history:
        if entry.get("role") == "tool":
            out.append(str(entry.get("content")))
        elif entry.get("type") == "function_call_output":
            out.append(str(entry.get("output")))
    return out


def incoming(history: list[dict[str, Any]]) -> list[str]:
    """The contents of the user-role (incoming message) entries of a history."""
    return [str(e["content"]) for e in history if e.get("role") == "user"]


async def run_task(
    runtime: MAILRuntime,
    task_id: str = "t1",
    body: str = "hello",
    *,
    timeout: float = 5.0,
    **kwargs: Any,
) -> MAILMessage:
    """Run one user task to its end on an ephemeral loop, failing the test if it hangs."""
    return await asyncio.wait_for(
        runtime.run_task(user_message(task_id, body), timeout=timeout, **kwargs), timeout + 1
    )


def two_agent_runtime(
    supervisor: Step | list[Step],
    worker: list[Step] | None = None,
    **kwargs: Any,
) -> tuple[MAILRuntime, ScriptedAgent, ScriptedAgent]:
    """supervisor (entrypoint, can complete) <-> worker, with the given scripts."""
    sup = ScriptedAgent("supervisor", list(supervisor))  # type: ignore[arg-type]
    wrk = ScriptedAgent("worker", list(worker or []))
    actions = kwargs.pop("actions", None)
    sup_actions = kwargs.pop("supervisor_actions", list(actions or {}))
    runtime = make_runtime(
        {
            "supervisor": AgentSpec(sup, ["worker"], True, actions=sup_actions),
            "worker": AgentSpec(wrk, ["supervisor"]),
        },
        actions,
        **kwargs,
    )
    return runtime, sup, wrk


# --------------------------------------------------------------------------------- actions


async def echo_action(args: dict[str, Any]) -> str:
    """An action function for swarms.json `python::` references: echoes its arguments."""
    return f"echo: {json.dumps(args, sort_keys=True)}"


async def step_log_action(args: dict[str, Any]) -> str:
    """An action with an outside effect: appends its step id (`mail.current_step_id`) to the
    file MAIL_TEST_STEP_LOG names. With ``hang``, the first run of a step then hangs (a test
    kills the server meanwhile); a run of a step already in the file returns at once."""
    from mail import current_step_id

    step = str(current_step_id())
    log = Path(os.environ["MAIL_TEST_STEP_LOG"])
    seen = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
    with log.open("a", encoding="utf-8") as out:
        out.write(step + "\n")
    if args.get("hang") and step not in seen:
        await asyncio.sleep(60)
    return f"logged {step}"
