"""Team messaging survives kill -9 with PostgreSQL: threads (participants, posts), inbox read
state and attachments are on disk as soon as the tool call that made them reported success."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.support.pg_schema import reachable_database
from tests.support.store_backends import DurableStore, durable_store  # noqa: F401 - fixture

from server_fixtures import ServerProcess, auth, create_key, free_port, write_config
from support.scripted_llm import ScriptedLLM, reply, tool_call
from team_e2e_support import is_agent, json_result, results, team_config_extra, write_team_swarm

pytestmark = pytest.mark.timeout(240)

DATABASE_URL = os.environ.get("MAIL_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
LEAD = is_agent("lead")


@pytest.fixture(scope="module")
def database() -> str:
    return reachable_database(DATABASE_URL)


@pytest.fixture
def llm() -> Iterator[tuple[ScriptedLLM, asyncio.AbstractEventLoop]]:
    box: dict[str, Any] = {}
    ready = threading.Event()

    def serve() -> None:
        async def main() -> None:
            box["stop"] = asyncio.Event()
            async with ScriptedLLM() as server:
                box["llm"], box["loop"] = server, asyncio.get_running_loop()
                ready.set()
                await box["stop"].wait()

        asyncio.run(main())

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert ready.wait(10)
    yield box["llm"], box["loop"]
    box["loop"].call_soon_threadsafe(box["stop"].set)
    thread.join(10)


def _queue(llm: Any, *parts: Any) -> None:
    server, loop = llm

    async def put() -> None:
        if len(parts) == 1 and callable(parts[0]):
            server.queue(parts[0], match=LEAD)
        else:
            server.queue(*parts, match=LEAD)

    asyncio.run_coroutine_threadsafe(put(), loop).result(5)


def _server(directory: Path, swarm: str, port: int, store: DurableStore) -> ServerProcess:
    config = write_config(directory, port=port, swarm=swarm, extra=team_config_extra(directory))
    return ServerProcess(directory, port, args=["--config", str(config)], env=store.env)


def _post(server: ServerProcess, key: str, body: str) -> dict[str, Any]:
    r = httpx.post(
        f"{server.base_url}/message", json={"body": body}, headers=auth(key), timeout=120
    )
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def script_thread_and_file(
    llm: Any, directory: Path, swarm: str, title: str, content: bytes
) -> tuple[str, dict[str, Any]]:
    """A team swarm whose lead, on the next task, creates a thread (``state["tid"]``) and
    hands the user a file holding `content`; returns the user key (id carol) and state."""
    write_team_swarm(directory, swarm, llm[0].base_url)
    key = create_key(directory / "registries" / "keys.json", "user", "carol")
    root = directory / "files" / "user-carol"
    root.mkdir(parents=True)
    (root / "keep.txt").write_bytes(content)
    state: dict[str, Any] = {}

    def after_create(r: Any) -> Any:
        state["tid"] = json_result(results(r)[-1])["thread_id"]
        return reply(
            tool_call("transfer_file", {"recipient": "user", "source_path": "keep.txt"}),
            tool_call("get_messages", {}),
        )

    thread = {"title": title, "participants": ["a"], "initial_message": "hi a"}
    _queue(llm, tool_call("create_thread", thread))
    _queue(llm, after_create)
    _queue(llm, lambda r: reply(tool_call("task_complete", {"finish_message": results(r)[-2]})))
    return key, state


def test_threads_inbox_and_attachments_survive_kill_9(
    durable_store: DurableStore,  # noqa: F811
    llm: Any,
    tmp_path: Path,
) -> None:
    swarm = f"team-persist-{uuid.uuid4().hex[:8]}"
    key, state = script_thread_and_file(llm, tmp_path, swarm, "Durable", b"durable bytes")
    port = free_port()

    first = _server(tmp_path, swarm, port, durable_store).start()
    try:
        out = _post(first, key, "set things up")
        meta = json_result(out["response"])
    finally:
        assert first.proc is not None
        first.proc.kill()  # kill -9: no shutdown hooks run
        first.proc.wait(10)

    second = _server(tmp_path, swarm, port, durable_store).start()
    try:
        headers = auth(key)
        threads = httpx.get(f"{second.base_url}/threads", headers=headers, timeout=10).json()
        assert [t["thread_id"] for t in threads["threads"]] == [state["tid"]]
        detail = httpx.get(
            f"{second.base_url}/threads/{state['tid']}", headers=headers, timeout=10
        ).json()
        assert detail["participants"] == ["lead", "a"]
        assert [m["body"] for m in detail["messages"]][-1] == "hi a"
        assert detail["unread"] == {"lead": 0, "a": 2}
        download = httpx.get(
            f"{second.base_url}/attachments/{meta['id']}", headers=headers, timeout=10
        )
        assert download.status_code == 200 and download.content == b"durable bytes"
        assert download.headers["x-content-sha256"] == meta["sha256"]

        # Inbox read state survived: only this task's message is unread for the lead.
        _queue(llm, tool_call("check_new_messages", {}))
        _queue(llm, lambda r: reply(tool_call("task_complete", {"finish_message": results(r)[-1]})))
        counts = json_result(_post(second, key, "anything new?")["response"])
        assert counts == {"unread": 1, "direct": 1, "threads": {}}
    finally:
        assert second.stop() == 0, second.logs()
    assert json.loads(json.dumps(state))  # state was filled by the scripted replies
