"""HTTP benchmark of `mail server` (not a test): prints numbers.

    uv run bench/http.py [--requests 1000]

What it measures, each against a real server process on 127.0.0.1 with local auth:

1. startup: `mail server` (the repository's `demo` swarm, keys already created) from process
   start to the first 200 on GET /health; median of 5 starts with Python's bytecode cache;
2. POST /message at 1 client (sequential) and at 16 concurrent clients (each its own user):
   requests/s and p50/p95/p99 latency. The swarm is a one-agent stub built here whose agent
   calls task_complete at once, so the numbers are the server's and runtime's own cost;
3. SSE: time from sending POST /message with stream=true to receiving the first event.

The stub swarm is served through the documented injection hook
`mail.server.app.create_app(config=..., template=...)`; `python bench/http.py --serve PORT KEYS`
is that server process.
"""

from __future__ import annotations

import sys
from pathlib import Path

# This file is named like the stdlib `http` package; when run as a script its directory comes
# first on sys.path and would shadow it. Drop that entry before anything imports `http`.
if sys.path and Path(sys.path[0] or ".").resolve() == Path(__file__).resolve().parent:
    del sys.path[0]

import argparse  # noqa: E402
import asyncio  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import socket  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TARGETS = {
    "p50_1_ms": 3.0,
    "rps_16": 450.0,
    "p99_16_ms": 100.0,
    "sse_first_ms": 3.0,
    "startup_s": 1.0,
}


# ------------------------------------------------------------------------- server side


def stub_template() -> Any:
    from mail import AgentToolCall, MAILAgentTemplate, MAILSwarmTemplate

    completion = {"role": "assistant", "content": None}

    def factory(**_: Any) -> Any:
        async def agent(history: list[dict[str, Any]], tool_choice: Any) -> Any:
            call = AgentToolCall(
                tool_name="task_complete",
                tool_args={"finish_message": "done"},
                tool_call_id="c1",
                completion=completion,
            )
            return None, [call]

        return agent

    agent = MAILAgentTemplate("solo", factory, [], enable_entrypoint=True, can_complete_tasks=True)
    return MAILSwarmTemplate(
        name="bench", version="1.0.0", agents=[agent], actions=[], entrypoint="solo"
    )


def serve(port: int, keys_file: str, directory: str) -> None:
    import logging

    import uvicorn

    from mail.config import ServerConfig
    from mail.server.app import create_app

    # As `mail server` does: INFO logs with one access line per request (stderr -> a file).
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)-7s %(name)s: %(message)s"
    )
    config = ServerConfig.model_validate(
        {
            "host": "127.0.0.1",
            "port": port,
            "swarm": {"name": "bench", "registry": f"{directory}/registries/bench.json"},
            "settings": {"task_message_limit": 0},
            "auth": {"mode": "local", "keys_file": keys_file},
        }
    )
    app = create_app(config, template=stub_template(), template_source="bench stub")
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        log_config=None,
        log_level="info",
        access_log=True,
        ws="none",
    )


# ------------------------------------------------------------------------- client side


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_keys(keys_file: Path, count: int) -> list[str]:
    from mail.server import keystore

    return [keystore.create_key(keys_file, "user", f"bench-{i}")[0] for i in range(count)]


def wait_health(url: str, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> float:
    import urllib.request

    start = time.perf_counter()
    while time.perf_counter() - start < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=1) as reply:
                if reply.status == 200:
                    return time.perf_counter() - start
        except OSError:
            time.sleep(0.005)
    raise RuntimeError("server did not become healthy")


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()


def measure_startup(workdir: Path, *, bytecode_cache: bool, runs: int = 5) -> float:
    """Median seconds from spawning `mail server` to the first 200 on /health.

    ``bytecode_cache=True`` lets Python cache compiled modules (in a private directory, after
    one warm-up start), as it does in a normal installation. Some environments set
    PYTHONDONTWRITEBYTECODE, which makes every start compile every module from source.
    """
    if not (workdir / "mail.toml").exists():
        shutil.copy(REPO / "mail.toml", workdir / "mail.toml")
        shutil.copy(REPO / "swarms.json", workdir / "swarms.json")
        make_keys(workdir / "registries" / "keys.json", 1)
    env = dict(os.environ)
    if bytecode_cache:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(workdir / "pycache")
    samples = []
    for i in range(runs + (1 if bytecode_cache else 0)):
        port = free_port()
        command = [
            sys.executable,
            "-m",
            "mail.cli",
            "server",
            "--port",
            str(port),
            "--host",
            "127.0.0.1",
        ]
        start = time.perf_counter()
        proc = subprocess.Popen(
            command, cwd=workdir, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            elapsed = wait_health(f"http://127.0.0.1:{port}", proc)
            elapsed = time.perf_counter() - start
        finally:
            stop(proc)
        if bytecode_cache and i == 0:
            continue  # the warm-up start fills the cache
        samples.append(elapsed)
    return statistics.median(samples)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


async def load(url: str, keys: list[str], clients: int, total: int) -> tuple[float, list[float]]:
    import aiohttp

    body = json.dumps({"body": "go"}).encode()
    latencies: list[float] = []
    remaining = total

    async def worker(session: aiohttp.ClientSession, key: str) -> None:
        nonlocal remaining
        headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        while remaining > 0:
            remaining -= 1
            t0 = time.perf_counter()
            async with session.post(f"{url}/message", data=body, headers=headers) as reply:
                payload = await reply.read()
                if reply.status != 200:
                    raise RuntimeError(f"HTTP {reply.status}: {payload[:200]!r}")
            latencies.append(time.perf_counter() - t0)

    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector) as session:
        start = time.perf_counter()
        await asyncio.gather(*(worker(session, keys[i % len(keys)]) for i in range(clients)))
        elapsed = time.perf_counter() - start
    return total / elapsed, latencies


