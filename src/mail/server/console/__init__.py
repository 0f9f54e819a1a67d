"""The web console: static assets under ``/ui``, served by the MAIL server itself.

The pages are plain ES modules and CSS shipped in ``assets/`` (no build step). They call the
same HTTP API as every other client, with the API key the user typed (kept in the browser's
sessionStorage). Serving the assets needs no key; everything they fetch does.

Every response carries a strict Content-Security-Policy: scripts, styles and connections only
from this origin, no inline code, no framing.
"""

from __future__ import annotations

import logging
import mimetypes
import threading
import time
from pathlib import Path
from typing import Any

from fastapi import APIRouter, HTTPException
from starlette.responses import RedirectResponse, Response

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

router = APIRouter(include_in_schema=False)


def _asset(relative: str) -> Response:
    path = (ASSETS_DIR / relative).resolve()
    if not path.is_relative_to(ASSETS_DIR) or not path.is_file():
        raise HTTPException(404, "Not found")
    media = _TYPES.get(path.suffix) or mimetypes.guess_type(path.name)[0]
    if media is None:
        raise HTTPException(404, "Not found")
    return Response(path.read_bytes(), media_type=media, headers=SECURITY_HEADERS)


@router.get(CONSOLE_PATH)
async def console_redirect() -> Response:
    # Relative asset URLs in index.html need the trailing slash.
    return RedirectResponse(CONSOLE_PATH + "/", status_code=308, headers=SECURITY_HEADERS)


@router.get(CONSOLE_PATH + "/")
async def console_index() -> Response:
    return _asset("index.html")


@router.get(CONSOLE_PATH + "/{relative:path}")
async def console_asset(relative: str) -> Response:
    return _asset(relative)


def console_url(base_url: str) -> str:
    return base_url.rstrip("/") + CONSOLE_PATH + "/"


__all__ = [
    "CONSOLE_PATH",
    "CONTENT_SECURITY_POLICY",
    "console_url",
    "open_browser_when_ready",
    "router",
]


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
