"""Mixed-load benchmark of `mail server` with a loss and cross-talk checker (prints numbers).

    uv run python bench/load.py [--requests 1000] [--users 4] [--connections 16] [--seed 1]

Starts a real `mail server` on 127.0.0.1 (the test suite's stub swarm: a supervisor and a
worker, deterministic agents, no model) with one key per user, then sends ``--requests``
POST /message over ``--connections`` kept-alive connections (one aiohttp session of one
connection each), mixing five kinds of work, each request tagged so its answer can be checked:

* ``plain``: non-streamed request; the answer must be ``echo[<user>]: TAG <tag>``;
* ``stream``: the same over SSE; the closing ``task_complete`` must carry that answer;
* ``multi``: three turns on one ``task_id``; turn n must answer ``turn n``;
* ``breakpoint``: pauses at a breakpoint tool (the paused answer must quote the tag), then
  resumes with a result naming the tag; the answer must be ``reviewed: <tag>``;
* ``drop``: a stream the client abandons after its first event (the task keeps running).

A wrong answer, or an answer naming another user or another request's tag, is *crossed*.
At the end every task must be in its own user's GET /tasks, completed, and in nobody else's
(*lost* otherwise). Prints requests/s, p50/p99 latency, errors, crossed, lost; the exit code
is 1 unless all three are 0. ``run_load`` is what tests/test_load.py runs at ~100 requests.
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
import json
import random
import statistics
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[1]

KINDS = ("plain", "stream", "multi", "breakpoint", "drop")
WEIGHTS = (4, 3, 1, 1, 1)
REQUESTS_PER_KIND = {"plain": 1, "stream": 1, "multi": 3, "breakpoint": 2, "drop": 1}


@dataclass
class Job:
    kind: str
    user: str
    tag: str
    task_id: str = field(default_factory=lambda: str(uuid.uuid4()))


@dataclass
class LoadReport:
    requests: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    crossed: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    tasks: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def percentile(self, q: float) -> float:
        if not self.latencies:
            return 0.0
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]

    def ok(self) -> bool:
        return not (self.errors or self.crossed or self.lost)

    def summary(self) -> str:
        return (
            f"requests {self.requests} ({self.tasks} tasks: "
            + ", ".join(f"{k} {v}" for k, v in sorted(self.by_kind.items()))
            + f") in {self.seconds:.2f}s: {self.rps:.0f} req/s, "
            f"p50 {self.percentile(50) * 1000:.1f} ms, p99 {self.percentile(99) * 1000:.1f} ms, "
            f"mean {statistics.fmean(self.latencies) * 1000 if self.latencies else 0:.1f} ms; "
            f"errors {len(self.errors)}, crossed {len(self.crossed)}, lost {len(self.lost)}"
        )


def plan(total: int, users: list[str], rng: random.Random) -> list[Job]:
    """Jobs adding up to ``total`` requests, kinds drawn by WEIGHTS, users round-robin."""
    jobs: list[Job] = []
    count = 0
    while count < total:
        kind = rng.choices(KINDS, WEIGHTS)[0]
        if count + REQUESTS_PER_KIND[kind] > total:
            kind = "plain"
        user = users[len(jobs) % len(users)]
        jobs.append(Job(kind, user, f"{kind}-{len(jobs)}-{uuid.uuid4().hex[:8]}"))
        count += REQUESTS_PER_KIND[kind]
    rng.shuffle(jobs)
    return jobs


class Worker:
    """One kept-alive connection; runs jobs and checks every answer."""

    def __init__(self, base_url: str, keys: dict[str, str], report: LoadReport) -> None:
        self.base_url = base_url
        self.keys = keys
        self.report = report
        connector = aiohttp.TCPConnector(limit=1, force_close=False)
        self.session = aiohttp.ClientSession(
            connector=connector, timeout=aiohttp.ClientTimeout(total=120)
        )

    async def close(self) -> None:
        await self.session.close()

    async def _post(self, job: Job, payload: dict[str, Any]) -> dict[str, Any]:
        started = time.perf_counter()
        async with self.session.post(
            f"{self.base_url}/message",
            json={"task_id": job.task_id, **payload},
            headers={"Authorization": f"Bearer {self.keys[job.user]}"},
        ) as response:
            text = await response.text()
        self.report.latencies.append(time.perf_counter() - started)
        self.report.requests += 1
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {text[:200]}")
        data: dict[str, Any] = json.loads(text)
        return data

    async def _stream(self, job: Job, body: str, *, drop: bool = False) -> str | None:
        started = time.perf_counter()
        final: str | None = None
        async with self.session.post(
            f"{self.base_url}/message",
            json={"task_id": job.task_id, "body": body, "stream": True},
            headers={"Authorization": f"Bearer {self.keys[job.user]}"},
        ) as response:
            if response.status != 200:
                raise RuntimeError(f"HTTP {response.status}: {(await response.text())[:200]}")
            event = None
            async for raw in response.content:
                line = raw.decode().rstrip("\r\n")
                if line.startswith("event: "):
                    event = line[7:]
                    if drop:
                        response.close()  # walk away mid-stream; the task keeps running
                        break
                elif line.startswith("data: ") and event in ("task_complete", "task_error"):
                    data = json.loads(line[6:])
                    if data.get("task_id") != job.task_id:
                        self.report.crossed.append(f"{job.tag}: stream of another task {data}")
                    final = f"{event}:{data.get('response')}"
        self.report.latencies.append(time.perf_counter() - started)
        self.report.requests += 1
        return final

    def _expect(self, job: Job, what: str, got: Any, want: str) -> None:
        if got != want:
            self.report.crossed.append(f"{job.tag} ({job.user}) {what}: got {got!r}, want {want!r}")

    async def run(self, job: Job) -> None:
        try:
            await getattr(self, f"_run_{job.kind}")(job)
        except Exception as exc:  # noqa: BLE001 - every failure is counted, none stops the run
            self.report.errors.append(f"{job.tag} ({job.kind}, {job.user}): {exc!r}")

    async def _run_plain(self, job: Job) -> None:
        data = await self._post(job, {"body": f"TAG {job.tag}"})
        self._expect(job, "task_id", data.get("task_id"), job.task_id)
        self._expect(job, "answer", data.get("response"), f"echo[{job.user}]: TAG {job.tag}")

    async def _run_stream(self, job: Job) -> None:
        final = await self._stream(job, f"TAG {job.tag}")
        self._expect(job, "stream answer", final, f"task_complete:echo[{job.user}]: TAG {job.tag}")

    async def _run_drop(self, job: Job) -> None:
        await self._stream(job, f"SLEEP 0.05 TAG {job.tag}", drop=True)

    async def _run_multi(self, job: Job) -> None:
        for turn in (1, 2, 3):
            data = await self._post(job, {"body": f"COUNT {job.tag}"})
            self._expect(job, f"turn {turn}", data.get("response"), f"turn {turn}")

    async def _run_breakpoint(self, job: Job) -> None:
        paused = await self._post(job, {"body": f"BREAKPOINT {job.tag}"})
        if job.tag not in str(paused.get("response")):
            self.report.crossed.append(f"{job.tag}: paused answer {paused.get('response')!r}")
        data = await self._post(
            job,
            {
                "body": "",
                "resume_from": "breakpoint_tool_call",
                "kwargs": {"breakpoint_tool_call_result": {"content": job.tag}},
            },
        )
        self._expect(job, "resumed answer", data.get("response"), f"reviewed: {job.tag}")


async def _all_tasks(session: aiohttp.ClientSession, base_url: str, key: str) -> dict[str, Any]:
    """Every page of one user's GET /tasks (pages follow X-Next-Cursor)."""
    tasks: dict[str, Any] = {}
    params: dict[str, str] = {"limit": "1000"}
    while True:
        async with session.get(
            f"{base_url}/tasks", params=params, headers={"Authorization": f"Bearer {key}"}
        ) as response:
            tasks.update(await response.json())
            cursor = response.headers.get("X-Next-Cursor")
        if not cursor:
            return tasks
        params = {"limit": "1000", "cursor": cursor}


