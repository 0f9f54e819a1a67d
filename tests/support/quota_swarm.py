"""A swarm whose agent stores what the scripted LLM makes it store, a real `mail server` over it
with a byte quota, and what the server's database and file root then hold.

The supervisor has the stdlib file actions (write_file, read_directory), the team tools
`files` and `threads`, and `read_directory` as a breakpoint tool when asked; a worker agent
takes part in threads. `stored_bytes` sums what the database keeps (the content columns of
the task, team and idempotency tables, the way `mail.store.lifecycle` measures a task) and
`file_bytes` what the file root keeps.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from server_fixtures import ServerProcess, auth, create_key, start_on_a_free_port, write_config
from support.store_backends import DurableStore

FS = ["read_file", "write_file", "read_directory"]
MIB = 1024 * 1024

# table -> the column holding its content (`mail.store.lifecycle.TASK_CONTENT` and the team
# and idempotency tables).
CONTENT = {
    "task_events": "event_data",
    "agent_histories": "history",
    "task_responses": "response",
    "task_queues": "items",
    "tasks": "metadata",
    "team_threads": "record",
    "team_posts": "record",
    "team_inbox": "record",
    "team_attachments": "data",
    "idempotency_keys": "body",
}


def swarm(name: str, llm_url: str, *, breakpoint: bool = False) -> dict[str, Any]:
    params = {
        "llm": "openai/gpt-4o-mini",
        "use_proxy": False,
        "api_base": llm_url,
        "api_key": "test-key",
        "system": "You store things.",
    }
    return {
        "name": name,
        "version": "1.0.0",
        "entrypoint": "supervisor",
        "action_imports": [f"python::mail.stdlib.fs.actions:{a}" for a in FS],
        "breakpoint_tools": ["read_directory"] if breakpoint else [],
        "agents": [
            {
                "name": "supervisor",
                "factory": "python::mail.factories.supervisor:LiteLLMSupervisorFunction",
                "comm_targets": ["worker"],
                "enable_entrypoint": True,
                "can_complete_tasks": True,
                "tool_format": "completions",
                "actions": FS,
                "team_tools": ["files", "threads"],
                "agent_params": params,
            },
            {
                "name": "worker",
                "factory": "python::mail.factories.action:LiteLLMActionAgentFunction",
                "comm_targets": ["supervisor"],
                "tool_format": "completions",
                "team_tools": ["threads"],
                "agent_params": {**params, "system": "You read threads."},
            },
        ],
        "actions": [],
    }


@contextlib.contextmanager
def quota_server(
    store: DurableStore, llm_url: str, *, quota: int, extra: str = "", breakpoint: bool = False
) -> Iterator[ServerProcess]:
    """A `mail server` in the store's folder over `swarm`, its byte quota `quota`, files under
    ``<folder>/files``; ``server.keys["alice"]`` is a user's key. Stops it at the end."""
    directory = store.directory
    name = f"quota-{uuid.uuid4().hex[:8]}"
    (directory / "swarms.json").write_text(
        json.dumps([swarm(name, llm_url, breakpoint=breakpoint)]), encoding="utf-8"
    )
    key = create_key(directory / "registries" / "keys.json", "user", "alice")
    settings = f"""
[stdlib.fs]
root = "{directory / "files"}"
max_write_bytes = {4 * MIB}

[server.store]
max_stored_bytes_per_caller = {quota}
{extra}
"""

    def make(port: int) -> ServerProcess:
        config = write_config(directory, port=port, swarm=name, extra=settings)
        return ServerProcess(directory, port, args=["--config", str(config)], env=store.env)

    server = start_on_a_free_port(make)
    server.keys = {"alice": key}
    try:
        yield server
    finally:
        server.stop(timeout=60)


def headers(server: ServerProcess) -> dict[str, str]:
    return auth(server.keys["alice"])


def stored_bytes(store: DurableStore) -> int:
    """What the database keeps: the bytes of every content column listed in `CONTENT`."""
    total = 0
    for table, column in CONTENT.items():
        if store.kind == "postgres":
            if not store.fetch("SELECT to_regclass($1) IS NOT NULL AS found", table)[0]["found"]:
                continue
            size = f"octet_length({column}::text)" if column != "data" else "octet_length(data)"
            if table == "idempotency_keys":
                size = "octet_length(body)"
        else:
            size = f"length(CAST({column} AS BLOB))"
        rows = store.fetch(f"SELECT COALESCE(sum({size}), 0) AS n FROM {table}")
        total += int(rows[0]["n"]) if rows else 0
    return total


def file_bytes(store: DurableStore) -> int:
    """What the file root of `quota_server` keeps."""
    root = store.directory / "files"
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) if root.exists() else 0


def tool_results(requests: list[Any]) -> list[str]:
    """The tool results the agent was shown, over every model call."""
    return [
        str(m.get("content"))
        for request in requests
        for m in request.messages
        if m.get("role") == "tool"
    ]


def files_in(store: DurableStore) -> list[Path]:
    root = store.directory / "files"
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []
