"""A caller that keys every streamed ``POST /message`` (MAILClient does) is never stopped by
``max_idempotency_keys_per_caller``: a stream that ended leaves its key answered, so it is
among the oldest answered keys forgotten at the bound (docs/api-http.md).

A real `mail server` (stub agents) with a bound of 20 keys gets 30 streamed keyed messages
one after the other, each read to its end: none is refused. A repeat of a recent one still
attaches to its task's events (replayed, the same task, nothing run again). On the SQLite
file with the key written in the task store's buffer (the usual path), on SQLite with the key
committed on its own (a message with its own webhook), and on PostgreSQL.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.support.pg_schema import BASE_URL, scratch_schema, with_search_path

from server_fixtures import (
    ServerProcess,
    auth,
    create_key,
    free_port,
    parse_sse_stream,
    write_config,
    write_stub_swarms,
)

pytestmark = pytest.mark.timeout(300)

BOUND = 20
MESSAGES = 30  # past the bound by half of it
EXTRA = (
    f"max_idempotency_keys_per_caller = {BOUND}\n"
    '\n[server.webhooks]\nallowed_hosts = ["127.0.0.1"]\n'
)


@pytest.fixture(params=["sqlite", "sqlite-classic", "postgres"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ServerProcess]:
    """A server on the stub swarms (SQLite or a PostgreSQL schema of its own); its
    ``kind`` is the fixture's parameter."""
    write_stub_swarms(tmp_path)
    api_key = create_key(tmp_path / "registries" / "keys.json", "user", "streamer")

    def run(env: dict[str, str]) -> Iterator[ServerProcess]:
        port = free_port()
        config = write_config(tmp_path, port=port, extra=EXTRA)
        srv = ServerProcess(tmp_path, port, args=["--config", str(config)], env=env)
        srv.keys = {"streamer": api_key}
        srv.kind = request.param  # type: ignore[attr-defined]
        srv.start()
        try:
            yield srv
        finally:
            assert srv.stop(timeout=60) == 0, srv.logs()

    if request.param == "postgres":
        with scratch_schema("mail_idem_stream_bound", BASE_URL) as schema:
            yield from run({"DATABASE_URL": with_search_path(BASE_URL, schema)})
    else:
        yield from run({})


def stream(
    server: ServerProcess, key: str, payload: dict[str, Any]
) -> tuple[httpx.Response, list[Any]]:
    """A keyed streamed message read to its end: (the response, its events but pings)."""
    headers = {**auth(server.keys["streamer"]), "Idempotency-Key": key}
    with httpx.stream(
        "POST", f"{server.base_url}/message", json=payload, headers=headers, timeout=60
    ) as response:
        if response.status_code != 200:
            response.read()
            return response, []
        events = [e for e in parse_sse_stream(response) if e.event != "ping"]
    return response, events


def test_streamed_keys_past_the_bound_are_never_refused(server: ServerProcess) -> None:
    kind = server.kind  # type: ignore[attr-defined]
    sent: list[tuple[str, dict[str, Any], str]] = []
    for n in range(MESSAGES):
        key, payload = f'"{uuid.uuid4()}"', {"body": f"streamed {n}", "stream": True}
        if kind == "sqlite-classic":  # a webhook of its own: the key is committed on its own
            payload["webhook"] = {"url": f"http://127.0.0.1:9/hook-{n}"}
        response, events = stream(server, key, payload)
        assert response.status_code == 200, (n, response.status_code, response.text)
        assert "idempotent-replayed" not in response.headers
        assert events and events[-1].event == "task_complete", [e.event for e in events]
        sent.append((key, payload, events[-1].json()["task_id"]))
    tasks = httpx.get(
        f"{server.base_url}/tasks", headers=auth(server.keys["streamer"]), timeout=30
    ).json()
    assert len(tasks) == MESSAGES
    # A repeat of the latest still attaches to its task (its key is kept: the newest are).
    key, payload, task_id = sent[-1]
    again, events = stream(server, key, payload)
    assert again.status_code == 200, again.text
    assert again.headers["idempotent-replayed"] == "true"
    assert events[-1].event == "task_complete"
    assert events[-1].json()["task_id"] == task_id
    after = httpx.get(
        f"{server.base_url}/tasks", headers=auth(server.keys["streamer"]), timeout=30
    ).json()
    assert len(after) == MESSAGES  # nothing ran again
