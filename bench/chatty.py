"""One chatty task (not a test): what N request/response rounds cost a server, per store.

    uv run python bench/chatty.py [--rounds 1000 | --quick] [--latency-ms 0,10]
                                  [--stores memory,sqlite,postgres] [--agents stub|model]
                                  [--database-url URL]

The target of issue 66 (persistence as a per-task log), measured the way users meet it: a real
`mail server` (the CLI, from a scratch folder with a swarms.json and a mail.toml, the store
chosen by `[server.store] kind`) and one `POST /message` that starts one task in which the
supervisor sends its one agent N requests of 2 KB, each answered with 2 KB, then completes.
The swarms.json does not opt out of stored agent histories. `--agents stub` (the default): the
tests' stub agents (`CHATTY N 2048`, no model; every turn waits `--latency-ms`, as
`MAIL_STUB_LATENCY_MS`). `--agents model`: LiteLLM agents whose model is the tests' scripted
OpenAI-compatible server (tests/support/scripted_llm.py), scripted to `send_request`,
`send_response` and `task_complete`, each call waiting `--latency-ms`; there the model calls
(the whole history sent each time) cost more than the store. `--agents action`: the same, the
agent calling an action (an echo) before each answer: the commit awaited before an action.

Per run: wall time of the POST, the server process's CPU (utime + stime, /proc/<pid>/stat)
from just before the POST until its writes stopped after it, its peak RSS (VmHWM, the whole
life of the process), its bytes written (/proc/<pid>/io write_bytes, same span) and the
task's final state: the store's growth (SQLite: data/ files after a clean stop, the WAL
checkpointed; PostgreSQL: pg_total_relation_size of the run's scratch schema) and the task as
`GET /task` reads it back (events). On PostgreSQL the writes happen in the database server:
the row shows the WAL it generated for the run (pg_current_wal_lsn, the whole cluster: other
work on it counts too), not the mail server's own bytes.

The targets the rewrite must meet are printed beside the numbers: server CPU on SQLite at most
1.3x the memory store's, peak RSS on SQLite at most the memory store's + 30 MB, bytes written
at most 2x the final state (the store's growth). Beside them, the floors of a store that commits
every step (two per round) or every shared 50 ms window, whichever is rarer, from bare SQLite in
the same run (`sqlite_floor`): the memory store's CPU plus that of the bare commits, and the
bytes bare SQLite writes per byte it keeps.
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
import asyncio  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import sqlite3  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import Any  # noqa: E402

import httpx  # noqa: E402

from server_fixtures import ServerProcess, auth, create_key, start_on_a_free_port, write_config  # noqa: E402
from support.pg_schema import fetch_rows, scratch_schema, with_search_path  # noqa: E402
from support.scripted_llm import ScriptedLLM, ScriptedRequest, hang, reply, tool_call  # noqa: E402
from support.stub_agents import stub_swarms_json  # noqa: E402

MB = 1_000_000
DATABASE_URL = os.environ.get("MAIL_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
ANSWER = ("The agent's answer, line by line. " * 62)[:2048]  # 2 KB


# ------------------------------------------------------------------------- the model


class ChattyModel:
    """The scripted model server on a thread of its own, answering every call of the task."""

    def __init__(self, rounds: int, latency: float, action: bool = False) -> None:
        self.rounds, self.latency, self.action = rounds, latency, action
        self.supervisor_calls = self.agent_calls = 0
        self.llm = ScriptedLLM()
        self.loop = asyncio.new_event_loop()
        started = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop.run_until_complete(self.llm.__aenter__())
            self.llm.queue(self.answer)
            started.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        started.wait(30)

    def answer(self, request: ScriptedRequest) -> Any:
        self.llm.queue(self.answer)  # the next call's
        self.llm.requests.clear()  # a late call sends the whole history: keep none
        if request.system_text.startswith("You are the supervisor."):
            self.supervisor_calls += 1
            if self.supervisor_calls > self.rounds:
                call = tool_call("task_complete", {"finish_message": f"{self.rounds} rounds"})
            else:
                args = {
                    "target": "agent",
                    "subject": "Round",
                    "body": f"round {self.supervisor_calls}",
                }
                call = tool_call("send_request", args)
        elif self.action and "::action_complete::" not in str(request.messages[-1]):
            call = tool_call("echo", {"round": self.agent_calls})
        else:
            self.agent_calls += 1
            args = {"target": "supervisor", "subject": "Re: Round", "body": ANSWER}
            call = tool_call("send_response", args)
        return hang(self.latency, reply(call)) if self.latency else reply(call)

    def swarms_json(self) -> list[dict[str, Any]]:
        common = {"llm": "openai/gpt-4o-mini", "use_proxy": False, "api_key": "bench"}
        common["api_base"] = self.llm.base_url

        def agent(name: str, target: str, system: str, **more: Any) -> dict[str, Any]:
            return {"name": name, "factory": "python::mail.factories.base:LiteLLMAgentFunction",
                    "comm_targets": [target], "tool_format": "completions",
                    "agent_params": {**common, "system": system}, **more}  # fmt: skip

        supervisor = agent("supervisor", "agent", "You are the supervisor.",
                           enable_entrypoint=True, can_complete_tasks=True)  # fmt: skip
        supervisor["factory"] = "python::mail.factories.supervisor:LiteLLMSupervisorFunction"
        echo = {"name": "echo", "description": "Echo.", "parameters": {"type": "object"},
                "function": "python::tests.support.scripted_agents:echo_action"}  # fmt: skip
        worker = agent("agent", "supervisor", "You are the agent.",
                       actions=["echo"] if self.action else [])  # fmt: skip
        return [{"name": "chatty", "version": "1.0.0", "entrypoint": "supervisor",
                 "agents": [supervisor, worker], "actions": [echo] if self.action else []}]  # fmt: skip

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.llm.__aexit__(None, None, None), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)


# ------------------------------------------------------------------------- the process


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def written(pid: int) -> int:
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("write_bytes:"):
            return int(line.split()[1])
    raise RuntimeError("no write_bytes")


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024 / MB
    raise RuntimeError("no VmHWM")


def settle(pid: int, quiet: float = 1.0, timeout: float = 60.0) -> None:
    """Until the server's CPU and writes stopped for ``quiet`` seconds (histories saved)."""
    deadline = time.monotonic() + timeout
    last = (cpu_seconds(pid), written(pid))
    while time.monotonic() < deadline:
        time.sleep(quiet)
        now = (cpu_seconds(pid), written(pid))
        if now[1] == last[1] and now[0] - last[0] < 0.05 * quiet:
            return
        last = now


