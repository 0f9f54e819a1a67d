"""The console against a server on the stub swarm: breakpoints, escaping, following a task."""

from __future__ import annotations

import threading
from collections.abc import Iterator
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


@pytest.fixture(scope="module")
def console_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleServer]:
    with serve_console(
        tmp_path_factory.mktemp("console-stub"),
        swarm="stub",
        who=[("user", "alice")],
        stub=True,
    ) as server:
        yield server


def test_resume_one_held_call_from_the_form(console: ConsolePage) -> None:
    page = console.sign_in("alice").page
    console.send("BREAKPOINT may I book the room?", ".bubble-breakpoint")
    assert "human_review" in page.locator(".bubble-breakpoint").last.inner_text()
    page.locator(".bubble-breakpoint a.btn").last.click()
    page.wait_for_selector("#bp-form")
    assert "may I book the room?" in page.locator(".bp-args").inner_text()
    # One held call: the single-object form is offered and chosen.
    assert page.is_checked('input[name="bp-mode"][value="object"]')
    console.screenshot("breakpoint-form")
    page.fill("#bp-result-0", "approved <b>by</b> me")
    page.click("#bp-submit")
    page.wait_for_selector(".bubble-assistant", timeout=ANSWER_TIMEOUT_MS)
    assert page.locator(".bubble-assistant .bubble-text").last.inner_text() == (
        "reviewed: approved <b>by</b> me"
    )
    # The breakpoint list is empty again.
    console.go("#/breakpoints")
    page.wait_for_selector(".state-empty")
    assert "No task is waiting" in page.locator(".state-title").inner_text()
    assert console.errors == []


def test_resume_two_held_calls_as_a_list_after_a_reload(console: ConsolePage) -> None:
    page = console.sign_in("alice").page
    console.send("BREAKPOINT2", ".bubble-breakpoint")
    page.reload()
    page.wait_for_selector("nav.nav")
    console.go("#/breakpoints")
    page.wait_for_selector("#bp-list .task-row")
    assert "2 held" in page.locator("#bp-list .task-row").first.inner_text()
    page.locator("#bp-list .task-row").first.click()
    page.wait_for_selector("#bp-form")
    # Two calls: only the list-by-call_id form applies.
    assert page.is_disabled('input[name="bp-mode"][value="object"]')
    assert page.is_checked('input[name="bp-mode"][value="list"]')
    page.click("#bp-submit")  # empty results are refused with a message
    assert "Enter a result" in page.locator("#bp-form .form-error").inner_text()
    page.fill("#bp-result-0", "yes")
    page.fill("#bp-result-1", "no")
    console.screenshot("breakpoint-list-form")
    page.click("#bp-submit")
    page.wait_for_selector(".bubble-assistant", timeout=ANSWER_TIMEOUT_MS)
    assert page.locator(".bubble-assistant .bubble-text").last.inner_text() == "reviewed: yes | no"
    assert console.errors == []


HOSTILE = (
    "<script>window.__pwned = 1</script>"
    '<img src="x" onerror="window.__pwned = 2">'
    "<b id=\"bold\">not bold</b> & 'quotes'"
)


def test_agent_and_user_text_is_shown_as_text(console: ConsolePage) -> None:
    page = console.sign_in("alice").page
    console.send(HOSTILE, ".bubble-assistant")
    answer = page.locator(".bubble-assistant .bubble-text").last.inner_text()
    assert answer == f"echo[alice]: {HOSTILE}"
    assert page.locator(".bubble-user .bubble-text").last.inner_text() == HOSTILE
    for fragment in ("#/events", "#/agents/supervisor"):
        console.go(fragment)
        page.wait_for_selector(".event-row, .trace-item")
        if fragment == "#/events":
            page.locator(".event-row summary").first.click()
        assert "<script>" in page.locator("#view").inner_text()
    # Nothing from the body became markup, and nothing ran.
    assert page.locator("#view script, #view img[src='x'], #bold").count() == 0
    assert page.evaluate("() => window.__pwned") is None
    console.screenshot("escaping", narrow=False)
    assert console.errors == []


def test_follow_a_running_task_until_it_finishes(
    console: ConsolePage, console_server: ConsoleServer
) -> None:
    # The task sleeps on the server; the console attaches to it (GET /task/events) while it
    # runs and shows each of its events once.
    result: dict[str, Any] = {}

    def run() -> None:
        result["reply"] = console_server.post("alice", {"body": "SLEEP 4 slow one"})

    worker = threading.Thread(target=run)
    worker.start()
    try:
        page = console.sign_in("alice").page
        console.go("#/tasks")
        row = page.wait_for_selector(".task-row:has(.badge-info)", timeout=30_000)
        row.click()
        page.wait_for_selector("#task-follow")
        page.click("#task-follow")
        page.wait_for_selector(".facts .badge-good", timeout=ANSWER_TIMEOUT_MS)
        worker.join(60)
        task_id = result["reply"]["task_id"]
        assert page.locator("#task-id").inner_text() == task_id
        record = httpx.get(
            f"{console_server.url}/task",
            params={"task_id": task_id},
            headers=auth(console_server.keys["alice"]),
        ).json()
        ids = page.eval_on_selector_all(
            ".task-detail .event-row", "els => els.map(e => e.dataset.id)"
        )
        assert ids == [str(e["id"]) for e in record["events"]]  # oldest first
        console.go("#/events")
        page.wait_for_selector(".event-row")
        keys = page.evaluate(
            "() => [...document.querySelectorAll('.event-row')].map(r => r.textContent)"
        )
        assert len(keys) == len(set(keys)) or len(keys) == len(record["events"])
        console.screenshot("follow")
    finally:
        worker.join(60)
    assert console.errors == []
