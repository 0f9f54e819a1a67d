"""Idempotency keys survive a kill -9 of a real `mail server`, on SQLite (the default) and on
PostgreSQL (DATABASE_URL); the scripted model server counts the model calls.

Before the kill, three keyed messages are sent and their connections dropped while the model
thinks: a plain one and a streamed one whose tasks then finish, and one whose model call is
still in flight when the server is killed. After the restart, each retried with its key:

- the plain one gets the stored answer and the streamed one attaches to its task's events
  (its answer at the end); the model saw each of their calls once;
- the interrupted one is the same task, continued by the restarted server (the interrupted
  model call runs again: at-least-once for a turn cut by a crash), answered once it is done:
  still one task.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.support.store_backends import DurableStore, scratch_durable_store

from server_fixtures import (
    ServerProcess,
    aparse_sse_stream,
    auth,
    create_key,
    free_port,
    healthy,
    write_config,
)
from support.review_swarm import review_swarms_json
from support.scripted_llm import ScriptedLLM, hang, reply, tool_call

# Two server start-ups with LiteLLM per store: slow on a busy machine.
pytestmark = pytest.mark.timeout(900)


@pytest.fixture(params=["sqlite", "postgres"])
def durable_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DurableStore]:
    """The server's default SQLite file, or a PostgreSQL schema of this test's own."""
    with scratch_durable_store(request.param, tmp_path, "mail_idem_kill") as store:
        yield store


def _complete(text: str) -> Any:
    return reply(tool_call("task_complete", {"finish_message": text}))


async def _until(condition: Any, what: str, timeout: float = 120) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def _send_and_drop(
    server: ServerProcess,
    key: str,
    api_key: str,
    payload: dict[str, Any],
    llm: ScriptedLLM,
    token: str,
) -> None:
    """Send on a raw connection, close it once the model got the call."""
    body = json.dumps(payload).encode()
    _, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(
        (
            f"POST /message HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer {api_key}\r\nIdempotency-Key: {key}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        + body
    )
    await writer.drain()
    await _until(lambda: any(token in str(r.body) for r in llm.requests), "the model call")
    writer.close()


def _calls(llm: ScriptedLLM, token: str) -> int:
    return sum(token in str(r.body) for r in llm.requests)


async def _task_done(client: httpx.AsyncClient, api_key: str, count: int) -> bool:
    tasks = (await client.get("/tasks", headers=auth(api_key))).json()
    return len(tasks) == count and all(t["completed"] for t in tasks.values())


async def test_keys_survive_kill_9(tmp_path: Path, durable_store: DurableStore) -> None:
    swarm = f"idem-kill-{uuid.uuid4().hex[:8]}"
    port = free_port()
    api_key = create_key(tmp_path / "registries" / "keys.json", "user", "alice")
    plain, streamed, cut = (uuid.uuid4().hex for _ in range(3))
    keys = {name: f'"{uuid.uuid4()}"' for name in (plain, streamed, cut)}
    payloads = {
        plain: {"body": f"question {plain}"},
        streamed: {"body": f"question {streamed}", "stream": True},
        cut: {"body": f"question {cut}"},
    }
    async with ScriptedLLM() as llm:
        for token in (plain, streamed):
            llm.queue(
                hang(1.0, then=_complete(f"answer {token}")),
                match=lambda r, t=token: t in str(r.body),
            )
        # The interrupted call never answers; its re-run after the restart does.
        llm.queue(hang(600, then=_complete("never")), match=lambda r: cut in str(r.body))
        llm.queue(_complete(f"answer {cut}"), match=lambda r: cut in str(r.body))
        (tmp_path / "swarms.json").write_text(
            json.dumps([review_swarms_json(swarm, llm.base_url)]), encoding="utf-8"
        )
        config = write_config(tmp_path, port=port, swarm=swarm)

        def server() -> ServerProcess:
            return ServerProcess(
                tmp_path, port, args=["--config", str(config)], env=durable_store.env
            )

        first = server().start(wait=False)
        try:
            await healthy(first)
            for token in (plain, streamed):
                await _send_and_drop(first, keys[token], api_key, payloads[token], llm, token)
            async with httpx.AsyncClient(base_url=first.base_url, timeout=60) as client:
                await _until_async(lambda: _task_done(client, api_key, 2), "both tasks done")
            await _send_and_drop(first, keys[cut], api_key, payloads[cut], llm, cut)
        finally:
            assert first.proc is not None
            first.proc.kill()  # kill -9: no shutdown hooks run
            first.proc.wait(10)
        assert (_calls(llm, plain), _calls(llm, streamed), _calls(llm, cut)) == (1, 1, 1)

        second = server().start(wait=False)
        try:
            await healthy(second)
            async with httpx.AsyncClient(base_url=second.base_url, timeout=120) as client:
                r = await client.post(
                    "/message", json=payloads[plain], headers=_keyed(api_key, keys[plain])
                )
                assert r.status_code == 200, r.text
                assert r.json()["response"] == f"answer {plain}"
                assert r.headers["idempotent-replayed"] == "true"

                events = []
                async with client.stream(
                    "POST",
                    "/message",
                    json=payloads[streamed],
                    headers=_keyed(api_key, keys[streamed]),
                ) as response:
                    assert response.status_code == 200
                    async for event in aparse_sse_stream(response):
                        if event.event != "ping":
                            events.append(event)
                        if event.event in ("task_complete", "task_error") and event.id is None:
                            break
                assert events[-1].event == "task_complete"
                assert events[-1].json()["response"] == f"answer {streamed}"

                busy = 0
                while True:
                    r = await client.post(
                        "/message", json=payloads[cut], headers=_keyed(api_key, keys[cut])
                    )
                    if r.status_code != 409 or "retry-after" not in r.headers:
                        break
                    busy += 1
                    assert busy < 600, r.text
                    await asyncio.sleep(0.2)
                assert r.status_code == 200, r.text
                assert r.json()["response"] == f"answer {cut}"
                tasks = (await client.get("/tasks", headers=auth(api_key))).json()
            assert len(tasks) == 3, tasks  # one task per key, across the kill
            assert r.json()["task_id"] in tasks
        finally:
            assert second.stop(timeout=120) == 0, second.logs()
    assert (_calls(llm, plain), _calls(llm, streamed)) == (1, 1)
    assert _calls(llm, cut) == 2  # the cut call, and its re-run by the restarted server


def _keyed(api_key: str, key: str) -> dict[str, str]:
    return {**auth(api_key), "Idempotency-Key": key}


async def _until_async(check: Any, what: str, timeout: float = 120) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await check():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)