def data_bytes(directory: Path) -> int:
    """The SQLite file (without its WAL: after a clean stop the WAL is in it)."""
    path = directory / "data" / "mail.db"
    return path.stat().st_size if path.exists() else 0


async def _pg_scalar(url: str, sql: str) -> int:
    rows = await fetch_rows(url, sql)
    return int(rows[0][0] or 0)


def pg_wal(url: str) -> int:
    return asyncio.run(_pg_scalar(url, "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn"))


def pg_schema_bytes(url: str, schema: str) -> int:
    sql = (
        "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace n"
        f" ON n.oid = c.relnamespace WHERE n.nspname = '{schema}' AND c.relkind = 'r'"
    )
    return asyncio.run(_pg_scalar(url, sql))


# ------------------------------------------------------------------------- one run


@dataclass
class Run:
    store: str
    latency_ms: float
    rounds: int
    seconds: float
    cpu: float
    peak_mb: float
    written: int
    stored: int  # the store's growth
    history: int  # the agents' histories as stored (the conversation)
    read_back: int  # GET /task's body

    def row(self) -> str:
        ratio = f"{self.written / self.stored:7.1f}" if self.stored else "      -"
        return (
            f"| {self.store:<8} | {self.latency_ms:>4.0f} | {self.rounds:>6} | {self.seconds:7.2f}"
            f" | {self.cpu:7.2f} | {self.peak_mb:6.0f} | {self.written / MB:8.1f}"
            f" | {self.stored / MB:8.1f} | {self.history / MB:10.1f} | {self.read_back / MB:7.1f}"
            f" | {ratio} |"
        )


HEADER = (
    "| store    | ms   | rounds |  wall s | CPU s   | RSS MB | write MB | store MB | history MB"
    " | read MB | w/store |\n|---|---|---|---|---|---|---|---|---|---|---|"
)


@contextlib.contextmanager
def postgres(database_url: str) -> Iterator[tuple[str, str]]:
    with scratch_schema("bench_chatty", database_url) as schema:
        yield with_search_path(database_url, schema), schema


