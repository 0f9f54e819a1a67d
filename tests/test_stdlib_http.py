"""mail.stdlib.http against a real aiohttp server on 127.0.0.1 (allow-listed for these tests)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from aiohttp import web

from mail.stdlib.http import (
    http_delete,
    http_get,
    http_head,
    http_options,
    http_patch,
    http_post,
    http_put,
)

PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


@pytest.fixture(autouse=True)
def loopback_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in PROXY_VARS:
        monkeypatch.delenv(var, raising=False)
        monkeypatch.delenv(var.lower(), raising=False)
    monkeypatch.setenv("MAIL_STDLIB_NET_ALLOWED_HOSTS", "127.0.0.1")


@dataclass
class Site:
    base: str
    hits: list[str] = field(default_factory=list)


async def _start(app: web.Application, host: str) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, host, 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, port


@pytest.fixture
async def other() -> AsyncIterator[Site]:
    """A server on 127.0.0.2: loopback, but not on the allow-list."""
    site = Site("")

    async def secret(request: web.Request) -> web.Response:
        site.hits.append(request.path)
        return web.Response(text="internal secret")

    app = web.Application()
    app.router.add_get("/secret", secret)
    runner, port = await _start(app, "127.0.0.2")
    site.base = f"http://127.0.0.2:{port}"
    yield site
    await runner.cleanup()


@pytest.fixture
async def server(other: Site) -> AsyncIterator[Site]:
    site = Site("")

    async def echo(request: web.Request) -> web.Response:
        site.hits.append(f"{request.method} {request.path}")
        payload = {
            "method": request.method,
            "headers": {k.lower(): v for k, v in request.headers.items()},
            "body": await request.text(),
        }
        return web.json_response(payload, headers={"Allow": "GET, POST"})

    async def redirect(request: web.Request) -> web.Response:
        raise web.HTTPFound(request.query["to"])

    async def big(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)  # chunked: no Content-Length to trust
        for _ in range(64):
            await response.write(b"x" * 1024)
        return response

    async def sized(request: web.Request) -> web.Response:
        return web.Response(body=b"y" * 5000)

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(30)
        return web.Response(text="late")

    async def missing(request: web.Request) -> web.Response:
        return web.Response(status=404, text="no such page")

    app = web.Application()
    app.router.add_route("*", "/echo", echo)
    app.router.add_get("/redirect", redirect)
    app.router.add_get("/big", big)
    app.router.add_get("/sized", sized)
    app.router.add_get("/slow", slow)
    app.router.add_get("/missing", missing)
    runner, port = await _start(app, "127.0.0.1")
    site.base = f"http://127.0.0.1:{port}"
    yield site
    await runner.cleanup()


async def test_get_sends_headers_and_returns_body(server: Site) -> None:
    out = await http_get.function({"url": f"{server.base}/echo", "headers": {"X-Token": "abc"}})
    seen = json.loads(out)
    assert seen["method"] == "GET"
    # The original dropped GET headers.
    assert seen["headers"]["x-token"] == "abc"


@pytest.mark.parametrize(
    ("action", "verb"), [(http_post, "POST"), (http_put, "PUT"), (http_patch, "PATCH")]
)
async def test_verbs_with_a_json_body(server: Site, action, verb: str) -> None:  # type: ignore[no-untyped-def]
    out = await action.function(
        {"url": f"{server.base}/echo", "headers": {"X-Kind": verb}, "body": {"n": 1}}
    )
    seen = json.loads(out)
    assert seen["method"] == verb
    assert json.loads(seen["body"]) == {"n": 1}
    assert seen["headers"]["content-type"] == "application/json"
    assert seen["headers"]["x-kind"] == verb


async def test_delete_forwards_headers(server: Site) -> None:
    out = await http_delete.function({"url": f"{server.base}/echo", "headers": {"X-A": "1"}})
    seen = json.loads(out)
    assert seen["method"] == "DELETE" and seen["headers"]["x-a"] == "1"


async def test_head_returns_empty_body_and_options_the_body(server: Site) -> None:
    assert await http_head.function({"url": f"{server.base}/echo"}) == ""
    out = await http_options.function({"url": f"{server.base}/echo", "headers": {"X-B": "2"}})
    assert json.loads(out)["method"] == "OPTIONS"
    assert server.hits.count("HEAD /echo") == 1


async def test_caller_content_type_wins(server: Site) -> None:
    out = await http_post.function(
        {
            "url": f"{server.base}/echo",
            "headers": {"Content-Type": "application/vnd.test+json"},
            "body": {},
        }
    )
    assert json.loads(out)["headers"]["content-type"] == "application/vnd.test+json"


async def test_error_status_returns_the_body(server: Site) -> None:
    assert await http_get.function({"url": f"{server.base}/missing"}) == "no such page"


async def test_redirects_are_followed_when_allowed(server: Site) -> None:
    out = await http_get.function({"url": f"{server.base}/redirect?to=/echo"})
    assert json.loads(out)["method"] == "GET"


async def test_redirect_to_a_refused_address_is_not_followed(server: Site, other: Site) -> None:
    target = f"{other.base}/secret"
    out = await http_get.function({"url": f"{server.base}/redirect?to={target}"})
    assert out.startswith("Error: refused to connect to 127.0.0.2")
    assert "loopback" in out and "allowed_hosts" in out
    assert other.hits == []


async def test_metadata_address_is_refused(server: Site) -> None:
    out = await http_get.function({"url": "http://169.254.169.254/latest/meta-data/"})
    assert out.startswith("Error: refused to connect to 169.254.169.254")
    assert "link-local" in out


async def test_guard_refuses_loopback_when_not_allow_listed(
    server: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MAIL_STDLIB_NET_ALLOWED_HOSTS")
    for url in (f"{server.base}/echo", server.base.replace("127.0.0.1", "localhost") + "/echo"):
        out = await http_get.function({"url": url})
        assert out.startswith("Error: refused to connect to"), out
        assert "loopback" in out
    assert server.hits == []


async def test_guard_can_be_relaxed_by_host_name(
    server: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MAIL_STDLIB_NET_ALLOWED_HOSTS", "localhost")
    url = server.base.replace("127.0.0.1", "localhost") + "/echo"
    assert json.loads(await http_get.function({"url": url}))["method"] == "GET"


async def test_oversize_responses_are_refused(
    server: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MAIL_STDLIB_HTTP_MAX_RESPONSE_BYTES", "4096")
    chunked = await http_get.function({"url": f"{server.base}/big"})
    assert chunked.startswith("Error: response body is over the limit of 4096 bytes")
    declared = await http_get.function({"url": f"{server.base}/sized"})
    assert declared.startswith("Error: response body is 5000 bytes, over the limit")
    monkeypatch.setenv("MAIL_STDLIB_HTTP_MAX_RESPONSE_BYTES", "70000")
    assert len(await http_get.function({"url": f"{server.base}/big"})) == 64 * 1024


async def test_read_timeout(server: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAIL_STDLIB_HTTP_READ_TIMEOUT", "0.5")
    out = await asyncio.wait_for(http_get.function({"url": f"{server.base}/slow"}), 20)
    assert out == "Error: no response data within 0.5 s"


async def test_total_timeout(server: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAIL_STDLIB_HTTP_TOTAL_TIMEOUT", "0.5")
    out = await asyncio.wait_for(http_get.function({"url": f"{server.base}/slow"}), 20)
    assert out.startswith("Error: request took longer than 0.5 s")


@pytest.mark.parametrize(
    ("action", "args", "expected"),
    [
        (http_get, {}, "Error: `url` is required"),
        (http_get, {"url": 5}, "Error: `url` must be a string"),
        (http_get, {"url": "x", "headers": "h"}, "Error: `headers` must be a dictionary"),
        (http_post, {"url": "http://a", "body": {}}, "Error: `headers` is required"),
        (http_put, {"url": "http://a", "headers": {}}, "Error: `body` is required"),
        (http_patch, {"url": "http://a"}, "Error: `body` is required"),
        (http_patch, {"url": "http://a", "body": []}, "Error: `body` must be a dictionary"),
        (http_get, {"url": "file:///etc/passwd"}, "Error: only http and https URLs"),
        (http_get, {"url": "http://a", "headers": {"x": {}}}, "Error: `headers` values"),
    ],
)
async def test_argument_errors(action, args, expected: str) -> None:  # type: ignore[no-untyped-def]
    assert (await action.function(args)).startswith(expected)


async def test_connection_refused_is_an_error_text() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = await http_get.function({"url": f"http://127.0.0.1:{port}/"})
    assert out.startswith("Error: ") and len(out) > len("Error: ")


async def test_environment_proxy_is_used(server: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        seen.append(head.split(b"\r\n", 1)[0])
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\nConnection: close\r\n\r\nproxied")
        await writer.drain()
        writer.close()

    proxy = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = proxy.sockets[0].getsockname()[1]
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
    try:
        assert await http_get.function({"url": f"{server.base}/echo"}) == "proxied"
        assert seen == [f"GET {server.base}/echo HTTP/1.1".encode()]
        # The target is still checked before the proxy is asked.
        out = await http_get.function({"url": "http://169.254.169.254/"})
        assert out.startswith("Error: refused") and len(seen) == 1
        monkeypatch.setenv("MAIL_STDLIB_NET_TRUST_ENV", "false")
        assert json.loads(await http_get.function({"url": f"{server.base}/echo"}))["method"]
        assert len(seen) == 1
    finally:
        proxy.close()
        await proxy.wait_closed()


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("fd00::1", "private"),
        ("fe80::1", "link-local"),
        ("169.254.169.254", "link-local"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),
        # IPv6 forms that carry an IPv4 destination: 6to4, Teredo (client), NAT64, compatible
        ("2002:7f00:1::", "loopback"),
        ("2002:a00:1::1", "private"),
        ("2001:0:4136:e378:8000:63bf:f5ff:fffe", "private"),
        ("64:ff9b::a9fe:a9fe", "link-local"),
        ("::127.0.0.1", "loopback"),
        ("100.64.0.1", "non-public"),
        ("224.0.0.1", "multicast"),
        ("0.0.0.0", "unspecified"),
    ],
)
def test_policy_refuses_internal_addresses(address: str, reason: str) -> None:
    import ipaddress

    from mail.config import StdlibNetConfig
    from mail.stdlib.netguard import AddressPolicy, AddressRefused

    policy = AddressPolicy.from_config(StdlibNetConfig())
    with pytest.raises(AddressRefused, match=reason):
        policy.check("h.example", [ipaddress.ip_address(address)])


def test_policy_allow_list_forms() -> None:
    import ipaddress

    from mail.config import StdlibNetConfig
    from mail.stdlib.netguard import AddressPolicy, AddressRefused

    ip = ipaddress.ip_address
    public = ip("93.184.216.34")
    policy = AddressPolicy.from_config(
        StdlibNetConfig(allowed_hosts=["10.0.0.0/8", "*.corp.example", "db.local"])
    )
    assert policy.check("x.example", [public]) == [public]
    assert policy.check("x.example", [ip("10.9.9.9")]) == [ip("10.9.9.9")]
    assert policy.check("api.corp.example", [ip("192.168.0.5")]) == [ip("192.168.0.5")]
    assert policy.check("DB.local.", [ip("127.0.0.1")]) == [ip("127.0.0.1")]
    # A name answering with one public and one internal address is refused as a whole.
    with pytest.raises(AddressRefused, match="192.168.0.5"):
        policy.check("mixed.example", [public, ip("192.168.0.5")])
    everything = AddressPolicy.from_config(StdlibNetConfig(allow_private_addresses=True))
    assert everything.check("x", [ip("127.0.0.1")]) == [ip("127.0.0.1")]
