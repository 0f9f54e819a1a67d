"""A2A through the bridge against POST /message on the same stub swarm (not a test).

    uv run python3 bench/a2a.py [--requests 200] [--clients 1,8]

One `mail server` process on the stub swarm of the tests (`supervisor` answers at once: one
agent call per task) and the a2a-sdk's own sample server (tests/support/a2a_sample_server.py,
an echo executor on the SDK's Starlette routes: the floor of any A2A agent in Python). Every
client keeps its connection alive (one httpx.AsyncClient each). Rows:

- `POST /message`: the MAIL answer, non-streamed;
- `A2A SendMessage (JSON-RPC)`: the same message as a JSON-RPC 1.0 SendMessage to `/a2a`;
- `A2A SendMessage (SDK client)`: the same through `a2a.client` (card resolved once);
- the same two against the SDK's sample echo server (reference).

Printed: p50 and p90 latency (ms) and requests/s per row, at each client count; the bridge's
target is p50 within 1.5x of `POST /message`.
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/http.py is named like the stdlib `http` package: drop this script's folder from the path.
if sys.path and Path(sys.path[0] or ".").resolve() == Path(__file__).resolve().parent:
    del sys.path[0]

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from server_fixtures import ROOT_ALICE_BOB, keyed_stub_server  # noqa: E402
from support.a2a_peers import sample_a2a_server  # noqa: E402

Call = Callable[[], Awaitable[None]]


def _rpc(text: str) -> dict:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {
            "message": {
                "role": "ROLE_USER",
                "messageId": str(uuid.uuid4()),
                "parts": [{"text": text}],
            }
        },
    }


async def _message_call(http: httpx.AsyncClient, base: str) -> None:
    r = await http.post(f"{base}/message", json={"body": "hi"})
    assert r.status_code == 200 and r.json()["response"].startswith("echo"), r.text


async def _rpc_call(http: httpx.AsyncClient, url: str) -> None:
    r = await http.post(url, json=_rpc("hi"))
    state = r.json()["result"]["task"]["status"]["state"]
    assert state == "TASK_STATE_COMPLETED", r.text


async def _sdk_client(url: str, http: httpx.AsyncClient) -> Call:
    from a2a.client import A2ACardResolver, ClientConfig, create_client
    from a2a.helpers.proto_helpers import new_text_part
    from a2a.types.a2a_pb2 import Message, Role, SendMessageRequest

    card = await A2ACardResolver(http, url, agent_card_path="").get_agent_card()
    client = await create_client(card, ClientConfig(streaming=False, httpx_client=http))

    async def call() -> None:
        msg = Message(
            role=Role.ROLE_USER, message_id=str(uuid.uuid4()), parts=[new_text_part("hi")]
        )
        async for _ in client.send_message(SendMessageRequest(message=msg)):
            pass

    return call


async def _run(
    make: Callable[[httpx.AsyncClient], Awaitable[Call]], headers: dict, clients: int, requests: int
) -> tuple[float, float, float]:
    latencies: list[float] = []
    per_client = max(1, requests // clients)

    async def one() -> None:
        async with httpx.AsyncClient(headers={**headers, "A2A-Version": "1.0"}, timeout=60) as http:
            call = await make(http)
            await call()  # warm: connection, card, instance
            for _ in range(per_client):
                started = time.perf_counter()
                await call()
                latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(clients)))
    elapsed = time.perf_counter() - started
    q = statistics.quantiles(latencies, n=10)
    return statistics.median(latencies) * 1000, q[8] * 1000, len(latencies) / elapsed


async def main(requests: int, client_counts: list[int]) -> None:
    with tempfile.TemporaryDirectory() as d, keyed_stub_server(Path(d), ROOT_ALICE_BOB) as mail:
        with sample_a2a_server(Path(d)) as sample:
            key = {"Authorization": f"Bearer {mail.keys['alice']}"}
            base = mail.base_url
            rows: list[tuple[str, Callable[[httpx.AsyncClient], Awaitable[Call]], dict]] = [
                ("POST /message", _const(lambda h: _message_call(h, base)), key),
                ("A2A SendMessage (JSON-RPC)", _const(lambda h: _rpc_call(h, f"{base}/a2a")), key),
                (
                    "A2A SendMessage (SDK client)",
                    lambda h: _sdk_client(f"{base}/.well-known/agent-card.json", h),
                    key,
                ),
                ("sample server JSON-RPC", _const(lambda h: _rpc_call(h, f"{sample}/echo/")), {}),
                (
                    "sample server SDK client",
                    lambda h: _sdk_client(f"{sample}/echo/.well-known/agent-card.json", h),
                    {},
                ),
            ]
            print(f"{'row':34} {'clients':>7} {'p50 ms':>8} {'p90 ms':>8} {'req/s':>8}")
            for clients in client_counts:
                for name, make, headers in rows:
                    p50, p90, rps = await _run(make, headers, clients, requests)
                    print(f"{name:34} {clients:>7} {p50:8.2f} {p90:8.2f} {rps:8.1f}", flush=True)


def _const(
    fn: Callable[[httpx.AsyncClient], Awaitable[None]],
) -> Callable[[httpx.AsyncClient], Awaitable[Call]]:
    async def make(http: httpx.AsyncClient) -> Call:
        return lambda: fn(http)

    return make


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--clients", default="1,8")
    args = parser.parse_args()
    asyncio.run(main(args.requests, [int(c) for c in args.clients.split(",")]))
