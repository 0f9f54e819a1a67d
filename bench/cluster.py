"""Cluster-mode benchmark (not a test): prints numbers, each next to its target.

    uv sync --extra cluster && uv run python bench/cluster.py [--requests 200]

Everything is real and on this machine: a Ray cluster of a head (no CPUs, runs no instances)
and two worker nodes (``ray.cluster_utils.Cluster``), `mail server --cluster ray` front ends
and a single-process `mail server`, all on the same PostgreSQL database (``DATABASE_URL``,
default postgresql://postgres@127.0.0.1:5432/test) and the same stub swarm (a supervisor that
asks two workers at once and completes with both answers: four agent calls per task; see
tests/support/durable_agents.py). Clients are httpx.AsyncClient with kept-alive connections.

1. Added latency of the cluster hop: POST /message (non-stream), GET /status and GET /whoami,
   1 client, after warm-up, cluster front end vs single process, interleaved rounds; p50 and
   p90. Next to it, where the time goes: a plain Ray actor call, the instance actor called
   directly, and the front end's client of the actors, from this process; and the floor
   (bench/cluster_floor.py): a bare HTTP route, the same route awaiting one bare actor call,
   and that call with the actor busy as long as the request takes.
2. Throughput: 16 concurrent clients over 4 users, through 1 front end and through 2 (clients
   split across them), and the single process, in interleaved rounds; CPU time per task.
3. Failover: a task whose agent calls take 200 ms; the worker node hosting the instance is
   killed mid-task (its raylet and the instance's process, SIGKILL); time until Ray declares
   the node dead, until the new host claims the instance, until it makes its next agent call
   and until the task completes (followed with GET /task/events + Last-Event-ID through
   another front end). Ray's health checks are set to 1 s x 3 (``--ray-defaults``: Ray's own).
4. Memory per idle instance actor: RSS and USS of the actor processes of 6 callers that ran
   one task each, next to an empty Ray actor's process and the single process's growth; the
   PostgreSQL connections each holds (the reason for 6 callers rather than more: each actor
   has its own pool, and PostgreSQL's default max_connections is 100).

Run time is about 2-3 minutes; ``--only latency failover`` runs a part.
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/http.py is named like the stdlib `http` package; when this file runs as a script its
# directory comes first on sys.path and would shadow it. Drop that entry first.
if sys.path and Path(sys.path[0] or ".").resolve() == Path(__file__).resolve().parent:
    del sys.path[0]

import argparse
import asyncio
import contextlib
import json
import os
import re
import signal
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")

DATABASE_URL = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
# Added latency of the cluster hop: at most this many times one bare Ray actor call measured
# in the same run (issue 27; the earlier absolute 1 ms sits below one actor call here).
TARGET_ADDED_FACTOR = 1.5
TARGET_FAILOVER_S = 5.0
STUB_LATENCY_MS = 200
THROUGHPUT_USERS = 4
# Each instance actor opens its own PostgreSQL pool (6 connections, see the memory section):
# at PostgreSQL's default max_connections = 100 a few dozen instances exhaust the server.
IDLE_USERS = 6
# How fast Ray's control store (GCS) declares a silent node dead; an instance is restarted
# elsewhere only after that. Ray's defaults (period 3000 ms, threshold 5, timeout 10000 ms)
# take 15-30 s. The bench (and docs/cluster.md) use a check every second, dead after 3 misses.
FAST_HEALTH_CHECK = {
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_timeout_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
}
SECTIONS = ["latency", "throughput", "memory", "failover"]
ECHO_ACTOR = "_bench_echo"


def load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


# ------------------------------------------------------------------------------ latency


async def timed(client: httpx.AsyncClient, method: str, url: str, key: str, body: Any) -> float:
    started = time.perf_counter()
    reply = await client.request(method, url, json=body, headers=auth(key))
    elapsed = (time.perf_counter() - started) * 1000
    if reply.status_code != 200:
        raise RuntimeError(f"{method} {url}: {reply.status_code} {reply.text[:300]}")
    return elapsed


async def latency(
    targets: dict[str, tuple[str, str]], requests: int, method: str, path: str, body: Any
) -> dict[str, list[float]]:
    """Interleaved rounds (so drift in the machine's load hits every target alike)."""
    samples: dict[str, list[float]] = {name: [] for name in targets}
    clients = {name: httpx.AsyncClient(timeout=60) for name in targets}
    try:
        for name, (url, key) in targets.items():  # warm-up: connection, instance, code paths
            for _ in range(20):
                await timed(clients[name], method, url + path, key, body)
        rounds = 5
        for _ in range(rounds):
            for name, (url, key) in targets.items():
                for _ in range(requests // rounds):
                    samples[name].append(await timed(clients[name], method, url + path, key, body))
    finally:
        for client in clients.values():
            await client.aclose()
    return samples


def print_latency(
    title: str, samples: dict[str, list[float]], bare_ms: float | None = None
) -> float:
    single = samples["single process"]
    cluster = samples["cluster"]
    added50 = pct(cluster, 0.5) - pct(single, 0.5)
    added90 = pct(cluster, 0.9) - pct(single, 0.9)
    print(f"  {title} ({len(single)} requests each, 1 kept-alive client)")
    for name, values in samples.items():
        print(f"    {name:<15} p50 {pct(values, 0.5):7.2f} ms   p90 {pct(values, 0.9):7.2f} ms")
    mark = ""
    if bare_ms is not None:
        target = TARGET_ADDED_FACTOR * bare_ms
        mark = "  OK" if added50 <= target else "  MISSED"
        mark = (
            f"   (target <= {TARGET_ADDED_FACTOR:g} x a bare actor call = {target:.2f} ms "
            f"added at p50){mark}"
        )
    print(f"    added by the cluster hop: p50 {added50:+.2f} ms, p90 {added90:+.2f} ms{mark}")
    return added50


async def round_trips(call: Callable[[], Any], samples: int) -> list[float]:
    for _ in range(min(30, samples)):
        await call()
    out = []
    for _ in range(samples):
        started = time.perf_counter()
        await call()
        out.append((time.perf_counter() - started) * 1000)
    return out


async def bare_actor_round_trip(samples: int = 300) -> dict[str, Any]:
    """A plain async Ray actor on a worker node echoing a forwarded-request-sized payload."""
    import ray

    @ray.remote(num_cpus=0.01)
    class Echo:
        async def echo(self, request: Any, work_ms: float = 0.0) -> Any:
            # ``work_ms``: busy for that long first, in slices with the event loop free in
            # between, as an instance is while it runs a task (its agents, its store).
            end = time.perf_counter() + work_ms / 1000
            while time.perf_counter() < end:
                sum(range(1000))
                await asyncio.sleep(0)
            return (200, [(b"content-type", b"application/json")], b"{}" * 300)

        def pid(self) -> int:
            return os.getpid()

    # Named, so the floor's HTTP server (bench/cluster_floor.py) calls this same actor.
    actor = Echo.options(name=ECHO_ACTOR).remote()  # type: ignore[attr-defined]
    request = {
        "method": "POST",
        "path": "/message",
        "headers": [(b"authorization", b"Bearer " + b"k" * 40)] * 6,
        "body": b"x" * 200,
    }
    awaited = await round_trips(lambda: actor.echo.remote(request), samples)
    blocking = await round_trips(
        lambda: asyncio.to_thread(ray.get, actor.echo.remote(request)), samples
    )
    return {
        "await_p50": pct(awaited, 0.5),
        "await_p90": pct(awaited, 0.9),
        "get_p50": pct(blocking, 0.5),
        "pid": await actor.pid.remote(),
        "handle": actor,
    }


async def floor_route(env: dict[str, Any], requests: int, work_ms: float) -> dict[str, list[float]]:
    """The floor under the hop: bench/cluster_floor.py, an HTTP server (a Ray driver, as a
    front end is) whose ``/actor`` route awaits one call of the bare echo actor, next to its
    ``/plain`` route, over one kept-alive client each, in interleaved rounds. ``/busy`` makes
    the same call with the actor busy for ``work_ms`` first (subtracted from its times): a
    call that takes as long as an instance's request costs Ray more than an instant one."""
    from server_fixtures import free_port

    port = free_port()
    script = Path(__file__).with_name("cluster_floor.py")
    cluster = env["cluster"]
    proc = subprocess.Popen(
        [sys.executable, str(script), "--address", cluster.address]
        + ["--namespace", cluster.namespace, "--actor", ECHO_ACTOR, "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        async with httpx.AsyncClient(timeout=5) as client:
            while True:
                if proc.poll() is not None:
                    err = proc.stderr.read().decode() if proc.stderr else ""
                    raise RuntimeError(f"the floor's server exited: {err[-2000:]}")
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(f"{base}/actor")).status_code == 200:
                        break
                if time.monotonic() > deadline:
                    raise RuntimeError("the floor's server did not answer in 120 s")
                await asyncio.sleep(0.2)
        targets = {
            "bare route": (f"{base}/plain", "floor"),
            "bare route + 1 Ray call": (f"{base}/actor", "floor"),
            "same, actor busy first": (f"{base}/busy?work_ms={work_ms:.3f}", "floor"),
        }
        samples = await latency(targets, requests, "GET", "", None)
        busy = samples["same, actor busy first"]
        samples["same, actor busy first"] = [t - work_ms for t in busy]
        return samples
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=30)
        if proc.poll() is None:
            proc.kill()


async def empty_actor_start(env: dict[str, str], samples: int = 3) -> list[float]:
    """Seconds from creating an empty Ray actor (with an instance's runtime environment) to
    its first answer: the floor under any restart that needs a new actor process."""
    import ray

    @ray.remote(num_cpus=0.01)
    class Empty:
        def pid(self) -> int:
            return os.getpid()

    times = []
    for _ in range(samples):
        started = time.perf_counter()
        actor = Empty.options(runtime_env={"env_vars": env}).remote()  # type: ignore[attr-defined]
        await actor.pid.remote()
        times.append(time.perf_counter() - started)
        ray.kill(actor)
    return times


async def instance_round_trip(
    env: dict[str, Any],
    samples: int = 200,
    method: str = "GET",
    path: str = "/status",
    body: bytes = b"",
) -> list[float]:
    """A request sent straight to the caller's instance actor (no front end, no HTTP)."""
    from mail.cluster.host import ForwardedRequest

    dep, key = env["dep"], env["keys"]["user0"]
    actor = await asyncio.to_thread(env["cluster"].actor, dep.swarm, "user", "user0")
    caller = {"role": "user", "id": "user0", "api_key": key, "swarm": None}
    headers = [(b"authorization", f"Bearer {key}".encode())]
    if body:
        headers += [(b"content-type", b"application/json")]
        headers += [(b"content-length", str(len(body)).encode())]
    request = ForwardedRequest(method, path, headers=headers, body=body)
    return await round_trips(lambda: actor.unary.remote(caller, request), samples)


async def client_round_trip(env: dict[str, Any], samples: int = 200) -> list[float]:
    """GET /status through the front end's own client of the actors, from this process."""
    from mail.cluster.frontend import host_config_json
    from mail.cluster.host import ForwardedRequest
    from mail.cluster.ray_backend import RayInstances
    from mail.config import load_config
    from mail.server.auth import Caller

    dep, key = env["dep"], env["keys"]["user0"]
    config = load_config(dep.config_file(), use_cache=False).server
    config = config.model_copy(
        update={
            "cluster": config.cluster.model_copy(update={"namespace": env["cluster"].namespace})
        }
    )
    instances = RayInstances(config, config_json=host_config_json(config))
    instances.connect()  # this process is already a driver of the cluster: no new connection
    caller = Caller(role="user", id="user0", api_key=key, swarm=None)
    request = ForwardedRequest(
        "GET", "/status", headers=[(b"authorization", f"Bearer {key}".encode())]
    )
    return await round_trips(lambda: instances.unary(dep.swarm, caller, request), samples)


# --------------------------------------------------------------------------- throughput


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time the processes used so far (from /proc/<pid>/stat)."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


def ray_daemon_pids() -> list[int]:
    """This installation's Ray processes that are not workers (raylets, GCS, agents)."""
    import ray

    package = str(Path(ray.__file__).parent).encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if package in (entry / "cmdline").read_bytes():
                pids.append(int(entry.name))
    return pids


async def throughput(
    urls: list[str], keys: list[str], clients: int, seconds: float
) -> tuple[float, int]:
    body = {"body": "FANOUT load"}
    stop = time.perf_counter() + seconds
    done = errors = 0

    async def run(i: int) -> None:
        nonlocal done, errors
        url, key = urls[i % len(urls)], keys[i % len(keys)]
        async with httpx.AsyncClient(timeout=60) as client:
            await client.get(url + "/health")
            while time.perf_counter() < stop:
                reply = await client.post(url + "/message", json=body, headers=auth(key))
                if reply.status_code == 200:
                    done += 1
                else:
                    errors += 1

    started = time.perf_counter()
    await asyncio.gather(*(run(i) for i in range(clients)))
    return done / (time.perf_counter() - started), errors


# ------------------------------------------------------------------------------- memory


def database_connections(pid: int) -> int:
    """Open TCP connections of a process to PostgreSQL's port (its pools), from /proc."""
    port = int(urlsplit(DATABASE_URL).port or 5432)
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    count = 0
    for table in ("tcp", "tcp6"):
        lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        for line in lines:
            fields = line.split()
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            if remote_port == port and fields[3] == "01" and fields[9] in inodes:  # ESTABLISHED
                count += 1
    return count


def process_memory(pid: int) -> tuple[float, float]:
    """(RSS, USS) in MiB, from /proc (USS: the pages no other process shares)."""
    rss = uss = 0
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        name, _, value = line.partition(":")
        if name == "Rss":
            rss = int(value.split()[0])
        elif name in ("Private_Clean", "Private_Dirty"):
            uss += int(value.split()[0])
    return rss / 1024, uss / 1024


async def one_task_each(urls: list[str], keys: list[str]) -> float:
    """One task per caller (the first alone, timed: a cold instance), the rest at once."""
    async with httpx.AsyncClient(timeout=120) as client:

        async def one(i: int) -> float:
            started = time.perf_counter()
            reply = await client.post(
                urls[i % len(urls)] + "/message",
                json={"body": "FANOUT idle"},
                headers=auth(keys[i]),
            )
            if reply.status_code != 200:
                raise RuntimeError(f"POST /message: {reply.status_code} {reply.text[:200]}")
            return time.perf_counter() - started

        first = await one(0)
        await asyncio.gather(*(one(i) for i in range(1, len(keys))))
        return first


# ------------------------------------------------------------------------------ failover


def calls(path: Path) -> list[tuple[str, int]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        agent, pid, _ = line.split()
        out.append((agent, int(pid)))
    return out


async def wait_for(check: Callable[[], bool], timeout: float, what: str) -> float:
    started = time.perf_counter()
    while not check():
        if time.perf_counter() - started > timeout:
            raise RuntimeError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)
    return time.perf_counter()


async def claimed_after(swarm: str, caller_id: str, since: float) -> float | None:
    """Seconds from ``since`` (wall clock) to the instance's last claim, from the store."""
    import asyncpg

    conn = await asyncpg.connect(DATABASE_URL)
    try:
        at = await conn.fetchval(
            "SELECT claimed_at FROM instance_generations "
            "WHERE swarm_name = $1 AND caller_role = 'user' AND caller_id = $2",
            swarm,
            caller_id,
        )
    finally:
        await conn.close()
    return None if at is None else at.timestamp() - since


def kill_node(cluster: Any, node_id: str, pid: int) -> None:
    """Kill a worker node as a machine dies: its raylet, and at once the instance's process.

    Removing a node kills its raylet; its worker processes notice only later and could go on
    running (and writing) for a moment, until the restarted instance fences them off. A dead
    machine runs nothing, so the instance's process is killed right after its raylet.
    """
    node = next(n for n in cluster.nodes if n.node_id == node_id)
    cluster.cluster.remove_node(node, allow_graceful=False)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    cluster.nodes.remove(node)


async def node_declared_dead(node_id: str, timeout: float = 120) -> float:
    """When Ray's control store first reports the node as not alive."""
    import ray

    def dead() -> bool:
        return any(n["NodeID"] == node_id and not n["Alive"] for n in ray.nodes())

    started = time.perf_counter()
    while not await asyncio.to_thread(dead):
        if time.perf_counter() - started > timeout:
            break
        await asyncio.sleep(0.05)
    return time.perf_counter()


async def failover(
    dep: Any, cluster: Any, front_end: str, other: str, key: str, log: Path
) -> float:
    from server_fixtures import aparse_sse_stream

    swarm = dep.swarm
    async with httpx.AsyncClient(timeout=60) as client:
        warm = await client.post(
            front_end + "/message", json={"body": "FANOUT warm"}, headers=auth(key)
        )
        assert warm.status_code == 200, warm.text
        before = await asyncio.to_thread(cluster.describe, swarm, "user", "failover")
        old_pid = before["pid"]
        task_id = str(uuid.uuid4())
        seen: list[int] = []

        async def stream() -> str:
            try:
                async with client.stream(
                    "POST",
                    front_end + "/message",
                    json={"body": "FANOUT go", "task_id": task_id, "stream": True},
                    headers=auth(key),
                ) as response:
                    async for event in aparse_sse_stream(response):
                        if event.id and event.event != "ping":
                            seen.append(int(event.id))
                        if event.event == "task_complete":
                            return "completed on the old node"
            except httpx.HTTPError as exc:
                return f"cut ({type(exc).__name__})"
            return "ended without task_complete"

        streaming = asyncio.create_task(stream())
        count = len(calls(log))
        await wait_for(
            lambda: any(a.startswith("worker") and p == old_pid for a, p in calls(log)[count:]),
            30,
            "a worker call on the first node",
        )
        node_id = before["node_id"]
        kill_node(cluster, node_id, old_pid)
        killed, killed_wall = time.perf_counter(), time.time()
        noticed = asyncio.create_task(node_declared_dead(node_id))
        count = len(calls(log))
        try:
            running = await wait_for(
                lambda: any(p != old_pid for _a, p in calls(log)[count:]), 60, "a restarted call"
            )
        except RuntimeError:
            import ray

            print(f"    calls since the kill: {calls(log)[count:]}")
            print(f"    nodes alive: {sum(1 for n in ray.nodes() if n['Alive'])}")
            with contextlib.suppress(Exception):
                actor = cluster.actor(swarm, "user", "failover")
                print(f"    instance: {await asyncio.wait_for(actor.describe.remote(), 10)}")
            raise
        outcome = await streaming
        after_id = seen[-1] if seen else 0
        events: list[Any] = []
        async with client.stream(
            "GET",
            other + "/task/events",
            params={"task_id": task_id},
            headers={**auth(key), "Last-Event-ID": str(after_id)},
        ) as response:
            assert response.status_code == 200, await response.aread()
            async for event in aparse_sse_stream(response):
                if event.event == "ping":
                    continue
                events.append(event)
                if event.event in ("task_complete", "task_error") and event.id is None:
                    break
        completed = time.perf_counter()
        ids = [int(e.id) for e in events if e.id is not None]
        gapless = seen + ids == list(range(1, len(seen) + len(ids) + 1))
        after = await asyncio.to_thread(cluster.describe, swarm, "user", "failover")
    dead_at = await noticed
    claimed = await claimed_after(swarm, "failover", killed_wall)
    run_s = running - killed
    mark = "OK" if run_s <= TARGET_FAILOVER_S else "MISSED"
    print(f"  task with {STUB_LATENCY_MS} ms agent calls; node killed during a worker call")
    print("    the node's raylet and the instance's process were killed (SIGKILL)")
    print(
        f"    node death -> restarted instance's next agent call: {run_s:.2f} s "
        f"(target <= {TARGET_FAILOVER_S:.0f} s) {mark}"
    )
    how = "a warm host adopts," if after.get("adopted_warm") else "a new actor process starts,"
    print(
        f"      of which: Ray declares the node dead {dead_at - killed:.2f} s; {how} "
        f"claims, restores and calls the agent {running - dead_at:.2f} s"
    )
    if claimed is not None:
        print(
            f"      the new host claimed the instance (generation row in PostgreSQL) "
            f"{claimed:.2f} s after the kill: {claimed - (dead_at - killed):.2f} s after the "
            f"node was declared dead (process start, imports, pool); then "
            f"{run_s - claimed:.2f} s to restore and call the agent"
        )
    if run_s > TARGET_FAILOVER_S:
        print(
            "    -> missed: Ray's health checks must first declare the node dead, then a new "
            "Python process starts for the instance and imports the server (compare a cold "
            "instance's first task in 4.)"
        )
    print(f"    node death -> task complete (via the other front end): {completed - killed:.2f} s")
    print(
        f"    original stream: {outcome} after event {after_id}; resumed with Last-Event-ID: "
        f"{len(ids)} more events, ids 1..{len(seen) + len(ids)} each once: {gapless}; "
        f"last event {events[-1].event if events else None}"
    )
    print(
        f"    generation {before['generation']} -> {after['generation']}, "
        f"node changed: {before['node_id'] != after['node_id']}"
    )
    return run_s


# ---------------------------------------------------------------------------------- main


async def measure(args: argparse.Namespace, env: dict[str, Any]) -> None:
    dep, cluster = env["dep"], env["cluster"]
    _fe0, fe1, fe_slow = dep.front_ends
    keys = env["keys"]

    if "latency" in args.only:
        await measure_latency(args, env)
    if "throughput" in args.only:
        await measure_throughput(args, env)
    # Each instance actor holds PostgreSQL connections: end the ones measured so far.
    end_actors(env, [f"user{i}" for i in range(THROUGHPUT_USERS)])
    if "failover" in args.only:
        print("\n3. node failure (head + 2 worker nodes; the instance's node is killed mid-task)")
        runs: list[float] = []
        for run in range(args.failover_runs):
            print(f"  run {run + 1} of {args.failover_runs}")
            if args.warm_pool > 0:
                # A node dies when the pool is full; one that dies while it still refills
                # after the previous failover meets a cold start (warm_pool = 0's path).
                refill = cluster.wait_pool_settled()  # Ray wants the main thread
                print(f"    warm pool full again after {refill:.1f} s more")
            runs.append(
                await failover(
                    dep, cluster, fe_slow.base_url, fe1.base_url, keys["failover"], env["log"]
                )
            )
            cluster.add_worker()  # back to two worker nodes (Ray wants the main thread)
        p50 = statistics.median(runs)
        mark = "OK" if p50 <= TARGET_FAILOVER_S else "MISSED"
        print(
            f"  node death -> running again, p50 of {len(runs)}: {p50:.2f} s "
            f"(runs: {', '.join(f'{r:.2f}' for r in runs)}; target <= {TARGET_FAILOVER_S:.0f} s) "
            f"{mark}; {load()}"
        )
        from mail.cluster.actor import forwarded_env

        empty = await empty_actor_start(forwarded_env())
        print(
            f"  floor in this run: an empty Ray actor (no mail code) from creation to its first "
            f"answer: p50 {statistics.median(empty):.2f} s (samples: "
            f"{', '.join(f'{e:.2f}' for e in empty)}); every restart pays it, plus Ray's "
            f"node-death detection (above) and the server's imports and start-up"
        )
        end_actors(env, ["failover"])
    if "memory" in args.only:
        await measure_memory(args, env)


def end_actors(env: dict[str, Any], users: list[str]) -> None:
    import ray

    from mail.cluster.warm_pool import end_instance

    for user in users:
        with contextlib.suppress(Exception):
            end_instance(ray, env["cluster"].namespace, f"{env['dep'].swarm}/user/{user}")


async def measure_latency(args: argparse.Namespace, env: dict[str, Any]) -> None:
    fe0, single, keys = env["dep"].front_ends[0], env["single"], env["keys"]
    print("\n1. added latency of the cluster hop")
    message = {"body": "FANOUT hop"}
    targets = {
        "single process": (single.base_url, keys["solo0"]),
        "cluster": (fe0.base_url, keys["user0"]),
    }
    # The floor, measured first in the same run: one bare Ray actor call.
    bare = await bare_actor_round_trip()
    env["bare"] = bare
    print(
        f"  one bare Ray actor call (request-sized payload, awaited): p50 "
        f"{bare['await_p50']:.2f} ms, p90 {bare['await_p90']:.2f} ms"
    )
    lat = await latency(targets, args.requests, "POST", "/message", message)
    added = print_latency(
        "POST /message, non-stream, 4 agent calls per task", lat, bare["await_p50"]
    )
    # The floor, in the same run: what one Ray actor call adds to an HTTP route of a server
    # process that is a driver of the cluster (a front end with nothing of MAIL's in it).
    # The actor of the busy floor works as long as the single process's server takes for
    # the request (its time less a bare route's: HTTP and the client are on both sides).
    work_ms = max(0.0, pct(lat["single process"], 0.5) - 0.66)
    floor = await floor_route(env, args.requests, work_ms)
    plain = floor["bare route"]
    plain_p50 = pct(plain, 0.5)
    print(
        "  the floor: a bare HTTP route; one awaiting one Ray actor call; the same call with "
        f"the actor busy {work_ms:.2f} ms first, subtracted ({len(plain)} each)"
    )
    for name, values in floor.items():
        print(f"    {name:<24} p50 {pct(values, 0.5):7.2f} ms   p90 {pct(values, 0.9):7.2f} ms")
    target = TARGET_ADDED_FACTOR * bare["await_p50"]
    for name in ("bare route + 1 Ray call", "same, actor busy first"):
        floor50 = pct(floor[name], 0.5) - pct(plain, 0.5)
        floor90 = pct(floor[name], 0.9) - pct(plain, 0.9)
        what = "one Ray call" if name.startswith("bare") else "one busy Ray call"
        print(
            f"    added by {what} behind HTTP: p50 {floor50:+.2f} ms, p90 {floor90:+.2f} ms = "
            f"{floor50 / bare['await_p50']:.2f} x a bare actor call"
            + (f" (the target, {target:.2f} ms, is below it)" if floor50 > target else "")
            + f"; the cluster hop adds {added - floor50:+.2f} ms more"
        )
    status = await latency(targets, args.requests, "GET", "/status", None)
    print_latency("GET /status (the lightest forwarded route)", status, bare["await_p50"])
    whoami = await latency(targets, args.requests // 2, "GET", "/whoami", None)
    print_latency("GET /whoami (authenticated, answered by the front end itself)", whoami)
    direct = await instance_round_trip(env)
    message_direct = await instance_round_trip(
        env, args.requests, "POST", "/message", json.dumps(message).encode()
    )
    via_client = await client_round_trip(env)
    print("  where the added time goes (from this driver process, no HTTP):")
    print(
        f"    plain Ray actor call, request-sized payload: await p50 {bare['await_p50']:.2f} ms, "
        f"p90 {bare['await_p90']:.2f} ms (ray.get in a thread: p50 {bare['get_p50']:.2f} ms)"
    )
    print(
        f"    GET /status straight to the instance actor: p50 {pct(direct, 0.5):.2f} ms, "
        f"p90 {pct(direct, 0.9):.2f} ms (Ray call + the host's in-process ASGI call)"
    )
    print(
        f"    the same through the front end's client (RayInstances.unary): p50 "
        f"{pct(via_client, 0.5):.2f} ms, p90 {pct(via_client, 0.9):.2f} ms"
    )
    # POST /message: the single process's server time is its p50 less a bare route's (HTTP
    # and the client); the front end's share is what the cluster's p50 has beyond a bare
    # route and the same request sent straight to the instance actor.
    server = pct(lat["single process"], 0.5) - plain_p50
    straight = pct(message_direct, 0.5)
    print(
        f"    POST /message straight to the instance actor: p50 {straight:.2f} ms, p90 "
        f"{pct(message_direct, 0.9):.2f} ms; the single process's server takes {server:.2f} ms"
        f" of its p50 -> Ray and the host add {straight - server:+.2f} ms, the front end "
        f"{pct(lat['cluster'], 0.5) - plain_p50 - straight:+.2f} ms"
    )
    # The verdict for POST /message: what Ray itself takes for a call as long as the request
    # (the busy floor) against the target, and what is left for mail's own forwarding.
    target = TARGET_ADDED_FACTOR * bare["await_p50"]
    busy = pct(floor["same, actor busy first"], 0.5) - plain_p50
    print(
        f"  -> POST /message: the hop adds {added:+.2f} ms against a target of {target:.2f} ms; "
        f"one Ray call as long as this request, behind HTTP, takes {busy:+.2f} ms by itself "
        f"({'above' if busy > target else 'below'} the target), mail's forwarding (the front "
        f"end's route, the host's in-process call, the second authentication) {added - busy:+.2f}"
        " ms. GET /status is answered from the names of all instance actors and one actor call"
        " (more than one hop)."
    )


async def measure_throughput(args: argparse.Namespace, env: dict[str, Any]) -> None:
    fe0, fe1 = env["dep"].front_ends[:2]
    single, keys = env["single"], env["keys"]
    print(
        f"\n2. throughput, 16 concurrent kept-alive clients over {THROUGHPUT_USERS} users, "
        f"{args.rounds} interleaved rounds of {args.seconds:.0f} s"
    )
    cluster_keys = [keys[f"user{i}"] for i in range(THROUGHPUT_USERS)]
    solo_keys = [keys[f"solo{i}"] for i in range(THROUGHPUT_USERS)]
    # Every user's actor exists (a request cut off by the end of a run may not have made it).
    await one_task_each([fe0.base_url, fe1.base_url], cluster_keys)
    await throughput([fe0.base_url, fe1.base_url], cluster_keys, 16, 1.0)  # warm every actor
    await throughput([single.base_url], solo_keys, 16, 1.0)
    runs = (
        ("single process", [single.base_url], solo_keys),
        ("cluster, 1 front end", [fe0.base_url], cluster_keys),
        ("cluster, 2 front ends", [fe0.base_url, fe1.base_url], cluster_keys),
    )
    actors = []
    for i in range(THROUGHPUT_USERS):
        info = await asyncio.to_thread(
            env["cluster"].describe, env["dep"].swarm, "user", f"user{i}"
        )
        actors.append(info["pid"])
    servers = {
        "single process": [single.proc.pid],
        "cluster": [fe0.proc.pid, fe1.proc.pid, *actors],
    }
    daemons = ray_daemon_pids()
    groups = {"daemons": daemons, **servers}
    idle_started = time.perf_counter()
    idle_before = {name: cpu_seconds(pids) for name, pids in groups.items()}
    await asyncio.sleep(2)
    idle = {
        name: (cpu_seconds(pids) - idle_before[name]) / (time.perf_counter() - idle_started)
        for name, pids in groups.items()
    }
    results: dict[str, list[float]] = {title: [] for title, _u, _k in runs}
    cpu: dict[str, list[tuple[float, float]]] = {title: [] for title, _u, _k in runs}
    errors = 0
    for _ in range(args.rounds):  # interleaved, so drifting load hits each alike
        for title, urls, ks in runs:
            pids = servers["single process" if title == "single process" else "cluster"]
            before, ray_before = cpu_seconds(pids), cpu_seconds(daemons)
            rps, failed = await throughput(urls, ks, 16, args.seconds)
            tasks = max(rps * args.seconds, 1) / 1000  # none done under heavy load: no 0/0
            cpu[title].append(
                (
                    (cpu_seconds(pids) - before) / tasks,
                    (cpu_seconds(daemons) - ray_before) / tasks,
                )
            )
            results[title].append(rps)
            errors += failed
    for title, values in results.items():
        own = statistics.median(c[0] for c in cpu[title])
        ray_part = statistics.median(c[1] for c in cpu[title])
        extra = "" if title == "single process" else f" + Ray daemons {ray_part:.1f} ms"
        print(
            f"    {title:<22} {statistics.median(values):7.1f} req/s median of {len(values)} "
            f"(range {min(values):.0f}-{max(values):.0f}); CPU per task {own:.1f} ms{extra}"
        )
    print(
        "    (CPU per task: the single process, or the front ends and the 4 instance actors. "
        f"When idle, these use {idle['single process'] * 100:.1f}% and "
        f"{idle['cluster'] * 100:.1f}% of a core, Ray's daemons {idle['daemons'] * 100:.1f}%.) "
        "All of it shares 2 cores with the clients and PostgreSQL (and here other jobs: "
        "see the load average): a second front end on the same cores adds no capacity."
    )
    print(f"    errors: {errors}; {load()}")


async def measure_memory(args: argparse.Namespace, env: dict[str, Any]) -> None:
    dep, cluster, single, keys = env["dep"], env["cluster"], env["single"], env["keys"]
    fe0, fe1 = dep.front_ends[:2]
    bare = await bare_actor_round_trip(10)  # a fresh one: the first may have been on a lost node
    print(f"\n4. memory per idle instance actor ({IDLE_USERS} idle users)")
    single_before = process_memory(single.proc.pid)[0]
    idle = [keys[f"idle{i}"] for i in range(IDLE_USERS)]
    started = time.perf_counter()
    cold = await one_task_each([fe0.base_url, fe1.base_url], idle)
    created = time.perf_counter() - started
    cold_single = await one_task_each([single.base_url], idle)
    single_after = process_memory(single.proc.pid)[0]
    rss, uss, conns = [], [], []
    for i in range(IDLE_USERS):
        info = await asyncio.to_thread(cluster.describe, dep.swarm, "user", f"idle{i}")
        r, u = process_memory(info["pid"])
        rss.append(r)
        uss.append(u)
        conns.append(database_connections(info["pid"]))
    echo_rss, echo_uss = process_memory(bare["pid"])
    fe_rss = process_memory(fe0.proc.pid)[0]
    print(
        f"    {IDLE_USERS} callers ran one task each (POST /message), then idle: "
        f"{created:.1f} s in all; a new caller's first task: {cold:.2f} s in the cluster "
        f"(warm_pool = {os.environ.get('MAIL_CLUSTER_WARM_POOL', '1')}: "
        f"{'a new actor process' if os.environ.get('MAIL_CLUSTER_WARM_POOL') == '0' else 'a warm host adopts it'}), "
        f"{cold_single:.2f} s single process"
    )
    print(
        f"    per instance actor: RSS median {statistics.median(rss):.0f} MiB "
        f"(min {min(rss):.0f}, max {max(rss):.0f}), USS median {statistics.median(uss):.0f} MiB; "
        f"total RSS {sum(rss):.0f} MiB"
    )
    print(
        f"    an empty Ray actor process: RSS {echo_rss:.0f} MiB, USS {echo_uss:.0f} MiB; "
        f"a front end process: RSS {fe_rss:.0f} MiB"
    )
    print(
        f"    single process, same {IDLE_USERS} users: RSS {single_before:.0f} -> "
        f"{single_after:.0f} MiB ({(single_after - single_before) / IDLE_USERS:.2f} MiB each)"
    )
    print(
        f"    PostgreSQL connections held per idle instance actor: median "
        f"{statistics.median(conns):.0f} (max {max(conns)}); a front end holds "
        f"{database_connections(fe0.proc.pid)}, the single process "
        f"{database_connections(single.proc.pid)} for all its instances"
    )
    total = Path("/proc/meminfo").read_text().split()[1]
    print(f"    machine: {int(total) / 2**20:.1f} GiB RAM")


def start_all(root: Path, env: dict[str, Any]) -> None:
    from tests.support.durable_agents import swarms_json
    from tests.support.ray_cluster import ClusterDeployment, RayTestCluster

    from server_fixtures import ServerProcess, create_key, free_port, write_config

    started = time.perf_counter()
    env["cluster"] = cluster = RayTestCluster(workers=2).start()
    swarm = f"bench-{uuid.uuid4().hex[:8]}"
    env["dep"] = dep = ClusterDeployment(
        root=root,
        cluster=cluster,
        database_url=DATABASE_URL,
        swarms=swarms_json(swarm),
        swarm=swarm,
    ).prepare()
    names = [f"user{i}" for i in range(THROUGHPUT_USERS)]
    names += [f"solo{i}" for i in range(THROUGHPUT_USERS)]
    names += [f"idle{i}" for i in range(IDLE_USERS)] + ["failover"]
    keys = {name: create_key(dep.keys_file, "user", name) for name in names}
    env["keys"] = keys
    print(
        f"ray cluster up in {time.perf_counter() - started:.1f} s (namespace {cluster.namespace})"
    )

    # The single-process server: the same swarm, key file and database; its users (solo*)
    # are not cluster users, so the two never hold one instance.
    solo_dir = root / "single"
    solo_dir.mkdir()
    port = free_port()
    config = write_config(
        solo_dir, port=port, swarm=swarm, source=str(root / "swarms.json"), extra=dep.settings
    )
    single = ServerProcess(
        solo_dir,
        port,
        args=["--port", str(port)],
        env={
            "DATABASE_URL": DATABASE_URL,
            "MAIL_KEYS_FILE": str(dep.keys_file),
            "MAIL_CONFIG_PATH": str(config),
        },
    )
    env["single"] = single
    single.start(wait=False)
    dep.start_front_end()
    dep.start_front_end()
    # The failover front end's instances make every agent call take 200 ms and log it.
    env["log"] = root / "calls.log"
    dep.env = {
        "MAIL_STUB_LATENCY_MS": str(STUB_LATENCY_MS),
        "MAIL_DURABLE_CALL_LOG": str(env["log"]),
    }
    dep.start_front_end()
    single.wait_healthy()
    print(
        f"3 front ends + 1 single-process server up in {time.perf_counter() - started:.1f} s "
        f"(from the start of the ray cluster)"
    )


def dump_logs(env: dict[str, Any]) -> None:
    servers = list(env["dep"].front_ends) if "dep" in env else []
    servers += [env["single"]] if "single" in env else []
    for server in servers:
        lines = server.logs().splitlines()
        causes = [line for line in lines if re.match(r"^[\w.]*(Error|Exception)\b", line)]
        if causes:
            print(f"--- {server.base_url}: errors in its log ---", file=sys.stderr)
            print("\n".join(dict.fromkeys(causes)), file=sys.stderr)


def stop_all(env: dict[str, Any]) -> None:
    for name in ("single",):
        if name in env:
            with contextlib.suppress(Exception):
                env[name].stop()
    if "dep" in env:
        env["dep"].stop()
    if "cluster" in env:
        env["cluster"].shutdown()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200, help="latency samples per target")
    parser.add_argument("--seconds", type=float, default=2.0, help="per throughput run")
    parser.add_argument("--rounds", type=int, default=3, help="throughput rounds")
    parser.add_argument(
        "--failover-runs", type=int, default=5, help="node kills (the p50 is reported)"
    )
    parser.add_argument(
        "--ray-defaults",
        action="store_true",
        help="keep Ray's default node health checks (node death is noticed after 15-30 s)",
    )
    parser.add_argument(
        "--no-bytecode-cache",
        action="store_true",
        help="keep the environment's PYTHONDONTWRITEBYTECODE: then every new instance process"
        " compiles every module it imports (by default bytecode is cached, as installed packages"
        " do; the first actors fill the cache)",
    )
    parser.add_argument(
        "--warm-pool",
        type=int,
        default=1,
        help="[server.cluster] warm_pool of the front ends (0: every instance host starts cold)",
    )
    parser.add_argument(
        "--only",
        nargs="+",
        default=SECTIONS,
        choices=SECTIONS,
        help="run only these measurements",
    )
    args = parser.parse_args()
    try:
        import ray  # noqa: F401
    except ImportError:
        print("needs Ray: uv sync --extra cluster", file=sys.stderr)
        return 2
    if not args.ray_defaults:
        os.environ.update(FAST_HEALTH_CHECK)  # read by the head's GCS when it starts
    os.environ["MAIL_CLUSTER_WARM_POOL"] = str(args.warm_pool)  # inherited by the front ends
    began = time.perf_counter()
    print(f"mail cluster bench — {load()}; {os.cpu_count()} CPUs; DATABASE_URL {DATABASE_URL}")
    checks = {k.removeprefix("RAY_"): os.environ.get(k, "default") for k in FAST_HEALTH_CHECK}
    print(f"ray node health checks: {checks}")
    env: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="mail-cluster-bench-") as tmp:
        if not args.no_bytecode_cache:
            # Inherited by the raylets, so by every front end and actor process.
            os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
            os.environ["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        cached = "cached" if os.environ.get("PYTHONDONTWRITEBYTECODE") != "1" else "not cached"
        print(f"bytecode: {cached} (--no-bytecode-cache keeps PYTHONDONTWRITEBYTECODE)")
        try:
            start_all(Path(tmp), env)
            asyncio.run(measure(args, env))
        except BaseException:
            dump_logs(env)
            raise
        finally:
            stop_all(env)
    print(f"\ndone in {time.perf_counter() - began:.0f} s — {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
