"""A/B of two source trees on the stub POST /message (not a test): prints numbers.

    uv run python bench/http_ab.py A_SRC B_SRC [--kind raw|httpx|MAILClient] [--json]
                                              [--rounds 6] [--requests 1500]

Two servers as `bench/http.py` runs them (same stub swarm, socket, logging, access log on),
one importing `mail` from A_SRC and one from B_SRC (each a `src` directory, e.g. a git
worktree's), measured in alternating rounds by 16 kept-alive clients over 4 users. This VM's
speed drifts by up to a fifth over seconds, so a change smaller than that only shows in the
medians of interleaved rounds: printed per side are req/s and the server's CPU per request
(every round, then the median).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("a_src")
    parser.add_argument("b_src")
    parser.add_argument("--kind", default="raw", choices=("raw", "httpx", "MAILClient"))
    parser.add_argument("--json", action="store_true", help="non-streamed answers")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--requests", type=int, default=1500, help="requests per round")
    args = parser.parse_args()
    spec = importlib.util.spec_from_file_location("bench_http", HERE / "http.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    stream = not args.json
    with tempfile.TemporaryDirectory(prefix="mail-ab-") as tmp:
        workdir = Path(tmp)
        keys_file = workdir / "keys.json"
        keys = bench.make_keys(keys_file, 4)
        servers = {}
        saved = os.environ.get("PYTHONPATH")
        try:
            for side, src in (("A", args.a_src), ("B", args.b_src)):
                os.environ["PYTHONPATH"] = str(Path(src).resolve())  # the server's `mail`
                servers[side] = bench.StubServer(workdir, keys_file, 0.0, access_log=True)
        finally:
            if saved is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = saved
        results: dict[str, tuple[list[float], list[float]]] = {s: ([], []) for s in servers}
        try:
            for server in servers.values():
                asyncio.run(bench.load("raw", server.url, keys, 16, 320, stream))  # warm-up
            for number in range(args.rounds):
                order = ["A", "B"] if number % 2 == 0 else ["B", "A"]
                for side in order:
                    server = servers[side]
                    before = server.cpu_seconds()
                    rps, _ = asyncio.run(
                        bench.load(args.kind, server.url, keys, 16, args.requests, stream)
                    )
                    cpu = (server.cpu_seconds() - before) / args.requests
                    results[side][0].append(rps)
                    results[side][1].append(cpu * 1e6)
        finally:
            for server in servers.values():
                server.close()
    what = "json" if args.json else "stream"
    print(f"{args.kind}, {what}, 16 clients, {args.rounds} alternating rounds:")
    for side, src in (("A", args.a_src), ("B", args.b_src)):
        rps, cpu = results[side]
        print(
            f"  {side} {src}: req/s median {statistics.median(rps):.0f} "
            f"{[round(x) for x in rps]}; server CPU per request median "
            f"{statistics.median(cpu):.0f} us {[round(x) for x in cpu]}"
        )


if __name__ == "__main__":
    sys.exit(main())
