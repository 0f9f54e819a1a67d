"""The console's Threads screen and attachments, in a real headless Chromium against a real
`mail server` on the offline team example of docs/team-tools.md (lead, analyst, writer on the
demo model): attach a file in the chat, see the thread the lead opens with its participants and
posts, download an attachment (bytes checked), the 413 of a too-large file, and a user cannot
see another user's thread."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.server_fixtures import auth
from tests.support.console_harness import (
    ANSWER_TIMEOUT_MS,
    ConsolePage,
    ConsoleServer,
    serve_console,
)

pytestmark = pytest.mark.timeout(600)

TEAM = ["reply_wait", "threads", "inbox", "files"]
# Small enough that the test can exceed it cheaply; the brief below fits.
MAX_ATTACHMENT = 4096


def _agent(name: str, factory: str, targets: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "factory": f"python::mail.factories.{factory}",
        "comm_targets": targets,
        "tool_format": "completions",
        "team_tools": TEAM,
        "agent_params": {"llm": "mail/demo", "system": f"You are {name}."},
        **extra,
    }


def write_team_demo(directory: Path) -> Path:
    """The team example of docs/team-tools.md as swarms.json in ``directory``."""
    swarm = {
        "name": "team-demo",
        "version": "1.0.0",
        "entrypoint": "lead",
        "agents": [
            _agent(
                "lead",
                "supervisor:LiteLLMSupervisorFunction",
                ["analyst", "writer"],
                enable_entrypoint=True,
                can_complete_tasks=True,
            ),
            _agent("analyst", "base:LiteLLMAgentFunction", ["lead", "writer"]),
            _agent("writer", "base:LiteLLMAgentFunction", ["lead", "analyst"]),
        ],
        "actions": [],
    }
    path = directory / "swarms.json"
    path.write_text(json.dumps([swarm], indent=2), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def console_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleServer]:
    directory = tmp_path_factory.mktemp("console-team")
    with serve_console(
        directory,
        swarm="team-demo",
        source=write_team_demo(directory),
        who=[("admin", "root"), ("user", "alice"), ("user", "bob")],
        settings=f"\n[server.team_tools]\nmax_attachment_bytes = {MAX_ATTACHMENT}\n",
    ) as server:
        yield server


BRIEF = b"Launch on Monday.\nBudget: 12k\n"


def _download(console: ConsolePage, button: Any) -> bytes:
    with console.page.expect_download() as info:
        button.click()
    download = info.value
    return Path(download.path()).read_bytes()


def _alice_thread(server: ConsoleServer) -> str:
    """The id of one of alice's threads (opened over HTTP when she has none yet)."""
    found = httpx.get(f"{server.url}/threads", headers=auth(server.keys["alice"]), timeout=30)
    threads = found.json()["threads"]
    if not threads:
        server.post(
            "alice",
            {"body": "Plan it", "attachments": [{"filename": "a.txt", "content": "x"}]},
        )
        found = httpx.get(f"{server.url}/threads", headers=auth(server.keys["alice"]), timeout=30)
        threads = found.json()["threads"]
    return str(threads[0]["thread_id"])


