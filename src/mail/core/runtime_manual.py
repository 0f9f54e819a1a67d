"""Manual mode: messages to agents are buffered until the caller steps an agent."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, Protocol

from mail.core.message import (
    ALL_AGENTS,
    MAILMessage,
    create_agent_address,
    create_system_address,
    make_message,
    make_request,
)
from mail.core.runtime_ports import HostLink, Swarm, TurnLocks

MANUAL_STEP_SUBJECT = "::manual_step::"


def render_buffer(messages: list[MAILMessage]) -> str:
    """The text an agent sees for its buffered messages (public vs private blocks)."""
    blocks = []
    for message in messages:
        payload: Any = message["message"]
        sender = payload["sender"]["address"]
        if message["msg_type"] in ("broadcast", "interrupt"):
            names = [r["address"] for r in payload["recipients"]]
            if names == [ALL_AGENTS]:
                blocks.append(
                    f"<public_message>\n<from>{sender}</from>\n{payload['body']}\n</public_message>"
                )
            else:
                blocks.append(
                    f"<private_message>\n<from>{sender}</from>\n<to>{', '.join(names)}</to>\n"
                    f"{payload['body']}\n</private_message>"
                )
        else:
            blocks.append(
                f"<private_message>\n<from>{sender}</from>\n{payload['body']}\n</private_message>"
            )
    return "\n\n\n".join(blocks)


def manual_routing(response_type: str, response_targets: list[str] | None) -> dict[str, Any]:
    """The routing_info of a manual step's request: where the agent's text answer goes."""
    if response_type not in ("broadcast", "response", "request"):
        raise ValueError(f"invalid response_type '{response_type}'")
    if response_type != "broadcast" and not response_targets:
        raise ValueError(f"response_type '{response_type}' requires response_targets")
    return {
        "manual_response_type": response_type,
        "manual_response_targets": list(response_targets or [ALL_AGENTS]),
    }


class ManualHost(Swarm, TurnLocks, Protocol):
    """What manual steps use of the runtime."""

    @property
    def context_compressor(self) -> Any: ...

    async def await_idle(self) -> None: ...
    async def await_task_idle(self, task_id: str, poll: float = 0.01) -> None: ...
    def _run_turn(
        self, task_id: str, agent_name: str, message: MAILMessage | None, tool_choice: Any
    ) -> Coroutine[Any, Any, None]: ...


class ManualStepper(HostLink[ManualHost]):
    """Manual mode: the messages buffered per agent, and `manual_step`."""

    def __init__(self, host: ManualHost) -> None:
        self._link(host)
        # "{task}::{agent}" -> messages delivered in manual mode, shown at its next step
        self.message_buffer: dict[str, list[MAILMessage]] = {}
        # "{task}::{agent}" -> the step waiting for that agent's text answer
        self.return_messages: dict[str, asyncio.Future[MAILMessage]] = {}

    async def step(
        self,
        task_id: str,
        target: str,
        routing: dict[str, Any],
        payload: str | None,
        ctx_ratio: float,
        llm: str | None,
        system: str | None,
    ) -> MAILMessage:
        """`MAILRuntime.manual_step` once its arguments are checked: `routing` is what
        `manual_routing` made of the response type and targets."""
        rt = self.host
        await rt.await_idle()
        if target not in rt.agents:
            raise ValueError(f"unknown agent target: '{target}'")
        for name in routing["manual_response_targets"]:
            if name != ALL_AGENTS and name not in rt.agents:
                raise ValueError(f"unknown agent response target: '{name}'")
        key = f"{task_id}::{target}"
        buffered = self.message_buffer.pop(key, [])
        text = render_buffer(buffered)
        if payload:
            text = f"{text}\n\n\n{payload}" if text else payload
        body = text.rstrip()
        rt._ensure_task(task_id)
        request = make_request(
            task_id,
            create_system_address("system"),
            create_agent_address(target),
            MANUAL_STEP_SUBJECT,
            body,
            routing_info=routing,
        )
        message = make_message(request, "buffered")
        future: asyncio.Future[MAILMessage] = asyncio.get_running_loop().create_future()
        self.return_messages[key] = future
        if ctx_ratio > 0 and llm and rt.context_compressor is not None:
            turn_key = f"{task_id}::{target}"
            async with rt._in_turn(turn_key):
                await rt.context_compressor(rt.history_for(task_id, target), ctx_ratio, llm)
        overrides = _apply_overrides(rt.agents[target].function, llm, system)
        try:
            rt._spawn(task_id, rt._run_turn(task_id, target, message, "auto"))
            idle: asyncio.Task[None] = asyncio.create_task(rt.await_task_idle(task_id))
            try:
                pending: set[asyncio.Future[Any]] = {future, idle}
                await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            finally:
                idle.cancel()
            if future.done():
                return future.result()
            # Everything this step set off has finished and the agent never answered in
            # text (it only called tools, or it failed): say so instead of waiting forever.
            task = rt.mail_tasks.get(task_id)
            errors = [
                e.description for e in (task.events if task else []) if e.event == "agent_error"
            ]
            detail = f": {errors[-1]}" if errors else ""
            raise RuntimeError(
                f"agent '{target}' ended its manual step without text output{detail}"
            )
        finally:
            self.return_messages.pop(key, None)
            _restore_overrides(rt.agents[target].function, overrides)


def _inner_function(fn: Any) -> Any:
    for attr in ("supervisor_fn", "action_agent_fn"):
        inner = getattr(fn, attr, None)
        if inner is not None:
            return inner
    return fn


def _apply_overrides(fn: Any, llm: str | None, system: str | None) -> dict[str, Any]:
    saved: dict[str, Any] = {}
    target = _inner_function(fn)
    for attr, value in (("llm", llm), ("system", system)):
        if value is not None and hasattr(target, attr):
            saved[attr] = getattr(target, attr)
            setattr(target, attr, value)
    return saved


def _restore_overrides(fn: Any, saved: dict[str, Any]) -> None:
    target = _inner_function(fn)
    for attr, value in saved.items():
        setattr(target, attr, value)
