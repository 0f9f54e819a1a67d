"""A two-agent swarm for loop tests: the supervisor hands the user's body to the worker, the
worker answers it upper-cased, the supervisor completes with ``answer: <BODY>``. Every agent
call sleeps ``latency`` seconds first."""

from __future__ import annotations

from typing import Any

from mail import MAILAgentTemplate, MAILSwarm, MAILSwarmTemplate
from support.scripted_agents import ScriptedAgent, send_request, send_response, task_complete


def _body(history: list[dict[str, Any]]) -> str:
    return str(history[-1].get("content", "")).split("<body>")[1].split("</body>")[0]


def _supervisor_step(history: list[dict[str, Any]], tool_choice: Any) -> list[Any]:
    if '<from type="user">' in str(history[-1].get("content", "")):
        return [send_request("worker", _body(history))]
    return [task_complete(f"answer: {_body(history)}")]


def _worker_step(history: list[dict[str, Any]], tool_choice: Any) -> list[Any]:
    return [send_response("supervisor", _body(history).upper())]


def relay_swarm(latency: float, name: str = "relay") -> MAILSwarm:
    template = MAILSwarmTemplate(
        name=name,
        agents=[
            MAILAgentTemplate(
                "supervisor",
                lambda **_: ScriptedAgent("supervisor", default=_supervisor_step, sleep=latency),
                ["worker"],
                enable_entrypoint=True,
                can_complete_tasks=True,
            ),
            MAILAgentTemplate(
                "worker",
                lambda **_: ScriptedAgent("worker", default=_worker_step, sleep=latency),
                ["supervisor"],
            ),
        ],
        entrypoint="supervisor",
    )
    return template.instantiate(user_id=f"{name}-user")
