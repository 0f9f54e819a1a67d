"""Two federated MAIL servers on this machine, offline (demo model), one cross-swarm task.

    uv run python scripts/multi_swarm_demo.py

Starts `swarm-alpha` (a supervisor) and `swarm-beta` (a supervisor and a math agent) as two
`mail server` processes on free loopback ports, gives each an `agent` key for the other,
registers them with each other through POST /swarms, then asks alpha a question its
supervisor forwards to `math@swarm-beta`. Prints the answer and both sides' conversation.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

DEMO = {"llm": "mail/demo", "use_proxy": False}
SUPERVISOR = "python::mail.factories.supervisor:LiteLLMSupervisorFunction"
MATH = "python::mail.examples.math_dummy.agent:LiteLLMMathFunction"
CALCULATE = {
    "name": "calculate_expression",
    "description": "Evaluate a basic arithmetic expression",
    "parameters": {
        "type": "object",
        "properties": {"expression": {"type": "string", "description": "Expression to evaluate"}},
        "required": ["expression"],
    },
    "function": "python::mail.examples.math_dummy.actions:calculate_expression",
}


def swarms(name: str) -> list[dict[str, Any]]:
    supervisor_targets = ["math@swarm-beta"] if name == "swarm-alpha" else ["math"]
    agents: list[dict[str, Any]] = [
        {
            "name": "supervisor",
            "factory": SUPERVISOR,
            "comm_targets": supervisor_targets,
            "enable_entrypoint": True,
            "can_complete_tasks": True,
            "enable_interswarm": True,
            "agent_params": {
                **DEMO,
                "system": "You coordinate. The math agent of swarm-beta calculates expressions.",
            },
        }
    ]
    actions: list[dict[str, Any]] = []
    if name == "swarm-beta":
        agents.append(
            {
                "name": "math",
                "factory": MATH,
                "comm_targets": ["supervisor", "supervisor@swarm-alpha"],
                "enable_interswarm": True,
                "actions": ["calculate_expression"],
                "agent_params": {**DEMO, "system": "You calculate arithmetic expressions."},
            }
        )
        actions.append(CALCULATE)
    return [
        {
            "name": name,
            "version": "1.0.0",
            "entrypoint": "supervisor",
            "enable_interswarm": True,
            "public": True,
            "description": f"{name} of the multi-swarm demo",
            "agents": agents,
            "actions": actions,
        }
    ]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def mail_cli(*args: str, cwd: Path) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "mail.cli", *args], cwd=cwd, capture_output=True, text=True
    )
    if out.returncode != 0:
        raise SystemExit(f"mail {' '.join(args)} failed:\n{out.stderr}")
    return out.stdout


def create_key(directory: Path, role: str, ident: str) -> str:
    keys = directory / "registries" / "keys.json"
    raw = mail_cli(
        "keys",
        "--keys-file",
        str(keys),
        "create",
        "--role",
        role,
        "--id",
        ident,
        "--json",
        cwd=directory,
    )
    return str(json.loads(raw)["key"])


class Side:
    def __init__(self, root: Path, name: str) -> None:
        self.name = name
        self.dir = root / name
        self.dir.mkdir(parents=True)
        self.port = free_port()
        (self.dir / "swarms.json").write_text(json.dumps(swarms(name), indent=2))
        (self.dir / "mail.toml").write_text(
            f'[server]\nport = {self.port}\nhost = "127.0.0.1"\nlog_level = "warning"\n\n'
            f'[server.swarm]\nname = "{name}"\nsource = "swarms.json"\n'
            f'registry = "registries/{name}.json"\n\n'
            "[server.settings]\nprint_llm_streams = false\ninterswarm_timeout = 10.0\n"
        )
        self.admin = create_key(self.dir, "admin", f"{name}-admin")
        self.user = create_key(self.dir, "user", "demo-user")
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mail.cli", "server", "--config", "mail.toml"],
            cwd=self.dir,
            env={**os.environ, **env},
            stdout=(self.dir / "server.log").open("wb"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/health", timeout=0.5).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise SystemExit(f"{self.name} did not start:\n{(self.dir / 'server.log').read_text()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(15)


def show(title: str, record: dict[str, Any]) -> None:
    print(f"\n--- {title}: task {record['task_id']} (owner {record['task_owner']})")
    for event in record.get("events", []):
        data = json.loads(event["data"]) if isinstance(event["data"], str) else event["data"]
        if event["event"] in (
            "new_message",
            "interswarm_message_sent",
            "interswarm_message_received",
            "action_complete",
        ):
            first = data["description"].split("\n")[0]
            body = data.get("extra_data", {}).get("full_message", {}).get("message", {}).get("body")
            print(f"  [{event['event']}] {first}" + (f" -> {body!r}" if body else ""))


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="mail-federation-") as tmp:
        root = Path(tmp)
        alpha, beta = Side(root, "swarm-alpha"), Side(root, "swarm-beta")
        alpha_on_beta = create_key(beta.dir, "agent", "swarm-alpha")
        beta_on_alpha = create_key(alpha.dir, "agent", "swarm-beta")
        try:
            alpha.start({"SWARM_AUTH_TOKEN_SWARM_BETA": alpha_on_beta})
            beta.start({"SWARM_AUTH_TOKEN_SWARM_ALPHA": beta_on_alpha})
            print(f"swarm-alpha on {alpha.url}, swarm-beta on {beta.url}")
            for side, other in ((alpha, beta), (beta, alpha)):
                r = httpx.post(
                    f"{side.url}/swarms",
                    json={"name": other.name, "base_url": other.url, "volatile": False},
                    headers={"Authorization": f"Bearer {side.admin}"},
                    timeout=20,
                )
                r.raise_for_status()
                print(f"{side.name} registered {other.name}: {r.json()}")
            task_id = str(uuid.uuid4())
            question = "What is 17 * 23?"
            print(f"\nuser -> swarm-alpha: {question}")
            r = httpx.post(
                f"{alpha.url}/message",
                json={"body": question, "task_id": task_id},
                headers={"Authorization": f"Bearer {alpha.user}"},
                timeout=60,
            )
            r.raise_for_status()
            print(f"swarm-alpha answered: {r.json()['response']}")
            # /tasks lists summaries; the event log of one task is on /task.
            mine = httpx.get(
                f"{alpha.url}/task",
                params={"task_id": task_id},
                headers={"Authorization": f"Bearer {alpha.user}"},
            ).json()
            show("swarm-alpha", mine)
            theirs = httpx.get(
                f"{beta.url}/task",
                params={"task_id": task_id},
                headers={"Authorization": f"Bearer {beta.admin}"},
            )
            if theirs.status_code == 200:
                show("swarm-beta", theirs.json())
            return 0 if "391" in r.json()["response"] else 1
        finally:
            alpha.stop()
            beta.stop()


if __name__ == "__main__":
    raise SystemExit(main())
