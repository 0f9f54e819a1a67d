"""Private files per caller on a real `mail server` process: user B's agent can neither list,
read nor transfer a file user A's agent wrote (stdlib fs actions and team file tools share one
folder per caller instance), and `save_attachment` into a folder refuses a symbolic link named
like the file instead of writing through it."""

from __future__ import annotations

import asyncio
import json
import os
import re
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from server_fixtures import ServerProcess, auth, create_key, free_port, write_config
from support.scripted_llm import Reply, ScriptedLLM, ScriptedRequest, reply, tool_call

pytestmark = pytest.mark.timeout(600)

FS = ["read_file", "write_file", "read_directory"]


def swarm(name: str, llm_url: str) -> dict[str, Any]:
    return {
        "name": name,
        "version": "1.0.0",
        "entrypoint": "supervisor",
        "action_imports": [f"python::mail.stdlib.fs.actions:{a}" for a in FS],
        "agents": [
            {
                "name": "supervisor",
                "factory": "python::mail.factories.supervisor:LiteLLMSupervisorFunction",
                "comm_targets": [],
                "enable_entrypoint": True,
                "can_complete_tasks": True,
                "tool_format": "completions",
                "actions": FS,
                "team_tools": ["files"],
                "agent_params": {
                    "llm": "openai/gpt-4o-mini",
                    "use_proxy": False,
                    "api_base": llm_url,
                    "api_key": "test-key",
                    "system": "You are supervisor.",
                },
            }
        ],
        "actions": [],
    }


async def healthy(server: ServerProcess, timeout: float = 240.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    async with httpx.AsyncClient(timeout=1) as client:
        while loop.time() < deadline:
            assert server.proc is not None
            if server.proc.poll() is not None:
                raise AssertionError(f"server exited:\n{server.logs()}")
            try:
                if (await client.get(f"{server.base_url}/health")).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError(f"server not healthy in {timeout}s:\n{server.logs()}")


def tool_results(request: ScriptedRequest) -> list[str]:
    return [str(m["content"]) for m in request.messages if m.get("role") == "tool"]


def finish_with_results(request: ScriptedRequest) -> Reply:
    return reply(tool_call("task_complete", {"finish_message": json.dumps(tool_results(request))}))


async def test_callers_do_not_see_each_others_files(tmp_path: Path) -> None:
    name = f"files-{uuid.uuid4().hex[:8]}"
    port = free_port()
    keys = tmp_path / "registries" / "keys.json"
    alice, bob = create_key(keys, "user", "alice"), create_key(keys, "user", "bob")
    root = tmp_path / "files"
    outside = tmp_path / "outside.txt"
    outside.write_text("untouched", encoding="utf-8")
    async with ScriptedLLM() as llm:
        (tmp_path / "swarms.json").write_text(json.dumps([swarm(name, llm.base_url)]))
        config = write_config(
            tmp_path, port=port, swarm=name, extra=f'[stdlib.fs]\nroot = "{root}"\n'
        )
        server = ServerProcess(tmp_path, port, args=["--config", str(config)]).start(wait=False)
        try:
            await healthy(server)
            async with httpx.AsyncClient(base_url=server.base_url, timeout=240) as client:

                async def run(key: str, *calls: Any) -> list[str]:
                    llm.queue(*calls)
                    llm.queue(finish_with_results)
                    r = await client.post(
                        "/message",
                        json={"body": "go", "task_id": str(uuid.uuid4())},
                        headers=auth(key),
                    )
                    assert r.status_code == 200, r.text
                    return list(json.loads(r.json()["response"]))

                wrote = await run(
                    alice,
                    tool_call("write_file", {"path": "secret.txt", "content": "alice only"}),
                    tool_call("read_directory", {"path": "."}),
                )
                assert wrote[1] == "SUCCESS: secret.txt", wrote
                # Alice's file lives in her instance's folder, not in the shared root.
                assert (root / "user-alice" / "secret.txt").read_text() == "alice only"
                assert not (root / "secret.txt").exists()

                seen = await run(
                    bob,
                    tool_call("read_directory", {"path": "."}),
                    tool_call("read_file", {"path": "secret.txt"}),
                    tool_call("read_file", {"path": "../user-alice/secret.txt"}),
                    tool_call("read_file", {"path": str(root / "user-alice" / "secret.txt")}),
                    tool_call("transfer_file", {"recipient": "user", "source_path": "secret.txt"}),
                    tool_call(
                        "transfer_file",
                        {"recipient": "user", "source_path": "../user-alice/secret.txt"},
                    ),
                )
                assert seen[0] == "SUCCESS", seen  # an empty listing
                assert "file not found at secret.txt" in seen[1]
                assert "outside the file root" in seen[2] and "outside the file root" in seen[3]
                assert "no file at 'secret.txt'" in seen[4]
                assert "outside your working folder" in seen[5]
                assert not any("alice only" in text for text in seen), seen

                # save_attachment into a folder where a link is named like the file.
                sent = await run(
                    alice,
                    tool_call("write_file", {"path": "report.txt", "content": "payload"}),
                    tool_call("transfer_file", {"recipient": "user", "source_path": "report.txt"}),
                )
                match = re.search(r"att_[0-9a-f]{16}", sent[1])
                assert match, sent
                (root / "user-alice" / "inbox").mkdir()
                os.symlink(outside, root / "user-alice" / "inbox" / "report.txt")
                saved = await run(
                    alice,
                    tool_call(
                        "save_attachment", {"attachment_id": match.group(0), "path": "inbox"}
                    ),
                    tool_call("save_attachment", {"attachment_id": match.group(0), "path": "kept"}),
                )
                assert "symbolic link" in saved[0] and saved[0].startswith("ERROR"), saved
                assert outside.read_text() == "untouched"
                assert (root / "user-alice" / "kept").read_text() == "payload", saved
        finally:
            server.stop()