def run_one(store: str, rounds: int, latency_ms: float, agents: str, database_url: str) -> Run:
    with contextlib.ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mail-chatty-")))
        key = create_key(folder / "registries" / "keys.json", "user", "chatty")
        env = {"MAIL_STUB_LATENCY_MS": str(latency_ms)}
        model = None
        if agents != "stub":
            model = ChattyModel(rounds, latency_ms / 1000, action=agents == "action")
            stack.callback(model.close)
            swarms, env = json.dumps(model.swarms_json()), {}
            body, swarm = "Chat with the agent.", "chatty"
        else:
            swarms, swarm = json.dumps(stub_swarms_json()), "stub"
            body = f"CHATTY {rounds} {len(ANSWER)}"
        (folder / "swarms.json").write_text(swarms, encoding="utf-8")
        schema = url = ""
        if store == "postgres":
            url, schema = stack.enter_context(postgres(database_url))
            env["DATABASE_URL"] = url
        extra = (
            "task_message_limit = 0\ntask_turn_limit = 0\nprint_llm_streams = false\n\n"
            f'[server.store]\nkind = "{store}"\n'
            "max_stored_bytes_per_caller = 0\nmax_stored_tasks_per_caller = 0\n"
        )

        def make(port: int) -> ServerProcess:
            config = write_config(folder, port=port, swarm=swarm, extra=extra)
            return ServerProcess(folder, port, args=["--config", str(config)], env=env)

        server = start_on_a_free_port(make)
        stack.callback(server.stop)
        assert server.proc is not None
        pid = server.proc.pid
        with httpx.Client(base_url=server.base_url, timeout=3600, headers=auth(key)) as client:
            settle(pid, quiet=0.5)
            before = (cpu_seconds(pid), written(pid), data_bytes(folder))
            wal = pg_wal(url) if url else 0
            size = pg_schema_bytes(url, schema) if url else 0
            started = time.monotonic()
            answer = client.post("/message", json={"body": body})
            seconds = time.monotonic() - started
            assert answer.status_code == 200, answer.text
            done = model.agent_calls if model else answer.text.count(f"chatted {rounds}") * rounds
            if done != rounds:
                raise SystemExit(f"{store}: the task did not chat {rounds} rounds: {answer.text}")
            settle(pid)
            cpu, wrote = cpu_seconds(pid) - before[0], written(pid) - before[1]
            stored = history = 0
            if url:
                wrote, stored = pg_wal(url) - wal, pg_schema_bytes(url, schema) - size
                sql = f"SELECT sum(octet_length(history::text)) FROM {schema}.agent_histories"
                history = asyncio.run(_pg_scalar(url, sql))
            task = client.get("/task", params={"task_id": answer.json()["task_id"]})
            assert task.status_code == 200, task.text
            peak = peak_rss_mb(pid)
        assert server.stop() == 0, server.logs()
        if store == "sqlite":
            stored = data_bytes(folder) - before[2]
            with contextlib.closing(sqlite3.connect(folder / "data" / "mail.db")) as db:
                sql = "SELECT sum(length(CAST(history AS BLOB))) FROM agent_histories"
                history = int(db.execute(sql).fetchone()[0] or 0)
        return Run(
            store, latency_ms, rounds, seconds, cpu, peak, wrote, stored, history, len(task.content)
        )


BATCH_DELAY = 0.05  # the SQLite store's shared commit window (store/sqlite.py batch_delay)


