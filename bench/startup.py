"""Cold-start benchmark (not a test): what a new server process and a new instance host cost.

    uv run python bench/startup.py [--runs 5]

1. ``mail server`` (the CLI, as an operator starts it) with ``DATABASE_URL`` set: seconds from
   the process's start until ``GET /health`` answers 200, p50 of the runs; then the first
   answer after start: a user's ``POST /message`` sent as soon as /health answered (the
   user's key made with the CLI; the stub swarm: three agent calls), its latency, next to a
   second one's right after it (nothing left to load), p50 of the runs. The same with the
   callers' keys checked by an auth service (the original's ``AUTH_ENDPOINT`` /
   ``TOKEN_INFO_ENDPOINT``: the tests' stub service, in a process of its own on 127.0.0.1).
2. A new instance host (what a cluster instance actor runs after a failover or on a caller's
   first request), in a fresh Python process, with ``DATABASE_URL`` set: seconds to import
   ``mail.cluster.host``, then to start the host (the in-process application, the store, the
   claim of the instance and its restore); p50 of the runs. It also says whether LangGraph /
   LangChain were imported: a stub swarm never uses agent memory, so they should not be.

Uses the stub swarm of the tests and the PostgreSQL database at ``DATABASE_URL`` (default
postgresql://postgres@127.0.0.1:5432/test).
"""

from __future__ import annotations

import sys
from pathlib import Path

if sys.path and Path(sys.path[0] or ".").resolve() == Path(__file__).resolve().parent:
    del sys.path[0]

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import textwrap
import time

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

DATABASE_URL = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")

HOST_PROBE = textwrap.dedent(
    """
    import asyncio, json, sys, time
    t0, c0 = time.perf_counter(), time.process_time()
    from mail.cluster.host import InstanceHost
    t1 = time.perf_counter()

    async def main():
        host = InstanceHost(sys.argv[1], {"role": "user", "id": sys.argv[2], "api_key": "k"})
        t2 = time.perf_counter()
        await host.ready()
        t3 = time.perf_counter()
        await host.stop()
        return t2, t3

    t2, t3 = asyncio.run(main())
    heavy = sorted(m for m in ("langgraph", "langchain_core", "langmem") if m in sys.modules)
    cpu = time.process_time() - c0
    print(json.dumps({"import": t1 - t0, "start": t3 - t2, "cpu": cpu, "heavy": heavy}))
    """
)


ENV: dict[str, str] = {"DATABASE_URL": DATABASE_URL}

# The tests' stub auth service in a process of its own: prints its URL, serves until stdin ends.
AUTH_SERVICE = textwrap.dedent(
    """
    import sys
    from server_fixtures import StubAuthService
    with StubAuthService({sys.argv[1]: ("user", "bench")}) as service:
        print(service.url, flush=True)
        sys.stdin.read()
    """
)


