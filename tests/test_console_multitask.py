"""The console's chat with a task that is still working, and in the background, in Chromium.

A supervisor asks a slow worker (tests/support/multitask_agents.py). While the first answer is
on its way the chat still takes a message, with the strategy chosen beside it: interrupted,
the earlier message gets a note saying so and the new one its answer; queued, each answer
comes in order. A message sent in the background is answered at once and the chat follows its
task until the answer. The task's events list the strategy applied.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.console_harness import (
    ANSWER_TIMEOUT_MS,
    ConsolePage,
    ConsoleServer,
    serve_console,
)
from tests.support.multitask_agents import swarms_json

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def console_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleServer]:
    root = tmp_path_factory.mktemp("console-multitask")
    source = root / "multitask.json"
    source.write_text(json.dumps(swarms_json("multi")), encoding="utf-8")
    with serve_console(
        root,
        swarm="multi",
        who=[("user", "alice")],
        source=source,
        env={"MAIL_MULTITASK_LOG": str(root / "calls.log")},
    ) as server:
        yield server


def _wait_for_worker(server: ConsoleServer, body: str) -> None:
    log = Path(server.process.directory) / "calls.log"
    deadline = time.monotonic() + 60
    while f"worker start {body}" not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline, f"the worker never got {body!r}"
        time.sleep(0.02)


def _bubbles(console: ConsolePage, kind: str) -> list[str]:
    texts: list[str] = console.page.eval_on_selector_all(
        f".bubble-{kind} .bubble-text", "els => els.map(e => e.textContent)"
    )
    return texts


def test_a_message_while_the_task_works_interrupts_it(
    console: ConsolePage, console_server: ConsoleServer
) -> None:
    page = console.sign_in("alice").page
    console.go("#/chat")
    page.fill("#chat-input", "ASK SLOW 30 first")
    page.click("#chat-send")
    _wait_for_worker(console_server, "SLOW 30 first")
    # Working: the strategy is offered beside the composer, the background switch is not.
    page.wait_for_selector("#chat-strategy", state="visible")
    assert page.locator("#chat-background").is_hidden()
    page.select_option("#chat-strategy", "interrupt")
    page.fill("#chat-input", "COUNT")
    page.click("#chat-send")
    page.wait_for_function(
        "() => [...document.querySelectorAll('.bubble-assistant .bubble-text')]"
        ".some(e => e.textContent.startsWith('callers:'))",
        timeout=ANSWER_TIMEOUT_MS,
    )
    assert _bubbles(console, "assistant")[-1] == "callers: ASK SLOW 30 first | COUNT"
    notes = _bubbles(console, "system")
    assert any(n.startswith("Interrupting") for n in notes), notes
    assert any("was interrupted by a newer message" in n for n in notes), notes
    console.screenshot("chat-interrupted")

    # The task's events name the strategy applied.
    page.click(".chat-task a")
    page.wait_for_selector("#task-events .event-row")
    rows = page.locator("#task-events .event-row", has_text="Interrupted by a newer message")
    assert rows.count() == 1
    assert "worker" in rows.first.inner_text()
    console.screenshot("task-strategy-event", narrow=False)
    assert console.errors == []


def test_queued_messages_are_answered_in_order(
    console: ConsolePage, console_server: ConsoleServer
) -> None:
    page = console.sign_in("alice").page
    console.go("#/chat")
    page.click("#chat-new") if page.locator("#chat-new").is_visible() else None
    page.fill("#chat-input", "ASK SLOW 2 queued-first")
    page.click("#chat-send")
    _wait_for_worker(console_server, "SLOW 2 queued-first")
    page.select_option("#chat-strategy", "enqueue")
    page.fill("#chat-input", "COUNT")
    page.click("#chat-send")
    page.wait_for_function(
        "() => [...document.querySelectorAll('.bubble-assistant .bubble-text')]"
        ".some(e => e.textContent.startsWith('callers:'))",
        timeout=ANSWER_TIMEOUT_MS,
    )
    assert _bubbles(console, "assistant")[-2:] == [
        "done: worked: queued-first",
        "callers: ASK SLOW 2 queued-first | COUNT",
    ]
    assert any(n.startswith("Queued") for n in _bubbles(console, "system"))
    assert console.errors == []


def test_a_background_message_is_followed_to_its_answer(console: ConsolePage) -> None:
    page = console.sign_in("alice").page
    console.go("#/chat")
    page.click("#chat-new") if page.locator("#chat-new").is_visible() else None
    page.check("#chat-background")
    page.fill("#chat-input", "ASK SLOW 1 in-the-background")
    page.click("#chat-send")
    page.wait_for_function(
        "() => [...document.querySelectorAll('.bubble-assistant .bubble-text')]"
        ".some(e => e.textContent === 'done: worked: in-the-background')",
        timeout=ANSWER_TIMEOUT_MS,
    )
    assert any(n.startswith("Running in the background") for n in _bubbles(console, "system"))
    console.screenshot("chat-background")
    assert console.errors == []
