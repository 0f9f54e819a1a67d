"""Memory per user instance (not a test): what each caller's instance costs a server.

    uv run python bench/memory.py [--users 1,50,200] [--rounds 1] [--database-url URL]

A real `mail server` (the CLI, from a scratch folder) on the stub swarm of the tests
(supervisor + worker, no model), one local key per user made with the CLI (`mail keys
create`, as the tests make them). Users are added in steps (1, then up to 50, then up to 200):
each new user sends one `POST /message` (``DELEGATE``: the supervisor asks the worker and
completes with its answer, three agent calls), so each has an instance that ran one task.
After each step, once the server is idle, its resident memory (VmRSS of /proc) is read.

MB per instance is the slope between steps: (RSS at 200 - RSS at 1) / 199, and the same
from 1 to 50. The first instance is not counted: it loads the modules and caches every
instance shares. The default store is the server's own (SQLite in the scratch folder);
``--database-url`` runs it on PostgreSQL instead (``DATABASE_URL``).
"""

from __future__ import annotations

import sys
from pathlib import Path

if sys.path and Path(sys.path[0] or ".").resolve() == Path(__file__).resolve().parent:
    del sys.path[0]

import argparse
import statistics
import tempfile
import time

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def settle(pid: int, quiet: float = 0.5, timeout: float = 10.0) -> float:
    """RSS once it stopped changing for ``quiet`` seconds (background writes done)."""
    deadline = time.monotonic() + timeout
    last = rss_mb(pid)
    stable_since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = rss_mb(pid)
        if now != last:
            last, stable_since = now, time.monotonic()
        elif time.monotonic() - stable_since >= quiet:
            break
    return last


def measure(directory: Path, steps: list[int], database_url: str | None) -> dict[int, float]:
    import httpx

    from server_fixtures import (
        ServerProcess,
        create_key,
        free_port,
        write_config,
        write_stub_swarms,
    )

    write_stub_swarms(directory)
    keys_file = directory / "registries" / "keys.json"
    keys = [create_key(keys_file, "user", f"mem-user-{i}") for i in range(max(steps))]
    port = free_port()
    config = write_config(directory, port=port)
    env = {"DATABASE_URL": database_url} if database_url else {}
    server = ServerProcess(directory, port, args=["--config", str(config)], env=env)
    server.start()
    assert server.proc is not None
    rss: dict[int, float] = {}
    try:
        with httpx.Client(base_url=server.base_url, timeout=60) as client:
            done = 0
            for step in steps:
                for key in keys[done:step]:
                    reply = client.post(
                        "/message",
                        json={"body": "DELEGATE hello"},
                        headers={"Authorization": f"Bearer {key}"},
                    )
                    assert reply.status_code == 200, reply.text
                    assert "worked: hello" in reply.text, reply.text
                done = step
                rss[step] = settle(server.proc.pid)
    finally:
        server.stop()
    return rss


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--users", default="1,50,200", help="the steps (users with a task)")
    parser.add_argument("--rounds", type=int, default=1, help="servers measured (median)")
    parser.add_argument("--database-url", default=None, help="run on PostgreSQL")
    args = parser.parse_args()
    steps = sorted({int(n) for n in args.users.split(",")})
    runs: list[dict[int, float]] = []
    with tempfile.TemporaryDirectory(prefix="mail-memory-") as tmp:
        for i in range(args.rounds):
            folder = Path(tmp) / f"server{i}"
            folder.mkdir()
            runs.append(measure(folder, steps, args.database_url))
    first = steps[0]
    for step in steps:
        values = [r[step] for r in runs]
        print(f"server RSS with {step} user instance(s): {statistics.median(values):.1f} MB")
    for step in steps[1:]:
        slopes = [(r[step] - r[first]) / (step - first) for r in runs]
        print(
            f"MB per user instance ({first} -> {step} users):"
            f" {statistics.median(slopes):.4f} (target 0.046)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
