"""Push delivery benchmarks (not a test): prints numbers.

    uv run python bench/webhooks.py [--events 200] [--rounds 4] [--requests 400]

1. Event to receiver: one `mail server` (stub agents, SQLite, the default) and a receiver
   process on loopback; a user subscribed to `task.completed` sends `--events` messages one
   after another. For each, the time from the event (the payload's `timestamp`, taken when the
   task answers, before it is stored) to its arrival at the receiver: p50 / p99 (target: p50
   <= 20 ms).
2. `POST /message` with 16 concurrent kept-alive clients (16 users) on three servers,
   measured in interleaved rounds: A has no subscriptions; B has 100 (of other callers) and
   one slow receiver (10 s per answer) that gets every task of one of the 16 (target: B
   within 10% of A); C has 100 too and delivers every task of the 16 to a fast receiver on
   the same machine (what the delivery work itself costs; for information). Requests/s, latency
   p50 and the server's CPU per request. Between rounds C's deliveries are waited for, so its
   delivery work does not spill into another side's round.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# bench/ (the script's folder, first on the path) has an http.py: the stdlib's must win.
sys.path[0] = str(REPO) if sys.path[0] == str(Path(__file__).resolve().parent) else sys.path[0]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import httpx  # noqa: E402
from tests.server_fixtures import (  # noqa: E402
    ServerProcess,
    create_key,
    free_port,
    write_config,
    write_stub_swarms,
)
from tests.support.webhook_receiver import ReceiverProcess  # noqa: E402

USERS = 16
SUBSCRIPTIONS = 100


def server(directory: Path, webhooks: bool, users: int) -> tuple[ServerProcess, dict[str, str]]:
    directory.mkdir(parents=True, exist_ok=True)
    write_stub_swarms(directory)
    port = free_port()
    extra = "access_log = false\n"
    hooks = '\n[server.webhooks]\nallowed_hosts = ["127.0.0.1"]\n' if webhooks else ""
    config = write_config(directory, port=port, extra=hooks)
    text = config.read_text().replace('log_level = "info"', 'log_level = "warning"\n' + extra)
    config.write_text(text)
    keys_file = directory / "registries" / "keys.json"
    keys = {f"u{i}": create_key(keys_file, "user", f"u{i}") for i in range(users)}
    proc = ServerProcess(directory, port, args=["--config", str(config)]).start()
    return proc, keys


def subscribe(proc: ServerProcess, key: str, url: str, events: list[str]) -> None:
    r = httpx.post(
        proc.base_url + "/webhooks",
        json={"url": url, "events": events},
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )
    r.raise_for_status()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def event_latency(workdir: Path, events: int) -> None:
    receiver = ReceiverProcess(free_port(), workdir).start()
    proc, keys = server(workdir / "latency", True, 1)
    try:
        subscribe(proc, keys["u0"], receiver.url("/lat"), ["task.completed"])
        with httpx.Client(headers={"Authorization": f"Bearer {keys['u0']}"}, timeout=60) as http:
            for i in range(20):  # warm-up: the instance, connections, the TLS context
                http.post(proc.base_url + "/message", json={"body": f"warm {i}"}).raise_for_status()
            receiver.wait_for(20, "/lat", timeout=60)
            for i in range(events):
                http.post(proc.base_url + "/message", json={"body": f"n {i}"}).raise_for_status()
                time.sleep(0.01)  # one event at a time: what a single event costs
        got = receiver.wait_for(20 + events, "/lat", timeout=120)[20:]
        latencies = []
        for entry in got:
            sent = json.loads(entry["body"])["timestamp"].replace("Z", "+00:00")
            at = datetime.datetime.fromisoformat(sent).timestamp()
            latencies.append((entry["at"] - at) * 1000)
        p50, p99 = pct(latencies, 0.5), pct(latencies, 0.99)
        verdict = "target met" if p50 <= 20 else "TARGET MISSED"
        print(
            f"event -> receiver, {len(latencies)} events: p50 {p50:.1f} ms, p99 {p99:.1f} ms ({verdict})"
        )
    finally:
        proc.stop()
        receiver.stop()


async def load(url: str, keys: list[str], requests: int) -> tuple[float, list[float]]:
    latencies: list[float] = []
    per_client = requests // len(keys)

    async def client(key: str) -> None:
        async with httpx.AsyncClient(
            headers={"Authorization": f"Bearer {key}"}, timeout=120
        ) as http:
            for i in range(per_client):
                started = time.perf_counter()
                r = await http.post(url + "/message", json={"body": f"load {i}"})
                r.raise_for_status()
                latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(client(k) for k in keys))
    return len(latencies) / (time.perf_counter() - started), latencies


def message_load(workdir: Path, rounds: int, requests: int) -> None:
    fast = ReceiverProcess(free_port(), workdir).start()
    slow = ReceiverProcess(free_port(), workdir).start()
    slow.script("/slow", [200] * 100_000, delay=10)
    a, a_keys = server(workdir / "a", True, USERS)
    b, b_keys = server(workdir / "b", True, USERS + SUBSCRIPTIONS)
    c, c_keys = server(workdir / "c", True, USERS + SUBSCRIPTIONS)
    try:
        # B: 100 subscriptions; 99 of callers other than the 16 sending, and the slow one,
        # which gets every task of one of the 16.
        for i in range(USERS, USERS + SUBSCRIPTIONS - 1):  # callers that send nothing here
            subscribe(b, b_keys[f"u{i}"], fast.url("/idle"), ["task.completed"])
        subscribe(b, b_keys["u0"], slow.url("/slow"), ["task.completed"])
        # C: 100 subscriptions too, and every task of the 16 delivered to a fast receiver
        # (what the delivery work itself costs).
        for i in range(USERS):
            subscribe(c, c_keys[f"u{i}"], fast.url("/fast"), ["task.completed"])
        for i in range(USERS, SUBSCRIPTIONS):
            subscribe(c, c_keys[f"u{i}"], fast.url("/idle"), ["task.completed"])
        assert not fast.received("/idle")
        sides = {
            "A (no subscriptions)": (a, [a_keys[f"u{i}"] for i in range(USERS)]),
            "B (100 subscriptions, one slow receiver)": (
                b,
                [b_keys[f"u{i}"] for i in range(USERS)],
            ),
            "C (100 subscriptions, each task delivered)": (
                c,
                [c_keys[f"u{i}"] for i in range(USERS)],
            ),
        }
        for proc, keys in sides.values():
            asyncio.run(load(proc.base_url, keys, 160))  # warm-up
        expected_fast = 160
        fast.wait_for(expected_fast, "/fast", timeout=120)
        results: dict[str, tuple[list[float], list[float], list[float]]] = {
            name: ([], [], []) for name in sides
        }
        names = list(sides)
        for number in range(rounds):
            order = names[number % 3 :] + names[: number % 3]  # each side first in turn
            for name in order:
                proc, keys = sides[name]
                assert proc.proc is not None
                before = cpu_seconds(proc.proc.pid)
                rps, latencies = asyncio.run(load(proc.base_url, keys, requests))
                cpu = (cpu_seconds(proc.proc.pid) - before) / len(latencies) * 1e3
                results[name][0].append(rps)
                results[name][1].append(pct(latencies, 0.5) * 1000)
                results[name][2].append(cpu)
                if proc is c:  # its deliveries land before the next round starts
                    expected_fast += len(latencies)
                    fast.wait_for(expected_fast, "/fast", timeout=120)
        print(f"POST /message, {USERS} clients, {rounds} interleaved rounds of {requests}:")
        medians = {}
        for name, (rps, p50, cpu) in results.items():
            medians[name] = (statistics.median(rps), statistics.median(p50), statistics.median(cpu))
            print(
                f"  {name}: req/s {medians[name][0]:.0f} "
                f"(rounds {', '.join(f'{x:.0f}' for x in rps)}), "
                f"p50 {medians[name][1]:.1f} ms, server CPU {medians[name][2]:.2f} ms/request"
            )
        base = medians[names[0]]
        for name in names[1:]:
            rps, p50, cpu = medians[name]
            ratio = rps / base[0]
            verdict = (
                ("target met" if ratio >= 0.9 else "TARGET MISSED") if name == names[1] else "info"
            )
            print(
                f"  {name[0]}/A req/s {ratio:.2f}, p50 {p50 / base[1]:.2f}, "
                f"CPU {cpu / base[2]:.2f} ({verdict})"
            )
        print(f"  slow receiver got {len(slow.received('/slow'))} (each answered after 10 s)")
        print(f"  idle subscriptions got {len(fast.received('/idle'))} (none expected)")
    finally:
        for proc in (a, b, c):
            proc.stop()
        fast.stop()
        slow.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--requests", type=int, default=400, help="requests per round")
    parser.add_argument("--only", choices=("latency", "load"))
    args = parser.parse_args()
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    with tempfile.TemporaryDirectory(prefix="mail-webhooks-bench-") as tmp:
        workdir = Path(tmp)
        if args.only in (None, "latency"):
            event_latency(workdir, args.events)
        if args.only in (None, "load"):
            message_load(workdir, args.rounds, args.requests)


if __name__ == "__main__":
    main()
