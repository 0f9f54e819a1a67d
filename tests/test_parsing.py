"""mail.utils.parsing: python:: / url:: references and interswarm address detection."""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import mail.utils
from mail.utils.parsing import (
    read_python_string,
    read_url_string,
    resolve_prefixed_string_references,
    target_address_is_interswarm,
)

# Objects this test module exposes to python:: references (resolved by importing this module).
SYSTEM_PROMPT = "You are a helpful test agent."


class Holder:
    class Inner:
        VALUE = 42

    @staticmethod
    def make() -> str:
        return "made"


THIS = __name__  # the importable name of this module under pytest's import mode


# --------------------------------------------------------------------------- read_python_string


def test_read_python_string_with_and_without_prefix() -> None:
    assert read_python_string(f"python::{THIS}:SYSTEM_PROMPT") == SYSTEM_PROMPT
    assert read_python_string(f"{THIS}:SYSTEM_PROMPT") == SYSTEM_PROMPT
    import json as json_module

    assert read_python_string("python::json:dumps") is json_module.dumps


def test_read_python_string_follows_dotted_attribute_paths() -> None:
    assert read_python_string(f"python::{THIS}:Holder.Inner.VALUE") == 42
    assert read_python_string(f"{THIS}:Holder.make")() == "made"
    assert read_python_string("os.path:join") is __import__("os").path.join


@pytest.mark.parametrize("bad", ["json", "python::json", "python::json:", ":dumps", ""])
def test_read_python_string_requires_module_colon_object(bad: str) -> None:
    with pytest.raises(ValueError) as info:
        read_python_string(bad)
    assert str(info.value) == f"Invalid python reference '{bad}'. Expected 'module:object' format."


def test_read_python_string_unknown_module_and_attribute() -> None:
    with pytest.raises(ModuleNotFoundError):
        read_python_string("python::no_such_module_for_mail_tests:x")
    with pytest.raises(AttributeError) as info:
        read_python_string(f"python::{THIS}:Holder.Missing.VALUE")
    assert f"'{THIS}.Holder' has no attribute 'Missing'" in str(info.value)


# --------------------------------------------------------------------------- loopback HTTP server


class _Handler(BaseHTTPRequestHandler):
    routes: dict[str, tuple[int, str, bytes]] = {
        "/prompt.json": (200, "application/json", json.dumps({"system": "from url"}).encode()),
        "/list.json": (200, "application/json", b"[1, 2, 3]"),
        "/text": (200, "text/plain", b"plain words, not JSON"),
        "/missing.json": (404, "application/json", b'{"detail": "Not Found"}'),
    }

    def do_GET(self) -> None:  # noqa: N802 - http.server API
        status, content_type, body = self.routes.get(self.path, (404, "text/plain", b"?"))
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # keep test output quiet
        pass


@pytest.fixture(scope="module")
def http_base() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture
def closed_port_url() -> str:
    # Bind then close: nothing listens on that port afterwards, so connecting is refused.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/prompt.json"


# --------------------------------------------------------------------------- read_url_string


def test_read_url_string_returns_json_text(http_base: str) -> None:
    text = read_url_string(f"url::{http_base}/prompt.json")
    assert json.loads(text) == {"system": "from url"}
    assert text == json.dumps({"system": "from url"})
    assert read_url_string(f"{http_base}/list.json") == "[1, 2, 3]"


@pytest.mark.parametrize("path", ["/text", "/missing.json"])
def test_read_url_string_falls_back_to_the_bare_url(
    http_base: str, path: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"{http_base}{path}"
    with caplog.at_level(logging.WARNING, logger="mail.utils.parsing"):
        assert read_url_string(f"url::{url}") == url
    assert any(url in record.getMessage() for record in caplog.records)
    with pytest.raises(RuntimeError, match="error reading URL string"):
        read_url_string(f"url::{url}", raise_on_error=True)


def test_read_url_string_unreachable_server(closed_port_url: str) -> None:
    assert read_url_string(f"url::{closed_port_url}") == closed_port_url
    with pytest.raises(RuntimeError, match="127.0.0.1"):
        read_url_string(closed_port_url, raise_on_error=True)


# --------------------------------------------------------------------------- resolve_prefixed_string_references


def test_resolve_walks_nested_dicts_and_lists(http_base: str, closed_port_url: str) -> None:
    params = {
        "llm": "openai/gpt-5-mini",
        "system": f"python::{THIS}:SYSTEM_PROMPT",
        "remote": f"url::{http_base}/prompt.json",
        "broken": f"url::{closed_port_url}",
        "nested": {
            "items": [f"python::{THIS}:Holder.Inner.VALUE", "plain", 3, None],
            "deeper": [{"fn": f"{THIS}:Holder.make"}],
        },
        "python::not-a-key-reference": True,
    }
    original = json.loads(json.dumps(params))
    resolved = resolve_prefixed_string_references(params)
    assert resolved == {
        "llm": "openai/gpt-5-mini",
        "system": SYSTEM_PROMPT,
        "remote": json.dumps({"system": "from url"}),
        "broken": closed_port_url,
        "nested": {
            "items": [42, "plain", 3, None],
            # no prefix: only prefixed strings are references
            "deeper": [{"fn": f"{THIS}:Holder.make"}],
        },
        "python::not-a-key-reference": True,
    }
    assert params == original  # the input is not modified


def test_resolve_leaves_scalars_alone() -> None:
    assert resolve_prefixed_string_references("hello") == "hello"
    assert resolve_prefixed_string_references(7) == 7
    assert resolve_prefixed_string_references(None) is None
    assert resolve_prefixed_string_references(f"python::{THIS}:Holder") is Holder


def test_resolve_propagates_bad_python_references() -> None:
    with pytest.raises(ValueError, match="Invalid python reference 'python::nocolon'"):
        resolve_prefixed_string_references({"a": ["python::nocolon"]})


# --------------------------------------------------------------------------- interswarm addresses


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("weather", False),
        ("  weather  ", False),
        ("weather@away", True),
        (" weather @ away ", True),
        ("a@b@c", True),
        ("weather@", False),
        ("weather@  ", False),
    ],
)
def test_target_address_is_interswarm(address: str, expected: bool) -> None:
    assert target_address_is_interswarm(address) is expected


# --------------------------------------------------------------------------- package re-exports


def test_mail_utils_reexports() -> None:
    assert mail.utils.read_python_string is read_python_string
    assert mail.utils.target_address_is_interswarm is target_address_is_interswarm
    assert "read_python_string" in dir(mail.utils)
    with pytest.raises(AttributeError, match="no attribute 'nonexistent'"):
        _ = mail.utils.nonexistent
