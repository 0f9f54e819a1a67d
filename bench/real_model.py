"""The documented model tasks against a real model (not a test; scripts/real-model-check.sh).

    uv run python bench/real_model.py --url http://127.0.0.1:8080/v1 [--model local-model]
        [--modes api,api-stream,server,server-stream] [--max-steps 6] [--timeout 300]
        [--tasks 1,3] [--max-tokens 256] [--request-timeout 600] [--text-only]

Runs the questions of the README, docs/examples.md, docs/quickstart.md and
scripts/run_demo.py on the root swarms.json's ``local`` swarm (supervisor, weather, math),
pointed at ``--url``, four ways:

- ``api``: the Python API as the README shows (``MAILSwarmTemplate.from_swarm_json_file``,
  ``post_message``); ``api-stream``: the same with ``stream_tokens: true``;
- ``server``: ``mail server --swarm-name local`` started from a scratch folder with a copy of
  swarms.json and a key made by ``mail keys create``, asked with ``POST /message``;
  ``server-stream``: the same with ``stream_tokens: true`` and ``"stream": true``.

One line per task: the outcome (the answer's subject and the task's state), the model calls
and tokens the task recorded (``~`` marks estimated counts), seconds, the end of the answer
(an error's own words come last), and what the model did on each call, in order (the tool
an agent called, or ``nothing`` / ``text`` for an answer without a valid tool call). Each task
gets ``max_steps`` and a timeout; ``--tasks`` picks some of them (1-based), ``--max-tokens``
sets every agent's ``max_tokens``, ``--request-timeout`` its ``request_timeout`` (a slow CPU
needs more than the default 180 s for a 2,000-token prompt); ``--text-only`` makes every agent a model that only ever
answers in text (``default_tool_choice: "none"``: the server is asked for no tool call, while
the runtime still needs one). The run ends with a summary line.
"""

from __future__ import annotations

import sys
from pathlib import Path

if sys.path and Path(sys.path[0] or ".").resolve() == Path(__file__).resolve().parent:
    del sys.path[0]

import argparse
import asyncio
import json
import os
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
SWARM = "local"

# (where the question is written, the question)
TASKS: list[tuple[str, str]] = [
    ("README", "What is 12 * 7?"),
    ("examples.md", "What's the weather in Oslo?"),
    ("run_demo.py", "What's the weather in Paris tomorrow?"),
    ("run_demo.py", "What is 12 * (3 + 4)?"),
    ("run_demo.py", "What is the weather in Oslo, and what is 2 + 2?"),
    ("quickstart.md", "Hello"),
    ("quickstart.md", "Stream please"),
]


@dataclass
class Outcome:
    mode: str
    source: str
    question: str
    subject: str
    state: str
    calls: int
    tokens: int
    estimated: bool
    seconds: float
    answer: str
    did: str

    def row(self) -> str:
        tokens = f"{'~' if self.estimated else ''}{self.tokens}"
        answer = " ".join(self.answer.split())
        if len(answer) > 70:  # the end says why (an error's own words come last)
            answer = "…" + answer[-69:]
        return (
            f"{self.mode:<13} {self.question[:38]:<38} {self.subject:<22} {self.state:<10} "
            f"{self.calls:>5} {tokens:>8} {self.seconds:>7.1f}  {answer}\n{'':>13} did: {self.did}"
        )


HEADER = (
    f"{'mode':<13} {'task':<38} {'answer subject':<22} {'state':<10} "
    f"{'calls':>5} {'tokens':>8} {'seconds':>7}  answer"
)


def swarms_document(url: str, model: str, stream: bool, args: argparse.Namespace) -> list[Any]:
    """The root swarms.json with the local swarm pointed at `url` and `model`."""
    document = json.loads((REPO / "swarms.json").read_text(encoding="utf-8"))
    for swarm in document:
        if swarm["name"] != SWARM:
            continue
        for agent in swarm["agents"]:
            agent["agent_params"].update(api_base=url, llm=f"openai/{model}", stream_tokens=stream)
            if args.max_tokens:
                agent["agent_params"]["max_tokens"] = args.max_tokens
            if args.request_timeout:
                agent["agent_params"]["request_timeout"] = args.request_timeout
            if args.text_only:
                agent["agent_params"]["default_tool_choice"] = "none"
    return document


def _usage(events: list[dict[str, Any]]) -> tuple[int, int, bool]:
    calls = [e for e in events if e.get("event") == "model_call"]
    tokens = sum(
        int(c["extra_data"].get("input_tokens", 0)) + int(c["extra_data"].get("output_tokens", 0))
        for c in calls
    )
    return len(calls), tokens, any(c["extra_data"].get("estimated") for c in calls)


