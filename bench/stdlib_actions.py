"""Cost of the stdlib http action's guards (not a test): prints numbers.

    uv run bench/stdlib_actions.py [--calls 300]

Against an aiohttp server on 127.0.0.1 (allow-listed), it times sequential calls of:

1. `http_get.function(...)`: the whole action (settings lookup, guarded client, address
   check, size-capped read), one fresh client per call as the action does;
2. a plain `httpx.AsyncClient` GET per call, fresh client each time sharing the same TLS
   context (the same connection pattern without any guard) — the difference is what the
   guard and argument checks cost; and a default httpx client per call, which loads the CA
   bundle every time (what the actions avoid by sharing one context);
3. `AddressPolicy.check` alone on an already-resolved address.

Medians and p95 in milliseconds.
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/http.py would shadow the stdlib `http` package when this directory leads sys.path.
if sys.path and Path(sys.path[0] or ".").resolve() == Path(__file__).resolve().parent:
    del sys.path[0]

import argparse  # noqa: E402
import asyncio  # noqa: E402
import ipaddress  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Awaitable, Callable  # noqa: E402

import httpx  # noqa: E402
from aiohttp import web  # noqa: E402


async def _timed(calls: int, fn: Callable[[], Awaitable[object]]) -> list[float]:
    out = []
    for _ in range(calls):
        start = time.perf_counter()
        await fn()
        out.append((time.perf_counter() - start) * 1000)
    return out


def _report(name: str, samples: list[float]) -> None:
    samples = sorted(samples)
    p95 = samples[int(len(samples) * 0.95) - 1]
    print(f"{name:<44} median {statistics.median(samples):7.3f} ms   p95 {p95:7.3f} ms")


async def main(calls: int) -> None:
    os.environ["MAIL_STDLIB_NET_ALLOWED_HOSTS"] = "127.0.0.1"
    for var in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        os.environ.pop(var, None)
    from mail.config import StdlibNetConfig
    from mail.stdlib.http import http_get
    from mail.stdlib.netguard import AddressPolicy, shared_ssl_context

    app = web.Application()
    app.router.add_get("/", lambda request: web.Response(text="ok" * 100))
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    url = f"http://127.0.0.1:{port}/"

    async def action() -> None:
        assert (await http_get.function({"url": url})).startswith("okok")

    async def plain() -> None:
        async with httpx.AsyncClient(trust_env=False) as client:
            (await client.get(url)).raise_for_status()

    async def plain_shared_tls() -> None:
        async with httpx.AsyncClient(trust_env=False, verify=shared_ssl_context()) as client:
            (await client.get(url)).raise_for_status()

    policy = AddressPolicy.from_config(StdlibNetConfig(allowed_hosts=["10.0.0.0/8"]))
    address = [ipaddress.ip_address("93.184.216.34")]

    async def check() -> None:
        policy.check("example.com", address)

    for fn in (action, plain, plain_shared_tls):  # warm up imports and the loopback path
        await _timed(10, fn)
    _report("http_get action (guarded, fresh client)", await _timed(calls, action))
    _report("plain httpx GET, shared TLS ctx, no guard", await _timed(calls, plain_shared_tls))
    _report("plain httpx GET, default client, no guard", await _timed(calls // 4, plain))
    _report("AddressPolicy.check (one address)", await _timed(calls * 10, check))
    await runner.cleanup()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    asyncio.run(main(parser.parse_args().calls))
