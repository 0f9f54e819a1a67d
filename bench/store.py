"""Store benchmark (not a test): memory vs SQLite vs PostgreSQL, measured interleaved.

    uv run python bench/store.py [--requests 1500] [--tasks 300] [--rounds 3]

1. HTTP: POST /message at 16 kept-alive clients over 4 users (raw asyncio client from
   bench/http.py) against three `mail server`-like processes on the bench/http.py stub swarm
   (supervisor + 3 workers, no latency), one per store ([server.store] kind = memory,
   sqlite; postgres with DATABASE_URL), and the floor: bench/http.py's bare FastAPI route.
   Rounds alternate between the servers, each row is the median of its rounds, with the
   server's CPU time per request. Then the same at 1 client (one request at a time: the
   latency a lone caller sees). Targets (issue 40): SQLite >= 0.8 of memory's req/s at 16
   clients, and SQLite's 1-client p50 <= 1.25 x memory's; the SQLite floor (4.) is printed
   beside them as what the memory server plus bare SQLite would cost.
2. Runtime: tasks/s of one swarm instance running N tasks at once (bench/runtime.py's swarm)
   with no store (memory, as a server on kind = "memory") and with `attach_store` on a SQLite
   file and on PostgreSQL, interleaved,
   timed until the store has flushed every write.
3. Start to first 200 on GET /health of a stub server on memory and on SQLite (the
   default), interleaved.
4. The SQLite floor: the batches the store wrote for the runtime row's tasks (captured,
   coalesced and encoded as the store does), written again into a fresh file with bare
   sqlite3 (same statements and indexes, one transaction per batch, executemany per kind),
   as CPU microseconds per task and per row; and the same rows with one transaction per
   task (what one lone request commits). No store can write those rows for less. Beside
   it, bare `orjson.dumps` of every JSON value those rows hold (the text a store must make
   and a memory store never does). The ceilings they leave: memory's CPU per request /
   (memory's + the floor's) at 16 clients, with and without the encoding, and (memory's
   p50 + one task's transaction) / memory's p50 at 1 client.

PostgreSQL is MAIL_BENCH_DATABASE_URL (default postgresql://postgres@127.0.0.1:5432/test, in a
scratch schema made for the run and dropped after it);
it is skipped when unreachable. `--serve PORT KEYS DIR KIND` is the server process, configured
as bench/http.py's (`BENCH_CONFIG`: no bound on what one caller keeps stored, every other
setting the default); any answer but a 200 stops the run with exit status 1.
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/http.py is named like the stdlib `http` package: when this file runs as a script its
# directory comes first on sys.path and would shadow it. Drop that entry first.
if sys.path and Path(sys.path[0] or ".").resolve() == Path(__file__).resolve().parent:
    del sys.path[0]

import argparse
import asyncio
import contextlib
import importlib.util
import os
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
DATABASE_URL = os.environ.get(
    "MAIL_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
KINDS = ("memory", "sqlite", "postgres")


def _load(name: str) -> ModuleType:
    # bench/http.py is named like the stdlib package: load it by path.
    spec = importlib.util.spec_from_file_location(f"mail_bench_{name}", HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def serve(port: int, keys_file: str, directory: str, kind: str) -> None:
    import uvicorn

    from mail.commands.server import _bind
    from mail.config import ServerConfig
    from mail.server.app_factory import create_app
    from mail.server.http_protocol import http_protocol

    bench_http = _load("http")
    from mail.server.logs import setup_server_logging

    setup_server_logging("warning")
    config = ServerConfig.model_validate(
        {
            "host": "127.0.0.1",
            "port": port,
            "access_log": False,
            "swarm": {"name": "bench", "registry": f"{directory}/registries/bench.json"},
            "settings": bench_http.BENCH_CONFIG["settings"],
            "auth": {"mode": "local", "keys_file": keys_file},
            "store": {**bench_http.BENCH_CONFIG["store"], "kind": kind},
        }
    )
    app = create_app(config, template=bench_http.stub_template(0.0), template_source="bench")
    server = uvicorn.Server(
        uvicorn.Config(
            app, log_config=None, log_level="warning", access_log=False, http=http_protocol()
        )
    )
    server.run(sockets=[_bind("127.0.0.1", port)])


def _pg_reachable() -> bool:
    import asyncpg

    async def probe() -> bool:
        try:
            conn = await asyncpg.connect(DATABASE_URL, timeout=3)
        except Exception:  # noqa: BLE001
            return False
        await conn.close()
        return True

    return asyncio.run(probe())


@contextlib.contextmanager
def _scratch_schema(url: str) -> Iterator[str]:
    """A fresh schema for this run (dropped after it): the URL that uses it."""
    import asyncpg

    schema = f"bench_store_{uuid.uuid4().hex[:12]}"

    async def execute(sql: str) -> None:
        conn = await asyncpg.connect(url, timeout=5)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(execute(f"CREATE SCHEMA {schema}"))
    try:
        yield f"{url}{'&' if '?' in url else '?'}search_path={schema}"
    finally:
        asyncio.run(execute(f"DROP SCHEMA {schema} CASCADE"))


def http_rows(
    workdir: Path, kinds: list[str], requests: int, rounds: int
) -> tuple[dict[str, float], dict[str, float]]:
    """Prints the HTTP rows; returns (CPU ms per request at 16 clients, p50 ms at 1 client)."""
    bench_http = _load("http")
    keys_file = workdir / "keys.json"
    keys = bench_http.make_keys(keys_file, 4)
    procs: dict[str, tuple[subprocess.Popen[bytes], str]] = {}
    try:
        for kind in kinds:
            port = bench_http.free_port()
            folder = workdir / kind
            folder.mkdir()
            env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
            if kind == "postgres":
                env["DATABASE_URL"] = DATABASE_URL
            cmd = [sys.executable, __file__, "--serve", str(port), str(keys_file), str(folder)]
            proc = subprocess.Popen(
                [*cmd, kind], env=env, stderr=(folder / "server.err").open("wb")
            )
            url = f"http://127.0.0.1:{port}"
            bench_http.wait_health(url, proc)
            procs[kind] = (proc, url)

        # The floor: a bare FastAPI route on the same uvicorn (bench/http.py), no swarm.
        bare = bench_http.StubServer(workdir, keys_file, 0.0, access_log=False, bare=True)
        procs["floor"] = (bare.proc, bare.url)
        cpu_ms: dict[str, list[float]] = {kind: [] for kind in procs}

        def measure(kind: str, pid: int, url: str) -> Any:
            def run() -> Any:
                before = bench_http.cpu_seconds(pid)
                result = asyncio.run(bench_http.load("raw", url, keys, 16, requests, False))
                cpu_ms[kind].append((bench_http.cpu_seconds(pid) - before) * 1000 / requests)
                return result

            return run

        rows = [(kind, measure(kind, proc.pid, url)) for kind, (proc, url) in procs.items()]
        results = bench_http.interleaved(rows, rounds)
        lone_requests = max(100, requests // 4)

        def measure_one(url: str) -> Any:
            return lambda: asyncio.run(bench_http.load("raw", url, keys, 1, lone_requests, False))

        lone = bench_http.interleaved(
            [(kind, measure_one(url)) for kind, (_, url) in procs.items()], rounds
        )
    finally:
        for proc, _ in procs.values():
            bench_http.stop(proc)
    print("HTTP POST /message, 16 clients (raw), median of rounds;")
    print("server CPU per request (all its threads) is steadier than req/s on a busy machine:")
    medians = {kind: statistics.median(rps) for kind, (rps, _) in results.items()}
    cpu = {kind: statistics.median(values) for kind, values in cpu_ms.items()}
    for kind, (rps, lat) in results.items():
        lat_ms = sorted(x * 1000 for x in lat)
        p50 = lat_ms[len(lat_ms) // 2]
        print(
            f"  {kind:<9} {medians[kind]:7.0f} req/s (rounds {min(rps):.0f}-{max(rps):.0f})"
            f"  p50 {p50:.1f} ms  CPU {cpu[kind]:.2f} ms/request"
        )
    if "sqlite" in medians:
        print(f"  CPU SQLite / memory = {cpu['sqlite'] / cpu['memory']:.2f}")
        ratio = medians["sqlite"] / medians["memory"]
        verdict = "target met" if ratio >= 0.8 else "TARGET MISSED"
        print(f"  SQLite / memory = {ratio:.2f} ({verdict}: >= 0.80)")
    print("HTTP POST /message, 1 client (raw), median of rounds:")
    p50s: dict[str, float] = {}
    for kind, (rps, lat) in lone.items():
        lat_ms = sorted(x * 1000 for x in lat)
        p50s[kind] = lat_ms[len(lat_ms) // 2]
        print(f"  {kind:<9} {statistics.median(rps):7.0f} req/s  p50 {p50s[kind]:.2f} ms")
    if "sqlite" in p50s:
        ratio = p50s["sqlite"] / p50s["memory"]
        verdict = "target met" if ratio <= 1.25 else "TARGET MISSED"
        print(f"  p50 SQLite / memory = {ratio:.2f} ({verdict}: <= 1.25)")
    return cpu, p50s


async def _runtime_once(kind: str, workdir: Path, tasks: int) -> float:
    from mail.store.base import InstanceKey

    bench_runtime = _load("runtime")
    store: Any
    if kind == "memory":  # no store: the runtime keeps its tasks (a server on kind = "memory")
        store = None
    elif kind == "sqlite":
        from mail.store.sqlite import SqliteTaskStore

        store = SqliteTaskStore(workdir / f"runtime-{time.monotonic_ns()}.db")
    else:
        from mail.store.postgres import PostgresTaskStore

        store = PostgresTaskStore(DATABASE_URL)
    swarm = bench_runtime.build_template(0.0).instantiate({}, user_id="bench")
    if store is not None:
        await store.start()
        await swarm.attach_store(store, InstanceKey("bench", "user", f"b-{time.monotonic_ns()}"))
    loop_task = asyncio.create_task(swarm.run_continuous())
    await asyncio.sleep(0)
    start = time.perf_counter()
    await asyncio.gather(*(swarm.post_message("go") for _ in range(tasks)))
    if store is not None:
        await store.flush(60)
    elapsed = time.perf_counter() - start
    await swarm.shutdown()
    await loop_task
    if store is not None:
        await store.close()
    return tasks / elapsed


def runtime_rows(workdir: Path, kinds: list[str], tasks: int, rounds: int) -> None:
    results: dict[str, list[float]] = {kind: [] for kind in kinds}
    for number in range(rounds):
        print(f"  ... runtime round {number + 1} of {rounds}", file=sys.stderr)
        for kind in kinds:
            results[kind].append(asyncio.run(_runtime_once(kind, workdir, tasks)))
    print(f"Runtime: {tasks} tasks at once on one instance, until stored, median of rounds:")
    for kind, values in results.items():
        print(
            f"  {kind:<9} {statistics.median(values):7.0f} tasks/s"
            f" (rounds {min(values):.0f}-{max(values):.0f})"
        )


def startup(workdir: Path, runs: int = 3) -> None:
    bench_http = _load("http")
    folder = workdir / "startup"
    folder.mkdir()
    keys_file = folder / "keys.json"
    bench_http.make_keys(keys_file, 1)
    times: dict[str, list[float]] = {"memory": [], "sqlite": []}
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    for _ in range(runs):  # interleaved: the machine's speed drifts
        for kind, values in times.items():
            port = bench_http.free_port()
            cmd = [sys.executable, __file__, "--serve", str(port), str(keys_file), str(folder)]
            proc = subprocess.Popen([*cmd, kind], env=env, stderr=subprocess.DEVNULL)
            try:
                values.append(bench_http.wait_health(f"http://127.0.0.1:{port}", proc))
            finally:
                bench_http.stop(proc)
    print("Start to /health (process start and imports included), median of runs:")
    for kind, values in times.items():
        runs_text = ", ".join(f"{t:.2f}" for t in values)
        print(f"  {kind:<9} {statistics.median(values):.2f} s (runs {runs_text})")


async def _capture_batches(path: Path, tasks: int) -> list[list[Any]]:
    """The batches a SQLite store applies for `tasks` runtime tasks (bench/runtime.py)."""
    from mail.store.base import InstanceKey
    from mail.store.sqlite import SqliteTaskStore

    bench_runtime = _load("runtime")
    store = SqliteTaskStore(path)
    batches: list[list[Any]] = []
    apply = store._buffer._apply

    async def spy(batch: Any) -> None:
        batches.append(list(batch))
        await apply(batch)

    store._buffer._apply = spy
    await store.start()
    swarm = bench_runtime.build_template(0.0).instantiate({}, user_id="bench")
    await swarm.attach_store(store, InstanceKey("bench", "user", "floor"))
    loop_task = asyncio.create_task(swarm.run_continuous())
    await asyncio.sleep(0)
    await asyncio.gather(*(swarm.post_message("go") for _ in range(tasks)))
    await store.flush(60)
    await swarm.shutdown()
    await loop_task
    await store.close()
    return batches


def _write_bare(path: Path, batches: list[list[tuple[str, list[Any]]]]) -> float:
    """CPU seconds bare sqlite3 takes to write `batches` (one transaction each)."""
    from mail.store.sqlite_schema import connect, migrate

    conn = connect(path)
    migrate(conn)
    start = time.thread_time()
    for batch in batches:
        conn.execute("BEGIN IMMEDIATE")
        for statement, args in batch:
            conn.executemany(statement, args)
        conn.execute("COMMIT")
    spent = time.thread_time() - start
    conn.close()
    return spent


def _json_values(batches: list[list[tuple[str, list[Any]]]]) -> list[Any]:
    """Every JSON text the rows of `batches` hold (event payloads, histories, records, queues),
    parsed back into the Python values a store starts from."""
    import orjson

    values: list[Any] = []
    for batch in batches:
        for _, rows in batch:
            for row in rows:
                for column in row:
                    if isinstance(column, str) and column[:1] in ("{", "["):
                        try:
                            values.append(orjson.loads(column))
                        except orjson.JSONDecodeError:
                            continue
    return values


def _encode_bare(values: list[Any]) -> float:
    """CPU seconds bare `orjson.dumps` takes to turn `values` into JSON text again."""
    import orjson

    dumps = orjson.dumps
    start = time.thread_time()
    for value in values:
        dumps(value)
    return time.thread_time() - start


def sqlite_floor(
    workdir: Path,
    tasks: int,
    rounds: int,
    cpu: dict[str, float] | None = None,
    p50s: dict[str, float] | None = None,
) -> None:
    import importlib

    from mail.store.base import to_json
    from mail.store.sqlite import _SQL

    try:  # where the batch helpers live (store/sql_base.py before the abstract stores folded)
        sql_base = importlib.import_module("mail.store.sql_batch")
    except ImportError:
        sql_base = importlib.import_module("mail.store.sql_base")
    coalesce_writes, runs_by_kind = sql_base.coalesce_writes, sql_base.runs_by_kind
    unpack_outbox = sql_base.unpack_outbox

    # (named encode_histories before issue 40: this script also runs against older code)
    encode = getattr(sql_base, "encode_deferred", None) or sql_base.encode_histories
    captured = asyncio.run(_capture_batches(workdir / "floor-capture.db", tasks))

    def statements(writes: Any) -> list[tuple[str, list[Any]]]:
        return [(_SQL[k], r) for k, r in runs_by_kind(encode(coalesce_writes(writes), to_json))]

    batches = [statements(b) for b in captured]
    per_task: dict[str, list[Any]] = {}  # the same writes, one transaction per task
    for write in unpack_outbox([w for b in captured for w in b]):
        per_task.setdefault(str(write.args[3]).split("::")[0], []).append(write)
    lone = [statements(w) for w in per_task.values()]
    rows = sum(len(r) for batch in batches for _, r in batch)
    micros = [_write_bare(workdir / f"floor-{n}.db", batches) * 1e6 for n in range(rounds)]
    lone_micros = [_write_bare(workdir / f"lone-{n}.db", lone) * 1e6 for n in range(rounds)]
    values = _json_values(batches)
    encode = statistics.median(_encode_bare(values) * 1e6 for _ in range(rounds)) / tasks
    total = statistics.median(micros)
    one = statistics.median(lone_micros) / max(1, len(lone))
    print(
        f"SQLite floor (bare sqlite3, the store's batches of {tasks} runtime tasks: "
        f"{rows / tasks:.1f} rows per task in {len(batches)} transactions), median of rounds:"
    )
    print(f"  {total / tasks:.0f} us CPU per task, {total / rows:.1f} us per row")
    print(f"  {one:.0f} us CPU per task in a transaction of its own (a lone request)")
    print(
        f"  {encode:.0f} us CPU per task to encode the JSON those rows hold with bare orjson "
        f"({len(values) / tasks:.1f} values per task; what a memory store never does)"
    )
    if cpu and "memory" in cpu:
        cap = cpu["memory"] / (cpu["memory"] + total / tasks / 1000)
        print(f"  ceiling at 16 clients: SQLite / memory <= {cap:.2f} (memory's CPU + floor)")
        cap = cpu["memory"] / (cpu["memory"] + (total / tasks + encode) / 1000)
        print(f"  ceiling at 16 clients: SQLite / memory <= {cap:.2f} (+ the bare encoding too)")
    if p50s and "memory" in p50s:
        ratio = (p50s["memory"] + one / 1000) / p50s["memory"]
        print(f"  floor at 1 client: p50 SQLite / memory >= {ratio:.2f} (+ one transaction)")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--requests", type=int, default=1500, help="HTTP requests per round")
    parser.add_argument("--tasks", type=int, default=300, help="runtime tasks per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--serve", nargs=4, metavar=("PORT", "KEYS", "DIR", "KIND"))
    args = parser.parse_args()
    if args.serve:
        port, keys, directory, kind = args.serve
        serve(int(port), keys, directory, kind)
        return
    kinds = list(KINDS) if _pg_reachable() else ["memory", "sqlite"]
    with contextlib.ExitStack() as stack:
        if "postgres" in kinds:
            # A scratch schema per run: the bench's fixed users would otherwise reach their
            # stored-task quota in a shared database after a few runs (a 429 mid-bench).
            global DATABASE_URL
            DATABASE_URL = stack.enter_context(_scratch_schema(DATABASE_URL))
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mail-bench-store-")))
        try:
            cpu, p50s = http_rows(workdir, kinds, args.requests, args.rounds)
        except RuntimeError as failure:  # bench/http.py's BenchFailure: a non-2xx answer
            if type(failure).__name__ != "BenchFailure":
                raise
            print(f"bench/store.py: FAILED, the numbers are void: {failure}", file=sys.stderr)
            sys.exit(1)
        runtime_rows(workdir, kinds, args.tasks, args.rounds)
        startup(workdir)
        sqlite_floor(workdir, args.tasks, args.rounds, cpu, p50s)


if __name__ == "__main__":
    main()
