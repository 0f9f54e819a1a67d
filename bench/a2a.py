"""A2A through the bridge against POST /message on the same stub swarm (not a test).

    uv run python3 bench/a2a.py [--rounds 5] [--requests 40] [--clients 1,8]
    uv run --with pyinstrument python3 bench/a2a.py --profile /tmp/a2a.html --rows bridge-rpc

One `mail server` process on the stub swarm of the tests (`supervisor` answers at once: one
agent call per task) and the a2a-sdk's own sample server (tests/support/a2a_sample_server.py,
an echo executor on the SDK's Starlette routes: the floor of any A2A agent in Python). Every
client keeps its connection alive (one httpx.AsyncClient each). Rows:

- `health`: `GET /health` of the MAIL server (the bare route: HTTP and the app's middleware);
- `message`: `POST /message`, the MAIL answer, non-streamed;
- `bridge-rpc`: the same message as a JSON-RPC 1.0 `SendMessage` to `/a2a`, sent with httpx;
- `bridge-rest`: the same over the HTTP+JSON binding, `POST /a2a/message:send`, with httpx;
- `bridge-sdk`: the same through the SDK's client (`a2a.client`, card resolved once);
- `sample-rpc`, `sample-sdk`: the same two against the SDK's sample echo server: the SDK's own
  cost of one send, without and with its client.

The rows run interleaved: `--rounds` rounds, each row once per round (the order rotates), each
time `--requests` requests spread over the clients. Printed per row: p50 over all rounds, the
lowest and highest per-round p50 (the spread), p90, requests/s. Then the verdict: the bridge's
p50 against 1.5x `POST /message` (the issue's target), and whether that target lies below the
SDK's own cost of one send measured in the same run.

`--profile PATH` runs the MAIL server under pyinstrument (needs `uv run --with pyinstrument`;
`.html` or text by the extension) for the rows chosen with `--rows`.
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/http.py is named like the stdlib `http` package: drop this script's folder from the path.
if sys.path and Path(sys.path[0] or ".").resolve() == Path(__file__).resolve().parent:
    del sys.path[0]

import argparse
import asyncio
import contextlib
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from server_fixtures import ROOT_ALICE_BOB, keyed_stub_server  # noqa: E402
from support.a2a_peers import sample_a2a_process  # noqa: E402

Call = Callable[[], Awaitable[None]]
Make = Callable[[httpx.AsyncClient], Awaitable[tuple[Call, Callable[[], Awaitable[None]]]]]


def _rpc(text: str) -> dict[str, Any]:
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


async def _nothing() -> None:
    return None


def _plain(call: Callable[[httpx.AsyncClient], Awaitable[None]]) -> Make:
    async def make(http: httpx.AsyncClient) -> tuple[Call, Callable[[], Awaitable[None]]]:
        return (lambda: call(http)), _nothing

    return make


def _health(base: str) -> Make:
    async def call(http: httpx.AsyncClient) -> None:
        r = await http.get(f"{base}/health")
        assert r.status_code == 200, r.text

    return _plain(call)


def _message(base: str) -> Make:
    async def call(http: httpx.AsyncClient) -> None:
        r = await http.post(f"{base}/message", json={"body": "hi"})
        assert r.status_code == 200 and r.json()["response"].startswith("echo"), r.text

    return _plain(call)


def _jsonrpc(url: str) -> Make:
    async def call(http: httpx.AsyncClient) -> None:
        r = await http.post(url, json=_rpc("hi"))
        state = r.json()["result"]["task"]["status"]["state"]
        assert state == "TASK_STATE_COMPLETED", r.text

    return _plain(call)


def _rest(url: str) -> Make:
    async def call(http: httpx.AsyncClient) -> None:
        r = await http.post(url, json={"message": _rpc("hi")["params"]["message"]})
        assert r.json()["task"]["status"]["state"] == "TASK_STATE_COMPLETED", r.text

    return _plain(call)


def _sdk_client(card_url: str) -> Make:
    async def make(http: httpx.AsyncClient) -> tuple[Call, Callable[[], Awaitable[None]]]:
        from a2a.client import A2ACardResolver, ClientConfig, create_client
        from a2a.helpers.proto_helpers import new_text_part
        from a2a.types.a2a_pb2 import Message, Role, SendMessageRequest, TaskState

        card = await A2ACardResolver(http, card_url, agent_card_path="").get_agent_card()
        client = await create_client(card, ClientConfig(streaming=False, httpx_client=http))

        async def call() -> None:
            msg = Message(
                role=Role.ROLE_USER, message_id=str(uuid.uuid4()), parts=[new_text_part("hi")]
            )
            async for event in client.send_message(SendMessageRequest(message=msg)):
                assert event.task.status.state == TaskState.TASK_STATE_COMPLETED, event

        return call, client.close

    return make


@dataclass
class Row:
    name: str
    label: str
    make: Make
    headers: dict[str, str]
    pid: int  # the server process answering this row
    latencies: list[float] = field(default_factory=list)
    round_p50: list[float] = field(default_factory=list)
    elapsed: float = 0.0
    server_cpu: float = 0.0  # seconds of CPU of the server process (all its threads)
    client_cpu: float = 0.0  # seconds of CPU of this process (the clients)

    def p50(self) -> float:
        return statistics.median(self.latencies) * 1000

    def p90(self) -> float:
        return statistics.quantiles(self.latencies, n=10)[8] * 1000

    def rps(self) -> float:
        return len(self.latencies) / self.elapsed

    def server_ms(self) -> float:
        return self.server_cpu / len(self.latencies) * 1000

    def client_ms(self) -> float:
        return self.client_cpu / len(self.latencies) * 1000

    def reset(self) -> None:
        self.latencies, self.round_p50 = [], []
        self.elapsed = self.server_cpu = self.client_cpu = 0.0


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of a process, all threads (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _measure(rows: list[Row], clients: int, rounds: int, requests: int) -> None:
    per_client = max(1, requests // clients)
    async with contextlib.AsyncExitStack() as stack:
        calls: dict[str, list[Call]] = {}
        for row in rows:
            calls[row.name] = []
            for _ in range(clients):
                http = await stack.enter_async_context(
                    httpx.AsyncClient(headers={**row.headers, "A2A-Version": "1.0"}, timeout=60)
                )
                call, close = await row.make(http)
                stack.push_async_callback(close)
                await call()  # warm: connection, card, instance
                calls[row.name].append(call)

        async def one(call: Call, into: list[float]) -> None:
            for _ in range(per_client):
                started = time.perf_counter()
                await call()
                into.append(time.perf_counter() - started)

        for r in range(rounds):
            shift = r % len(rows)
            for row in rows[shift:] + rows[:shift]:
                got: list[float] = []
                cpu, own = _cpu_seconds(row.pid), time.process_time()
                started = time.perf_counter()
                await asyncio.gather(*(one(c, got) for c in calls[row.name]))
                row.elapsed += time.perf_counter() - started
                row.server_cpu += _cpu_seconds(row.pid) - cpu
                row.client_cpu += time.process_time() - own
                row.latencies += got
                row.round_p50.append(statistics.median(got) * 1000)


def _verdict(by: dict[str, Row]) -> list[str]:
    need = ("health", "message", "bridge-rpc", "bridge-sdk", "sample-rpc", "sample-sdk")
    if any(name not in by for name in need):
        return ["(verdict needs every row)"]
    health, message = by["health"].p50(), by["message"].p50()
    b_rpc, b_sdk = by["bridge-rpc"].p50(), by["bridge-sdk"].p50()
    s_rpc, s_sdk = by["sample-rpc"].p50(), by["sample-sdk"].p50()
    target = 1.5 * message
    mail_task = message - health  # what running the MAIL task adds to a bare route
    lines = [
        f"bridge / POST /message: {b_rpc / message:.2f}x with httpx, {b_sdk / message:.2f}x "
        f"with the SDK client (target 1.5x = {target:.2f} ms)",
        f"SDK's own cost of one send (sample echo server): {s_rpc:.2f} ms with httpx, "
        f"{s_sdk:.2f} ms with its client (client side {s_sdk - s_rpc:+.2f} ms)",
        f"a bridge adding nothing to SDK + MAIL task: {s_rpc + mail_task:.2f} ms "
        f"(sample {s_rpc:.2f} + /message - /health {mail_task:.2f}); "
        f"ours on top: {b_rpc - s_rpc - mail_task:+.2f} ms",
    ]
    # Server CPU per request: what each send costs the server whatever else runs on the machine
    # (a loaded machine stretches latencies far more than it changes these).
    cpu = {name: by[name].server_ms() for name in need}
    own = cpu["bridge-rpc"] - cpu["sample-rpc"] - (cpu["message"] - cpu["health"])
    lines.append(
        f"server CPU per send: bridge {cpu['bridge-rpc']:.2f} ms, POST /message "
        f"{cpu['message']:.2f} ms ({cpu['bridge-rpc'] / cpu['message']:.2f}x), SDK sample "
        f"{cpu['sample-rpc']:.2f} ms, bare route {cpu['health']:.2f} ms; ours on top of SDK + "
        f"MAIL task: {own:+.2f} ms"
    )
    client_sdk = by["sample-sdk"].client_ms() - by["sample-rpc"].client_ms()
    lines.append(
        f"client CPU per send, SDK client over httpx: {client_sdk:+.2f} ms (sample), "
        f"{by['bridge-sdk'].client_ms() - by['bridge-rpc'].client_ms():+.2f} ms (bridge)"
    )
    checks = (
        ("p50, httpx", b_rpc, s_rpc, target),
        ("p50, the SDK client", b_sdk, s_sdk, target),
        ("server CPU", cpu["bridge-rpc"], cpu["sample-rpc"], 1.5 * cpu["message"]),
    )
    for what, bridge, floor, goal in checks:
        if bridge <= goal:
            lines.append(f"verdict ({what}): target met ({bridge:.2f} <= {goal:.2f} ms)")
        elif goal < floor:
            lines.append(
                f"verdict ({what}): target missed ({bridge:.2f} > {goal:.2f} ms), and it lies "
                f"below the SDK's own cost of one send ({floor:.2f} ms): out of reach for a "
                "bridge built on the SDK's request handler"
            )
        else:
            lines.append(
                f"verdict ({what}): target missed ({bridge:.2f} > {goal:.2f} ms) though above "
                f"the SDK's own cost ({floor:.2f} ms)"
            )
    return lines


async def main(args: argparse.Namespace) -> None:
    profile: tuple[str, ...] = ()
    if args.profile:
        renderer = "html" if args.profile.endswith(".html") else "text"
        profile = ("-m", "pyinstrument", "-r", renderer, "-o", args.profile)
    with (
        tempfile.TemporaryDirectory() as d,
        keyed_stub_server(Path(d), ROOT_ALICE_BOB, python_args=profile) as mail,
        sample_a2a_process(Path(d)) as (sample, sample_process),
    ):
        assert mail.proc is not None
        pids = {"mail": mail.proc.pid, "sample": sample_process.pid}
        key = {"Authorization": f"Bearer {mail.keys['alice']}"}
        base = mail.base_url
        card = f"{base}/.well-known/agent-card.json"
        sample_card = f"{sample}/echo/.well-known/agent-card.json"
        mine, theirs = pids["mail"], pids["sample"]
        rows = [
            Row("health", "GET /health (bare route)", _health(base), {}, mine),
            Row("message", "POST /message", _message(base), key, mine),
            Row("bridge-rpc", "bridge SendMessage, httpx", _jsonrpc(f"{base}/a2a"), key, mine),
            Row(
                "bridge-rest",
                "bridge message:send, httpx",
                _rest(f"{base}/a2a/message:send"),
                key,
                mine,
            ),
            Row("bridge-sdk", "bridge SendMessage, SDK client", _sdk_client(card), key, mine),
            Row("sample-rpc", "SDK sample, httpx", _jsonrpc(f"{sample}/echo/"), {}, theirs),
            Row("sample-sdk", "SDK sample, SDK client", _sdk_client(sample_card), {}, theirs),
        ]
        if args.rows:
            rows = [r for r in rows if r.name in args.rows.split(",")]
        for clients in [int(c) for c in args.clients.split(",")]:
            for row in rows:
                row.reset()
            await _measure(rows, clients, args.rounds, args.requests)
            load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
            print(
                f"\nclients={clients}, {args.rounds} rounds x {args.requests} requests per row; "
                f"load average {load} on {os.cpu_count()} CPUs (latencies mean little when the "
                "load is above the CPU count; server CPU per request holds up better)"
            )
            print(
                f"{'row':32} {'p50 ms':>7} {'spread':>13} {'p90 ms':>7} {'req/s':>7} "
                f"{'srv CPU':>8} {'cli CPU':>8}  (CPU: ms per request)"
            )
            for row in rows:
                spread = f"{min(row.round_p50):.2f}-{max(row.round_p50):.2f}"
                print(
                    f"{row.label:32} {row.p50():7.2f} {spread:>13} {row.p90():7.2f} "
                    f"{row.rps():7.1f} {row.server_ms():8.2f} {row.client_ms():8.2f}"
                )
            for line in _verdict({r.name: r for r in rows}):
                print(line)
            sys.stdout.flush()
    if args.profile:
        print(f"\nprofile of the MAIL server: {args.profile}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--clients", default="1,8")
    parser.add_argument("--rows", default="", help="comma-separated row names (default: all)")
    parser.add_argument("--profile", default="", help="run the MAIL server under pyinstrument")
    asyncio.run(main(parser.parse_args()))
