"""The console's Webhooks screen in a real headless Chromium against a real `mail server` and a
real receiver: create a webhook (its secret shown once, and it verifies the deliveries), the
delivery log with every attempt, a retry that delivers, disabling, text shown as text, and a
user never sees another user's webhooks. Screenshots wide and at 390 px."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from standardwebhooks.webhooks import Webhook
from tests.server_fixtures import auth, free_port
from tests.support.console_harness import ConsolePage, ConsoleServer, serve_console
from tests.support.webhook_receiver import ReceiverProcess

pytestmark = pytest.mark.timeout(300)

SETTINGS = """
[server.webhooks]
allowed_hosts = ["127.0.0.1"]
retry_schedule = [0.2]
poll_interval = 0.2
"""


@pytest.fixture(scope="module")
def receiver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReceiverProcess]:
    made = ReceiverProcess(free_port(), tmp_path_factory.mktemp("console-receiver")).start()
    try:
        yield made
    finally:
        made.stop()


@pytest.fixture(scope="module")
def console_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleServer]:
    directory = tmp_path_factory.mktemp("console-webhooks")
    with serve_console(
        directory,
        swarm="stub",
        stub=True,
        who=[("user", "alice"), ("user", "bob")],
        settings=SETTINGS,
    ) as server:
        yield server


def test_create_see_the_secret_once_and_retry_a_failed_delivery(
    console: ConsolePage, receiver: ReceiverProcess
) -> None:
    page = console.sign_in("alice").page
    console.go("#/webhooks")
    page.wait_for_selector("#wh-form")
    page.wait_for_selector(".state-empty")
    page.wait_for_selector("#wh-types input[value='task.completed']", state="attached")
    console.screenshot("webhooks-empty", narrow=False)

    # Only completions, a description full of markup (shown as text).
    page.fill("#wh-url", receiver.url("/console"))
    page.uncheck("#wh-all")
    page.check("#wh-types input[value='task.completed']")
    page.fill("#wh-description", "<img src=x onerror=alert(1)> ops pager")
    page.click("#wh-submit")
    page.wait_for_selector("#wh-secret-value")
    secret = page.inner_text("#wh-secret-value").strip()
    assert secret.startswith("whsec_")
    page.wait_for_selector(".wh-card")
    card = page.locator(".wh-card").first
    assert "<img src=x onerror=alert(1)> ops pager" in card.inner_text()
    assert page.locator(".wh-card img").count() == 0
    console.screenshot("webhooks-created")

    # The first attempt is refused (500), the only retry too: the delivery fails.
    receiver.script("/console", [500, 500])
    server = console.server
    task = server.post("alice", {"body": "ring the bell"})
    got = receiver.wait_for(2, "/console")
    assert len(got) == 2
    for entry in got:  # the secret the screen showed verifies what was sent
        Webhook(secret).verify(entry["body"], entry["headers"])

    card.locator("a", has_text="Deliveries").click()
    page.wait_for_selector("#wh-deliveries")
    page.wait_for_function(
        "() => document.querySelector('.wh-delivery')?.dataset.status === 'failed'"
        " || (location.reload(), false)",
        timeout=30_000,
        polling=1000,
    )
    delivery = page.locator(".wh-delivery").first
    delivery.locator("summary").click()
    body = delivery.inner_text()
    assert "task.completed" in body and "HTTP 500" in body and "answer 500" in body
    assert task["task_id"][-8:] in body
    assert page.locator(".wh-attempts tbody tr").count() == 2
    console.screenshot("webhooks-log-failed")

    delivery.locator("button[data-retry]").click()
    page.wait_for_selector("#wh-message.form-notice")
    got = receiver.wait_for(3, "/console")
    assert len(got) == 3 and got[2]["headers"]["webhook-id"] == got[0]["headers"]["webhook-id"]
    page.click("text=Refresh")
    page.wait_for_selector(".wh-delivery[data-status='delivered']")
    console.screenshot("webhooks-log-delivered")

    # The secret is not shown again: not after a reload, nor by the API.
    page.reload()
    page.wait_for_selector(".wh-card")
    assert secret not in page.content()
    listed = httpx.get(f"{server.url}/webhooks", headers=auth(server.keys["alice"]), timeout=30)
    assert secret not in listed.text

    # Disable it from the card.
    console.go("#/webhooks")
    page.wait_for_selector(".wh-card")
    page.locator(".wh-card button", has_text="Disable").first.click()
    page.wait_for_selector(".wh-card .badge-bad")
    assert not console.errors, console.errors


def test_another_user_sees_none_of_it(console: ConsolePage) -> None:
    hooks = httpx.get(
        f"{console.server.url}/webhooks", headers=auth(console.server.keys["alice"]), timeout=30
    ).json()["webhooks"]
    page = console.sign_in("bob").page
    console.go("#/webhooks")
    page.wait_for_selector(".state-empty")
    assert page.locator(".wh-card").count() == 0
    if hooks:
        console.go(f"#/webhooks/{hooks[0]['id']}")
        page.wait_for_selector("#wh-log .state-empty")
        assert "Webhook not found" in page.inner_text("#wh-log")
    # The browser logs the 404 it was meant to get; nothing else.
    assert [e for e in console.errors if "404" not in e] == [], console.errors


def test_the_screen_fits_a_phone(console: ConsolePage, tmp_path: Path) -> None:
    page = console.sign_in("alice").page
    console.go("#/webhooks")
    page.wait_for_selector("#wh-form")
    page.set_viewport_size({"width": 390, "height": 844})
    overflow = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 1, overflow
    console.screenshot("webhooks-phone")
    assert not console.errors, console.errors


def test_a_long_delivery_summary_stays_inside_the_delivery_log(console: ConsolePage) -> None:
    """A delivery's summary is one line cut with an ellipsis: the row stays inside the log
    at full width (it was as wide as the whole summary, running under the New webhook form
    beside the log)."""
    headers = auth(console.server.keys["alice"])
    made = httpx.post(
        f"{console.server.url}/webhooks",
        headers=headers,
        json={"url": f"http://127.0.0.1:{free_port()}/long", "events": ["task.completed"]},
        timeout=30,
    )
    assert made.status_code == 201, made.text
    hook = made.json()["id"]
    answer = httpx.post(
        f"{console.server.url}/message", headers=headers, json={"body": "long " * 200}, timeout=60
    )
    assert answer.status_code == 200, answer.text
    page = console.sign_in("alice").page
    console.go(f"#/webhooks/{hook}")
    page.wait_for_selector(".wh-delivery .wh-summary")
    log, row = page.evaluate(
        "() => [document.querySelector('#wh-log'), document.querySelector('.wh-delivery')]"
        ".map((e) => e.getBoundingClientRect().right)"
    )
    console.screenshot("webhooks-long-summary", narrow=False)
    assert row <= log, (row, log)
    assert not console.errors, console.errors