async def check_tasks(
    base_url: str, keys: dict[str, str], jobs: list[Job], report: LoadReport, deadline: float
) -> None:
    """Every task in its owner's /tasks, completed, and in no other user's."""
    owner = {job.task_id: job for job in jobs}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
        while True:
            listings: dict[str, dict[str, Any]] = {}
            for user, key in keys.items():
                listings[user] = await _all_tasks(session, base_url, key)
            pending = [
                job.tag
                for job in jobs
                if not (listings[job.user].get(job.task_id) or {}).get("completed")
            ]
            if not pending or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)  # dropped streams finish on their own; poll until then
    for user, tasks in listings.items():
        for task_id in tasks:
            job = owner.get(task_id)
            if job is not None and job.user != user:
                report.crossed.append(f"{job.tag} of {job.user} listed in {user}'s /tasks")
    for job in jobs:
        record = listings[job.user].get(job.task_id)
        if record is None:
            report.lost.append(f"{job.tag} ({job.kind}) missing from {job.user}'s /tasks")
        elif not record.get("completed"):
            report.lost.append(f"{job.tag} ({job.kind}) never completed")


async def run_load(
    base_url: str,
    keys: dict[str, str],
    total: int = 1000,
    connections: int = 16,
    seed: int = 1,
    settle_timeout: float = 60.0,
) -> LoadReport:
    """Send ``total`` requests over ``connections`` kept-alive connections and check them."""
    report = LoadReport()
    jobs = plan(total, sorted(keys), random.Random(seed))
    report.tasks = len(jobs)
    for job in jobs:
        report.by_kind[job.kind] = report.by_kind.get(job.kind, 0) + 1
    queue: asyncio.Queue[Job] = asyncio.Queue()
    for job in jobs:
        queue.put_nowait(job)
    workers = [Worker(base_url, keys, report) for _ in range(connections)]

    async def drain(worker: Worker) -> None:
        while not queue.empty():
            await worker.run(queue.get_nowait())

    started = time.perf_counter()
    try:
        async with asyncio.TaskGroup() as group:
            for worker in workers:
                group.create_task(drain(worker))
    finally:
        report.seconds = time.perf_counter() - started
        for worker in workers:
            await worker.close()
    await check_tasks(base_url, keys, jobs, report, time.monotonic() + settle_timeout)
    return report