def _did(events: list[dict[str, Any]]) -> str:
    """What the model did on each call, in order: `agent:tool`, or `agent:nothing` /
    `agent:text` for an answer without a valid tool call; repeats as `×n`."""
    steps: list[str] = []
    for event in events:
        words = str(event.get("description") or "").split()
        if event["event"] == "tool_call" and len(words) >= 4 and words[2] == "called":
            if words[3] == "text_output":  # the text of an answer (its agent_error says so)
                continue
            steps.append(f"{words[1]}:{words[3]}")
        elif event["event"] == "agent_error" and len(words) >= 3 and words[2] == "answered":
            what = " ".join(words[3:])
            kind = {"with": "nothing", "in": "text"}.get(words[3] if len(words) > 3 else "", what)
            if what.startswith("without calling"):
                kind = "not-" + words[5].rstrip(",")
            steps.append(f"{words[1]}:{kind}")
        elif event["event"] == "agent_error":
            steps.append(f"error({' '.join(words[:8])}…)")
    out: list[str] = []
    for step in steps:
        if out and out[-1].split("×")[0] == step:
            count = int(out[-1].split("×")[1]) if "×" in out[-1] else 1
            out[-1] = f"{step}×{count + 1}"
        else:
            out.append(step)
    return ", ".join(out) or "-"


# ------------------------------------------------------------------------- the Python API


async def run_api(args: argparse.Namespace, stream: bool) -> list[Outcome]:
    from mail import MAILSwarmTemplate

    mode = "api-stream" if stream else "api"
    document = swarms_document(args.url, args.model, stream, args)
    path = Path(tempfile.mkdtemp(prefix="mail-real-model-")) / "swarms.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    template = MAILSwarmTemplate.from_swarm_json_file(SWARM, str(path))
    outcomes = []
    for source, question in args.task_list:
        swarm = template.instantiate(
            {"user_token": "bench"}, user_id="bench", print_llm_streams=False
        )
        started = time.perf_counter()
        try:
            response, _ = await swarm.post_message(
                body=question, timeout=args.timeout, max_steps=args.max_steps
            )
            task = swarm.get_task_by_id(response["message"]["task_id"])
            events = [
                {"event": e.event, "extra_data": e.extra_data or {}, "description": e.description}
                for e in (task.events if task else [])
            ]
            state = task.state.value if task is not None else "?"
            subject = response["message"]["subject"]
            answer = response["message"]["body"]
        finally:
            await swarm.shutdown()
        calls, tokens, estimated = _usage(events)
        outcome = Outcome(
            mode,
            source,
            question,
            subject,
            state,
            calls,
            tokens,
            estimated,
            time.perf_counter() - started,
            answer,
            _did(events),
        )
        print(outcome.row(), flush=True)
        outcomes.append(outcome)
    return outcomes


# ------------------------------------------------------------------------- mail server


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _mail(folder: Path, *argv: str, **popen: Any) -> Any:
    command = ["uv", "run", "--project", str(REPO), "mail", *argv]
    if popen:
        return subprocess.Popen(command, cwd=folder, **popen)
    return subprocess.run(command, cwd=folder, check=True, capture_output=True, text=True)


