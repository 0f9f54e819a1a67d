"""Python bytecodes the server runs per POST /message, with an Idempotency-Key and without.

    uv run python bench/keyed_bytecodes.py [--requests 200] [--rounds 2] [--top 25]

CPU time on this VM moves by more than the few percent a key costs (bench/http.py measures
that side by side, with a 90% interval of about a point); the number of bytecodes the
server's event loop thread executes per request does not, so it shows what a change to the
keyed path adds or spares, function by function, in one run. The server is bench/http.py's
stub server (a supervisor and three workers, SQLite, the access log on), run in a child
process that counts every bytecode its loop thread runs between two signals
(`sys.settrace` with opcode events: slow, so only a few hundred requests). The floor in the
same run is the unkeyed request's own count. Counted: Python only; what SQLite, the kernel
and C extensions do is not (bench/http.py's CPU time has them).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import importlib.util
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType
from typing import Any

HERE = Path(__file__).resolve().parent
# Signals of the counting child: start counting, stop and write the counts (bench/http.py's
# server takes SIGUSR1 for its access log; uvicorn SIGINT and SIGTERM).
START = getattr(signal, "SIGUSR2", None)
STOP = getattr(signal, "SIGHUP", None)
# Seconds given to the child after each signal: START is handled at the loop's next bytecode,
# and after the last answer the server finishes its work (its commit, the access log).
SETTLE = 0.2


def bench_http() -> Any:
    """bench/http.py as a module (its name `http` is the standard library's)."""
    spec = importlib.util.spec_from_file_location("bench_http", HERE / "http.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def serve_counting(out: str, serve_args: list[str]) -> None:
    """The child: bench/http.py's stub server, counting bytecodes per code object between
    START and STOP (written to `out` as "count<TAB>file:line:function" lines)."""
    counts: collections.Counter[Any] = collections.Counter()

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "opcode":
            counts[frame.f_code] += 1
        return local

    def called(frame: FrameType, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        return local

    def start(*_: Any) -> None:
        counts.clear()
        sys.settrace(called)

    def stop(*_: Any) -> None:
        sys.settrace(None)
        partial = out + ".partial"
        with open(partial, "w", encoding="utf-8") as file:
            for code, count in counts.items():
                name = f"{code.co_filename}:{code.co_firstlineno}:{code.co_qualname}"
                file.write(f"{count}\t{name}\n")
        os.replace(partial, out)

    signal.signal(START, start)
    signal.signal(STOP, stop)
    http = bench_http()
    port, keys_file, directory, latency, access_log = serve_args
    http.serve(int(port), keys_file, directory, float(latency), access_log == "1")


def _short(name: str) -> str:
    """A code object's place without the directories before its package."""
    for marker in ("/site-packages/", "/src/", "/lib/python3."):
        _, found, tail = name.partition(marker)
        if found:
            return tail.split("/", 1)[1] if marker == "/lib/python3." else tail
    return name


def _counted(proc: Any, out: Path, send: Any) -> dict[str, int]:
    """Bytecodes per function of the child while `send()` runs."""
    out.unlink(missing_ok=True)
    os.kill(proc.pid, START)
    time.sleep(SETTLE)
    send()
    time.sleep(SETTLE)
    os.kill(proc.pid, STOP)
    deadline = time.monotonic() + 60
    while not out.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the counting server wrote no counts (see its log)")
        time.sleep(0.05)
    counts: dict[str, int] = {}
    for line in out.read_text(encoding="utf-8").splitlines():
        count, name = line.split("\t", 1)
        counts[_short(name)] = counts.get(_short(name), 0) + int(count)
    return counts


def main() -> None:
    if START is None or STOP is None:
        sys.exit("bench/keyed_bytecodes.py needs POSIX signals (SIGUSR2, SIGHUP)")
    if len(sys.argv) >= 2 and sys.argv[1] == "--serve-counting":
        serve_counting(sys.argv[2], sys.argv[3:])
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--requests", type=int, default=200, help="requests per kind a round")
    parser.add_argument("--rounds", type=int, default=2, help="rounds, the kinds alternating")
    parser.add_argument(
        "--clients",
        type=int,
        default=1,
        help="concurrent clients (default 1: each request commits alone, so both kinds batch "
        "alike; with more, how requests share commits differs between runs by some 150 "
        "bytecodes a request)",
    )
    parser.add_argument("--top", type=int, default=25, help="functions shown")
    args = parser.parse_args()
    http = bench_http()
    import subprocess

    with tempfile.TemporaryDirectory(prefix="mail-bytecodes-") as tmp:
        workdir = Path(tmp)
        keys_file = workdir / "keys.json"
        keys = http.make_keys(keys_file, 4)
        port = http.free_port()
        log = (workdir / "server.log").open("wb")
        out = workdir / "counts.txt"
        proc = subprocess.Popen(
            [sys.executable, __file__, "--serve-counting", str(out), str(port),
             str(keys_file), str(workdir), "0.0", "1"],
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            stdout=log,
            stderr=log,
            start_new_session=True,  # (a hang-up of this terminal is not its STOP)
        )  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        totals: dict[str, dict[str, int]] = {"raw": {}, "raw+key": {}}
        rounds: dict[str, list[float]] = {"raw": [], "raw+key": []}  # per request
        # (`http.load` warms each client with one request of the kind first: counted too)
        sent = args.requests + args.clients
        try:
            http.wait_health(url, proc)
            for kind in totals:  # warm-up: instances, the key table, the caller's key filter
                asyncio.run(http.load(kind, url, keys, 4, 400, False))
            for turn in range(args.rounds):
                for kind in ("raw", "raw+key") if turn % 2 == 0 else ("raw+key", "raw"):

                    def send(kind: str = kind) -> None:
                        asyncio.run(http.load(kind, url, keys, args.clients, args.requests, False))

                    counted = _counted(proc, out, send)
                    rounds[kind].append(sum(counted.values()) / sent)
                    for name, count in counted.items():
                        totals[kind][name] = totals[kind].get(name, 0) + count
        finally:
            http.stop(proc)
            log.close()
    per = (args.requests + args.clients) * args.rounds
    plain = sum(totals["raw"].values()) / per
    keyed = sum(totals["raw+key"].values()) / per
    print(
        f"POST /message, stub swarm, SQLite, {args.clients} client(s) over 4 users, "
        f"{args.requests} requests "
        f"a kind a round, {args.rounds} rounds: Python bytecodes of the server's loop thread "
        "per request"
    )
    added = [k - p for k, p in zip(rounds["raw+key"], rounds["raw"], strict=True)]
    print(f"  no key (the floor): {plain:9.0f}")
    print(
        f"  MAILClient's keys:  {keyed:9.0f}   {keyed - plain:+.0f} ({100 * (keyed / plain - 1):+.1f}%); "
        f"by round {', '.join(f'{a:+.0f}' for a in added)}, median {statistics.median(added):+.0f} "
        "(a round where a caller's key table doubles counts a few hundred more)"
    )
    names = set(totals["raw"]) | set(totals["raw+key"])
    diff = sorted(((totals["raw+key"].get(n, 0) - totals["raw"].get(n, 0)) / per, n) for n in names)
    print("  the functions a key adds most to (bytecodes per request; batching moves some):")
    for added, name in diff[::-1][: args.top]:
        print(f"    {added:+7.1f}  {name}")


if __name__ == "__main__":
    main()
