"""`mail ping URL`: one ✓ or ✗ line and the exit code."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from mail.cli import main
from test_client_fakes import FakeMailServer

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def server() -> Iterator[FakeMailServer]:
    fake = FakeMailServer().start()
    yield fake
    fake.stop()


def _ping(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["ping", *args])
    captured = capsys.readouterr()
    return code, captured.out.strip(), captured.err.strip()


def test_healthy_server(server: FakeMailServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert _ping(capsys, server.url) == (0, "✓ fake-swarm is healthy", "")
    assert server.last("/health").method == "GET"


def test_status_other_than_healthy_is_still_reported(
    server: FakeMailServer, capsys: pytest.CaptureFixture[str]
) -> None:
    server.health_status = "degraded"
    assert _ping(capsys, server.url + "/")[1] == "✓ fake-swarm is degraded"


def test_swarm_link(server: FakeMailServer, capsys: pytest.CaptureFixture[str]) -> None:
    link = f"swarm://connect?server={server.url}&token=ignored"
    assert _ping(capsys, link) == (0, "✓ fake-swarm is healthy", "")
    assert "Authorization" not in server.last("/health").headers


def test_cannot_connect(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    assert _ping(capsys, url) == (1, "", f"✗ Cannot connect to {url}")


def test_error_status(server: FakeMailServer, capsys: pytest.CaptureFixture[str]) -> None:
    server.health_http_status = 503
    assert _ping(capsys, server.url) == (1, "", "✗ Server returned 503")


def test_timeout(server: FakeMailServer, capsys: pytest.CaptureFixture[str]) -> None:
    server.health_delay = 2.0
    code, _, err = _ping(capsys, server.url, "-t", "0.3")
    assert code == 1
    assert err == f"✗ Cannot connect to {server.url} (no answer within 0.3 s)"


def test_non_json_answer(server: FakeMailServer, capsys: pytest.CaptureFixture[str]) -> None:
    server.health_as_html = True
    code, _, err = _ping(capsys, server.url)
    assert code == 1 and err.startswith("✗ Error: ")


def test_bad_swarm_link(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _ping(capsys, "swarm://connect?token=x")
    assert code == 1
    assert err.startswith("✗ Error: ") and "no server parameter" in err


def test_command_line_entry_point(server: FakeMailServer) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mail.cli", "ping", server.url, "--timeout", "10"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout.strip()) == (0, "✓ fake-swarm is healthy")


@pytest.mark.parametrize("command", ["ping", "client"])
@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("notaurl", "needs a scheme, e.g. http://notaurl"),
        ("localhost:8000", "needs a scheme, e.g. http://localhost:8000"),
        ("ftp://example.org", "use http:// or https://"),
    ],
)
def test_a_url_without_an_http_scheme_is_refused(
    capsys: pytest.CaptureFixture[str], command: str, url: str, says: str
) -> None:
    code = main([command, url])
    out, err = capsys.readouterr()
    assert code == 1
    assert says in err
    assert "connected" not in out + err and "/health" not in err
