"""``/openapi.json`` and ``/docs``: the committed API document, and a page to try it out."""

from __future__ import annotations

import json
import logging
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from mail.server.console import SECURITY_HEADERS, not_found, slash_redirect

logger = logging.getLogger("mail.server")

DOCS_PATH = "/docs"
OPENAPI_PATH = "/openapi.json"
HERE = Path(__file__).resolve().parent
# Swagger UI's files that the page uses (the package also ships an editor we do not serve).
SWAGGER_FILES = {
    "swagger-ui.css": "text/css; charset=utf-8",
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "favicon-32x32.png": "image/png",
}
OWN_FILES = {
    "index.html": "text/html; charset=utf-8",
    "start.js": "text/javascript; charset=utf-8",
}


def spec_path() -> Path | None:
    """Where the committed OpenAPI document is: inside the wheel, else in the checkout."""
    for candidate in (
        HERE.parents[1] / "spec" / "openapi.yaml",  # mail/spec/openapi.yaml in a wheel
        HERE.parents[3] / "spec" / "openapi.yaml",  # <checkout>/spec/openapi.yaml
    ):
        if candidate.is_file():
            return candidate
    return None


@lru_cache(maxsize=1)
def openapi_json() -> bytes | None:
    path = spec_path()
    if path is None:
        logger.warning("spec/openapi.yaml not found: /openapi.json answers 404")
        return None
    import yaml

    return json.dumps(yaml.safe_load(path.read_text(encoding="utf-8"))).encode()


async def _openapi(request: Request) -> Response:
    body = openapi_json()
    if body is None:
        return not_found()
    return Response(body, media_type="application/json")


async def _index(request: Request) -> Response:
    return _own("index.html")


def _own(name: str) -> Response:
    body = (HERE / name).read_bytes()
    return Response(body, media_type=OWN_FILES[name], headers=SECURITY_HEADERS)


@lru_cache(maxsize=len(SWAGGER_FILES))
def _swagger_file(name: str) -> bytes | None:
    try:
        return (resources.files("swagger_ui") / "static" / name).read_bytes()
    except (ModuleNotFoundError, FileNotFoundError, OSError):
        return None


async def _asset(request: Request) -> Response:
    name = request.path_params["name"]
    if name in OWN_FILES and name != "index.html":
        return _own(name)
    if name not in SWAGGER_FILES:
        return not_found()
    body = _swagger_file(name)
    if body is None:
        return not_found()
    headers = {**SECURITY_HEADERS, "Cache-Control": "public, max-age=86400"}
    return Response(body, media_type=SWAGGER_FILES[name], headers=headers)


def install_api_docs(app: Any) -> None:
    """Serve ``/openapi.json`` and ``/docs`` on ``app``."""
    app.router.routes.extend(
        [
            Route(OPENAPI_PATH, _openapi, methods=["GET"]),
            Route(DOCS_PATH, slash_redirect(DOCS_PATH), methods=["GET"]),
            Route(DOCS_PATH + "/", _index, methods=["GET"]),
            Route(DOCS_PATH + "/assets/{name}", _asset, methods=["GET"]),
        ]
    )


__all__ = ["install_api_docs", "openapi_json", "spec_path"]
