"""The console's Tasks screens at a phone's width (390 px), in a real headless Chromium against
a real `mail server` (stub agents): the list reads as a list (no wide empty status column,
question text on lines of readable length, rows of sane height), and a task's page lists its
events in the order its trace reads, oldest first."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from tests.support.console_harness import NARROW, ConsolePage, ConsoleServer, serve_console

pytestmark = pytest.mark.timeout(300)

QUESTIONS = [
    "What is the weather like in Lisbon today, and should I bring an umbrella to the meeting?",
    "hi",
    "Summarise the quarterly report for the board: revenue, costs, the three largest risks and "
    "what we should do about each of them before the next review in March.",
    "BREAKPOINT please check this before it goes out",
]


@pytest.fixture(scope="module")
def console_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleServer]:
    with serve_console(
        tmp_path_factory.mktemp("console-narrow"), swarm="stub", stub=True, who=[("user", "alice")]
    ) as server:
        for question in QUESTIONS:
            server.post("alice", {"body": question})
        yield server


def _rows(page: Any) -> list[dict[str, float]]:
    """Geometry of each task row: its height, the status badge's and its column's widths,
    the title's width and the row's."""
    return page.eval_on_selector_all(
        "#task-list .task-row",
        """rows => rows.map(row => {
            const badge = row.querySelector('.badge').getBoundingClientRect();
            const title = row.querySelector('.task-title').getBoundingClientRect();
            const box = row.getBoundingClientRect();
            const columns = getComputedStyle(row).gridTemplateColumns.split(' ');
            return {height: box.height, rowWidth: box.width, badge: badge.width,
                    firstColumn: parseFloat(columns[0]), title: title.width,
                    titleLeft: title.left - box.left};
        })""",
    )


def test_the_task_list_reads_well_on_a_phone(console: ConsolePage) -> None:
    page = console.sign_in("alice").page
    page.set_viewport_size(NARROW)
    console.go("#/tasks")
    page.wait_for_selector("#task-list .task-row")
    assert page.locator("#task-list .task-row").count() == len(QUESTIONS)
    rows = _rows(page)
    console.screenshot("tasks-narrow", narrow=False)
    page.screenshot(path=str(console.shots / "tasks-narrow-full.png"), full_page=True)
    for row in rows:
        # The status takes the room its badge needs, not a wide empty strip.
        assert row["firstColumn"] <= row["badge"] + 2, row
        # The question has most of the row's width: lines of words, not of a few letters.
        assert row["title"] >= 0.6 * row["rowWidth"], row
        # A row is a few lines, not a tower (at most three of them the question's).
        assert row["height"] <= 140, row
    # No horizontal scrolling.
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
    assert console.errors == []


def test_a_tasks_events_are_listed_oldest_first_like_its_trace(
    console: ConsolePage, console_server: ConsoleServer
) -> None:
    task = console_server.post("alice", {"body": "order please"})
    task_id = task["task_id"]
    page = console.sign_in("alice").page
    console.go(f"#/tasks/{task_id}")
    page.wait_for_selector("#task-events .event-row")
    ids = page.eval_on_selector_all(
        "#task-events .event-row", "rows => rows.map(r => Number(r.dataset.id))"
    )
    assert len(ids) >= 2 and ids == sorted(ids), ids
    page.set_viewport_size(NARROW)
    console.screenshot("task-detail", narrow=True)
    assert console.errors == []


def test_a_task_that_ended_on_an_error_reads_failed(
    console: ConsolePage, console_server: ConsoleServer
) -> None:
    task = console_server.post("alice", {"body": "FAIL on purpose"})  # the stub agent raises
    assert task["state"] == "failed", task
    page = console.sign_in("alice").page
    console.go("#/tasks")
    row = page.wait_for_selector(f'.task-row[data-task="{task["task_id"]}"]')
    assert row.query_selector(".badge").inner_text() == "Failed"
    assert row.query_selector(".badge-bad") is not None
    row.click()
    page.wait_for_selector("#task-id")
    assert page.locator(".facts .badge").first.inner_text() == "Failed"
    console.screenshot("task-failed", narrow=True)
    assert console.errors == []