def test_attach_in_chat_then_see_the_thread_and_download(console: ConsolePage) -> None:
    page = console.sign_in("alice").page
    console.go("#/chat")
    page.wait_for_selector("#chat-input")
    page.set_input_files(
        "#chat-files", files=[{"name": "brief.txt", "mimeType": "text/plain", "buffer": BRIEF}]
    )
    assert "brief.txt" in page.locator("#chat-picked").inner_text()
    page.fill("#chat-input", "Plan the launch")
    page.click("#chat-send")
    page.wait_for_selector(".bubble-assistant", timeout=ANSWER_TIMEOUT_MS)
    assert "opened with analyst, writer" in page.locator(".bubble-assistant").last.inner_text()
    # The picker is emptied once sent; the user's bubble lists the file with its server id.
    assert page.locator("#chat-picked li").count() == 0
    sent = page.locator(".bubble-user .attachment").first
    attachment_id = sent.get_attribute("data-attachment") or ""
    assert attachment_id.startswith("att_")
    assert "brief.txt" in sent.inner_text()
    assert _download(console, sent.locator(".attachment-download")) == BRIEF
    console.screenshot("chat-attachment")

    console.go("#/threads")
    row = page.wait_for_selector(".thread-row")
    assert "Plan the launch" in row.inner_text()
    assert "analyst" in row.inner_text() and "writer" in row.inner_text()
    row.click()
    page.wait_for_selector("#thread-posts")
    participants = page.eval_on_selector_all(
        ".participant", "els => els.map(e => [e.dataset.agent, Number(e.dataset.unread)])"
    )
    assert [name for name, _ in participants] == ["lead", "analyst", "writer"]
    unread = dict(participants)
    # The lead wrote every post; its teammates were only told quietly and have not read them.
    assert unread["lead"] == 0 and unread["analyst"] >= 2 and unread["writer"] >= 2
    kinds = page.eval_on_selector_all("#thread-posts > li", "els => els.map(e => e.dataset.kind)")
    assert kinds[0] == "membership" and kinds.count("post") >= 2
    assert "created thread" in page.locator(".post-membership").first.inner_text()
    first_post = page.locator('.post[data-kind="post"]').first
    assert first_post.locator(".post-sender").inner_text() == "lead"
    assert "Plan the launch" in first_post.locator(".post-body").inner_text()
    # The post names the uploaded file's id: it downloads from the thread too, same bytes.
    link = first_post.locator(f'.attachment-download[data-attachment="{attachment_id}"]')
    assert "brief.txt" in first_post.locator(".attachment").inner_text()
    assert _download(console, link) == BRIEF
    console.screenshot("threads")

    # The file the lead handed to the writer shows in the events, also downloadable.
    console.go("#/events")
    page.wait_for_selector('.event-row[data-event="attachment"]')
    page.locator('.event-row[data-event="attachment"] summary').first.click()
    handed = page.locator('.event-row[data-event="attachment"] .attachment-download').first
    assert _download(console, handed) == BRIEF
    assert console.errors == []


def test_a_too_large_attachment_shows_the_413(console: ConsolePage) -> None:
    page = console.sign_in("alice").page
    console.go("#/chat")
    page.wait_for_selector("#chat-input")
    big = b"x" * (MAX_ATTACHMENT + 1)
    page.set_input_files(
        "#chat-files",
        files=[{"name": "big.bin", "mimeType": "application/octet-stream", "buffer": big}],
    )
    page.fill("#chat-input", "Here is a big file")
    page.click("#chat-send")
    error = page.wait_for_selector(".bubble-system", timeout=ANSWER_TIMEOUT_MS)
    text = error.inner_text()
    assert "too large" in text and "413" in text and str(MAX_ATTACHMENT) in text
    console.screenshot("attachment-413", narrow=False)
    # The refused request is a failed fetch, which the browser reports on the console.
    assert [e for e in console.errors if "413" not in e] == []


def test_a_user_cannot_see_another_users_thread(console: ConsolePage) -> None:
    server = console.server
    thread_id = _alice_thread(server)
    bob = auth(server.keys["bob"])
    thread = httpx.get(
        f"{server.url}/threads/{thread_id}", headers=auth(server.keys["alice"]), timeout=30
    ).json()
    attachment_id = re.search(r"att_[0-9a-f]+", thread["messages"][1]["body"])
    assert attachment_id is not None
    assert (
        httpx.get(f"{server.url}/threads/{thread_id}", headers=bob, timeout=30).status_code == 404
    )
    assert (
        httpx.get(f"{server.url}/attachments/{attachment_id[0]}", headers=bob, timeout=30)
    ).status_code == 404
    assert httpx.get(f"{server.url}/threads", headers=bob, timeout=30).json() == {"threads": []}

    page = console.sign_in("bob").page
    console.go("#/threads")
    page.wait_for_selector(".thread-list-pane .state-empty")
    assert page.locator(".thread-row").count() == 0
    console.go(f"#/threads/{thread_id}")
    page.wait_for_selector("#thread-detail .state-empty")
    assert "Thread not found" in page.locator("#thread-detail").inner_text()
    console.screenshot("thread-not-found")


def test_an_admin_sees_every_instances_threads(console: ConsolePage) -> None:
    thread_id = _alice_thread(console.server)
    page = console.sign_in("root").page
    console.go("#/threads")
    row = page.wait_for_selector(f'.thread-row[data-thread="{thread_id}"]')
    assert "user:alice" in row.inner_text()
    row.click()
    page.wait_for_selector("#thread-posts")
    assert "user:alice" in page.locator("#thread-detail .facts").inner_text()
