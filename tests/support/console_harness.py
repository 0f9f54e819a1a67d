"""Real `mail server` processes and a real headless Chromium for the console tests.

The browser is the system's Chromium (Debian package `chromium`, installed by `.ci/run`)
driven by Playwright for Python; no browser is downloaded. Tests skip with a clear reason
when the executable is missing, unless ``MAIL_REQUIRE_BROWSER=1`` (then they fail).

The fixtures `browser` (one Chromium per module) and `console` (a fresh tab on the module's
server) are registered by tests/conftest.py; a console test module defines the module-scoped
fixture `console_server`, usually as ``with serve_console(directory, ...) as server``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.server_fixtures import (
    REPO_ROOT,
    ServerProcess,
    auth,
    create_key,
    free_port,
    write_config,
    write_stub_swarms,
)

WIDE = {"width": 1280, "height": 800}
NARROW = {"width": 390, "height": 844}
# Generous: the machine running the suite may be shared and busy.
ANSWER_TIMEOUT_MS = 90_000
STARTUP_TIMEOUT = 120.0


def chromium_path() -> str | None:
    for candidate in (
        os.environ.get("MAIL_CHROMIUM"),
        "/usr/bin/chromium",
        shutil.which("chromium"),
    ):
        if candidate and Path(candidate).exists():
            return candidate
    return None


def require_chromium() -> str:
    path = chromium_path()
    if path is None:
        message = "no Chromium executable (apt-get install chromium, or set MAIL_CHROMIUM)"
        if os.environ.get("MAIL_REQUIRE_BROWSER") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return path


@dataclass
class ConsoleServer:
    """A running server plus the keys of its callers (role, id) -> key."""

    process: ServerProcess
    keys: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.process.base_url

    @property
    def console(self) -> str:
        return self.process.base_url + "/ui/"

    def post(self, who: str, body: dict[str, Any], timeout: float = 120.0) -> dict[str, Any]:
        response = httpx.post(
            f"{self.url}/message", headers=auth(self.keys[who]), json=body, timeout=timeout
        )
        response.raise_for_status()
        return response.json()


def start_console_server(
    directory: Path,
    *,
    swarm: str,
    who: list[tuple[str, str]],
    stub: bool = False,
    source: Path | None = None,
    env: dict[str, str] | None = None,
    settings: str = "",
) -> ConsoleServer:
    """`mail server` on `swarm` of the repository's swarms.json (or of `source`, or of the
    stub swarms when `stub`), with a key for each (role, id) of `who`."""
    directory.mkdir(parents=True, exist_ok=True)
    port = free_port()
    if stub:
        source = write_stub_swarms(directory, swarm)
    config = write_config(
        directory,
        port=port,
        swarm=swarm,
        source=str(source or REPO_ROOT / "swarms.json"),
        extra=settings,
    )
    keys_file = directory / "registries" / "keys.json"
    keys = {ident: create_key(keys_file, role, ident) for role, ident in who}
    # --config: other tests may leave MAIL_CONFIG_PATH set in this process's environment.
    args = ["--config", str(config), "--port", str(port)]
    process = ServerProcess(directory, port, args=args, env=dict(env or {})).start(wait=False)
    try:
        process.wait_healthy(STARTUP_TIMEOUT)
    except BaseException:
        process.stop()
        raise
    return ConsoleServer(process, keys)


@contextmanager
def serve_console(directory: Path, **options: Any) -> Iterator[ConsoleServer]:
    """A server for browser tests (skipped without Chromium), stopped on leaving; `options`
    as for `start_console_server`."""
    require_chromium()
    server = start_console_server(directory, **options)
    try:
        yield server
    finally:
        server.process.stop()


def launch_browser(playwright: Any) -> Any:
    # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
    return playwright.chromium.launch(
        executable_path=require_chromium(), headless=True, args=["--no-sandbox"]
    )


class ConsolePage:
    """One browser tab on the console, recording page errors and console errors."""

    def __init__(self, browser: Any, server: ConsoleServer, shots: Path) -> None:
        self.server = server
        self.shots = shots
        self.context = browser.new_context(viewport=WIDE)
        self.page = self.context.new_page()
        self.page.set_default_timeout(30_000)
        self.errors: list[str] = []
        self.page.on("pageerror", lambda exc: self.errors.append(f"pageerror: {exc}"))
        self.page.on(
            "console",
            lambda msg: self.errors.append(f"console: {msg.text}") if msg.type == "error" else None,
        )

    def open(self, fragment: str = "") -> ConsolePage:
        self.page.goto(self.server.console + fragment)
        return self

    def sign_in(self, who: str) -> ConsolePage:
        self.open()
        self.page.fill("#api-key", self.server.keys[who])
        self.page.click("form.signin-form button[type=submit]")
        self.page.wait_for_selector("nav.nav")
        return self

    def go(self, fragment: str) -> None:
        self.page.evaluate("(f) => { location.hash = f; }", fragment)

    def send(self, text: str, selector: str) -> None:
        """Sends ``text`` from the chat and waits for one more element matching ``selector``."""
        self.go("#/chat")
        self.page.wait_for_selector("#chat-input")
        before = self.page.locator(selector).count()
        self.page.fill("#chat-input", text)
        self.page.click("#chat-send")
        self.page.wait_for_function(
            "([sel, n]) => document.querySelectorAll(sel).length > n",
            arg=[selector, before],
            timeout=ANSWER_TIMEOUT_MS,
        )

    def screenshot(self, name: str, *, narrow: bool = True) -> list[Path]:
        """Saves a wide (1280x800) and, unless told otherwise, a phone-width screenshot."""
        self.shots.mkdir(parents=True, exist_ok=True)
        wide = self.shots / f"{name}-wide.png"
        self.page.screenshot(path=str(wide))
        saved = [wide]
        if narrow:
            self.page.set_viewport_size(NARROW)
            narrow_path = self.shots / f"{name}-narrow.png"
            self.page.screenshot(path=str(narrow_path), full_page=True)
            self.page.set_viewport_size(WIDE)
            saved.append(narrow_path)
        return saved

    def close(self) -> None:
        self.context.close()


def new_console(browser: Any, server: ConsoleServer, tmp_path: Path) -> Iterator[ConsolePage]:
    console = ConsolePage(browser, server, tmp_path / "screenshots")
    try:
        yield console
    finally:
        console.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """One headless Chromium per console test module (Playwright, the system's Chromium)."""
    from playwright.sync_api import sync_playwright

    require_chromium()
    with sync_playwright() as playwright:
        instance = launch_browser(playwright)
        try:
            yield instance
        finally:
            instance.close()


@pytest.fixture
def console(browser: Any, console_server: ConsoleServer, tmp_path: Path) -> Iterator[ConsolePage]:
    """A new tab (signed out) on the module's `console_server`."""
    yield from new_console(browser, console_server, tmp_path)
