"""The console in a real headless Chromium against a real `mail server` on the demo swarm."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.console_harness import (
    ANSWER_TIMEOUT_MS,
    ConsolePage,
    ConsoleServer,
    serve_console,
    start_console_server,
)

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def console_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleServer]:
    with serve_console(
        tmp_path_factory.mktemp("console-demo"),
        swarm="demo",
        who=[("admin", "root"), ("user", "alice"), ("user", "bob")],
    ) as server:
        # The first message of a process pays for imports and instance creation; pay it here
        # so the browser tests time what the console does.
        server.post("root", {"body": "warm up"})
        yield server


def test_sign_in_shows_the_graph_with_every_agent_and_link(console: ConsolePage) -> None:
    page = console.sign_in("alice").page
    page.wait_for_selector(".gnode")
    agents = sorted(
        page.eval_on_selector_all(".gnode[data-agent]", "els => els.map(e => e.dataset.agent)")
    )
    assert agents == ["math", "supervisor", "weather"]
    edges = page.eval_on_selector_all(".gedge", "els => els.map(e => e.getAttribute('data-edge'))")
    assert sorted("|".join(sorted(e.split("|"))) for e in edges) == [
        "math|supervisor",
        "math|weather",
        "supervisor|weather",
    ]
    # Every demo link goes both ways, so no edge carries an arrow.
    assert page.locator(".gedge[marker-end], .gedge[marker-start]").count() == 0
    supervisor = page.locator('.gnode[data-agent="supervisor"]').text_content() or ""
    assert "Entry" in supervisor and "Completer" in supervisor
    assert "Entry" not in (page.locator('.gnode[data-agent="math"]').text_content() or "")
    assert page.locator(".me").inner_text().split()[:2] == ["user", "alice"]
    # A user does not get the registry screen.
    assert page.locator('.nav-link[data-path="registry"]').count() == 0
    # The key lives in sessionStorage only, never in the address.
    key = console.server.keys["alice"]
    assert page.evaluate("() => sessionStorage.getItem('mail-console-key')") == key
    assert page.evaluate("() => localStorage.length") == 0
    assert key not in page.url
    console.screenshot("graph")
    assert console.errors == []


def test_wrong_key_shows_an_error_and_stays_signed_out(console: ConsolePage) -> None:
    page = console.open().page
    page.fill("#api-key", "definitely-not-a-key")
    page.click("form.signin-form button[type=submit]")
    error = page.wait_for_selector("#signin-error:not([hidden])")
    assert "not accepted" in error.inner_text() and "401" in error.inner_text()
    assert page.evaluate("() => sessionStorage.getItem('mail-console-key')") is None
    assert page.locator("nav.nav").count() == 0
    console.screenshot("wrong-key")


def _chat(console: ConsolePage, text: str) -> str:
    """Sends ``text`` from the chat and returns the answer's text once it has streamed in."""
    page = console.page
    console.go("#/chat")
    page.wait_for_selector("#chat-input")
    before = page.locator(".bubble-assistant").count()
    page.fill("#chat-input", text)
    page.keyboard.press("Enter")
    page.wait_for_function(
        "(n) => document.querySelectorAll('.bubble-assistant').length > n",
        arg=before,
        timeout=ANSWER_TIMEOUT_MS,
    )
    return page.locator(".bubble-assistant .bubble-text").last.inner_text()