async def sse_first_event(url: str, key: str, runs: int) -> list[float]:
    import aiohttp

    headers = {"Authorization": f"Bearer {key}", "Accept": "text/event-stream"}
    samples = []
    async with aiohttp.ClientSession() as session:
        for _ in range(runs):
            t0 = time.perf_counter()
            async with session.post(
                f"{url}/message", json={"body": "go", "stream": True}, headers=headers
            ) as reply:
                first = None
                async for line in reply.content:
                    if first is None and line.startswith(b"event:"):
                        first = time.perf_counter() - t0
                await reply.read()
            assert first is not None, "no event received"
            samples.append(first)
    return samples


def run_benchmark(requests: int) -> dict[str, float]:
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="mail-bench-") as tmp:
        workdir = Path(tmp)
        startup_dir = workdir / "startup"
        startup_dir.mkdir()
        results["startup_s"] = measure_startup(startup_dir, bytecode_cache=True)
        if os.environ.get("PYTHONDONTWRITEBYTECODE"):
            results["startup_nocache_s"] = measure_startup(startup_dir, bytecode_cache=False)
        keys_file = workdir / "bench-keys.json"
        keys = make_keys(keys_file, 16)
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        log = (workdir / "server.log").open("wb")
        proc = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(port), str(keys_file), str(workdir)],
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            stdout=log,
            stderr=log,
        )
        try:
            wait_health(url, proc)
            asyncio.run(load(url, keys, 16, 16 * 20))  # warm-up: create the 16 instances
            rps1, lat1 = asyncio.run(load(url, keys[:1], 1, requests))
            results.update(
                rps_1=rps1,
                p50_1_ms=1000 * percentile(lat1, 50),
                p95_1_ms=1000 * percentile(lat1, 95),
                p99_1_ms=1000 * percentile(lat1, 99),
            )
            rps16, lat16 = asyncio.run(load(url, keys, 16, requests * 4))
            results.update(
                rps_16=rps16,
                p50_16_ms=1000 * percentile(lat16, 50),
                p95_16_ms=1000 * percentile(lat16, 95),
                p99_16_ms=1000 * percentile(lat16, 99),
            )
            sse = asyncio.run(sse_first_event(url, keys[0], 200))
            results["sse_first_ms"] = 1000 * statistics.median(sse)
            results["sse_first_p95_ms"] = 1000 * percentile(sse, 95)
        finally:
            stop(proc)
            log.close()
        lines = (
            (workdir / "server.log")
            .read_text(errors="replace")
            .count('"POST /message HTTP/1.1" 200')
        )
        results["logged_requests"] = float(lines)
    return results


def report(results: dict[str, float]) -> None:
    print(f"(server logged {int(results['logged_requests'])} request lines at INFO level)")

    def mark(key: str, good: bool) -> str:
        return "" if key not in TARGETS else ("  (target met)" if good else "  (TARGET MISSED)")

    startup = results["startup_s"]
    print(
        f"startup to first 200 on /health: {startup:.2f} s (median, bytecode cached)"
        f"{mark('startup_s', startup <= TARGETS['startup_s'])}"
    )
    if "startup_nocache_s" in results:
        print(
            f"  with PYTHONDONTWRITEBYTECODE set here (no .pyc, every module compiled at each start):"
            f" {results['startup_nocache_s']:.2f} s"
        )
    print(
        f"POST /message, 1 client:   {results['rps_1']:7.0f} req/s  p50 {results['p50_1_ms']:6.2f} ms"
        f"{mark('p50_1_ms', results['p50_1_ms'] <= TARGETS['p50_1_ms'])}  p95 {results['p95_1_ms']:6.2f} ms"
        f"  p99 {results['p99_1_ms']:6.2f} ms"
    )
    ok16 = results["rps_16"] >= TARGETS["rps_16"] and results["p99_16_ms"] <= TARGETS["p99_16_ms"]
    print(
        f"POST /message, 16 clients: {results['rps_16']:7.0f} req/s  p50 {results['p50_16_ms']:6.2f} ms"
        f"  p95 {results['p95_16_ms']:6.2f} ms  p99 {results['p99_16_ms']:6.2f} ms{mark('rps_16', ok16)}"
    )
    print(
        f"SSE first event: p50 {results['sse_first_ms']:.2f} ms  p95 {results['sse_first_p95_ms']:.2f} ms"
        f"{mark('sse_first_ms', results['sse_first_ms'] <= TARGETS['sse_first_ms'])}"
    )


def main() -> None:
    if len(sys.argv) >= 2 and sys.argv[1] == "--serve":
        serve(int(sys.argv[2]), sys.argv[3], sys.argv[4])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--requests", type=int, default=1000, help="requests in the 1-client run (x4 for 16)"
    )
    args = parser.parse_args()
    report(run_benchmark(args.requests))


if __name__ == "__main__":
    main()
