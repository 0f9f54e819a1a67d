"""`[stdlib]` settings are re-read when mail.toml changes, on a real `mail server` process:
a raised `max_read_bytes` takes effect without a restart, and an edit that does not validate
keeps the last good settings (the server keeps serving)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from server_fixtures import ServerProcess, auth, create_key, free_port, healthy, write_config
from support.fs_swarm import finish_with_results, swarm
from support.scripted_llm import ScriptedLLM, tool_call

pytestmark = pytest.mark.timeout(600)


async def test_stdlib_settings_follow_mail_toml(tmp_path: Path) -> None:
    name = f"reload-{uuid.uuid4().hex[:8]}"
    port = free_port()
    key = create_key(tmp_path / "registries" / "keys.json", "user", "alice")
    root = tmp_path / "files"

    def configure(max_read: str) -> Path:
        extra = f'[stdlib.fs]\nroot = "{root}"\nmax_read_bytes = {max_read}\n'
        return write_config(tmp_path, port=port, swarm=name, extra=extra)

    async with ScriptedLLM() as llm:
        (tmp_path / "swarms.json").write_text(json.dumps([swarm(name, llm.base_url)]))
        config = configure("5")
        server = ServerProcess(tmp_path, port, args=["--config", str(config)]).start(wait=False)
        try:
            await healthy(server)
            async with httpx.AsyncClient(base_url=server.base_url, timeout=240) as client:

                async def run(*calls: Any) -> list[str]:
                    llm.queue(*calls)
                    llm.queue(finish_with_results)
                    r = await client.post(
                        "/message",
                        json={"body": "go", "task_id": str(uuid.uuid4())},
                        headers=auth(key),
                    )
                    assert r.status_code == 200, r.text
                    return list(json.loads(r.json()["response"]))

                first = await run(
                    tool_call("write_file", {"path": "n.txt", "content": "0123456789"}),
                    tool_call("read_file", {"path": "n.txt"}),
                )
                assert "over the read limit of 5 bytes" in first[1], first

                configure("100")
                assert await run(tool_call("read_file", {"path": "n.txt"})) == [
                    "SUCCESS: 0123456789"
                ]

                configure("-1")  # invalid: the last good settings stay in force
                assert await run(tool_call("read_file", {"path": "n.txt"})) == [
                    "SUCCESS: 0123456789"
                ]
                configure("3")
                assert (
                    "over the read limit of 3 bytes"
                    in (await run(tool_call("read_file", {"path": "n.txt"})))[0]
                )
            server.stop()  # the log writer flushes at exit
            assert "keeping the previous [stdlib] settings" in server.logs()
        finally:
            server.stop()
