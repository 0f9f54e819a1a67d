"""mail.stdlib.mcp against real MCP servers from the `mcp` package on 127.0.0.1."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.server_fixtures import free_port

from mail.stdlib.mcp import (
    mcp_call_tool,
    mcp_get_prompt,
    mcp_list_prompts,
    mcp_list_resources,
    mcp_list_tools,
    mcp_ping,
    mcp_read_resource,
)

pytestmark = pytest.mark.timeout(120)

SERVER_SCRIPT = textwrap.dedent(
    """
    import sys
    from mcp.server.mcpserver import MCPServer

    srv = MCPServer("stdlib-test")

    @srv.tool()
    def add(a: int, b: int) -> int:
        \"\"\"Add two numbers.\"\"\"
        return a + b

    @srv.tool()
    def shout(text: str) -> str:
        \"\"\"Upper-case a text.\"\"\"
        return text.upper() * int(sys.argv[3]) if len(sys.argv) > 3 else text.upper()

    @srv.tool()
    async def slow() -> str:
        \"\"\"Takes a minute.\"\"\"
        import asyncio

        await asyncio.sleep(60)
        return "late"

    @srv.tool()
    def boom() -> str:
        \"\"\"Always fails.\"\"\"
        raise ValueError("boom failed")

    @srv.prompt()
    def intro(topic: str = "MAIL") -> str:
        \"\"\"An intro prompt.\"\"\"
        return f"Introduce {topic}"

    @srv.resource("doc://a", mime_type="text/plain")
    def doc_a() -> str:
        \"\"\"Document A.\"\"\"
        return "contents of a"

    if sys.argv[1] == "stdio":
        srv.run()
    else:
        srv.run(transport=sys.argv[1], host="127.0.0.1", port=int(sys.argv[2]))
    """
)


def _wait_port(port: int, proc: subprocess.Popen[bytes], deadline: float = 60.0) -> None:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"MCP server exited: {proc.stderr.read() if proc.stderr else ''}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError("MCP server did not start")


@pytest.fixture(scope="module")
def script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("mcp") / "server.py"
    path.write_text(SERVER_SCRIPT, encoding="utf-8")
    return path


def _serve(script: Path, transport: str) -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(script), transport, str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        _wait_port(port, proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="module")
def server(script: Path) -> Iterator[str]:
    for base in _serve(script, "streamable-http"):
        yield base + "/mcp"


@pytest.fixture(autouse=True)
def loopback_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("MAIL_STDLIB_NET_ALLOWED_HOSTS", "127.0.0.1")


async def test_ping(server: str) -> None:
    assert await mcp_ping.function({"server_url": server}) == "True"


async def test_tools(server: str) -> None:
    listed = await mcp_list_tools.function({"server_url": server})
    assert listed.startswith("[Tool(name='add'")
    assert "name='shout'" in listed and "Add two numbers." in listed
    out = await mcp_call_tool.function(
        {"server_url": server, "tool_name": "add", "tool_input": {"a": 2, "b": 3}}
    )
    assert out.startswith("CallToolResult(content=[TextContent(type='text', text='5'")
    assert "data=5" in out and "is_error=False" in out


async def test_tool_errors(server: str) -> None:
    failed = await mcp_call_tool.function(
        {"server_url": server, "tool_name": "boom", "tool_input": {}}
    )
    assert failed.startswith("Error: ") and "boom" in failed
    unknown = await mcp_call_tool.function(
        {"server_url": server, "tool_name": "nope", "tool_input": {}}
    )
    assert unknown == "Error: Unknown tool: nope"


async def test_prompts(server: str) -> None:
    listed = await mcp_list_prompts.function({"server_url": server})
    assert listed.startswith("[Prompt(name='intro'")
    got = await mcp_get_prompt.function({"server_url": server, "prompt_name": "intro"})
    assert "Introduce MAIL" in got
    # Prompt arguments are an addition: the original could not pass any.
    got = await mcp_get_prompt.function(
        {"server_url": server, "prompt_name": "intro", "arguments": {"topic": "federation"}}
    )
    assert "Introduce federation" in got
    missing = await mcp_get_prompt.function({"server_url": server, "prompt_name": "nope"})
    # The SDK's server answers an unknown prompt with a generic internal error.
    assert missing.startswith("Error: ")


async def test_resources(server: str) -> None:
    listed = await mcp_list_resources.function({"server_url": server})
    assert "uri='doc://a'" in listed and listed.startswith("[Resource(")
    read = await mcp_read_resource.function({"server_url": server, "resource_uri": "doc://a"})
    assert read.startswith("[TextResourceContents(uri='doc://a'")
    assert "text='contents of a'" in read
    missing = await mcp_read_resource.function({"server_url": server, "resource_uri": "doc://z"})
    assert missing == "Error: Unknown resource: doc://z"


async def test_result_size_cap(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAIL_STDLIB_MCP_MAX_RESULT_CHARS", "50")
    out = await mcp_list_tools.function({"server_url": server})
    assert out.startswith("Error: MCP result is ") and "over the limit of 50" in out


@pytest.mark.parametrize(
    ("action", "args", "expected"),
    [
        (mcp_ping, {}, "Error: `server_url` is required"),
        (mcp_ping, {"server_url": 1}, "Error: `server_url` must be a string"),
        (mcp_call_tool, {"server_url": "http://x"}, "Error: `tool_name` is required"),
        (mcp_call_tool, {"server_url": "http://x", "tool_name": "a"}, "Error: `tool_input` is"),
        (
            mcp_call_tool,
            {"server_url": "http://x", "tool_name": 1, "tool_input": {}},
            "Error: `tool_name` must be a string",
        ),
        (
            mcp_call_tool,
            {"server_url": "http://x", "tool_name": "a", "tool_input": []},
            "Error: `tool_input` must be a dictionary",
        ),
        (mcp_get_prompt, {"server_url": "http://x"}, "Error: `prompt_name` is required"),
        (mcp_read_resource, {"server_url": "http://x"}, "Error: `resource_uri` is required"),
        (
            mcp_read_resource,
            {"server_url": "http://x", "resource_uri": 3},
            "Error: `resource_uri` must be a string",
        ),
    ],
)
async def test_argument_errors(action, args, expected: str) -> None:  # type: ignore[no-untyped-def]
    assert (await action.function(args)).startswith(expected)


async def test_guard_refuses_loopback_when_not_allow_listed(
    server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MAIL_STDLIB_NET_ALLOWED_HOSTS")
    for action in (mcp_ping, mcp_list_tools):
        out = await action.function({"server_url": server})
        assert out.startswith("Error: refused to connect to 127.0.0.1: loopback"), out


async def test_unreachable_server_is_an_error_text() -> None:
    out = await mcp_ping.function({"server_url": f"http://127.0.0.1:{free_port()}/mcp"})
    assert out.startswith("Error: ") and len(out) > 10


async def test_local_scripts_are_refused_by_default(script: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    evil = tmp_path / "evil.py"
    evil.write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    out = await mcp_ping.function({"server_url": str(evil)})
    assert out.startswith("Error: launching") and "[stdlib.mcp] allowed_commands" in out
    assert not marker.exists()
    out = await mcp_ping.function({"server_url": "ftp://example.com/x"})
    assert out.startswith("Error: unsupported MCP server URL")


async def test_allow_listed_local_script_runs_over_stdio(
    script: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    launcher = tmp_path / "stdio_server.py"
    launcher.write_text(
        f"import sys, runpy\nsys.argv = [{str(script)!r}, 'stdio']\n"
        f"runpy.run_path({str(script)!r}, run_name='__main__')\n"
    )
    monkeypatch.setenv("MAIL_STDLIB_MCP_ALLOWED_COMMANDS", str(launcher))
    out = await mcp_call_tool.function(
        {"server_url": str(launcher), "tool_name": "shout", "tool_input": {"text": "hi"}}
    )
    assert "text='HI'" in out
    # Only the listed script, not its neighbours.
    out = await mcp_ping.function({"server_url": str(script)})
    assert out.startswith("Error: launching")


async def test_sse_transport(script: Path) -> None:
    for base in _serve(script, "sse"):
        assert await mcp_ping.function({"server_url": base + "/sse"}) == "True"
        out = await mcp_call_tool.function(
            {"server_url": base + "/sse", "tool_name": "add", "tool_input": {"a": 1, "b": 1}}
        )
        assert "text='2'" in out


async def test_timeout(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAIL_STDLIB_MCP_TIMEOUT", "1.5")
    started = time.monotonic()
    out = await mcp_call_tool.function(
        {"server_url": server, "tool_name": "slow", "tool_input": {}}
    )
    assert out.startswith("Error: "), out
    assert "1.5" in out or "timed out" in out.lower(), out
    assert time.monotonic() - started < 30


@pytest.mark.parametrize("timer", ["deadline", "http client", "http core", "sdk"])
async def test_every_timer_running_out_reads_as_the_timeout(
    server: str, monkeypatch: pytest.MonkeyPatch, timer: str
) -> None:
    # The call's deadline, the HTTP client's read timeout and the SDK's request timeout
    # share one setting; whichever fires first (load decides), the agent reads one text.
    import httpcore2
    import httpx2
    from mcp.shared.exceptions import MCPError

    from mail.stdlib.mcp.actions import _run

    monkeypatch.setenv("MAIL_STDLIB_MCP_TIMEOUT", "7")
    raised: dict[str, BaseException] = {
        "deadline": TimeoutError(),
        "http client": httpx2.ReadTimeout(""),
        "http core": httpcore2.ReadTimeout(""),
        "sdk": MCPError(code=-32001, message="Request 'tools/call' timed out"),
    }

    async def request(client: object) -> str:
        try:
            raise raised[timer]
        except BaseException as exc:
            raise RuntimeError("wrapped by the transport") from exc

    out = await _run(server, request)
    assert out == "Error: MCP server did not answer within 7 s ([stdlib.mcp] timeout)", out


async def test_other_failures_keep_their_own_text(server: str) -> None:
    from mail.stdlib.mcp.actions import _run

    async def request(client: object) -> str:
        raise ValueError("the server said no")

    assert await _run(server, request) == "Error: the server said no"
