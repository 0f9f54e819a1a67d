"""docs/quickstart.md, executed: the repo's mail.toml + swarms.json, `mail server`, then every
shell block of the "Try it" section, as written (only the port and `uv run` are substituted).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from server_fixtures import REPO_ROOT, ServerProcess, free_port, server_env

pytestmark = pytest.mark.timeout(180)

QUICKSTART = REPO_ROOT / "docs" / "quickstart.md"


def shell_blocks(section: str) -> list[str]:
    text = QUICKSTART.read_text()
    start = text.index(section)
    end = text.find("\n## ", start + len(section))
    body = text[start : end if end != -1 else None]
    return re.findall(r"```bash\n(.*?)```", body, re.S)


def test_quickstart_commands_work_as_written(tmp_path: Path) -> None:
    shutil.copy(REPO_ROOT / "mail.toml", tmp_path / "mail.toml")
    shutil.copy(REPO_ROOT / "swarms.json", tmp_path / "swarms.json")
    start_blocks = shell_blocks("## 2. Start the server")
    assert start_blocks[0].strip() == "uv run mail server"

    port = free_port()
    server = ServerProcess(tmp_path, port, args=["--port", str(port)]).start()
    try:
        printed = server.stdout_path.read_text()
        keys = dict(re.findall(r"(admin|user)\s+key \(id '\w+'\): (\S+)", printed))
        assert set(keys) == {"admin", "user"}, printed
        assert (tmp_path / "registries" / "keys.json").exists()
        assert keys["user"] not in (tmp_path / "registries" / "keys.json").read_text()

        env = server_env({"TOKEN": keys["user"]})
        python_cli = f"{sys.executable} -m mail.cli"

        def run(block: str) -> str:
            command = block.replace("http://localhost:8000", server.base_url).replace(
                "uv run mail", python_cli
            )
            done = subprocess.run(
                ["bash", "-e", "-c", command],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0, (command, done.stdout, done.stderr)
            return done.stdout

        # The "lost the keys?" block of step 2.
        created = run(start_blocks[-1])
        assert "Created user key for id 'alice'" in created

        blocks = shell_blocks("## 3. Try it")
        assert len(blocks) == 8
        outputs = {block: run(block) for block in blocks}
        by_marker = {
            marker: next(out for block, out in outputs.items() if marker in block)
            for marker in (
                "mail ping",
                "curl http://localhost:8000/\n",
                "/health",
                "/whoami",
                "/status",
                '"Hello"',
                "stream",
                "/tasks",
            )
        }
        assert by_marker["mail ping"].startswith("✓ demo is healthy")
        root = json.loads(by_marker["curl http://localhost:8000/\n"])
        assert (
            root["name"] == "mail"
            and root["protocol_version"] == "1.3"
            and root["swarm"]["name"] == "demo"
        )
        assert json.loads(by_marker["/health"])["status"] == "healthy"
        assert json.loads(by_marker["/whoami"]) == {
            "id": "user",
            "role": "user",
            "username": "user",
        }
        assert json.loads(by_marker["/status"])["swarm"]["name"] == "demo"
        reply = json.loads(by_marker['"Hello"'])
        assert reply["response"] and reply["events"] is None
        stream = by_marker["stream"].replace("\r\n", "\n")
        assert stream.startswith("id: 1\nevent: new_message\n")
        assert "\nevent: task_complete\n" in stream
        tasks = json.loads(by_marker["/tasks"])
        assert reply["task_id"] in tasks and len(tasks) == 2
    finally:
        assert server.stop() == 0, server.logs()
