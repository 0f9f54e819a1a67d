"""A server behind a path-prefix reverse proxy (`https://host/mail/...` forwarded to the
server's `/...`): the API document, the /docs page and the console work at the prefix.

A real `mail server`, the proxy of support/prefix_proxy.py (which passes answers through as
they are, like a proxy that does not rewrite `Location`), and Chromium. A person types the
address without the trailing slash (`/mail/docs`, `/mail/ui`): its redirect must stay under
the prefix (it sent them to `/docs/` and `/ui/`, outside it: the proxy's 404).
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from server_fixtures import keyed_stub_server
from support.prefix_proxy import PrefixProxy

pytestmark = pytest.mark.timeout(300)

USERS = {"alice": ("user", "alice")}


def test_docs_and_console_addresses_without_a_slash_stay_under_the_prefix(
    tmp_path: Path,
) -> None:
    with keyed_stub_server(tmp_path, USERS) as server, PrefixProxy(server.base_url) as proxy:
        landed = {
            path: httpx.get(f"{proxy.base_url}{path}", follow_redirects=True, timeout=30)
            for path in ("/docs", "/ui")
        }
    for path, answer in landed.items():
        assert answer.status_code == 200, (path, answer.status_code, answer.url)
        assert str(answer.url) == f"{proxy.base_url}{path}/", (path, answer.url)


def test_docs_page_tries_the_api_out_through_the_prefix_in_a_browser(tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    from support.console_harness import launch_browser

    with (
        keyed_stub_server(tmp_path, USERS) as server,
        PrefixProxy(server.base_url) as proxy,
        sync_playwright() as pw,
    ):
        browser = launch_browser(pw)
        try:
            page = browser.new_page()
            page.goto(f"{proxy.base_url}/docs")
            page.wait_for_selector("text=/message", timeout=60_000)
            health = page.locator(".opblock-get").filter(has_text="/health").first
            health.locator(".opblock-summary").first.click()
            health.get_by_role("button", name="Try it out").click()
            health.get_by_role("button", name="Execute").click()
            request_url = health.locator(".request-url pre").inner_text(timeout=30_000)
            answered = health.locator(".live-responses-table tbody .response-col_status")
            status = answered.first.inner_text(timeout=30_000)
            page.screenshot(path=str(tmp_path / "docs-behind-prefix.png"))
        finally:
            browser.close()
    assert request_url.strip() == f"{proxy.base_url}/health", request_url
    assert status.strip().startswith("200"), status
