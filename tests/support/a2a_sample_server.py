"""Stock a2a-sdk agents served by the SDK's own Starlette routes (no MAIL code), for the
outbound bridge tests and the bench: ``python3 -m tests.support.a2a_sample_server PORT``.

* ``/echo`` (card ``/echo/.well-known/agent-card.json``): ``ASK <q>`` asks back
  (``input-required``) and completes the follow-up with ``got: <answer>``; ``FAIL`` fails;
  ``SLOW <s> <text>`` waits first; ``BIG <n>`` answers n bytes; ``RECALL`` answers
  ``recall: <what was said before in this context, joined by ' | '>``; ``CONTEXT`` answers
  ``context: <the contextId it was sent>``; anything else ``echo: <text>``.
* ``/plain``: the echo agent behind a card without ``capabilities.streaming`` (the SDK's
  client then sends without streaming).
* ``/stream``: answers in three appended artifact chunks (``one``, ``two``, ``three``), then
  completes; ``GATED <key>`` waits after ``one`` until ``POST /gates/<key>`` (so a test can
  see the first chunk arrive while the call still runs); ``MANY <n>`` sends n chunks
  ``c0`` ... ``c<n-1>``; ``LONG <n>`` sends one chunk of n letters.
"""

from __future__ import annotations

import asyncio
import sys

import uvicorn
from a2a.helpers.proto_helpers import new_task, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    TaskState,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

# Gates of `GATED <key>` streams, opened by POST /gates/<key> (whichever comes first).
_GATES: dict[str, asyncio.Event] = {}


def _gate(key: str) -> asyncio.Event:
    return _GATES.setdefault(key, asyncio.Event())


async def _open_gate(request: Request) -> Response:
    _gate(request.path_params["key"]).set()
    return Response(status_code=204)


async def _start(context: RequestContext, queue: EventQueue) -> TaskUpdater:
    task_id, context_id = context.task_id or "", context.context_id or ""
    if context.current_task is None:
        await queue.enqueue_event(new_task(task_id, context_id, TaskState.TASK_STATE_SUBMITTED))
    updater = TaskUpdater(queue, task_id, context_id)
    await updater.start_work()
    return updater


class EchoExecutor(AgentExecutor):
    def __init__(self) -> None:
        self._said: dict[str, list[str]] = {}  # context id -> the texts it was sent, in order

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = context.get_user_input()
        said = self._said.setdefault(context.context_id or "", [])
        earlier = list(said)
        said.append(text)
        # Tasks that ended cannot take messages: a known task is one that asked for input.
        was_asking = context.current_task is not None
        updater = await _start(context, event_queue)
        if was_asking:
            await updater.add_artifact([new_text_part(f"got: {text}")], name="answer")
            await updater.complete()
            return
        about = {
            "RECALL": f"recall: {' | '.join(earlier)}",
            "CONTEXT": f"context: {context.context_id}",
        }
        if text in about:
            await updater.add_artifact([new_text_part(about[text])], name="answer")
            await updater.complete()
            return
        if text.startswith("ASK "):
            question = updater.new_agent_message([new_text_part(text[4:])])
            await updater.requires_input(question)
            return
        if text.startswith("FAIL"):
            await updater.failed(
                updater.new_agent_message([new_text_part("echo failed on purpose")])
            )
            return
        if text.startswith("SLOW "):
            _, seconds, text = text.split(" ", 2)
            await asyncio.sleep(float(seconds))
        if text.startswith("BIG "):
            text = "x" * int(text[4:])
        await updater.add_artifact([new_text_part(f"echo: {text}")], name="answer")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id or "", context.context_id or "").cancel()


class StreamingExecutor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = context.get_user_input()
        updater = await _start(context, event_queue)
        chunks = ["one", "two", "three"]
        if text.startswith("MANY "):
            chunks = [f"c{i}" for i in range(int(text[5:]))]
        elif text.startswith("LONG "):
            chunks = ["x" * int(text[5:])]
        for i, chunk in enumerate(chunks):
            if i == 1 and text.startswith("GATED "):
                await asyncio.wait_for(_gate(text[6:]).wait(), 60)
            await updater.add_artifact(
                [new_text_part(chunk)], artifact_id="answer", name="answer", append=i > 0
            )
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id or "", context.context_id or "").cancel()


def _card(base: str, name: str, streaming: bool = True) -> AgentCard:
    return AgentCard(
        name=name,
        description=f"stock a2a-sdk {name} agent",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(
                url=f"{base}/{name}/", protocol_binding="JSONRPC", protocol_version="1.0"
            )
        ],
        capabilities=AgentCapabilities(streaming=streaming),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id=name, name=name, description=name, tags=["sample"])],
    )


def build_app(base: str) -> Starlette:
    routes = [Route("/gates/{key}", _open_gate, methods=["POST"])]
    agents = (
        ("echo", EchoExecutor(), True),
        ("plain", EchoExecutor(), False),
        ("stream", StreamingExecutor(), True),
    )
    for name, executor, streaming in agents:
        card = _card(base, name, streaming)
        handler = DefaultRequestHandler(
            agent_executor=executor, task_store=InMemoryTaskStore(), agent_card=card
        )
        routes += create_agent_card_routes(card, card_url=f"/{name}/.well-known/agent-card.json")
        routes += create_jsonrpc_routes(handler, rpc_url=f"/{name}/", enable_v0_3_compat=True)
    return Starlette(routes=routes)


if __name__ == "__main__":
    port = int(sys.argv[1])
    uvicorn.run(
        build_app(f"http://127.0.0.1:{port}"), host="127.0.0.1", port=port, log_level="warning"
    )
