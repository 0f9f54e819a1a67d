"""MCP face benchmark (not a test): prints numbers.

    uv run python bench/mcp.py [--rounds 200]

A real `mail server` (CLI subprocess) on the stub swarm (supervisor + worker, no model).
Rows, p50 / p90 in milliseconds over kept-alive connections, measured interleaved (each
round runs one of each, in a rotating order) so that load on a shared machine hits all alike:

1. MCP: an outside agent joined over `/mcp` calls `send_request(target="worker",
   wait_for_reply=true)`; the worker answers with `send_response` (one agent turn);
2. MCP floor: the same session calls `check_new_messages` (transport, auth, one store read,
   no agent turn);
3. HTTP: `POST /message` with a body the supervisor answers at once (one agent turn), the
   user's round trip of the same size;
4. inside the swarm: `POST /message "DELEGATE x"`: supervisor asks worker, worker answers,
   supervisor completes (three turns), minus row 3: the in-swarm request + reply.
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


async def _run(base: str, keys: dict[str, str], rounds: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {"mcp": [], "floor": [], "one": [], "three": []}
    headers = {"Authorization": f"Bearer {keys['bob']}"}
    async with (
        mcp_agent(base, keys["alice"]) as agent,
        httpx.AsyncClient(headers=headers, timeout=60) as client,
    ):
        await agent.call("join_swarm", name="bench")

        async def mcp(i: int) -> None:
            result = await agent.call(
                "send_request", target="worker", subject="q", body=f"n{i}", wait_for_reply=True
            )
            assert "worked" in result["result"], result

        async def floor(i: int) -> None:
            assert (await agent.call("check_new_messages"))["unread"] == 0

        async def http(body: str) -> None:
            r = await client.post(f"{base}/message", json={"body": body})
            assert r.status_code == 200, r.text

        async def one(i: int) -> None:
            await http(f"hello {i}")

        async def three(i: int) -> None:
            await http(f"DELEGATE x{i}")

        steps = {"mcp": mcp, "floor": floor, "one": one, "three": three}
        names = list(steps)
        for i in range(rounds + 5):
            order = names[i % 4 :] + names[: i % 4]
            for name in order:
                started = time.perf_counter()
                await steps[name](i)
                if i >= 5:
                    samples[name].append(time.perf_counter() - started)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, keyed_stub_server(Path(tmp), ROOT_ALICE_BOB) as srv:
        samples = asyncio.run(_run(srv.base_url, srv.keys, args.rounds))
    _row("MCP send_request + wait_for_reply -> worker", samples["mcp"])
    _row("MCP check_new_messages (floor: no agent turn)", samples["floor"])
    _row("HTTP POST /message, one agent turn", samples["one"])
    _row("HTTP POST /message DELEGATE, three turns", samples["three"])
    p50 = {k: statistics.median(v) * 1000 for k, v in samples.items()}
    print(
        f"{'in-swarm request + reply (row 4 - row 3, p50)':<48} {p50['three'] - p50['one']:7.2f} ms"
    )
    print(
        f"{'MCP request + reply over floor (row 1 - row 2)':<48} {p50['mcp'] - p50['floor']:7.2f} ms"
    )


if __name__ == "__main__":
    main()
