"""Tasks started within a minute must look different in the console (issue 64).

UUIDv7 task ids begin with their creation time: the console showed their first 8 characters,
so three tasks sent together, and their webhook deliveries, read alike. In a real Chromium
against a real `mail server`: the task list, a task's page, the webhook delivery log and a
paused task's screen show each task's distinguishing id end, and its question where the task
is named. Screenshots wide and at 390 px.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
from tests.server_fixtures import auth, free_port
from tests.support.console_harness import (
    ANSWER_TIMEOUT_MS,
    ConsolePage,
    ConsoleServer,
    serve_console,
)

pytestmark = pytest.mark.timeout(300)

QUESTION = "Which room is free on Friday?"


@pytest.fixture(scope="module")
def console_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleServer]:
    with serve_console(
        tmp_path_factory.mktemp("console-task-names"),
        swarm="stub",
        stub=True,
        who=[("user", "alice")],
        settings='[server.webhooks]\nallowed_hosts = ["127.0.0.1"]\n',
    ) as server:
        yield server


def _webhook(server: ConsoleServer) -> str:
    """A webhook for completions, to a port nobody listens on: the deliveries stay listed."""
    made = httpx.post(
        f"{server.url}/webhooks",
        headers=auth(server.keys["alice"]),
        json={"url": f"http://127.0.0.1:{free_port()}/hook", "events": ["task.completed"]},
        timeout=30,
    )
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


def _wait_for_deliveries(server: ConsoleServer, hook: str, count: int) -> None:
    deadline = time.monotonic() + ANSWER_TIMEOUT_MS / 1000
    listed: list[object] = []
    while time.monotonic() < deadline:
        got = httpx.get(
            f"{server.url}/webhooks/{hook}/deliveries",
            headers=auth(server.keys["alice"]),
            timeout=30,
        )
        assert got.status_code == 200, got.text
        listed = got.json()["deliveries"]
        if len(listed) >= count:
            return
        time.sleep(0.2)
    raise AssertionError(f"{len(listed)} of {count} deliveries listed: {listed}")


def test_tasks_sent_together_are_told_apart(console: ConsolePage) -> None:
    server = console.server
    hook = _webhook(server)
    ids = [server.post("alice", {"body": QUESTION})["task_id"] for _ in range(3)]
    tails = [task_id[-8:] for task_id in ids]
    assert len(set(tails)) == 3
    page = console.sign_in("alice").page

    console.go("#/tasks")
    for task_id in ids:
        row = page.locator(f"a.task-row[data-task='{task_id}']")
        row.wait_for()
        assert QUESTION in row.locator(".task-title").inner_text()
        assert row.locator(".task-ref").inner_text() == f"…{task_id[-8:]}"
    console.screenshot("tasks-list")

    page.locator(f"a.task-row[data-task='{ids[1]}']").click()
    page.wait_for_selector("#task-id")
    name = page.inner_text("#task-name")
    assert ids[1][-8:] in name and QUESTION in name, name
    assert page.get_attribute("#task-name", "title") == ids[1]
    console.screenshot("task-page")

    # The deliveries are listed once the tasks' completions fan out; the page is opened after
    # the API lists them (a page reloaded every second never finished rendering on a busy CI).
    _wait_for_deliveries(server, hook, 3)
    console.go(f"#/webhooks/{hook}")
    page.wait_for_function(
        "n => document.querySelectorAll('.wh-delivery').length >= n",
        arg=3,
        timeout=ANSWER_TIMEOUT_MS,
    )
    lines = [page.locator(".wh-delivery summary").nth(i).inner_text() for i in range(3)]
    for task_id in ids:
        (line,) = [text for text in lines if task_id[-8:] in text]
        assert f"echo[alice]: {QUESTION}" in line, line
        link = page.locator(f".wh-delivery summary a[href='#/tasks/{task_id}']")
        assert link.get_attribute("title") == task_id
    console.screenshot("deliveries")
    assert not console.errors, console.errors


def test_a_paused_task_is_named_by_its_question(console: ConsolePage) -> None:
    paused = console.server.post("alice", {"body": "BREAKPOINT may I book room 4?"})
    task_id = paused["task_id"]
    page = console.sign_in("alice").page
    console.go("#/breakpoints")
    row = page.locator("#bp-list .task-title").filter(has_text=task_id[-8:])
    assert "may I book room 4?" in row.inner_text()
    console.screenshot("breakpoint-list")
    console.go(f"#/breakpoints/{task_id}")
    page.wait_for_selector("#bp-form")
    intro = page.locator("#bp-form > p").first.inner_text()
    assert task_id[-8:] in intro and "may I book room 4?" in intro, intro
    console.screenshot("breakpoint")
    assert not console.errors, console.errors
