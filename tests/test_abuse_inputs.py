"""Abusive inputs from the outside, against a real `mail server` (issue 26, part A).

Every byte a hostile party sends is counted while it is read: a gzip bomb behind ``http_get``
and a huge MCP ``tools/list`` answer are refused at their caps, and the server's peak RSS
(``VmHWM`` of the process, reset before each input) grows by less than ``RSS_BOUND_MIB``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from server_fixtures import ServerProcess, post_as
from support.abuse_harness import (
    DEFLATE_SPLIT_TEXT,
    GREEDY_STDIO,
    LOUD_STDIO,
    MIB,
    HostileSite,
    Memory,
    abuse_server,
    gzip_bomb,
    steps_body,
)

pytestmark = pytest.mark.timeout(180)

RSS_BOUND_MIB = 30
CLOSED_PORT = "http://127.0.0.1:9/mcp"


@pytest.fixture(scope="module")
def site() -> Iterator[HostileSite]:
    with HostileSite(bomb=gzip_bomb(200 * MIB), tools_answer_size=150 * MIB) as hostile:
        yield hostile


@pytest.fixture(scope="module")
def greedy_script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("greedy") / "greedy_stdio.py"
    path.write_text(GREEDY_STDIO, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def loud_script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("loud") / "loud_stdio.py"
    path.write_text(LOUD_STDIO, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, greedy_script: Path, loud_script: Path
) -> Iterator[ServerProcess]:
    env = {
        "MAIL_STDLIB_NET_ALLOWED_HOSTS": "127.0.0.1",
        "MAIL_STDLIB_MCP_TIMEOUT": "60",
        "MAIL_STDLIB_MCP_ALLOWED_COMMANDS": f"{greedy_script},{loud_script}",
    }
    with abuse_server(tmp_path_factory.mktemp("abuse"), env=env) as proc:
        yield proc


def run_steps(server: ServerProcess, *steps: dict[str, Any]) -> dict[str, Any]:
    r = post_as(server, "alice", {"body": steps_body(*steps)}, timeout=120)
    assert r.status_code == 200, r.text
    body = r.json()["response"]
    try:
        return dict(json.loads(body))
    except ValueError:
        raise AssertionError(f"the task did not end with a summary: {body[:2000]}") from None


def test_a_gzip_bomb_is_refused_while_it_is_inflated(
    server: ServerProcess, site: HostileSite
) -> None:
    assert server.proc is not None
    memory = Memory(server.proc.pid).start()
    outcome = run_steps(server, {"tool": "http_get", "args": {"url": f"{site.base_url}/bomb"}})
    memory.stop()
    print("gzip bomb: RSS before/peak/after MiB", memory.row())
    assert memory.growth < RSS_BOUND_MIB, memory.row()
    assert outcome["errors"] == 1, outcome
    assert "decompressed response body is over the limit" in outcome["first_error"]
    assert "max_response_bytes" in outcome["first_error"]


def test_raw_deflate_whose_first_chunk_is_one_byte_is_read(
    server: ServerProcess, site: HostileSite
) -> None:
    # The inflater used to decide raw vs zlib-wrapped deflate on the first chunk alone.
    outcome = run_steps(
        server, {"tool": "http_get", "args": {"url": f"{site.base_url}/deflate-split"}}
    )
    assert outcome["errors"] == 0, outcome
    assert DEFLATE_SPLIT_TEXT.decode()[:100] in outcome["last"], outcome


def test_a_huge_mcp_answer_is_cut_off_in_the_transport(
    server: ServerProcess, site: HostileSite
) -> None:
    assert server.proc is not None
    # The first MCP call imports the SDK (~25 MiB of modules): not what is measured here.
    warm = run_steps(server, {"tool": "mcp_list_tools", "args": {"server_url": CLOSED_PORT}})
    assert warm["errors"] == 1, warm
    memory = Memory(server.proc.pid).start()
    outcome = run_steps(
        server, {"tool": "mcp_list_tools", "args": {"server_url": f"{site.base_url}/mcp"}}
    )
    memory.stop()
    print("MCP 150 MB tools/list: RSS before/peak/after MiB", memory.row())
    assert memory.growth < RSS_BOUND_MIB, memory.row()
    assert outcome["errors"] == 1, outcome
    assert "max_response_bytes" in outcome["first_error"], outcome
    assert "POST tools/list" in site.hits


def test_an_endless_stdio_mcp_line_is_cut_off_by_the_relay(
    server: ServerProcess, greedy_script: Path
) -> None:
    assert server.proc is not None
    warm = run_steps(server, {"tool": "mcp_list_tools", "args": {"server_url": CLOSED_PORT}})
    assert warm["errors"] == 1, warm
    memory = Memory(server.proc.pid).start()
    outcome = run_steps(
        server, {"tool": "mcp_list_tools", "args": {"server_url": str(greedy_script)}}
    )
    memory.stop()
    print("stdio MCP 150 MB line: RSS before/peak/after MiB", memory.row())
    assert memory.growth < RSS_BOUND_MIB, memory.row()
    assert outcome["errors"] == 1, outcome
    assert "max_response_bytes" in outcome["first_error"], outcome


def test_a_stdio_mcp_server_flooding_stderr_is_cut_off_by_the_relay(
    server: ServerProcess, loud_script: Path
) -> None:
    # The relay passed the server's stderr through whole: 3.3 GB in the log in 20 s.
    before = server.stderr_path.stat().st_size
    outcome = run_steps(
        server, {"tool": "mcp_list_tools", "args": {"server_url": str(loud_script)}}
    )
    assert outcome["errors"] == 0, outcome  # the answer after the noise still arrives
    grown = server.stderr_path.stat().st_size - before
    assert grown < 5 * MIB, grown  # 64 MiB written, at most max_response_bytes (4 MiB) kept
    assert "stderr is cut after 4194304 bytes" in server.logs()
