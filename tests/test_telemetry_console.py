"""The console's task list rows and trace view, in a real Chromium against `mail server`."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from tests.support.console_harness import (
    ConsolePage,
    ConsoleServer,
    serve_console,
)

pytestmark = pytest.mark.timeout(600)
QUESTION = "What is 6 times 7?"


@pytest.fixture(scope="module")
def console_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleServer]:
    with serve_console(
        tmp_path_factory.mktemp("console-trace"), swarm="demo", who=[("user", "alice")]
    ) as server:
        yield server


def test_task_rows_and_the_trace_view(console: ConsolePage, console_server: ConsoleServer) -> None:
    task_id = str(uuid.uuid4())
    answer = console_server.post("alice", {"body": QUESTION, "task_id": task_id})["response"]
    page = console.sign_in("alice").page
    console.go("#/tasks")
    row = page.wait_for_selector(f'.task-row[data-task="{task_id}"]')
    text = row.inner_text()
    assert QUESTION in text  # the first user message names the task
    assert answer.splitlines()[0][:30] in text  # the answer's first line
    assert "Done" in text and "tokens" in text and "$0.0000" in text
    console.screenshot("task-list")

    row.click()
    page.wait_for_selector("#task-trace")
    assert page.inner_text("#task-answer").strip() == answer.strip()
    agents = page.eval_on_selector_all(".trace-turn", "els => els.map(e => e.dataset.agent)")
    assert agents[0] == "supervisor" and "math" in agents
    first = page.locator(".trace-turn").first
    assert "supervisor → mail/demo" in first.inner_text()
    tools = page.eval_on_selector_all(
        ".trace-turn >> .trace-tool .trace-name", "els => els.map(e => e.textContent)"
    )
    assert "send_request" in tools and "task_complete" in tools
    total = page.inner_text("#trace-total")
    assert f"{len(agents)} model calls" in total
    # expanding a model call shows the data its event holds
    first.locator("details.trace-data summary").first.click()
    assert '"input_tokens"' in first.locator("details.trace-data pre").first.inner_text()
    console.screenshot("trace-view")
    assert console.errors == []
