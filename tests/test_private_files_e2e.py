"""Private files per caller on a real `mail server` process: user B's agent can neither list,
read nor transfer a file user A's agent wrote (stdlib fs actions and team file tools share one
folder per caller instance), and `save_attachment` into a folder refuses a symbolic link named
like the file instead of writing through it."""

from __future__ import annotations

import json
import os
import re
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from server_fixtures import ServerProcess, auth, create_key, free_port, healthy, write_config
from support.fs_swarm import finish_with_results, swarm
from support.scripted_llm import ScriptedLLM, tool_call

pytestmark = pytest.mark.timeout(600)


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


async def test_a_plain_id_cannot_take_the_hashed_folder_of_another_id(tmp_path: Path) -> None:
    """Ids that are not plain names get `<role>-h<hex>`; a caller whose plain id *is*
    `h<hex>` must not land in that folder (ids may come from an external auth service where
    people pick their own names)."""
    from mail.core.instance_context import instance_folder_name

    hashed = instance_folder_name("user", "team..alice")
    assert hashed.startswith("user-h"), hashed
    lookalike_id = hashed.removeprefix("user-")
    assert instance_folder_name("user", lookalike_id) != hashed

    name = f"files-{uuid.uuid4().hex[:8]}"
    port = free_port()
    keys = tmp_path / "registries" / "keys.json"
    victim, attacker = (
        create_key(keys, "user", "team..alice"),
        create_key(keys, "user", lookalike_id),
    )
    root = tmp_path / "files"
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
                    victim, tool_call("write_file", {"path": "secret.txt", "content": "mine"})
                )
                assert wrote[0] == "SUCCESS: successfully wrote to secret.txt", wrote
                assert (root / hashed / "secret.txt").read_text() == "mine"

                seen = await run(
                    attacker,
                    tool_call("read_directory", {"path": "."}),
                    tool_call("read_file", {"path": "secret.txt"}),
                )
                assert "file not found at secret.txt" in seen[1], seen  # not the victim's file
                assert not any("mine" in text or "secret.txt" == text for text in seen), seen
        finally:
            server.stop()


async def test_paths_deeper_or_longer_than_the_limits_are_refused(tmp_path: Path) -> None:
    """The descriptor walk has no PATH_MAX: a 20,000-folder path made 20,000 nested folders in
    one call. Paths are bounded (MAX_PATH_DEPTH folders, MAX_PATH_CHARS characters)."""
    from mail.utils.safe_files import MAX_PATH_CHARS, MAX_PATH_DEPTH

    name = f"files-{uuid.uuid4().hex[:8]}"
    port = free_port()
    key = create_key(tmp_path / "registries" / "keys.json", "user", "alice")
    root = tmp_path / "files"
    deep = "/".join(["d"] * (MAX_PATH_DEPTH + 1)) + "/x.txt"
    fits = "/".join(["d"] * (MAX_PATH_DEPTH - 1)) + "/x.txt"
    long = "n" * (MAX_PATH_CHARS + 1)
    async with ScriptedLLM() as llm:
        (tmp_path / "swarms.json").write_text(json.dumps([swarm(name, llm.base_url)]))
        config = write_config(
            tmp_path, port=port, swarm=name, extra=f'[stdlib.fs]\nroot = "{root}"\n'
        )
        server = ServerProcess(tmp_path, port, args=["--config", str(config)]).start(wait=False)
        try:
            await healthy(server)
            async with httpx.AsyncClient(base_url=server.base_url, timeout=240) as client:
                llm.queue(
                    tool_call("write_file", {"path": deep, "content": "x"}),
                    tool_call("write_file", {"path": long, "content": "x"}),
                    tool_call("read_file", {"path": deep}),
                    tool_call("transfer_file", {"recipient": "user", "source_path": deep}),
                    tool_call("write_file", {"path": fits, "content": "ok"}),
                )
                llm.queue(finish_with_results)
                r = await client.post(
                    "/message",
                    json={"body": "go", "task_id": str(uuid.uuid4())},
                    headers=auth(key),
                )
                assert r.status_code == 200, r.text
                results = list(json.loads(r.json()["response"]))
                assert f"the limit is {MAX_PATH_DEPTH}" in results[0], results[0]
                assert f"the limit is {MAX_PATH_CHARS}" in results[1], results[1]
                assert f"the limit is {MAX_PATH_DEPTH}" in results[2], results[2]
                assert f"the limit is {MAX_PATH_DEPTH}" in results[3], results[3]
                assert results[4].startswith("SUCCESS: successfully wrote"), results[4]
                depth = max(len(p.relative_to(root).parts) for p in root.rglob("*"))
                assert depth == MAX_PATH_DEPTH + 1, depth  # user-alice + 63 folders + x.txt
        finally:
            server.stop()