def test_chat_streams_the_answer_and_the_events_can_be_filtered(console: ConsolePage) -> None:
    page = console.sign_in("alice").page
    answer = _chat(console, "What is 12 * 7?")
    assert "84" in answer
    assert page.locator(".bubble-user").last.inner_text().endswith("What is 12 * 7?")
    task_link = page.locator(".chat-task a")
    assert task_link.inner_text().startswith("Task ")
    console.screenshot("chat")

    console.go("#/events")
    page.wait_for_selector(".event-row")
    kinds = set(page.eval_on_selector_all(".event-row", "els => els.map(e => e.dataset.event)"))
    assert {"new_message", "tool_call", "action_call"} <= kinds
    page.click('.chip[data-type="tool_call"]')
    shown = page.eval_on_selector_all(".event-row", "els => els.map(e => e.dataset.event)")
    assert shown and set(shown) == {"tool_call"}
    page.fill("#event-search", "calculate_expression")
    rows = page.locator(".event-row")
    assert rows.count() >= 1
    assert all("calculate_expression" in rows.nth(i).inner_text() for i in range(rows.count()))
    page.click('.chip[data-type="tool_call"]')  # off again
    page.fill("#event-search", "")
    page.select_option("#event-agent", "math")
    math_rows = page.locator(".event-row")
    assert 0 < math_rows.count() < len(kinds) + 100
    # Expanding a row shows its data.
    math_rows.first.locator("summary").click()
    assert "Data" in math_rows.first.locator(".event-data").inner_text()
    console.screenshot("events")

    # The graph counted the activity of the agents that worked.
    console.go("#/graph")
    page.wait_for_selector('.gnode[data-agent="math"].has-count')
    assert page.locator(".feed li").count() >= 5  # the side panel lists the latest events
    console.screenshot("graph-activity", narrow=False)
    # The agent view lists what math received and the tools it called.
    console.go("#/agents/math")
    page.wait_for_selector(".trace-item")
    trace = page.locator("#agent-trace").inner_text()
    assert "Incoming request from supervisor" in trace and "calculate_expression" in trace
    console.screenshot("agent")
    assert console.errors == []


def test_a_task_opens_from_the_list_after_a_reload_and_continues(console: ConsolePage) -> None:
    page = console.sign_in("alice").page
    _chat(console, "What is 6 * 7?")
    task_id = page.locator(".chat-task a").get_attribute("title")
    assert task_id
    page.reload()
    page.wait_for_selector("nav.nav")  # still signed in: the key survived in the tab
    console.go("#/tasks")
    page.wait_for_selector(f'.task-row[data-task="{task_id}"]')
    page.click(f'.task-row[data-task="{task_id}"]')
    page.wait_for_selector("#task-id")
    assert page.locator("#task-id").inner_text() == task_id
    assert page.locator(".facts .badge").first.inner_text() == "Done"
    assert page.locator(".task-detail .event-row").count() > 3
    console.screenshot("task")
    # Continue the same task from the chat (resume_from: user_response).
    page.click("#task-continue")
    page.wait_for_selector("#chat-input")
    assert page.locator(".bubble-user").count() == 1
    answer = _chat(console, "And 2 + 2?")
    assert "4" in answer
    assert page.locator(".chat-task a").get_attribute("title") == task_id
    assert console.errors == []


def test_a_user_cannot_see_another_users_task(
    console: ConsolePage, console_server: ConsoleServer
) -> None:
    record = console_server.post("alice", {"body": "What is 3 * 3?"})
    alices = record["task_id"]
    page = console.sign_in("bob").page
    console.go("#/tasks")
    page.wait_for_selector("#task-list, .state-empty")
    assert page.locator(f'.task-row[data-task="{alices}"]').count() == 0
    console.go(f"#/tasks/{alices}")
    page.wait_for_selector(".state-title")
    assert page.locator(".state-title").inner_text() == "Task not found"
    console.screenshot("not-found")
    # An admin may look at every caller's tasks.
    admin = ConsolePage(console.page.context.browser, console_server, console.shots)
    try:
        admin.sign_in("root")
        admin.go("#/tasks")
        admin.page.wait_for_selector("#tasks-all")
        admin.page.check("#tasks-all")
        admin.page.wait_for_selector(f'.task-row[data-task="{alices}"]')
        assert "user:alice" in admin.page.locator(f'.task-row[data-task="{alices}"]').inner_text()
        admin.page.click(f'.task-row[data-task="{alices}"]')
        admin.page.wait_for_selector("#task-id")
        assert admin.page.locator("#task-id").inner_text() == alices
        admin.screenshot("admin-task")
    finally:
        admin.close()