def run_server(args: argparse.Namespace, stream: bool) -> list[Outcome]:
    mode = "server-stream" if stream else "server"
    folder = Path(tempfile.mkdtemp(prefix="mail-real-model-server-"))
    (folder / "swarms.json").write_text(
        json.dumps(swarms_document(args.url, args.model, stream, args), indent=2),
        encoding="utf-8",
    )
    key = _mail(folder, "keys", "create", "--role", "user", "--id", "bench").stdout.split()[-1]
    port = _free_port()
    log = (folder / "server.log").open("w")
    # The folder has no mail.toml, so the checkout's would name its swarms.json: name ours.
    server = _mail(
        folder,
        "server",
        "--swarm-name",
        SWARM,
        "--swarm-source",
        str(folder / "swarms.json"),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--print-llm-streams",
        "false",
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    headers = {"Authorization": f"Bearer {key}"}
    outcomes = []
    try:
        with httpx.Client(base_url=base, headers=headers, timeout=args.timeout + 60) as client:
            deadline = time.monotonic() + 120
            while True:
                try:
                    if client.get("/health").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline or server.poll() is not None:
                    raise SystemExit(f"mail server did not start: see {folder / 'server.log'}")
                time.sleep(0.5)
            for source, question in args.task_list:
                body = {
                    "body": question,
                    "stream": stream,
                    "kwargs": {"max_steps": args.max_steps, "timeout": args.timeout},
                }
                started = time.perf_counter()
                task_id, answer = _ask(client, body, stream)
                seconds = time.perf_counter() - started
                record = client.get("/task", params={"task_id": task_id}).json()
                events = [
                    {
                        "event": e.get("event"),
                        "extra_data": _data(e).get("extra_data") or {},
                        "description": str(_data(e).get("description") or ""),
                    }
                    for e in record.get("events") or []
                ]
                calls, tokens, estimated = _usage(events)
                subject = _subject(events)
                outcome = Outcome(
                    mode,
                    source,
                    question,
                    subject,
                    str(record.get("state")),
                    calls,
                    tokens,
                    estimated,
                    seconds,
                    answer,
                    _did(events),
                )
                print(outcome.row(), flush=True)
                outcomes.append(outcome)
    finally:
        server.terminate()
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()
    return outcomes


def _ask(client: httpx.Client, body: dict[str, Any], stream: bool) -> tuple[str, str]:
    if not stream:
        reply = client.post("/message", json=body)
        reply.raise_for_status()
        data = reply.json()
        return data["task_id"], data.get("response") or ""
    task_id, answer, event = "", "", ""
    with client.stream("POST", "/message", json=body) as reply:
        reply.raise_for_status()
        for line in reply.iter_lines():
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:") and event in ("task_complete", "task_error"):
                data = json.loads(line[5:])
                task_id = data.get("task_id") or task_id
                answer = str(data.get("response") or data.get("error") or data)
            elif line.startswith("data:") and not task_id:
                try:
                    task_id = json.loads(line[5:]).get("task_id") or ""
                except ValueError:
                    pass
    return task_id, answer


def _data(event: dict[str, Any]) -> dict[str, Any]:
    """An event of `GET /task`: its `data` is JSON text."""
    data = event.get("data")
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except ValueError:
            return {}
    return data if isinstance(data, dict) else {}


def _subject(events: list[dict[str, Any]]) -> str:
    """The subject of the runtime's message that ended the task (``::task_complete::`` ...)."""
    for event in reversed(events):
        if event["event"] == "task_error":  # the task's own end (no message event says so)
            timed_out = "timeout for task" in event.get("description", "")
            return "::task_timeout::" if timed_out else "::task_error::"
        if event["event"] == "new_message":
            message = (event["extra_data"].get("full_message") or {}).get("message") or {}
            subject = message.get("subject")
            if isinstance(subject, str) and subject.startswith("::"):
                return subject
    return "-"


# ------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("MAIL_REAL_MODEL_URL"), required=False)
    parser.add_argument("--model", default=os.environ.get("MAIL_REAL_MODEL_NAME", "local-model"))
    parser.add_argument("--modes", default="api,api-stream,server,server-stream")
    parser.add_argument("--max-steps", type=int, default=6)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--tasks", default="", help="which tasks, 1-based (default: all)")
    parser.add_argument("--max-tokens", type=int, default=None)
    parser.add_argument("--request-timeout", type=float, default=None)
    parser.add_argument("--text-only", action="store_true")
    args = parser.parse_args()
    args.task_list = (
        [TASKS[int(n) - 1] for n in args.tasks.split(",")] if args.tasks else list(TASKS)
    )
    if not args.url:
        parser.error("give --url (or MAIL_REAL_MODEL_URL): the server's OpenAI base URL")
    print(f"model {args.model} at {args.url}; max_steps {args.max_steps}, timeout {args.timeout}s")
    print(HEADER)
    outcomes: list[Outcome] = []
    for mode in args.modes.split(","):
        if mode in ("api", "api-stream"):
            outcomes += asyncio.run(run_api(args, stream=mode == "api-stream"))
        elif mode in ("server", "server-stream"):
            outcomes += run_server(args, stream=mode == "server-stream")
        else:
            parser.error(f"unknown mode {mode!r}")
    done = sum(o.subject == "::task_complete::" for o in outcomes)
    over = sum(o.calls > args.max_steps for o in outcomes)
    print(
        f"{len(outcomes)} tasks: {done} completed, {len(outcomes) - done} ended otherwise; "
        f"{over} made more model calls than max_steps ({args.max_steps}); "
        f"{sum(o.calls for o in outcomes)} model calls, {sum(o.tokens for o in outcomes)} "
        f"tokens, {sum(o.seconds for o in outcomes):.0f} s"
    )


if __name__ == "__main__":
    main()