def sqlite_floor(stored: int, commits: int) -> tuple[float, float]:
    """The floor of a store that commits each step (what a task resumes from after a crash)
    or each shared window, whichever is rarer: bare SQLite with the server's pragmas (WAL, synchronous=NORMAL, incremental auto-vacuum)
    appending `stored` bytes as one row per commit, `commits` times, each commit also
    updating one task row, then closed (checkpointed). Returns (bytes written / the file's
    size, CPU seconds of the loop): what the per-task log of issue 66 could reach at best."""
    with tempfile.TemporaryDirectory(prefix="mail-chatty-floor-") as folder:
        path = Path(folder) / "floor.db"
        me = os.getpid()
        wrote, cpu = written(me), time.process_time()
        db = sqlite3.connect(path, isolation_level=None)
        for pragma in ("auto_vacuum = INCREMENTAL", "journal_mode = WAL", "synchronous = NORMAL"):
            db.execute(f"PRAGMA {pragma}")
        db.execute("CREATE TABLE log (seq INTEGER PRIMARY KEY, task TEXT, row BLOB NOT NULL)")
        db.execute("CREATE TABLE tasks (task TEXT PRIMARY KEY, summary TEXT, size INTEGER)")
        db.execute("INSERT INTO tasks VALUES ('t', '', 0)")
        row = os.urandom(max(1, stored // commits))
        for step in range(commits):
            db.execute("BEGIN IMMEDIATE")
            db.execute("INSERT INTO log (task, row) VALUES ('t', ?)", (row,))
            db.execute("UPDATE tasks SET summary = ?, size = size + ? WHERE task = 't'",
                       (f"step {step}", len(row)))  # fmt: skip
            db.execute("COMMIT")
        db.close()
        cpu = time.process_time() - cpu
        return (written(me) - wrote) / path.stat().st_size, cpu


def _target(value: float, bound: float) -> str:
    return "met" if value <= bound else "NOT met"


def verdicts(runs: list[Run]) -> list[str]:
    lines = []
    for latency in sorted({r.latency_ms for r in runs}):
        by = {r.store: r for r in runs if r.latency_ms == latency}
        memory = by.get("memory")
        for store, run in by.items():
            if store == "memory":
                continue
            parts = [f"{store}, {latency:.0f} ms:"]
            floor = (0.0, 0.0)
            if store == "sqlite" and run.stored:
                # a commit per step (two a round), or per shared window if that is longer
                commits = min(2 * run.rounds, max(1, math.ceil(run.seconds / BATCH_DELAY)))
                floor = sqlite_floor(run.stored, commits)
            if memory is not None:
                cpu, rss = run.cpu / max(memory.cpu, 0.01), run.peak_mb - memory.peak_mb
                least = f"; floor {1 + floor[1] / max(memory.cpu, 0.01):.2f}" if floor[1] else ""
                parts.append(
                    f"CPU {cpu:.2f}x memory's (target <= 1.3{least}: {_target(cpu, 1.3)});"
                )
                parts.append(f"peak RSS {rss:+.0f} MB (target <= +30: {_target(rss, 30)});")
            if run.stored:
                ratio = run.written / run.stored
                least = f"; floor {floor[0]:.1f}" if floor[0] else ""
                parts.append(f"written {ratio:.1f}x the final state, the store's growth")
                parts.append(f"(target <= 2{least}: {_target(ratio, 2)})")
            if run.history:
                parts.append(f"and {run.written / run.history:.1f}x the stored histories")
            lines.append(" ".join(parts))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=None, help="request/response rounds (1000)")
    parser.add_argument("--quick", action="store_true", help="100 rounds (unless --rounds)")
    parser.add_argument("--latency-ms", default="0,10", help="model latency per call, a list")
    parser.add_argument("--stores", default="memory,sqlite", help="memory,sqlite,postgres")
    parser.add_argument(
        "--agents", choices=("stub", "model", "action"), default="stub",
        help="stub: the tests' agent functions (no model); model: LiteLLM agents on the scripted "
        "model; action: the same, the agent calling an action before each answer",
    )  # fmt: skip
    parser.add_argument(
        "--database-url", default=DATABASE_URL, help="PostgreSQL (a scratch schema)"
    )
    args = parser.parse_args()
    rounds = args.rounds or (100 if args.quick else 1000)
    stores = [s.strip() for s in args.stores.split(",") if s.strip()]
    load = os.getloadavg()[0]
    print(f"{rounds} rounds of 2 KB in one task ({args.agents} agents); load average {load:.1f}")
    print(HEADER, flush=True)
    runs = []
    for latency in [float(v) for v in args.latency_ms.split(",")]:
        for store in stores:
            runs.append(run_one(store, rounds, latency, args.agents, args.database_url))
            print(runs[-1].row(), flush=True)
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    print("store MB: the store's growth (SQLite: the file after a clean stop; PostgreSQL: the")
    print("schema's tables); history MB: the agents' stored histories; read MB: GET /task's body;")
    print("w/store: write MB / store MB. PostgreSQL's write MB: the WAL the whole cluster made.")
    for line in verdicts(runs):
        print(line)


if __name__ == "__main__":
    main()
