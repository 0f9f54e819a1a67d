"""The console's action review screen against a real `mail server` on the `email-review`
demo swarm (offline demo model): held calls with their allowed decisions, respond and edit
from the form, a refused (stale) decision shown as a 400, the task continuing with its
decision events."""

from __future__ import annotations

import json
from collections.abc import Iterator

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

EDITED = {
    "to": "team@example.com",
    "subject": "Launch moves to Friday",
    "body": "Hi all, the launch moves to Friday at 3pm. <b>Alice</b>",
}


@pytest.fixture(scope="module")
def console_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleServer]:
    with serve_console(
        tmp_path_factory.mktemp("console-review"), swarm="email-review", who=[("user", "bob")]
    ) as server:
        yield server


def _radios(console: ConsolePage, index: int) -> list[str]:
    return console.page.eval_on_selector_all(
        f'input[name="rv-decision-{index}"]', "els => els.map(e => e.value)"
    )


def _open_review_from_chat(console: ConsolePage, bubbles_before: int) -> None:
    page = console.page
    page.wait_for_function(
        "n => document.querySelectorAll('.bubble-review').length > n",
        arg=bubbles_before,
        timeout=ANSWER_TIMEOUT_MS,
    )
    console.screenshot(f"review-chat-{bubbles_before}", narrow=False)
    page.locator(".bubble-review a.btn").last.click()
    page.wait_for_selector("#rv-form")


def test_review_held_calls_respond_edit_and_a_refused_decision(
    console: ConsolePage, console_server: ConsoleServer
) -> None:
    page = console.sign_in("bob").page
    console.go("#/chat")
    page.fill("#chat-input", "Let the team know the launch moves to Friday")
    page.click("#chat-send")
    _open_review_from_chat(console, 0)

    # The question allows only respond and ignore; nothing is chosen for the user.
    card = page.locator(".rv-call").first
    assert "ask_question" in card.inner_text() and "assistant" in card.inner_text()
    assert "Who should receive this email?" in card.locator(".bp-args").inner_text()
    assert _radios(console, 0) == ["respond", "ignore"]
    page.click("#rv-submit")
    assert "Choose a decision" in page.locator("#rv-error").inner_text()
    page.check('input[name="rv-decision-0"][value="respond"]')
    page.click("#rv-submit")
    assert "Write a message" in page.locator("#rv-error").inner_text()
    page.fill("#rv-message-0", "team@example.com")
    console.screenshot("review-question")
    page.click("#rv-submit")

    # The draft is held next: all four decisions.
    page.wait_for_selector("#chat-timeline")
    _open_review_from_chat(console, 1)
    task_id = page.evaluate("() => location.hash.split('/').pop()")
    assert "send_email" in page.locator(".rv-call").first.inner_text()
    assert _radios(console, 0) == ["accept", "edit", "ignore", "respond"]
    stale_call = page.locator(".rv-call").first.get_attribute("data-call")

    # Someone else decides that call meanwhile (feedback: the assistant redrafts).
    httpx.post(
        f"{console_server.url}/message",
        headers=auth(console_server.keys["bob"]),
        json={
            "task_id": task_id,
            "resume_from": "action_review",
            "kwargs": {
                "decisions": [
                    {"tool_call_id": stale_call, "type": "respond", "message": "Say it is 3pm"}
                ]
            },
        },
        timeout=120,
    ).raise_for_status()

    # The stale form's decision is refused with the server's 400, shown on the form.
    page.check('input[name="rv-decision-0"][value="edit"]')
    page.fill("#rv-args-0", "{not json")
    page.click("#rv-submit")
    assert "not valid JSON" in page.locator("#rv-error").inner_text()
    page.fill("#rv-args-0", json.dumps(EDITED))
    page.click("#rv-submit")
    page.wait_for_selector("#rv-reload:not([hidden])")
    error = page.locator("#rv-error").inner_text()
    assert "400" in error and stale_call in error, error
    assert page.evaluate("() => location.hash").startswith("#/review/")
    console.screenshot("review-refused", narrow=False)

    # Reload the held calls: the redraft; edit it and send.
    page.click("#rv-reload")
    page.wait_for_selector("#rv-form")
    fresh_call = page.locator(".rv-call").first.get_attribute("data-call")
    assert fresh_call and fresh_call != stale_call
    assert "3pm" in page.locator(".rv-call .bp-args").first.inner_text()
    page.check('input[name="rv-decision-0"][value="edit"]')
    page.fill("#rv-args-0", json.dumps(EDITED, indent=2))
    console.screenshot("review-edit")
    page.click("#rv-submit")
    page.wait_for_selector(".bubble-assistant", timeout=ANSWER_TIMEOUT_MS)
    assert page.locator(".bubble-assistant .bubble-text").last.inner_text() == (
        "Email sent to team@example.com (subject: Launch moves to Friday)."
    )

    # The decisions are events of the task, in order; the edit carries the new arguments.
    record = httpx.get(
        f"{console_server.url}/task",
        params={"task_id": task_id},
        headers=auth(console_server.keys["bob"]),
    ).json()
    assert record["pending_reviews"] == []
    decisions = [
        json.loads(e["data"])["extra_data"]
        for e in record["events"]
        if e["event"] == "action_review_decision"
    ]
    assert [d["type"] for d in decisions] == ["respond", "respond", "edit"]
    assert decisions[-1]["args"] == EDITED
    console.go(f"#/tasks/{task_id}")
    page.wait_for_selector("#task-events .event-row")
    shown = page.eval_on_selector_all(
        '#task-events .event-row[data-event="action_review_decision"]',
        "rows => rows.map(r => r.textContent)",
    )
    assert len(shown) == 3 and "edit: send_email" in shown[-1]  # oldest first
    assert "Done" in page.locator(".facts").inner_text()
    # Nothing waits any more.
    console.go("#/review")
    page.wait_for_selector(".state-empty")
    assert "No call is waiting" in page.locator(".state-title").inner_text()
    assert page.locator("#view b").count() == 0
    console.screenshot("review-done", narrow=False)
    assert console.errors == [] or all("status of 400" in e for e in console.errors)
