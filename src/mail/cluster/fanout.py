"""Operator views that span every instance of a deployment (``GET /tasks/all``).

In one process ``GET /tasks/all`` walks the instances in memory. In cluster mode each instance
lives in its own actor, so the front end asks every instance actor of the namespace for the
same route (each answers with the tasks of the one instance it holds) and merges the answers.
An actor that is ending or restarting is left out of the answer rather than failing it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from fastapi import APIRouter, Depends, Request

from mail.cluster.host import ForwardedRequest, UnaryResponse, caller_to_dict
from mail.server.auth import Caller, caller_admin
from mail.server.jsonio import JSONBody

logger = logging.getLogger("mail.cluster")

# Seconds one instance may take to answer before the view is given without it.
FAN_OUT_TIMEOUT = 10.0


async def ask_every_instance(
    instances: Any, caller: Caller, request: ForwardedRequest
) -> list[UnaryResponse]:
    """The answers of every live instance actor of ``instances``' namespace to ``request``."""
    ray = instances.ray
    names = await asyncio.to_thread(instances.list_instances)

    async def one(name: str) -> UnaryResponse | None:
        try:
            handle = await asyncio.to_thread(ray.get_actor, name, instances.namespace)
            reply: UnaryResponse = await asyncio.wait_for(
                handle.unary.remote(caller_to_dict(caller), request), FAN_OUT_TIMEOUT
            )
        except Exception as exc:  # ending, restarting or slow: leave it out of the view
            logger.info("instance %s left out of %s: %s", name, request.path, type(exc).__name__)
            return None
        return reply

    answers = await asyncio.gather(*(one(name) for name in names))
    return [answer for answer in answers if answer is not None]


def merged_task_records(answers: list[UnaryResponse]) -> list[dict[str, Any]]:
    tasks: list[dict[str, Any]] = []
    for answer in answers:
        if answer.status != 200:
            continue
        tasks.extend(json.loads(answer.body).get("tasks", []))
    tasks.sort(key=lambda r: str(r.get("start_time") or ""), reverse=True)
    return tasks


router = APIRouter()


@router.get("/tasks/all", include_in_schema=False)
async def list_all_tasks(request: Request, caller: Caller = Depends(caller_admin)) -> JSONBody:
    backend = request.app.state.cluster_backend
    client = request.scope.get("client")
    forwarded = ForwardedRequest(
        method="GET",
        path="/tasks/all",
        headers=list(request.scope["headers"]),
        client=tuple(client) if client else None,  # type: ignore[arg-type]
    )
    answers = await ask_every_instance(backend.instances, caller, forwarded)
    return JSONBody({"tasks": merged_task_records(answers)})
