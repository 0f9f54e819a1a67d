"""The docs/team-tools.md example swarm runs offline on the demo model: the lead opens a
thread with its two teammates, hands over the user's file, waits for a reply, posts it and
completes the task."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

from mail import MAILSwarmTemplate
from mail.core.team import TeamSettings
from mail.core.team.files import EVERY_AGENT, attachment_meta, new_attachment
from mail.store.team_base import SqliteTeamStore

DOC = Path(__file__).resolve().parents[1] / "docs" / "team-tools.md"


def example_swarm() -> dict[str, Any]:
    text = DOC.read_text(encoding="utf-8")
    block = re.search(r"```json\n(\[\n.*?\n\])\n```", text, re.S)
    assert block, "the example swarm is missing from docs/team-tools.md"
    return json.loads(block.group(1))[0]  # type: ignore[no-any-return]


async def test_example_swarm_runs_offline(tmp_path: Path) -> None:
    template = MAILSwarmTemplate.from_swarm_json(json.dumps(example_swarm()))
    swarm = template.instantiate(user_id="demo", print_llm_streams=False)
    store = SqliteTeamStore()
    swarm.attach_team_store(store, TeamSettings(files_root=str(tmp_path)))
    team = swarm.team
    data = b"Launch on Monday."
    record = new_attachment(data, "brief.txt", "the brief", "user:demo", [EVERY_AGENT], "t1")
    await store.put_attachment(team.key, record, data)

    response, events = await asyncio.wait_for(
        swarm.post_message(
            "Plan the launch",
            task_id="t1",
            show_events=True,
            attachments=[attachment_meta(record)],
        ),
        60,
    )
    await swarm.shutdown()
    body = response["message"]["body"]
    assert response["message"]["subject"] == "::task_complete::", body
    assert "opened with analyst, writer" in body
    assert "analyst answered:" in body
    assert "writer about the file: Received brief.txt: Launch on Monday." in body

    calls = [e.data["extra_data"]["tool_name"] for e in events if e.event == "tool_call"]
    for name in ("create_thread", "save_attachment", "transfer_file", "read_attachment"):
        assert name in calls
    waits = [e for e in events if e.event == "await_message"]
    assert any(e.data["extra_data"].get("reason") == "wait_for_reply" for e in waits)

    threads = await store.list_threads(team.key)
    assert len(threads) == 1
    thread = threads[0][1]
    assert thread["participants"] == ["lead", "analyst", "writer"]
    posts = await store.thread_posts(team.key, thread["thread_id"])
    assert "Plan the launch" in posts[1]["body"]
    assert posts[-1]["body"].startswith("analyst: ")
    assert (tmp_path / "user-demo" / "brief.txt").read_bytes() == data