def test_admin_registers_and_removes_a_swarm(console: ConsolePage, tmp_path: Path) -> None:
    remote = start_console_server(
        tmp_path / "remote", swarm="remote", who=[("user", "x")], stub=True
    )
    try:
        page = console.sign_in("root").page
        page.on("dialog", lambda dialog: dialog.accept())
        console.go("#/registry")
        page.wait_for_selector("#reg-table")
        local = page.locator("#reg-table tbody tr")
        assert local.count() == 1 and "this server" in local.first.inner_text()
        page.fill("#reg-name", "remote")
        page.fill("#reg-url", remote.url)
        page.check("#reg-volatile")
        page.click("#reg-submit")
        row = page.wait_for_selector('#reg-table tr[data-swarm="remote"]')
        assert remote.url in row.inner_text()
        assert "Registered remote." in page.locator(".form-notice").inner_text()
        console.screenshot("registry")
        page.click('button[data-remove="remote"]')
        page.wait_for_selector('#reg-table tr[data-swarm="remote"]', state="detached")
        assert "Removed remote." in page.locator(".form-notice").inner_text()
        # A bad registration is explained, not swallowed.
        page.fill("#reg-name", "nowhere")
        page.fill("#reg-url", "http://127.0.0.1:9")
        page.click("#reg-submit")
        error = page.wait_for_selector(".form-error")
        assert re.search(r"Could not register: 500", error.inner_text())
    finally:
        remote.process.stop()


def test_the_server_announces_the_console_and_never_logs_a_key(
    console_server: ConsoleServer,
) -> None:
    # Runs after the tests above, so the log holds everything they did.
    logs = console_server.process.logs()
    assert f"MAIL console: http://localhost:{console_server.process.port}/ui/" in logs or (
        f"MAIL console: http://127.0.0.1:{console_server.process.port}/ui/" in logs
    )
    assert "GET /ui/ HTTP/1.1" in logs  # the console was served by this process
    for key in console_server.keys.values():
        assert key not in logs


def test_a_swarm_crossed_by_a_task_appears_as_a_node(console: ConsolePage) -> None:
    page = console.sign_in("alice").page
    page.wait_for_selector(".gnode")
    assert page.locator(".gnode-remote").count() == 0
    # An event as the runtime streams it when the supervisor writes to an agent of "meteo".
    page.evaluate(
        """async () => {
            const { addEvents } = await import(new URL("js/store.js", document.baseURI).href);
            addEvents([{ event: "new_message", id: "1", data: {
                task_id: "t-remote", timestamp: new Date().toISOString(),
                description: "sending message", extra_data: { full_message: {
                    id: "m1", msg_type: "request", message: {
                        sender: { address_type: "agent", address: "supervisor" },
                        recipient: { address_type: "agent", address: "forecaster@meteo" },
                        subject: "rain?", body: "<i>rain</i>?",
                        sender_swarm: "demo", recipient_swarm: "meteo" } } } } }],
                null, { live: true });
        }"""
    )
    page.wait_for_selector('.gnode-remote[data-remote="meteo"]')
    assert (page.locator(".gnode-remote").text_content() or "") == "@meteo"
    page.wait_for_selector('.gedge-remote[data-edge="supervisor|@meteo"]')
    assert page.locator('.gnode[data-agent="supervisor"].active').count() == 1
    console.screenshot("graph-remote", narrow=False)
    assert console.errors == []


def test_the_task_list_comes_in_pages(console: ConsolePage, console_server: ConsoleServer) -> None:
    """The list shows GET /tasks pages of 100 summaries and asks for the next on demand."""
    from concurrent.futures import ThreadPoolExecutor

    oldest = console_server.post("bob", {"body": "the first"})["task_id"]
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda i: console_server.post("bob", {"body": f"hello {i}"}), range(100)))
    page = console.sign_in("bob").page
    console.go("#/tasks")
    page.wait_for_selector("#task-list")
    assert page.locator("#task-list .task-row").count() == 100
    assert page.locator(f'.task-row[data-task="{oldest}"]').count() == 0
    page.click("#tasks-more")
    page.wait_for_selector(f'.task-row[data-task="{oldest}"]')
    assert page.locator("#tasks-more").count() == 0
    assert page.locator("#task-list .task-row").count() >= 101
    console.screenshot("tasks-paged")
    assert console.errors == []