def auth_service(key: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", AUTH_SERVICE, key],
        cwd=REPO / "tests",
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def server_start(directory: Path, *, external_auth: bool = False) -> tuple[float, float, float]:
    """Seconds to /health, then the first and the second POST /message's latencies; with
    `external_auth`, the key is checked by an auth service (a process of its own)."""
    import httpx

    from server_fixtures import (
        ServerProcess,
        create_key,
        free_port,
        write_config,
        write_stub_swarms,
    )

    write_stub_swarms(directory)
    key = create_key(directory / "registries" / "keys.json", "user", f"bench-{directory.name}")
    port = free_port()
    config = write_config(directory, port=port)
    env = dict(ENV)
    service = None
    if external_auth:
        service = auth_service(key)
        assert service.stdout is not None
        url = service.stdout.readline().strip()
        env.update({"AUTH_ENDPOINT": f"{url}/login", "TOKEN_INFO_ENDPOINT": f"{url}/token-info"})
    server = ServerProcess(directory, port, args=["--config", str(config)], env=env)
    server.start(wait=False)
    try:
        healthy = server.wait_healthy()
        took = []
        with httpx.Client(headers={"Authorization": f"Bearer {key}"}, timeout=60) as client:
            for _ in range(2):
                t0 = time.perf_counter()
                reply = client.post(f"{server.base_url}/message", json={"body": "hi"})
                took.append(time.perf_counter() - t0)
                assert reply.status_code == 200, reply.text
        return healthy, took[0], took[1]
    finally:
        server.stop()
        if service is not None:
            service.communicate("", timeout=30)  # stdin closed: the service ends


def host_start(directory: Path, run: int) -> dict[str, object]:
    from mail.config import ServerConfig
    from server_fixtures import server_env, write_stub_swarms

    source = write_stub_swarms(directory)
    config = ServerConfig.model_validate(
        {
            "host": "127.0.0.1",
            "port": 1,
            "swarm": {
                "name": "stub",
                "source": str(source),
                "registry": str(directory / "registries" / "stub.json"),
            },
            "settings": {"instance_idle_timeout": 0},
        }
    )
    out = subprocess.run(
        [sys.executable, "-c", HOST_PROBE, config.model_dump_json(), f"bench-{os.getpid()}-{run}"],
        cwd=directory,
        env=server_env(ENV),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--server-only", action="store_true", help="skip the instance-host part (2.)"
    )
    parser.add_argument(
        "--cached-bytecode",
        action="store_true",
        help="let the processes cache bytecode (a first start fills it), as installed packages"
        " do; by default the environment decides (PYTHONDONTWRITEBYTECODE=1: every process"
        " compiles every module it imports)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mail-startup-") as tmp:
        root = Path(tmp)
        if args.cached_bytecode:
            os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
            ENV["PYTHONPYCACHEPREFIX"] = str(root / "pycache")
            warm = root / "warm"
            warm.mkdir()
            server_start(warm)
            host_start(warm, -1)
        print(f"load average at start: {os.getloadavg()[0]:.1f}")
        runs = []
        for run in range(args.runs):
            folder = root / f"server{run}"
            folder.mkdir()
            runs.append(server_start(folder))
        starts = [r[0] for r in runs]
        print(
            f"mail server start -> /health (DATABASE_URL set): p50 {statistics.median(starts):.2f} s"
            f"  (runs: {', '.join(f'{s:.2f}' for s in starts)})"
        )
        firsts = [1000 * r[1] for r in runs]
        seconds = [1000 * r[2] for r in runs]
        print(
            f"first answer after start (POST /message as /health answers): p50"
            f" {statistics.median(firsts):.0f} ms, the next one {statistics.median(seconds):.0f} ms"
            f"  (first runs: {', '.join(f'{f:.0f}' for f in firsts)})"
        )
        external = []
        for run in range(args.runs):
            folder = root / f"auth{run}"
            folder.mkdir()
            external.append(server_start(folder, external_auth=True))
        firsts = [1000 * r[1] for r in external]
        seconds = [1000 * r[2] for r in external]
        print(
            f"the same, keys checked by an auth service (AUTH_ENDPOINT): p50"
            f" {statistics.median(firsts):.0f} ms, the next one {statistics.median(seconds):.0f} ms"
            f"  (first runs: {', '.join(f'{f:.0f}' for f in firsts)})"
        )
        if args.server_only:
            return 0
        hosts = []
        for run in range(args.runs):
            folder = root / f"host{run}"
            folder.mkdir()
            hosts.append(host_start(folder, run))
        imports = [float(h["import"]) for h in hosts]  # type: ignore[arg-type]
        cpus = [float(h["cpu"]) for h in hosts]  # type: ignore[arg-type]
        started = [float(h["start"]) for h in hosts]  # type: ignore[arg-type]
        heavy = sorted({m for h in hosts for m in h["heavy"]})  # type: ignore[attr-defined]
        print(
            f"new instance host: import p50 {statistics.median(imports):.2f} s,"
            f" start p50 {statistics.median(started):.2f} s,"
            f" CPU (import + start) p50 {statistics.median(cpus):.2f} s"
            f"  (start runs: {', '.join(f'{s:.2f}' for s in started)})"
        )
        print(f"load average at end: {os.getloadavg()[0]:.1f}")
        print(f"  heavy modules imported for a swarm without memory: {heavy or 'none'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
