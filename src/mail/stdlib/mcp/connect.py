"""Opening an MCP client session for an agent-supplied ``server_url``, guarded."""

from __future__ import annotations

import functools
import shutil
import sys
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

from mail.config import StdlibConfig
from mail.stdlib.netguard import AddressPolicy, AddressRefused, GuardedRouting


class ServerRefused(Exception):
    """A ``server_url`` the settings do not allow (the message is shown to the agent)."""


class ByteBudget:
    """Bytes one MCP call may receive over HTTP, every answer of its session together.

    Counted in the transport as the bytes arrive, before the SDK buffers or parses them, so
    a server that answers ``tools/list`` with 150 MB costs at most the budget in memory.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.refusal: str | None = None

    def take(self, size: int) -> None:
        self.used += size
        if self.used > self.limit:
            self.refusal = (
                f"the MCP server sent more than {self.limit} bytes "
                "([stdlib.mcp] max_response_bytes)"
            )
            raise AnswerTooLarge(self.refusal)

    def refuse_encoding(self, encoding: str) -> None:
        self.refusal = (
            f"the MCP server answered with Content-Encoding '{encoding}'; only uncompressed "
            "answers are read (their size is counted as they arrive)"
        )
        raise AnswerTooLarge(self.refusal)


class AnswerTooLarge(Exception):
    """Raised inside the transport once a `ByteBudget` is spent."""


@functools.cache
def _guarded_transport2_class() -> Any:
    """The guarded transport for httpx2 clients (built on first use: httpx2 loads lazily)."""
    import httpcore2
    import httpx2

    class CountedStream(httpx2.AsyncByteStream):
        def __init__(self, inner: Any, budget: ByteBudget) -> None:
            self.inner = inner
            self.budget = budget

        async def __aiter__(self) -> Any:
            async for chunk in self.inner:
                self.budget.take(len(chunk))
                yield chunk

        async def aclose(self) -> None:
            await self.inner.aclose()

    class GuardedTransport2(GuardedRouting, httpx2.AsyncBaseTransport):
        http: ClassVar[Any] = httpx2
        core: ClassVar[Any] = httpcore2
        budget: ByteBudget | None = None

        async def handle_async_request(self, request: Any) -> Any:
            response = await super().handle_async_request(request)
            if self.budget is not None:
                encoding = response.headers.get("content-encoding", "identity").strip().lower()
                if encoding not in ("", "identity"):
                    await response.aclose()
                    self.budget.refuse_encoding(encoding)
                response.stream = CountedStream(response.stream, self.budget)
            return response

    return GuardedTransport2


def _httpx2_client(
    cfg: StdlibConfig, budget: ByteBudget, headers: dict[str, str] | None = None
) -> Any:
    import httpx2

    transport = _guarded_transport2_class()(
        AddressPolicy.from_config(cfg.net), trust_env=cfg.net.trust_env
    )
    transport.budget = budget
    return httpx2.AsyncClient(
        transport=transport,
        trust_env=False,
        # Compressed answers could not be counted before they are inflated.
        headers={**(headers or {}), "Accept-Encoding": "identity"},
        timeout=httpx2.Timeout(cfg.mcp.timeout, connect=cfg.http.connect_timeout),
        follow_redirects=False,
    )


def allowed_command(server_url: str, cfg: StdlibConfig) -> list[str] | None:
    """The command line for an allow-listed local script (None when not allowed)."""
    if not cfg.mcp.allowed_commands:
        return None
    wanted = Path(server_url).expanduser().resolve()
    allowed = {Path(entry).expanduser().resolve() for entry in cfg.mcp.allowed_commands}
    if wanted not in allowed or not wanted.is_file():
        return None
    if wanted.suffix == ".py":
        return [sys.executable, str(wanted)]
    if wanted.suffix == ".js":
        node = shutil.which("node")
        if node is None:
            raise ServerRefused(f"{server_url} needs node, which is not installed")
        return [node, str(wanted)]
    raise ServerRefused(f"Unsupported script type: {server_url}")


async def open_transport(
    stack: AsyncExitStack, server_url: str, cfg: StdlibConfig, budget: ByteBudget
) -> Any:
    """What to hand to ``mcp.Client`` for ``server_url`` (resources go on ``stack``)."""
    from mcp import StdioServerParameters

    url = server_url.strip()
    scheme = urlsplit(url).scheme.lower()
    if scheme in ("http", "https"):
        if not urlsplit(url).hostname:
            raise ServerRefused(f"{server_url!r} has no host")
        if urlsplit(url).path.rstrip("/").endswith("/sse"):
            from mcp.client.sse import sse_client

            def factory(
                headers: dict[str, str] | None = None, timeout: Any = None, auth: Any = None
            ) -> Any:
                return _httpx2_client(cfg, budget, headers)

            return sse_client(url, httpx_client_factory=factory, sse_read_timeout=cfg.mcp.timeout)
        from mcp.client.streamable_http import streamable_http_client

        client = await stack.enter_async_context(_httpx2_client(cfg, budget))
        return streamable_http_client(url, http_client=client)
    command = allowed_command(url, cfg)
    if command is None:
        if scheme and len(scheme) > 1:
            raise ServerRefused(
                f"unsupported MCP server URL {server_url!r}: use an http:// or https:// URL"
            )
        raise ServerRefused(
            f"launching {server_url!r} as a local MCP server is not allowed; only http(s) URLs "
            "are accepted unless the script is listed in [stdlib.mcp] allowed_commands"
        )
    # Through the relay, which counts what the server writes (the SDK buffers whole lines).
    relay = str(Path(__file__).with_name("stdio_relay.py"))
    limit = str(cfg.mcp.max_response_bytes)
    return StdioServerParameters(command=sys.executable, args=[relay, limit, *command])


__all__ = [
    "AddressRefused",
    "AnswerTooLarge",
    "ByteBudget",
    "ServerRefused",
    "allowed_command",
    "open_transport",
]
