"""The web console: static assets under ``/ui``, served by the MAIL server itself."""

from __future__ import annotations

import logging
import mimetypes
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

logger = logging.getLogger("mail.server")

CONSOLE_PATH = "/ui"
ASSETS_DIR = Path(__file__).resolve().parent / "assets"

CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "font-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    ]
)

SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    # Assets are small; revalidating every load keeps an upgraded server's console consistent.
    "Cache-Control": "no-cache",
}

_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".txt": "text/plain; charset=utf-8",
}


def not_found() -> Response:
    return JSONResponse({"detail": "Not Found"}, status_code=404, headers=SECURITY_HEADERS)


def _asset(relative: str) -> Response:
    path = (ASSETS_DIR / relative).resolve()
    if not path.is_relative_to(ASSETS_DIR) or not path.is_file():
        return not_found()
    media = _TYPES.get(path.suffix) or mimetypes.guess_type(path.name)[0]
    if media is None:
        return not_found()
    return Response(path.read_bytes(), media_type=media, headers=SECURITY_HEADERS)


def slash_redirect(path: str) -> Callable[[Request], Awaitable[Response]]:
    """The route of `path` that sends to `path/` (relative asset URLs need the slash). The
    target is relative ("ui/"): behind a proxy's path prefix (/mail/ui) it stays under it."""
    target = path.rsplit("/", 1)[-1] + "/"

    async def redirect(request: Request) -> Response:
        return RedirectResponse(target, status_code=308, headers=SECURITY_HEADERS)

    return redirect


async def _index(request: Request) -> Response:
    return _asset("index.html")


async def _file(request: Request) -> Response:
    return _asset(request.path_params["relative"])


def install_console(app: Any) -> None:
    """Serve the console under ``/ui`` on ``app``."""
    app.router.routes.extend(
        [
            Route(CONSOLE_PATH, slash_redirect(CONSOLE_PATH), methods=["GET"]),
            Route(CONSOLE_PATH + "/", _index, methods=["GET"]),
            Route(CONSOLE_PATH + "/{relative:path}", _file, methods=["GET"]),
        ]
    )


def console_url(base_url: str) -> str:
    return base_url.rstrip("/") + CONSOLE_PATH + "/"


def open_browser_when_ready(server: Any, url: str, timeout: float = 60.0) -> threading.Thread:
    """Open ``url`` in a browser once the uvicorn ``server`` has started (background thread)."""

    def wait_and_open() -> None:
        deadline = time.monotonic() + timeout
        while not getattr(server, "started", False):
            if getattr(server, "should_exit", False) or time.monotonic() > deadline:
                return
            time.sleep(0.1)
        import webbrowser

        try:  # a machine without a browser is no reason to disturb the server
            webbrowser.open(url, new=2)
        except Exception as exc:
            logger.warning("could not open a browser for %s: %s", url, exc)

    thread = threading.Thread(target=wait_and_open, name="mail-open-console", daemon=True)
    thread.start()
    return thread


__all__ = [
    "ASSETS_DIR",
    "CONSOLE_PATH",
    "CONTENT_SECURITY_POLICY",
    "console_url",
    "install_console",
    "open_browser_when_ready",
]
