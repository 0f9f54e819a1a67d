"""The in-memory TaskStore, the store factory, and the .env reader.

The behaviour shared with the PostgreSQL store is covered for both backends in
test_store_postgres.py; this file covers what is specific to the in-process store and to
configuration.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from mail.store import (
    InstanceKey,
    MemoryTaskStore,
    PostgresTaskStore,
    StoreUnavailableError,
    create_store,
    database_url_from_env,
    detect_tool_format,
    load_dotenv,
    store_from_env,
)
from mail.store.base import normalize_start_time

KEY = InstanceKey("demo", "user", "u-1")


async def test_round_trip_and_snapshot_copies() -> None:
    store = MemoryTaskStore()
    await store.start()
    await store.upsert_task(
        KEY,
        {
            "task_id": "t",
            "task_owner": "user:u-1@demo",
            "task_contributors": ("user:u-1@demo",),
            "remote_swarms": [],
            "is_running": 1,
            "completed": False,
            "title": None,
            "start_time": "2025-01-02T03:04:05Z",
        },
    )
    await store.append_event(KEY, "t", {"event": "new_message", "data": {"a": 1}, "id": 4})
    await store.save_history(KEY, "t", "sup", None, [{"role": "user", "content": "x"}])
    await store.save_response(KEY, "t", {"message": {"body": "ok"}})
    await store.save_queue(KEY, "t", [{"priority": 1, "seq": 1, "message": {"id": "m"}}])

    snap = await store.load_instance(KEY)
    task = snap.tasks["t"]
    assert task["task_contributors"] == ["user:u-1@demo"]  # tuples are stored as lists
    assert task["is_running"] is True
    assert task["title"] is None
    assert task["start_time"] == "2025-01-02T03:04:05+00:00"
    assert snap.events["t"] == [{"event": "new_message", "data": '{"a":1}', "id": "4"}]
    assert snap.histories[("t", "sup")] == [{"role": "user", "content": "x"}]
    assert snap.queues["t"][0]["message"] == {"id": "m"}

    # A snapshot is the caller's to mutate.
    snap.histories[("t", "sup")].append({"role": "assistant", "content": "mine"})
    snap.tasks["t"]["completed"] = True
    again = await store.load_instance(KEY)
    assert again.histories[("t", "sup")] == [{"role": "user", "content": "x"}]
    assert again.tasks["t"]["completed"] is False
    assert await store.flush() is True and store.pending_writes == 0
    assert store.status() == {
        "backend": "memory",
        "pending_writes": 0,
        "failed_attempts": 0,
        "last_error": None,
        "degraded": False,
        "fenced_writes": 0,
        "dropped_writes": 0,
    }


async def test_mutating_a_saved_response_or_queue_does_not_leak() -> None:
    store = MemoryTaskStore()
    await store.start()
    response = {"message": {"body": "first"}}
    queue = [{"priority": 2, "seq": 1, "message": {"body": "q"}}]
    await store.save_response(KEY, "t", response)
    await store.save_queue(KEY, "t", queue)
    response["message"]["body"] = "changed"
    queue[0]["message"]["body"] = "changed"
    queue.clear()
    snap = await store.load_instance(KEY)
    assert snap.responses["t"]["message"]["body"] == "first"
    assert snap.queues["t"][0]["message"]["body"] == "q"


async def test_events_may_be_server_sent_event_objects() -> None:
    from sse_starlette import ServerSentEvent

    store = MemoryTaskStore()

    await store.start()
    await store.append_event(KEY, "t", ServerSentEvent(data='{"x":1}', event="task_complete", id=7))
    snap = await store.load_instance(KEY)
    assert snap.events["t"] == [{"event": "task_complete", "data": '{"x":1}', "id": "7"}]


async def test_unknown_instance_loads_empty_and_delete_queue_is_idempotent() -> None:
    store = MemoryTaskStore()
    await store.start()
    await store.delete_queue(KEY, "nope")
    snap = await store.load_instance(InstanceKey("other", "admin", "x"))
    assert snap.is_empty()


async def test_tool_format_detection_and_explicit_format() -> None:
    assert detect_tool_format([{"role": "user", "content": "x"}]) == "completions"
    assert detect_tool_format([{"type": "message", "content": "x"}]) == "responses"
    assert detect_tool_format([]) == "responses"


async def test_sdk_objects_in_histories_are_stored_as_data() -> None:
    from pydantic import BaseModel

    class ToolCall(BaseModel):
        id: str
        name: str

    store = MemoryTaskStore()

    await store.start()
    await store.save_history(
        KEY, "t", "a", None, [{"role": "assistant", "tool_calls": [ToolCall(id="c1", name="f")]}]
    )
    history = (await store.load_instance(KEY)).histories[("t", "a")]
    assert history == [{"role": "assistant", "tool_calls": [{"id": "c1", "name": "f"}]}]


def test_start_time_normalisation() -> None:
    assert normalize_start_time("2025-01-01T00:00:00") == "2025-01-01T00:00:00+00:00"
    assert normalize_start_time("2025-01-01T02:00:00+02:00") == "2025-01-01T00:00:00+00:00"
    with pytest.raises(ValueError, match="ISO 8601"):
        normalize_start_time("not a date")


def test_factory_reads_database_url_after_loading_dotenv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    assert database_url_from_env() is None
    assert isinstance(store_from_env(), MemoryTaskStore)

    (tmp_path / ".env").write_text(
        "# comment\n"
        "export DATABASE_URL='postgresql://u:p@db.example:5432/mail'\n"
        "OTHER_SETTING=value # trailing comment\n"
        "not a line\n",
        encoding="utf-8",
    )
    monkeypatch.delenv("OTHER_SETTING", raising=False)
    try:
        assert database_url_from_env() == "postgresql://u:p@db.example:5432/mail"
        assert os.environ["OTHER_SETTING"] == "value"
        assert isinstance(store_from_env(min_size=1), PostgresTaskStore)
    finally:
        # Set by the .env file, not by monkeypatch: removed here, or monkeypatch would put
        # them back at teardown (a later test's `mail` command would find a DATABASE_URL).
        os.environ.pop("DATABASE_URL", None)
        os.environ.pop("OTHER_SETTING", None)


def test_environment_wins_over_dotenv_and_none_disables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text('DATABASE_URL="postgresql://from-file/db"\n', encoding="utf-8")
    monkeypatch.setenv("DATABASE_URL", "none")
    assert database_url_from_env() is None
    assert isinstance(store_from_env(), MemoryTaskStore)
    monkeypatch.setenv("DATABASE_URL", "postgresql://from-env/db")
    assert database_url_from_env() == "postgresql://from-env/db"
    values = load_dotenv(tmp_path / ".env", override=True)
    assert values == {"DATABASE_URL": "postgresql://from-file/db"}
    assert os.environ["DATABASE_URL"] == "postgresql://from-file/db"


def test_missing_dotenv_is_not_an_error(tmp_path: Path) -> None:
    assert load_dotenv(tmp_path / "absent.env") == {}


def test_create_store_disabled_values() -> None:
    for value in (None, "", "none", "NONE", " none "):
        assert isinstance(create_store(value), MemoryTaskStore)


def test_importing_the_store_package_does_not_import_asyncpg() -> None:
    import subprocess
    import sys

    code = "import sys, mail.store; print('asyncpg' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


async def test_writes_before_start_are_refused_not_lost() -> None:
    store = MemoryTaskStore()
    with pytest.raises(StoreUnavailableError, match="not started"):
        await store.append_event(KEY, "t", {"event": "new_message", "data": "{}", "id": 1})
    assert store.write_nowait(KEY, "append_event", "t", {"event": "x", "data": "{}"}) is False
    await store.start()
    await store.append_event(KEY, "t", {"event": "new_message", "data": "{}", "id": 1})
    assert [e["id"] for e in (await store.load_instance(KEY)).events["t"]] == ["1"]
    await store.close()


async def test_data_outlives_a_close_and_is_seen_by_a_store_sharing_it() -> None:
    first = MemoryTaskStore()
    await first.start()
    await first.save_response(KEY, "t1", {"message": {"body": "kept"}})
    await first.close()
    await first.start()  # started again: what it held is still there
    assert (await first.load_instance(KEY)).responses["t1"]["message"]["body"] == "kept"
    await first.close()
    second = MemoryTaskStore(share_with=first)  # made after the first one closed
    await second.start()
    assert (await second.load_instance(KEY)).responses["t1"]["message"]["body"] == "kept"
    await second.close()


async def test_an_embedded_server_on_a_memory_store_delivers_its_webhooks(tmp_path: Path) -> None:
    import json

    import httpx
    import uvicorn
    from tests.server_fixtures import auth, create_key, free_port
    from tests.support.stub_agents import stub_swarms_json

    from mail.api import MAILSwarmTemplate
    from mail.config import ServerConfig
    from mail.server.app_factory import create_app

    delivered: asyncio.Queue[str] = asyncio.Queue()

    async def receiver(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            part = await receive()
            body += part.get("body", b"")
            if not part.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})
        delivered.put_nowait(json.loads(body)["type"])

    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(receiver, host="127.0.0.1", port=port, log_level="error")
    )
    serving = asyncio.create_task(server.serve())
    key = create_key(tmp_path / "keys.json", "user", "u1")
    config = ServerConfig.model_validate(
        {
            "store": {"kind": "memory"},
            "swarm": {"name": "stub", "registry": str(tmp_path / "registry.json")},
            "auth": {"mode": "local", "keys_file": str(tmp_path / "keys.json")},
            "webhooks": {"allowed_hosts": ["127.0.0.1"], "poll_interval": 0.1},
        }
    )
    store = MemoryTaskStore()
    await store.start()
    template = MAILSwarmTemplate.from_swarms_json(stub_swarms_json()[0])
    app = create_app(config, template=template, store=store)
    try:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://mail") as client:
                hook = {"url": f"http://127.0.0.1:{port}/hook", "events": ["task.completed"]}
                made = await client.post("/webhooks", json=hook, headers=auth(key))
                assert made.status_code == 201, made.text
                sent = await client.post("/message", json={"body": "hi"}, headers=auth(key))
                assert sent.status_code == 200, sent.text
                assert await asyncio.wait_for(delivered.get(), 30) == "task.completed"
    finally:
        await store.close()
        server.should_exit = True
        await serving
