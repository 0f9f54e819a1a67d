"""Abusive inputs against a real `mail server`: what the caller sees and what it costs the server.

    uv run python bench/abuse.py [--postgres] [--bound 30]

Starts a `mail server` (CLI subprocess, server defaults except where a row says otherwise) on
the abuse swarm of ``tests/support/abuse_agents.py`` (agents that make the tool calls a row
spells out, no model) plus a hostile loopback site, then for each abusive input prints the
error the caller (or the agent) gets and the server's RSS before / peak / after in MiB. The
peak is ``VmHWM`` of the server process, reset through ``/proc/<pid>/clear_refs`` before each
row, so ``peak - before`` is what that input cost. Exit code 1 when a row grows more than
``--bound`` MiB. ``--postgres`` runs the server with ``DATABASE_URL`` (a scratch schema of
``MAIL_TEST_DATABASE_URL``, default postgresql://postgres@127.0.0.1:5432/test).
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/http.py is named like the stdlib `http` package; drop this folder from sys.path.
if sys.path and Path(sys.path[0] or ".").resolve() == Path(__file__).resolve().parent:
    del sys.path[0]

REPO = Path(__file__).resolve().parents[1]
for extra in (str(REPO), str(REPO / "tests")):
    if extra not in sys.path:
        sys.path.insert(0, extra)

import argparse  # noqa: E402
import asyncio  # noqa: E402
import base64  # noqa: E402
import contextlib  # noqa: E402
import gzip  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import tempfile  # noqa: E402
from collections import Counter  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from typing import Any  # noqa: E402

import httpx  # noqa: E402

from server_fixtures import ServerProcess, auth  # noqa: E402
from support.abuse_harness import (  # noqa: E402
    GREEDY_STDIO,
    MIB,
    HostileSite,
    Memory,
    abuse_server,
    gzip_bomb,
    steps_body,
)

UPLOAD_QUOTA_MIB = 50
EXTRA = f"""task_repeat_limit = 0
task_message_limit = 0

