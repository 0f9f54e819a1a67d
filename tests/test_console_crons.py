"""The console's Crons screen in a real headless Chromium against a real `mail server`:
schedule a message from the form (text shown as text), see a run come in with a link to its
task, pause it, delete it; another user sees none of it; it fits a phone."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from tests.server_fixtures import auth
from tests.support.console_harness import ConsolePage, ConsoleServer, serve_console

pytestmark = pytest.mark.timeout(300)

SETTINGS = """
[server.crons]
min_interval = 1
"""


@pytest.fixture(scope="module")
def console_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleServer]:
    directory = tmp_path_factory.mktemp("console-crons")
    with serve_console(
        directory,
        swarm="stub",
        stub=True,
        who=[("user", "alice"), ("user", "bob")],
        settings=SETTINGS,
    ) as server:
        yield server


def test_schedule_watch_a_run_pause_and_delete(console: ConsolePage) -> None:
    page = console.sign_in("alice").page
    console.go("#/crons")
    page.wait_for_selector("#cron-form")
    page.wait_for_selector(".state-empty")

    page.fill("#cron-schedule", "*/2 * * * * *")
    page.fill("#cron-zone", "Europe/Paris")
    page.fill("#cron-body", "<img src=x onerror=alert(1)> daily report")
    page.click("#cron-submit")
    page.wait_for_selector("#cron-message.form-notice")
    card = page.locator(".wh-card").first
    card.wait_for()
    assert "<img src=x onerror=alert(1)> daily report" in card.inner_text()
    assert "Europe/Paris" in card.inner_text()
    assert page.locator(".wh-card img").count() == 0

    # A run comes in: the card links to its task.
    page.wait_for_function(
        "() => document.querySelector('.wh-card a[href^=\"#/tasks/\"]')"
        " || (document.querySelector('.toolbar button').click(), false)",
        timeout=30_000,
        polling=1000,
    )
    console.screenshot("crons-ran")
    href = page.locator(".wh-card a[href^='#/tasks/']").first.get_attribute("href")
    assert href is not None
    run = httpx.get(
        f"{console.server.url}/task",
        params={"task_id": href.removeprefix("#/tasks/")},
        headers=auth(console.server.keys["alice"]),
        timeout=30,
    )
    assert run.status_code == 200, run.text  # a task of Alice's

    page.locator(".wh-card button", has_text="Pause").click()
    page.wait_for_selector(".wh-card button:has-text('Resume')")
    assert "paused" in page.locator(".wh-card").first.inner_text()
    page.on("dialog", lambda dialog: dialog.accept())
    page.locator(".wh-card button", has_text="Delete").click()
    page.wait_for_selector(".state-empty")
    assert not console.errors, console.errors


def test_another_user_sees_none_of_it(console: ConsolePage) -> None:
    made = httpx.post(
        f"{console.server.url}/crons",
        headers=auth(console.server.keys["alice"]),
        json={"schedule": "0 9 * * 1-5", "message": {"body": "alice's report"}},
        timeout=30,
    )
    assert made.status_code == 201, made.text
    page = console.sign_in("bob").page
    console.go("#/crons")
    page.wait_for_selector(".state-empty")
    assert page.locator(".wh-card").count() == 0
    assert not console.errors, console.errors


def test_the_screen_fits_a_phone(console: ConsolePage) -> None:
    page = console.sign_in("alice").page
    console.go("#/crons")
    page.wait_for_selector(".wh-card")
    page.set_viewport_size({"width": 390, "height": 844})
    overflow = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 1, overflow
    console.screenshot("crons-phone")
    assert not console.errors, console.errors
