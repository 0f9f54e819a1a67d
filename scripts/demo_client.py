"""Walk through MAILClient against a MAIL server, printing what each call returns.

    uv run scripts/demo_client.py                      # starts a throwaway local server
    uv run scripts/demo_client.py --url URL --api-key KEY   # uses a server you already run

Without --url the script writes a mail.toml into a temporary directory (the offline `demo`
swarm from this repository's swarms.json, a free port on 127.0.0.1), creates a user key with
`mail keys create`, starts `mail server`, waits for /health, runs the client, and stops the
server again.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mail.client import ClientConfig, MAILClient

REPO_ROOT = Path(__file__).resolve().parents[1]
STARTUP_TIMEOUT = 60.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _show(title: str, value: Any) -> None:
    print(f"\n== {title}")
    print(value if isinstance(value, str) else json.dumps(value, indent=2, default=str))


def _mail(*args: str) -> list[str]:
    return [sys.executable, "-m", "mail.cli", *args]


class LocalServer:
    """A `mail server` subprocess living in a temporary directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = _free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.config = directory / "mail.toml"
        self.log = directory / "server.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def prepare(self) -> str:
        registry = self.directory / "registries" / "demo.json"
        self.config.write_text(
            "\n".join(
                [
                    "[server]",
                    f"port = {self.port}",
                    'host = "127.0.0.1"',
                    "[server.swarm]",
                    'name = "demo"',
                    f'source = "{REPO_ROOT / "swarms.json"}"',
                    f'registry = "{registry}"',
                    "[server.settings]",
                    "print_llm_streams = false",
                    "",
                ]
            ),
            encoding="utf-8",
        )
        done = subprocess.run(
            _mail(
                "keys",
                "--keys-file",
                str(registry.parent / "keys.json"),
                "create",
                "--role",
                "user",
                "--id",
                "demo-user",
                "--json",
            ),
            capture_output=True,
            text=True,
            check=True,
        )
        return str(json.loads(done.stdout)["key"])

    def start(self) -> None:
        env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True")
        for var in ("AUTH_ENDPOINT", "TOKEN_INFO_ENDPOINT", "MAIL_CONFIG_PATH"):
            env.pop(var, None)
        self.proc = subprocess.Popen(
            _mail("server", "--config", str(self.config)),
            cwd=self.directory,
            env=env,
            stdout=self.log.open("wb"),
            stderr=subprocess.STDOUT,
        )

    async def wait_healthy(self) -> float:
        started = time.monotonic()
        async with MAILClient(self.base_url, config=ClientConfig(timeout=2)) as client:
            while time.monotonic() - started < STARTUP_TIMEOUT:
                assert self.proc is not None
                if self.proc.poll() is not None:
                    raise RuntimeError(
                        f"the server exited; see {self.log}:\n{self.log.read_text()}"
                    )
                try:
                    await client.get_health()
                    return time.monotonic() - started
                except RuntimeError:
                    await asyncio.sleep(0.1)
        raise RuntimeError(
            f"the server did not answer /health in {STARTUP_TIMEOUT:g} s; see {self.log}"
        )

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


async def exercise(base_url: str, api_key: str) -> None:
    async with MAILClient(base_url, api_key=api_key, config=ClientConfig(timeout=300)) as client:
        _show("ping()  GET /", await client.ping())
        _show("get_health()  GET /health", await client.get_health())
        _show("login(key)  GET /whoami", await client.login(api_key))
        _show("get_status()  GET /status", await client.get_status())

        reply = await client.post_message("Hello from demo_client.py", show_events=True)
        events = reply.get("events") or []
        _show(
            "post_message(..., show_events=True)  POST /message",
            {
                "response": reply.get("response"),
                "task_id": reply.get("task_id"),
                "events": len(events),
            },
        )

        print("\n== post_message_stream(...)  POST /message with stream=true")
        started = time.monotonic()
        async for event in client.post_message_stream("Stream a short answer, please"):
            data = json.loads(event.data) if event.data else {}
            detail = data.get("response") or data.get("description") or ""
            first_line = str(detail).splitlines()[0] if detail else ""
            print(f"  +{time.monotonic() - started:5.2f}s  {event.event:<20} {first_line[:90]}")

        tasks = await client.get_tasks()
        _show("get_tasks()  GET /tasks", sorted(tasks))
        if reply.get("task_id"):
            task = await client.get_task(reply["task_id"])
            _show(
                "get_task(task_id)  GET /task",
                {
                    key: task.get(key)
                    for key in ("task_id", "task_owner", "completed", "is_running")
                },
            )


async def main_async(args: argparse.Namespace) -> int:
    if args.url:
        if not args.api_key:
            print("--api-key is required with --url", file=sys.stderr)
            return 2
        await exercise(args.url, args.api_key)
        return 0
    with tempfile.TemporaryDirectory(prefix="mail-demo-") as tmp:
        server = LocalServer(Path(tmp))
        key = server.prepare()
        print(f"starting mail server on {server.base_url} (log: {server.log})")
        server.start()
        try:
            print(f"healthy after {await server.wait_healthy():.2f} s")
            await exercise(server.base_url, key)
        finally:
            server.stop()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", help="use this running server instead of starting one")
    parser.add_argument("--api-key", help="user or admin key for --url")
    try:
        return asyncio.run(main_async(parser.parse_args()))
    except (RuntimeError, ValueError) as exc:
        print(f"demo failed: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
