"""MCP face benchmark (not a test): prints numbers.

    uv run python bench/mcp.py [--rounds 200]

A real `mail server` (CLI subprocess) on the stub swarm (supervisor + worker, no model).
Rows, p50 / p90 in milliseconds over kept-alive connections:

1. MCP: an outside agent joined over `/mcp` calls `send_request(target="worker",
   wait_for_reply=true)`; the worker answers with `send_response` (one agent turn);
2. HTTP: `POST /message` with a body the supervisor answers at once (one agent turn), the
   user's round trip of the same size;
3. inside the swarm: `POST /message "DELEGATE x"`: supervisor asks worker, worker answers,
   supervisor completes (three turns), minus row 2: the in-swarm request + reply.
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/http.py is named like the stdlib `http` package: drop this folder from the path first.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import argparse  # noqa: E402
import asyncio  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]

import httpx  # noqa: E402

from mcp_face_support import mcp_agent  # noqa: E402
from server_fixtures import ROOT_ALICE_BOB, keyed_stub_server  # noqa: E402


def _row(name: str, samples: list[float]) -> None:
    ms = sorted(s * 1000 for s in samples)
    p90 = ms[int(len(ms) * 0.9) - 1]
    print(f"{name:<48} p50 {statistics.median(ms):7.2f} ms   p90 {p90:7.2f} ms   n={len(ms)}")


async def _mcp(base: str, key: str, rounds: int) -> list[float]:
    out = []
    async with mcp_agent(base, key) as agent:
        await agent.call("join_swarm", name="bench")
        for i in range(rounds + 5):
            started = time.perf_counter()
            result = await agent.call(
                "send_request", target="worker", subject="q", body=f"n{i}", wait_for_reply=True
            )
            if i >= 5:
                out.append(time.perf_counter() - started)
            assert "worked" in result["result"], result
    return out


async def _http(base: str, key: str, body: str, rounds: int) -> list[float]:
    out = []
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(headers=headers, timeout=60) as client:
        for i in range(rounds + 5):
            started = time.perf_counter()
            r = await client.post(f"{base}/message", json={"body": f"{body}{i}"})
            if i >= 5:
                out.append(time.perf_counter() - started)
            assert r.status_code == 200, r.text
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, keyed_stub_server(Path(tmp), ROOT_ALICE_BOB) as srv:
        base, key = srv.base_url, srv.keys["alice"]
        mcp = asyncio.run(_mcp(base, key, args.rounds))
        one = asyncio.run(_http(base, srv.keys["bob"], "hello ", args.rounds))
        three = asyncio.run(_http(base, srv.keys["bob"], "DELEGATE x", args.rounds))
    _row("MCP send_request + wait_for_reply -> worker", mcp)
    _row("HTTP POST /message, one agent turn", one)
    _row("HTTP POST /message DELEGATE, three turns", three)
    inside = statistics.median(three) - statistics.median(one)
    print(f"{'in-swarm request + reply (row 3 - row 2, p50)':<48} {inside * 1000:7.2f} ms")


if __name__ == "__main__":
    main()
