"""The console attaches to a running task through GET /task/events: stub agents that take
50 ms per turn, a task that produces a good number of events, a reload in the middle."""

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
# Each round is two agent turns of 50 ms plus their events: the task runs for several
# seconds, long enough to attach, reload and attach again while it runs.
ROUNDS = 80


@pytest.fixture(scope="module")
def console_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleServer]:
    with serve_console(
        tmp_path_factory.mktemp("console-live"),
        swarm="stub",
        who=[("user", "alice")],
        stub=True,
        env={"MAIL_STUB_LATENCY_MS": "50"},
        settings="task_message_limit = 0",
    ) as server:
        yield server


def _shown_ids(console: ConsolePage) -> list[str]:
    # The list shows the oldest first, as the trace does.
    ids: list[str] = console.page.eval_on_selector_all(
        "#task-events .event-row", "rows => rows.map(r => r.dataset.id)"
    )
    return ids


def test_attach_mid_stream_after_a_reload_shows_every_event_once_in_order(
    console: ConsolePage, console_server: ConsoleServer
) -> None:
    result: dict[str, Any] = {}

    def run() -> None:
        result["reply"] = console_server.post("alice", {"body": f"CHATTY {ROUNDS} 40"}, timeout=300)

    worker = threading.Thread(target=run)
    worker.start()
    try:
        page = console.sign_in("alice").page
        console.go("#/tasks")
        page.wait_for_selector(".task-row:has(.badge-info)", timeout=30_000).click()
        page.click("#task-follow")
        # Attached: streamed events arrive.
        page.wait_for_function(
            "() => Number(document.querySelector('#follow-state')?.dataset.received) >= 5",
            timeout=ANSWER_TIMEOUT_MS,
        )
        console.screenshot("follow-live", narrow=False)
        # Reload the page mid-stream: the console starts from the record again and attaches
        # after its last event.
        page.reload()
        page.wait_for_selector("#task-follow", timeout=30_000)
        before = _shown_ids(console)
        assert before, "the reloaded task shows its recorded events"
        page.click("#task-follow")
        page.wait_for_function(
            "() => Number(document.querySelector('#follow-state')?.dataset.received) >= 3",
            timeout=ANSWER_TIMEOUT_MS,
        )
        console.screenshot("follow-live-after-reload")
        page.wait_for_selector("#follow-done", timeout=ANSWER_TIMEOUT_MS)
        worker.join(120)
        assert result["reply"]["response"] == f"chatted {ROUNDS}"
        task_id = result["reply"]["task_id"]
        assert page.locator("#task-id").inner_text() == task_id
        record = httpx.get(
            f"{console_server.url}/task",
            params={"task_id": task_id},
            headers=auth(console_server.keys["alice"]),
        ).json()
        expected = [str(e["id"]) for e in record["events"]]
        assert len(expected) > 4 * ROUNDS
        # Every event of the task exactly once, in order: the recorded ones, then the streamed.
        assert _shown_ids(console) == expected
        done = page.locator("#follow-done")
        streamed = int(done.get_attribute("data-received") or -1)
        # The page may have shown a few more recorded events between `before` and the click
        # (the detail refreshes while the task runs); the stream starts after the last shown id,
        # so it carries at most the rest, and (checked above) nothing is missing or repeated.
        assert 0 < streamed <= len(expected) - len(before)
        assert done.get_attribute("data-duplicates") == "0"
        assert done.get_attribute("data-out-of-order") == "0"
        assert "Done" in page.locator(".facts").inner_text()
        console.screenshot("follow-live-done")
    finally:
        worker.join(120)
    assert console.errors == []
