"""HTTP actions: one per verb, each returning the response body as text."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlsplit

import httpx

from mail.api.actions import MAILAction
from mail.config import StdlibConfig
from mail.stdlib._common import bad_args, error, exception_text, settings, stdlib_action
from mail.stdlib.http.bounded import ResponseTooLarge, UnsupportedEncoding, read_capped
from mail.stdlib.netguard import AddressRefused, guarded_client

_URL = {"type": "string", "description": "The URL to request."}
_HEADERS = {"type": "object", "description": "HTTP headers to send.", "optional": True}
_REQUIRED_HEADERS = {"type": "object", "description": "HTTP headers to send."}
_BODY = {"type": "object", "description": "JSON object sent as the request body."}

URL_AND_HEADERS: dict[str, Any] = {
    "type": "object",
    "properties": {"url": _URL, "headers": _HEADERS},
    "required": ["url"],
}
WITH_BODY: dict[str, Any] = {
    "type": "object",
    "properties": {"url": _URL, "headers": _REQUIRED_HEADERS, "body": _BODY},
    "required": ["url", "headers", "body"],
}
PATCH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"url": _URL, "headers": _HEADERS, "body": _BODY},
    "required": ["url", "body"],
}


def transport_error(exc: BaseException, cfg: StdlibConfig) -> str:
    """The agent's text for a failed request."""
    if isinstance(exc, AddressRefused | ResponseTooLarge | UnsupportedEncoding):
        return error(str(exc))
    if isinstance(exc, httpx.ConnectTimeout):
        return error(f"connecting timed out after {cfg.http.connect_timeout:g} s")
    if isinstance(exc, httpx.TimeoutException):
        return error(f"no response data within {cfg.http.read_timeout:g} s")
    if isinstance(exc, TimeoutError):
        return error(
            f"request took longer than {cfg.http.total_timeout:g} s ([stdlib.http] total_timeout)"
        )
    if isinstance(exc, httpx.TooManyRedirects):
        return error(f"more than {cfg.http.max_redirects} redirects")
    return exception_text(exc)


def _header_values(headers: dict[str, Any]) -> dict[str, str] | str:
    out: dict[str, str] = {}
    for key, value in headers.items():
        if isinstance(value, bool | int | float | str):
            out[str(key)] = str(value)
        else:
            return error("`headers` values must be strings")
    return out


async def guarded_get_json_bytes(url: str, cfg: StdlibConfig) -> tuple[int, bytes]:
    """GET `url` asking for JSON, through the address guard and within ``[stdlib.http]``'s
    total time; the body (capped while read) only with a 200, else ``b""``. Transport
    failures raise (``transport_error`` words them)."""
    client = guarded_client(cfg.net, cfg.http, headers={"Accept": "application/json"})
    async with asyncio.timeout(cfg.http.total_timeout), client:
        async with client.stream("GET", url) as response:
            if response.status_code != 200:
                return response.status_code, b""
            return 200, await read_capped(response, cfg.http.max_response_bytes)


def check_url(url: str) -> str | None:
    """An error text unless ``url`` is an absolute http(s) URL."""
    parts = urlsplit(url.strip())
    if parts.scheme.lower() not in ("http", "https"):
        return error(f"only http and https URLs are supported, got {url!r}")
    if not parts.hostname:
        return error(f"{url!r} has no host")
    return None


async def send(method: str, args: dict[str, Any], *, with_body: bool) -> str:
    """Send one request; ``args`` are already validated."""
    bad_url = check_url(args["url"])
    if bad_url:
        return bad_url
    cfg = settings()
    headers = args.get("headers")
    sent_headers = _header_values(headers) if isinstance(headers, dict) else None
    if isinstance(sent_headers, str):
        return sent_headers
    request: dict[str, Any] = {"headers": sent_headers}
    if with_body:
        request["json"] = args["body"]
    # HEAD is not redirected, as in the original (aiohttp does not follow it either).
    client = guarded_client(cfg.net, cfg.http, follow_redirects=method != "HEAD")
    try:
        async with asyncio.timeout(cfg.http.total_timeout), client:
            async with client.stream(method, args["url"], **request) as response:
                data = await read_capped(response, cfg.http.max_response_bytes)
                return data.decode(response.encoding or "utf-8", errors="replace")
    except Exception as exc:  # noqa: BLE001 - every failure becomes the agent's Error: text
        return transport_error(exc, cfg)


def _verb_action(method: str, description: str, parameters: dict[str, Any]) -> MAILAction:
    """The action for one HTTP verb: check the arguments its schema requires, then send."""
    required = tuple(parameters["required"])
    with_body = "body" in parameters["properties"]

    async def request(args: dict[str, Any]) -> str:
        problem = bad_args(
            args, required, ("url",), ("headers", "body") if with_body else ("headers",)
        )
        return problem or await send(method, args, with_body=with_body)

    name = f"http_{method.lower()}"
    request.__name__ = request.__qualname__ = name
    return stdlib_action(name, description, parameters)(request)


http_get = _verb_action("GET", "get a URL via HTTP", URL_AND_HEADERS)
http_post = _verb_action("POST", "post to a URL via HTTP", WITH_BODY)
http_put = _verb_action("PUT", "put to a URL via HTTP", WITH_BODY)
http_delete = _verb_action("DELETE", "delete a URL via HTTP", URL_AND_HEADERS)
http_patch = _verb_action("PATCH", "patch a URL via HTTP", PATCH_SCHEMA)
http_head = _verb_action("HEAD", "head a URL via HTTP", URL_AND_HEADERS)
http_options = _verb_action("OPTIONS", "options a URL via HTTP", URL_AND_HEADERS)