[server.team_tools]
max_attachment_bytes_per_instance = {UPLOAD_QUOTA_MIB * MIB}
"""


def _summary(response: httpx.Response) -> dict[str, Any]:
    if response.status_code != 200:
        return {"status": response.status_code, "detail": response.text[:200]}
    text = response.json().get("response", "")
    try:
        return dict(json.loads(text))
    except ValueError:
        return {"answer": str(text)[:200]}


class Bench:
    def __init__(self, server: ServerProcess, site: HostileSite, bound: float) -> None:
        self.server = server
        self.site = site
        self.bound = bound
        self.client = httpx.Client(base_url=server.base_url, timeout=300)
        self.failed = False
        assert server.proc is not None
        self.pid = server.proc.pid
        self.greedy_script = server.directory / "greedy_stdio.py"
        self.greedy_script.write_text(GREEDY_STDIO, encoding="utf-8")

    def post(self, who: str, body: dict[str, Any]) -> httpx.Response:
        return self.client.post("/message", json=body, headers=auth(self.server.keys[who]))

    def steps(self, who: str, *steps: dict[str, Any]) -> dict[str, Any]:
        return _summary(self.post(who, {"body": steps_body(*steps)}))

    def row(self, name: str, run: Callable[[], str]) -> None:
        memory = Memory(self.pid).start()
        seen = run()
        memory.stop()
        ok = memory.growth < self.bound
        self.failed |= not ok
        print(f"{name:<44} {memory.row()}  {'ok' if ok else 'OVER'}")
        print(f"    {seen[:160]}")

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))


def error_of(outcome: dict[str, Any]) -> str:
    if "first_error" in outcome:
        return f"{outcome['errors']}/{outcome['calls']} refused: {outcome['first_error']}"
    return json.dumps(outcome)[:200]


def rows(bench: Bench) -> None:
    site = bench.site.base_url
    # Imports the mcp SDK and warms the stdlib paths first: not what the rows measure.
    bench.steps("alice", {"tool": "mcp_list_tools", "args": {"server_url": "http://127.0.0.1:9/"}})
    bench.steps("alice", {"tool": "http_get", "args": {"url": "http://127.0.0.1:9/"}})

    bench.row(
        "http_get: 200 KB gzip -> 200 MB",
        lambda: error_of(
            bench.steps("alice", {"tool": "http_get", "args": {"url": f"{site}/bomb"}})
        ),
    )
    bench.row(
        "mcp_list_tools: 150 MB tools/list answer",
        lambda: error_of(
            bench.steps("alice", {"tool": "mcp_list_tools", "args": {"server_url": f"{site}/mcp"}})
        ),
    )
    bench.row(
        "mcp_list_tools: stdio server, 150 MB line",
        lambda: error_of(
            bench.steps(
                "alice",
                {"tool": "mcp_list_tools", "args": {"server_url": str(bench.greedy_script)}},
            )
        ),
    )
    bench.row(
        "create_thread: 1 MB title",
        lambda: error_of(
            bench.steps(
                "alice",
                {"tool": "create_thread", "args": {"title": {"$big": MIB}, "participants": []}},
            )
        ),
    )
    bench.row(
        "post_to_thread: 2 MB post",
        lambda: error_of(
            bench.steps(
                "alice",
                {"tool": "create_thread", "args": {"title": "t", "participants": ["worker"]}},
                {"tool": "post_to_thread", "args": {"thread_id": "$TH", "body": {"$big": 2 * MIB}}},
            )
        ),
    )
    bench.row(
        "create_thread x 3000 in one task",
        lambda: error_of(
            bench.steps(
                "bob",
                {
                    "tool": "create_thread",
                    "args": {"title": "spam", "participants": ["worker"]},
                    "repeat": 3000,
                },
            )
        ),
    )
    bench.row("POST /message: 120 KB gzip -> 120 MB body", lambda: gzip_body(bench))
    bench.row("POST /a2a: data part of 1.3M values", lambda: a2a_values(bench))
    bench.row("POST /interswarm/message: 200k targets", lambda: many_targets(bench))
    bench.row(f"60 x 1 MB uploads (quota {UPLOAD_QUOTA_MIB} MiB)", lambda: uploads(bench))
    bench.row("500 concurrent POST /message streams", lambda: asyncio.run(streams(bench)))
    bench.row("150 tasks paused at a breakpoint", lambda: paused(bench))
    heavy_tasks(bench)
    bench.row("GET /tasks/all over 31 heavy tasks", lambda: all_tasks(bench))


def _raw(bench: Bench, path: str, content: bytes, **headers: str) -> str:
    r = bench.client.post(
        path,
        content=content,
        headers={**auth(bench.server.keys["alice"]), "Content-Type": "application/json", **headers},
    )
    return f"{r.status_code} {r.text[:200]}"


def gzip_body(bench: Bench) -> str:
    bomb = gzip.compress(b" " * (120 * MIB), compresslevel=9)
    return _raw(bench, "/message", bomb, **{"Content-Encoding": "gzip"})


def a2a_values(bench: Bench) -> str:
    message = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"data": [0] * 1_300_000}]}
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
    return _raw(bench, "/a2a", json.dumps(body).encode(), **{"A2A-Version": "1.0"})


def many_targets(bench: Bench) -> str:
    body = {"targets": ["a@b"] * 200_000, "body": "x", "msg_type": "broadcast"}
    return _raw(bench, "/interswarm/message", json.dumps(body).encode())


def uploads(bench: Bench) -> str:
    statuses: Counter[int] = Counter()
    detail = ""
    data = base64.b64encode(b"u" * MIB).decode()
    for i in range(60):
        upload = {"filename": f"f{i}.bin", "content_base64": data}
        r = bench.post("carol", {"body": "keep this", "attachments": [upload]})
        statuses[r.status_code] += 1
        if r.status_code != 200:
            detail = r.json()["detail"]
    return f"{dict(statuses)} {detail}"


async def streams(bench: Bench) -> str:
    before = bench.fds()
    site = bench.site.base_url
    body = steps_body({"tool": "http_get", "args": {"url": f"{site}/slow?s=5"}})
    key = bench.server.keys["dave"]
    statuses: Counter[int] = Counter()
    detail = ""
    limits = httpx.Limits(max_connections=600, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=bench.server.base_url, timeout=120, limits=limits) as c:
        held = []

        async def one() -> None:
            nonlocal detail
            request = c.build_request(
                "POST", "/message", json={"body": body, "stream": True}, headers=auth(key)
            )
            response = await c.send(request, stream=True)
            statuses[response.status_code] += 1
            if response.status_code == 429:
                await response.aread()
                detail = (
                    f"Retry-After {response.headers.get('retry-after')}: "
                    + response.json()["detail"]
                )
                await response.aclose()
            else:
                held.append(response)

        await asyncio.gather(*(one() for _ in range(500)))
        during = bench.fds()
        for response in held:
            await response.aclose()
    return f"{dict(statuses)} fds {before} -> {during}; {detail}"


def paused(bench: Bench) -> str:
    statuses: Counter[int] = Counter()
    detail = ""
    body = steps_body({"tool": "human_review", "args": {"question": "ok?"}})
    for _ in range(150):
        r = bench.post("erin", {"body": body})
        statuses[r.status_code] += 1
        if r.status_code != 200:
            detail = r.json()["detail"]
    return f"{dict(statuses)} {detail}"


def heavy_tasks(bench: Bench) -> None:
    """31 tasks whose event logs hold ~2 MB each (tool calls with large arguments)."""
    step = {
        "tool": "http_get",
        "args": {"url": "http://127.0.0.1:9/", "headers": {"pad": {"$big": 200_000}}},
        "repeat": 10,
    }
    for _ in range(31):
        bench.steps("frank", step)


def all_tasks(bench: Bench) -> str:
    admin = auth(bench.server.keys["admin"])
    r = bench.client.get("/tasks/all", headers=admin)
    tasks = r.json()["tasks"]
    return (
        f"{r.status_code}: {len(tasks)} summaries, {len(r.content)} bytes, "
        f"next cursor {'yes' if r.headers.get('x-next-cursor') else 'none'}"
    )


KEYS = {
    "admin": ("admin", "root"),
    **{name: ("user", name) for name in ("alice", "bob", "carol", "dave", "erin", "frank")},
}


@contextlib.contextmanager
def database(use: bool) -> Iterator[dict[str, str]]:
    if not use:
        yield {}
        return
    from support.pg_schema import BASE_URL, scratch_schema, with_search_path

    with scratch_schema("bench_abuse") as schema:
        yield {"DATABASE_URL": with_search_path(BASE_URL, schema)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--postgres", action="store_true", help="persist in PostgreSQL")
    parser.add_argument("--bound", type=float, default=30.0, help="MiB of RSS growth per row")
    args = parser.parse_args()
    bomb = gzip_bomb(200 * MIB)
    with (
        tempfile.TemporaryDirectory() as tmp,
        HostileSite(bomb=bomb, tools_answer_size=150 * MIB) as site,
        database(args.postgres) as db_env,
    ):
        env = {
            "MAIL_STDLIB_NET_ALLOWED_HOSTS": "127.0.0.1",
            "MAIL_STDLIB_MCP_TIMEOUT": "60",
            "MAIL_STDLIB_MCP_ALLOWED_COMMANDS": str(Path(tmp) / "greedy_stdio.py"),
        }
        env |= db_env
        with abuse_server(Path(tmp), extra=EXTRA, env=env, keys=KEYS) as server:
            store = "postgres" if args.postgres else "memory"
            print(f"mail server pid {server.proc.pid if server.proc else '?'}, store: {store}")
            print(f"{'abusive input':<44} {'before':>7} {'peak':>7} {'after':>7}  (growth) MiB")
            bench = Bench(server, site, args.bound)
            rows(bench)
    return 1 if bench.failed else 0


if __name__ == "__main__":
    sys.exit(main())
