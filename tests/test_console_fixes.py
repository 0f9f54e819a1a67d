"""Issue 31's console fixes, each in a real Chromium against a real `mail server`.

The chat keeps a folded trace under every answer, signed with the agent that completed the
task; an answered breakpoint stops offering its form; graph links glow only where a message
crossed them and count those messages; an empty chat offers no "New task"; every tab is in
sight at phone width; registry addresses never break mid-address; a refused upload gives the
typed text back.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.console_harness import (
    ANSWER_TIMEOUT_MS,
    NARROW,
    ConsolePage,
    ConsoleServer,
    new_console,
    serve_console,
)

pytestmark = pytest.mark.timeout(600)
MAX_ATTACHMENT = 2048


@pytest.fixture(scope="module")
def console_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleServer]:
    with serve_console(
        tmp_path_factory.mktemp("console-fixes-demo"),
        swarm="demo",
        who=[("admin", "root"), ("user", "alice")],
    ) as server:
        yield server


@pytest.fixture(scope="module")
def stub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleServer]:
    with serve_console(
        tmp_path_factory.mktemp("console-fixes-stub"),
        swarm="stub",
        who=[("user", "alice")],
        stub=True,
        settings=f"[server.team_tools]\nmax_attachment_bytes = {MAX_ATTACHMENT}\n",
    ) as server:
        yield server


@pytest.fixture
def stub_console(browser: Any, stub: ConsoleServer, tmp_path: Path) -> Iterator[ConsolePage]:
    yield from new_console(browser, stub, tmp_path)


def test_each_answer_keeps_a_folded_trace_signed_by_its_completer(
    console: ConsolePage,
) -> None:
    page = console.sign_in("alice").page
    console.send("What is 12 * 7?", ".bubble-assistant")
    console.send("And 2 + 2?", ".bubble-assistant")
    answers = page.locator(".bubble-assistant")
    assert answers.count() == 2
    for i in range(2):
        answer = answers.nth(i)
        # Signed by the agent that called task_complete, not "Swarm".
        assert answer.get_attribute("data-agent") == "supervisor"
        assert answer.locator(".bubble-from").inner_text() == "supervisor"
        fold = answer.locator("details.bubble-trace")
        assert fold.count() == 1 and fold.get_attribute("open") is None
        assert "model calls" in fold.locator("summary").inner_text()
    # The first answer's trace is still there after the second, and opens to its own tree.
    first = answers.nth(0).locator("details.bubble-trace")
    first.locator("summary").click()
    turns = first.locator(".trace-turn")
    turns.first.wait_for()
    agents = [turns.nth(i).get_attribute("data-agent") for i in range(turns.count())]
    assert agents[0] == "supervisor" and "math" in agents
    calls = first.locator(".trace-tool .trace-name").all_inner_texts()
    assert "send_request" in calls and calls[-1] == "task_complete"
    assert page.locator("#task-trace").count() == 0  # the chat's trees take no page ids
    console.screenshot("chat-trace")
    # A task continued from its page rebuilds the traces from the record.
    task_id = page.locator(".chat-task a").get_attribute("title")
    page.reload()
    page.wait_for_selector("nav.nav")
    console.go(f"#/tasks/{task_id}")
    page.click("#task-continue")
    page.wait_for_selector(".bubble-assistant details.bubble-trace")
    rebuilt = page.locator(".bubble-assistant")
    assert rebuilt.count() == 2
    assert rebuilt.nth(1).get_attribute("data-agent") == "supervisor"
    assert "model calls" in rebuilt.nth(1).locator(".bubble-trace summary").inner_text()
    assert console.errors == []


def test_an_empty_chat_offers_no_new_task(console: ConsolePage) -> None:
    page = console.sign_in("alice").page
    console.go("#/chat")
    page.wait_for_selector("#chat-input")
    assert page.locator(".chat-task").inner_text() == ""
    assert page.get_by_text("New task", exact=True).locator("visible=true").count() == 0
    console.screenshot("chat-empty")
    console.send("What is 1 + 1?", ".bubble-assistant")
    assert page.is_visible("#chat-new") and page.is_enabled("#chat-new")
    assert "next message continues it" in page.locator(".chat-task").inner_text()
    page.click("#chat-new")
    page.wait_for_selector("#chat-new", state="hidden")
    assert page.locator(".bubble").count() == 0
    assert console.errors == []


def test_every_tab_is_in_sight_at_phone_width(console: ConsolePage) -> None:
    page = console.sign_in("root").page
    page.set_viewport_size(NARROW)
    console.go("#/graph")
    labels = page.locator(".nav-link").all_inner_texts()
    assert {"Review", "Threads", "Registry"} <= set(labels)
    boxes = page.eval_on_selector_all(
        ".nav-link",
        "els => els.map(e => { const r = e.getBoundingClientRect();"
        " return [e.textContent, r.left, r.right]; })",
    )
    width = NARROW["width"]
    hidden = [name for name, left, right in boxes if left < 0 or right > width]
    assert hidden == [], f"tabs out of sight at {width}px: {hidden}"
    console.screenshot("tabs-phone")
    assert console.errors == []


INJECT = """async (events) => {
    const { addEvents } = await import(new URL("js/store.js", document.baseURI).href);
    addEvents(events, null, { live: true });
}"""


def _message(n: int, sender: str, recipient: str) -> dict[str, Any]:
    """A new_message event as the runtime streams it."""
    return {
        "event": "new_message",
        "id": f"link-{n}",
        "data": {
            "task_id": "t-links",
            "timestamp": "2026-01-01T00:00:00Z",
            "description": "sending message",
            "extra_data": {
                "full_message": {
                    "id": f"m{n}",
                    "msg_type": "request",
                    "message": {
                        "sender": {"address_type": "agent", "address": sender},
                        "recipient": {"address_type": "agent", "address": recipient},
                        "subject": "s",
                        "body": "b",
                    },
                }
            },
        },
    }


def _edges(page: Any) -> dict[str, dict[str, Any]]:
    """Each drawn link by its sorted ends: whether it glows and the count on it."""
    found = page.evaluate(
        """() => [...document.querySelectorAll(".gedge")].map((line) => {
            const edge = line.getAttribute("data-edge");
            const label = document.querySelector(`.gedge-count[data-edge="${edge}"]`);
            return [edge.split("|").sort().join("|"), line.classList.contains("active"),
                    label && label.classList.contains("has-count") ? label.textContent : ""];
        })"""
    )
    return {key: {"glows": glows, "count": count} for key, glows, count in found}


def test_a_link_glows_only_when_a_message_crossed_it(console: ConsolePage) -> None:
    page = console.sign_in("alice").page
    page.wait_for_selector(".gnode")
    assert not any(e["glows"] or e["count"] for e in _edges(page).values())
    # Two messages from the supervisor to math; weather is busy too (it calls a tool), so
    # every agent is active, yet only the link the messages crossed may glow.
    tool = {
        "event": "tool_call",
        "id": "w-1",
        "data": {
            "task_id": "t-links",
            "timestamp": "2026-01-01T00:00:01Z",
            "description": "agent weather called get_forecast",
            "extra_data": {"tool_name": "get_forecast", "tool_args": {}},
        },
    }
    page.evaluate(INJECT, [_message(1, "supervisor", "math"), _message(2, "math", "supervisor")])
    page.evaluate(INJECT, [tool])
    page.wait_for_selector('.gnode[data-agent="weather"].active')
    page.wait_for_selector(".gedge.active")
    edges = _edges(page)
    assert edges["math|supervisor"] == {"glows": True, "count": "2"}
    assert edges["supervisor|weather"] == {"glows": False, "count": ""}
    assert edges["math|weather"] == {"glows": False, "count": ""}
    assert page.locator('.gnode[data-agent="supervisor"].active').count() == 1
    console.screenshot("graph-links", narrow=False)
    assert console.errors == []


LONG_URL = "https://forecasting-and-nowcasting.meteo-department.example.org:8443/mail/v1"


def test_registry_addresses_stay_on_one_line(console: ConsolePage) -> None:
    page = console.sign_in("root").page

    def add_long_entry(route: Any) -> None:
        # The server's own answer, plus an entry with a long address (registering one for
        # real needs a live server at that address).
        response = route.fetch()
        body = response.json()
        body["swarms"].append(
            {
                "swarm_name": "meteo",
                "base_url": LONG_URL,
                "is_active": True,
                "latency": 0.012,
                "last_seen": None,
                "public": True,
                "volatile": False,
                "is_local": False,
            }
        )
        route.fulfill(response=response, body=json.dumps(body))

    page.route("**/swarms/registry", add_long_entry)
    console.go("#/registry")
    page.wait_for_selector('#reg-table tr[data-swarm="meteo"]')
    line_count = """(el) => {
        const range = document.createRange();
        range.selectNodeContents(el);
        return new Set([...range.getClientRects()].map((r) => Math.round(r.top))).size;
    }"""
    for viewport in (None, NARROW):
        if viewport:
            page.set_viewport_size(viewport)
        cells = page.locator("#reg-table .reg-url")
        assert cells.count() == 2
        for i in range(2):
            assert cells.nth(i).evaluate(line_count) == 1
        meteo = page.locator('#reg-table tr[data-swarm="meteo"] .reg-url')
        assert meteo.get_attribute("title") == LONG_URL
        assert LONG_URL in meteo.inner_text()
    console.screenshot("registry-long-url")
    assert console.errors == []


def test_an_answered_breakpoint_stops_offering_its_form(stub_console: ConsolePage) -> None:
    console = stub_console
    page = console.sign_in("alice").page
    console.send("BREAKPOINT may I book the room?", ".bubble-breakpoint")
    held = page.locator(".bubble-breakpoint").last
    assert held.locator("a.btn").inner_text() == "Answer the held calls"
    held.locator("a.btn").click()
    page.fill("#bp-result-0", "yes")
    page.click("#bp-submit")
    page.wait_for_selector(".bubble-assistant", timeout=ANSWER_TIMEOUT_MS)
    held = page.locator(".bubble-breakpoint").last
    assert held.locator("a.btn").count() == 0
    assert "Answered" in held.inner_text()
    assert page.get_by_text("Answer the held calls").count() == 0
    console.screenshot("breakpoint-answered")
    assert console.errors == []


def test_a_refused_upload_gives_the_typed_text_back(stub_console: ConsolePage) -> None:
    console = stub_console
    page = console.sign_in("alice").page
    console.go("#/chat")
    page.wait_for_selector("#chat-input")
    page.set_input_files(
        "#chat-files",
        files=[{"name": "big.bin", "mimeType": "application/octet-stream", "buffer": b"x" * 4096}],
    )
    typed = "Here is the file,\nplease summarise it"
    page.fill("#chat-input", typed)
    page.click("#chat-send")
    error = page.wait_for_selector(".bubble-system", timeout=ANSWER_TIMEOUT_MS)
    assert "413" in error.inner_text() and "Nothing was sent" in error.inner_text()
    assert page.input_value("#chat-input") == typed.strip()
    assert page.locator(".bubble-user").count() == 0  # nothing was sent, so no bubble says so
    console.screenshot("upload-refused", narrow=False)
    # The refused request is a failed fetch, which the browser reports on the console.
    assert [e for e in console.errors if "413" not in e] == []