def print_report(report: LoadReport) -> None:
    print(report.summary())
    for title, items in (
        ("errors", report.errors),
        ("crossed", report.crossed),
        ("lost", report.lost),
    ):
        for item in items[:10]:
            print(f"  {title}: {item}")
        if len(items) > 10:
            print(f"  ... {len(items) - 10} more {title}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--users", type=int, default=4)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO / "tests"))
    sys.path.insert(0, str(REPO))
    from server_fixtures import (  # the test suite's real-server helpers
        ServerProcess,
        create_key,
        free_port,
        write_config,
        write_stub_swarms,
    )

    with tempfile.TemporaryDirectory(prefix="mail-load-") as tmp:
        directory = Path(tmp)
        write_stub_swarms(directory)
        port = free_port()
        config = write_config(directory, port=port, extra="print_llm_streams = false\n")
        keys_file = directory / "registries" / "keys.json"
        keys = {f"user{i}": create_key(keys_file, "user", f"user{i}") for i in range(args.users)}
        server = ServerProcess(
            directory, port, args=["--config", str(config), "--log-level", "warning"]
        )
        server.start(wait=False)
        server.wait_healthy(timeout=120)
        try:
            report = asyncio.run(
                run_load(server.base_url, keys, args.requests, args.connections, args.seed)
            )
        finally:
            server.stop()
    print(
        f"mail server load: {args.requests} POST /message, {args.users} users, "
        f"{args.connections} kept-alive connections, seed {args.seed}"
    )
    print_report(report)
    return 0 if report.ok() else 1


if __name__ == "__main__":
    sys.exit(main())
