"""One caller sending 1 MiB messages in a loop: server RSS, stored bytes, another caller's latency.

    uv run python bench/lifecycle.py [--messages 1000] [--kind sqlite|postgres|memory]
                                     [--size 1048000] [--extra 'finished_task_ttl = 0']

Starts a real `mail server` (CLI subprocess) on the stub swarm (its supervisor answers
`echo[...]: <body>`, so each task stores the message about four times: the message event,
the supervisor's history, its answer's arguments and the response) from a scratch folder,
with a key for `alice` (the loop) and one for `bob` (the bystander). Alice sends `--messages`
messages of `--size` characters one after another (each `POST /message` waits for its
answer); every tenth of the way the row prints the server's RSS (`VmRSS`), its peak
(`VmHWM`), the SQLite file (with its WAL) and bob's `POST /message` latency (a small
message, median of 5). The last rows: RSS after the loop, after 3 s idle, and alice's
`GET /tasks` and `GET /task` of her first task (read back from the store once it left memory).

`--extra` adds lines to `[server.store]` of the server's mail.toml (quota, retention);
by default the per-caller quotas are off (`max_stored_bytes_per_caller = 0`) so the loop
runs to the end. `--prune` stops the server and runs `mail db-prune --older-than 0` on its
SQLite file (size before and after). `--src OTHER/src` runs the server from another
checkout (an A/B against main: its own code, this script). PostgreSQL is MAIL_BENCH_DATABASE_URL (default
postgresql://postgres@127.0.0.1:5432/test, a scratch schema).
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/http.py is named like the stdlib `http` package; drop this folder from sys.path.
if sys.path and Path(sys.path[0] or ".").resolve() == Path(__file__).resolve().parent:
    del sys.path[0]

REPO = Path(__file__).resolve().parents[1]
for extra in (str(REPO), str(REPO / "tests")):
    if extra not in sys.path:
        sys.path.insert(0, extra)

import argparse  # noqa: E402
import contextlib  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import httpx  # noqa: E402

from server_fixtures import ROOT_ALICE_BOB, ServerProcess, auth, keyed_stub_server, run_cli  # noqa: E402
from support.pg_schema import scratch_schema, with_search_path  # noqa: E402

MIB = 1024 * 1024
DATABASE_URL = os.environ.get(
    "MAIL_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test"
)


def proc_status(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM of a process, in MiB."""
    values: dict[str, float] = {}
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            name, _, rest = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                values[name] = int(rest.split()[0]) / 1024
    return values


def file_mib(directory: Path) -> float:
    total = 0
    for name in ("mail.db", "mail.db-wal"):
        path = directory / "data" / name
        if path.exists():
            total += path.stat().st_size
    return total / MIB


def bob_latency(client: httpx.Client, key: str) -> float:
    times = []
    for _ in range(5):
        started = time.perf_counter()
        reply = client.post("/message", json={"body": "hello"}, headers=auth(key))
        times.append(time.perf_counter() - started)
        assert reply.status_code == 200, reply.text
    return statistics.median(times) * 1000


def run(args: argparse.Namespace) -> None:
    quotas = (
        "" if args.src else "max_stored_bytes_per_caller = 0\nmax_stored_tasks_per_caller = 0\n"
    )
    extra = (
        f'task_message_limit = 0\n\n[server.store]\nkind = "{args.kind}"\n'
        + quotas
        + "\n".join(args.extra)
    )
    with contextlib.ExitStack() as stack:
        directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mail-life-")))
        if args.kind == "postgres":
            schema = stack.enter_context(scratch_schema("bench_life", DATABASE_URL))
            url = with_search_path(DATABASE_URL, schema)
            (directory / ".env").write_text(f"DATABASE_URL={url}\n", encoding="utf-8")
        with keyed_stub_server(directory, ROOT_ALICE_BOB, extra=extra) as server:
            loop(args, server, directory)
        if args.prune and args.kind == "sqlite":
            started = time.monotonic()
            code, out, err = run_cli(
                "db-prune", "--older-than", "0", "--sqlite", str(directory / "data" / "mail.db")
            )
            print(
                f"mail db-prune --older-than 0 (exit {code}, {time.monotonic() - started:.1f} s):"
            )
            print("    " + (out + err).strip().replace("\n", "\n    "))


def loop(args: argparse.Namespace, server: ServerProcess, directory: Path) -> None:
    assert server.proc is not None
    pid = server.proc.pid
    client = httpx.Client(base_url=server.base_url, timeout=300)
    alice, bob = server.keys["alice"], server.keys["bob"]
    bob_latency(client, bob)  # bob's instance exists before the loop
    client.post("/message", json={"body": "warm"}, headers=auth(alice))
    body = "x" * args.size
    start = proc_status(pid)
    print(
        f"start: RSS {start['VmRSS']:.0f} MiB, file {file_mib(directory):.1f} MiB, "
        f"bob p50 {bob_latency(client, bob):.1f} ms"
    )
    first_task = None
    refused = None
    step = max(1, args.messages // 10)
    started = time.monotonic()
    for n in range(1, args.messages + 1):
        reply = client.post("/message", json={"body": body}, headers=auth(alice))
        if reply.status_code != 200:
            refused = (n, reply.status_code, reply.json().get("detail", reply.text))
            break
        first_task = first_task or reply.json()["task_id"]
        if n % step == 0 or n == args.messages:
            now = proc_status(pid)
            print(
                f"{n:>5} messages: RSS {now['VmRSS']:.0f} MiB "
                f"(+{now['VmRSS'] - start['VmRSS']:.0f}), peak {now['VmHWM']:.0f} MiB, "
                f"file {file_mib(directory):.0f} MiB, "
                f"bob p50 {bob_latency(client, bob):.1f} ms"
            )
    elapsed = time.monotonic() - started
    if refused is not None:
        print(f"refused at message {refused[0]}: {refused[1]} {refused[2]}")
    done = proc_status(pid)
    print(f"loop: {elapsed:.1f} s; RSS after {done['VmRSS']:.0f} MiB")
    time.sleep(3)
    idle = proc_status(pid)
    print(
        f"after 3 s idle: RSS {idle['VmRSS']:.0f} MiB "
        f"(+{idle['VmRSS'] - start['VmRSS']:.0f}), file {file_mib(directory):.0f} MiB"
    )
    t0 = time.perf_counter()
    tasks = client.get("/tasks", params={"limit": 5}, headers=auth(alice))
    t1 = time.perf_counter()
    task = client.get("/task", params={"task_id": first_task}, headers=auth(alice))
    t2 = time.perf_counter()
    print(
        f"GET /tasks {tasks.status_code} in {(t1 - t0) * 1000:.0f} ms; "
        f"GET /task (first) {task.status_code}, {len(task.content) / MIB:.1f} MiB "
        f"in {(t2 - t1) * 1000:.0f} ms"
    )
    client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--size", type=int, default=MIB - 1000)
    parser.add_argument("--kind", choices=("sqlite", "postgres", "memory"), default="sqlite")
    parser.add_argument("--extra", action="append", default=[], help="a [server.store] line")
    parser.add_argument(
        "--src", help="run the server from this source folder (another checkout's src/: A/B)"
    )
    parser.add_argument(
        "--prune", action="store_true", help="then `mail db-prune --older-than 0` (SQLite)"
    )
    args = parser.parse_args()
    if args.src:
        os.environ["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(Path(args.src).resolve()), os.environ.get("PYTHONPATH")])
        )
    run(args)


if __name__ == "__main__":
    main()
