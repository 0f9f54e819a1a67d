"""What "acknowledged means stored" costs a streamed POST /message (not a test): prints numbers.

    uv run python bench/stream_ack.py [--requests 200] [--store sqlite|postgres]
                                      [--base-src OTHER_CHECKOUT/src]

One `mail server` (stub agents, one agent turn per task, access log off) on SQLite (the
default) or on PostgreSQL (``--database-url``, default ``MAIL_TEST_DATABASE_URL`` or the local
test database, in a scratch schema dropped afterwards); one kept-alive httpx client sends
``--requests`` streamed and as many plain messages, one after another. Reported, per kind:
the time to the first event (a stream's headers and first event wait for the submission's
commit) and to the end of the answer, p50 and p90 in ms. With ``--base-src``, a second server
runs that source tree (``git archive <rev> src | tar -x -C DIR``, then ``DIR/src``) beside
this one, each request taking turns between them, so the machine's drift hits both alike.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# bench/ (the script's folder, first on the path) has an http.py: the stdlib's must win.
sys.path[0] = str(REPO) if sys.path[0] == str(Path(__file__).resolve().parent) else sys.path[0]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import httpx  # noqa: E402
from tests.server_fixtures import (  # noqa: E402
    ServerProcess,
    auth,
    create_key,
    free_port,
    write_config,
    write_stub_swarms,
)

DEFAULT_PG = os.environ.get("MAIL_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")


def _pg(url: str, sql: str) -> None:
    import asyncpg

    async def run() -> None:
        conn = await asyncpg.connect(url, timeout=5)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(run())


def _one(client: httpx.Client, stream: bool) -> tuple[float, float]:
    """(first byte, end) of one message, in seconds."""
    start = time.perf_counter()
    if not stream:
        r = client.post("/message", json={"body": "hi"})
        assert r.status_code == 200, r.text
        end = time.perf_counter() - start
        return end, end
    first = None
    with client.stream("POST", "/message", json={"body": "hi", "stream": True}) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if first is None and line.startswith("data:"):
                first = time.perf_counter() - start
            if line.startswith("event: task_complete"):
                break
    assert first is not None
    return first, time.perf_counter() - start


def measure(servers: dict[str, tuple[ServerProcess, str]], requests: int) -> dict[str, Any]:
    """Every server gets the same requests, taking turns (ABBA), so drift hits all alike."""
    out: dict[str, dict[str, list[float]]] = {
        name: {k: [] for k in ("stream first", "stream end", "plain end")} for name in servers
    }
    clients = {
        name: httpx.Client(base_url=server.base_url, headers=auth(key), timeout=60)
        for name, (server, key) in servers.items()
    }
    try:
        for i in range(requests + 20):  # the first 20 warm up
            names = list(clients) if i % 2 == 0 else list(reversed(clients))
            for name in names:
                for stream in (True, False):
                    first, end = _one(clients[name], stream)
                    if i < 20:
                        continue
                    if stream:
                        out[name]["stream first"].append(first)
                        out[name]["stream end"].append(end)
                    else:
                        out[name]["plain end"].append(end)
    finally:
        for client in clients.values():
            client.close()
    return out


def _server(directory: Path, env: dict[str, str]) -> tuple[ServerProcess, str]:
    directory.mkdir(parents=True)
    write_stub_swarms(directory)
    key = create_key(directory / "registries" / "keys.json", "user", "bench")
    port = free_port()
    config = write_config(directory, port=port)
    text = config.read_text().replace(
        'log_level = "info"', 'log_level = "warning"\naccess_log = false'
    )
    config.write_text(text)
    server = ServerProcess(directory, port, args=["--config", str(config)], env=env)
    return server.start(), key


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--requests", type=int, default=200, help="messages of each kind")
    parser.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--database-url", default=DEFAULT_PG, help="for --store postgres")
    parser.add_argument(
        "--base-src",
        help="a src/ folder of another version of mail: a second server runs it, side by side",
    )
    args = parser.parse_args()
    schemas: list[str] = []
    sides = {"this": None} if args.base_src is None else {"base": args.base_src, "this": None}
    try:
        with tempfile.TemporaryDirectory(prefix="mail-bench-ack-") as tmp:
            servers: dict[str, tuple[ServerProcess, str]] = {}
            try:
                for name, src in sides.items():
                    env: dict[str, str] = {}
                    if src is not None:
                        env["PYTHONPATH"] = os.pathsep.join([str(Path(src).resolve()), str(REPO)])
                    if args.store == "postgres":
                        schemas.append(f"mail_bench_ack_{uuid.uuid4().hex[:10]}")
                        _pg(args.database_url, f"CREATE SCHEMA {schemas[-1]}")
                        sep = "&" if "?" in args.database_url else "?"
                        env["DATABASE_URL"] = f"{args.database_url}{sep}search_path={schemas[-1]}"
                    servers[name] = _server(Path(tmp) / name, env)
                times = measure(servers, args.requests)
            finally:
                for server, _ in servers.values():
                    server.stop()
    finally:
        for schema in schemas:
            _pg(args.database_url, f"DROP SCHEMA {schema} CASCADE")
    print(f"{args.store}, {args.requests} streamed and {args.requests} plain per server, 1 client:")
    for name, rows in times.items():
        for label, values in rows.items():
            values.sort()
            p50 = 1000 * statistics.median(values)
            p90 = 1000 * values[int(0.9 * (len(values) - 1))]
            print(f"  {name:4s} {label:13s} p50 {p50:7.2f} ms  p90 {p90:7.2f} ms")


if __name__ == "__main__":
    main()
