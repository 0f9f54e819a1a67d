"""Bodies within ``max_request_body`` that cost far more than their bytes, against a real
`mail server` over HTTP (stub swarm, default limits).

* a compressed request body (a gzip bomb): refused with 415 before any of it is read;
* an A2A request with too many message parts or JSON values: JSON-RPC invalid params naming
  ``max_a2a_message_parts`` / ``max_a2a_json_values``, before the SDK reads it;
* an interswarm envelope or ``/interswarm/message`` body with too many addresses, a too long
  address, too many JSON values or too deep nesting: 400 naming the setting.

Each refusal is quick and the server's peak RSS (``VmHWM``, reset before each input) grows by
less than ``RSS_BOUND_MIB``.
"""

from __future__ import annotations

import gzip
import json
import time
import uuid
import zlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from server_fixtures import ROOT_ALICE_BOB, ServerProcess, auth, keyed_stub_server
from support.a2a_clients import a2a_client, collect, message
from support.abuse_harness import MIB, Memory

pytestmark = pytest.mark.timeout(300)

# A refusal of a shape comes after the JSON body is parsed (as every JSON route parses it),
# and parsing a 4 MiB body of 250 000 small objects alone takes up to about 60 MiB for a
# moment; a compressed body is not read at all.
RSS_BOUND_MIB = 90
UNREAD_RSS_BOUND_MIB = 30  # the first requests of a new server load a few modules
QUICK_SECONDS = 10.0  # a loaded 2-core machine; before the bounds: 1.2 to 4 s of CPU each


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    keys = {**ROOT_ALICE_BOB, "peer": ("agent", "peer")}
    with keyed_stub_server(tmp_path_factory.mktemp("shape"), keys) as srv:
        yield srv


def _post(
    server: ServerProcess, path: str, who: str, content: bytes, **headers: str
) -> tuple[httpx.Response, Memory, float]:
    assert server.proc is not None
    memory = Memory(server.proc.pid).start()
    started = time.monotonic()
    r = httpx.post(
        f"{server.base_url}{path}",
        content=content,
        headers={**auth(server.keys[who]), "Content-Type": "application/json", **headers},
        timeout=120,
    )
    elapsed = time.monotonic() - started
    memory.stop()
    return r, memory, elapsed


def _bounded(memory: Memory, elapsed: float, rss_bound: float = RSS_BOUND_MIB) -> None:
    print(f"{elapsed:6.2f}s  RSS before/peak/after MiB {memory.row()}")
    assert elapsed < QUICK_SECONDS, elapsed
    assert memory.growth < rss_bound, memory.row()


# -- compressed bodies --------------------------------------------------------------------
BOMB = gzip.compress(b" " * (120 * MIB), compresslevel=9)  # about 120 KB on the wire


@pytest.mark.parametrize(
    ("path", "who"),
    [("/a2a", "alice"), ("/message", "alice"), ("/interswarm/message", "alice")]
    + [("/interswarm/forward", "peer"), ("/interswarm/back", "peer")],
)
def test_a_gzip_bomb_is_refused_unread(server: ServerProcess, path: str, who: str) -> None:
    assert len(BOMB) < 200_000
    r, memory, elapsed = _post(server, path, who, BOMB, **{"Content-Encoding": "gzip"})
    assert r.status_code == 415, r.text
    assert "Content-Encoding 'gzip'" in r.json()["detail"], r.text
    assert r.headers["accept-encoding"] == "identity"
    _bounded(memory, elapsed, UNREAD_RSS_BOUND_MIB)


@pytest.mark.parametrize("encoding", ["deflate", "br", "identity, gzip", "zstd"])
def test_every_content_coding_but_identity_is_refused(server: ServerProcess, encoding: str) -> None:
    body = zlib.compress(json.dumps({"body": "hi"}).encode())
    r, _, _ = _post(server, "/message", "alice", body, **{"Content-Encoding": encoding})
    assert r.status_code == 415, r.text
    assert encoding.removeprefix("identity, ") in r.json()["detail"]


def test_identity_is_an_uncompressed_body(server: ServerProcess) -> None:
    body = json.dumps({"targets": ["x@nowhere"], "body": "hi"}).encode()
    r, _, _ = _post(
        server, "/interswarm/message", "alice", body, **{"Content-Encoding": "identity"}
    )
    assert r.status_code == 409, r.text  # read and checked: the stub swarm has interswarm off


# -- A2A ------------------------------------------------------------------------------------
def _send(parts: list[Any], method: str = "SendMessage", **message: Any) -> bytes:
    msg = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": parts, **message}
    return json.dumps(
        {"jsonrpc": "2.0", "id": 7, "method": method, "params": {"message": msg}}
    ).encode()


def _a2a(server: ServerProcess, content: bytes) -> tuple[dict[str, Any], Memory, float]:
    r, memory, elapsed = _post(server, "/a2a", "alice", content, **{"A2A-Version": "1.0"})
    assert r.status_code == 200, r.text
    return r.json(), memory, elapsed


def _invalid_params(answer: dict[str, Any], setting: str) -> None:
    assert answer.get("id") == 7, answer
    error = answer["error"]
    assert error["code"] == -32602, error
    assert f"([server.settings] {setting})" in error["message"], error


@pytest.mark.parametrize("method", ["SendMessage", "SendStreamingMessage"])
def test_a2a_message_parts_are_bounded(server: ServerProcess, method: str) -> None:
    answer, memory, elapsed = _a2a(server, _send([{"text": "a"}] * 250_000, method))
    _invalid_params(answer, "max_a2a_message_parts")
    assert "250000 parts; the limit is 100" in answer["error"]["message"]
    _bounded(memory, elapsed)


@pytest.mark.parametrize(
    ("name", "parts", "extra"),
    [
        ("a long list in a data part", [{"data": [0] * 1_300_000}], {}),
        ("many keys in a data part", [{"data": {str(i): 0 for i in range(250_000)}}], {}),
        ("a long list in the metadata", [{"text": "hi"}], {"metadata": {"x": [1] * 1_300_000}}),
        ("just over the bound", [{"data": {"items": list(range(10_000))}}], {}),
    ],
)
def test_a2a_json_values_are_bounded(
    server: ServerProcess, name: str, parts: list[Any], extra: dict[str, Any]
) -> None:
    answer, memory, elapsed = _a2a(server, _send(parts, **extra))
    _invalid_params(answer, "max_a2a_json_values")
    assert "more than 10000 JSON values" in answer["error"]["message"], name
    _bounded(memory, elapsed)


def test_a2a_messages_within_the_bounds_run(server: ServerProcess) -> None:
    parts: list[Any] = [{"text": f"line {i}"} for i in range(99)]
    parts.append({"data": {"subject": "bounded", "items": list(range(9000))}})
    answer, _, _ = _a2a(server, _send(parts))
    assert "error" not in answer, answer
    assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", answer


@pytest.mark.parametrize("streaming", [False, True])
async def test_the_sdk_client_is_told_which_setting(server: ServerProcess, streaming: bool) -> None:
    from a2a.helpers.proto_helpers import new_text_part

    request = message("first line")
    request.message.parts.extend(new_text_part(f"line {i}") for i in range(200))
    async with a2a_client(server.base_url, server.keys["bob"], streaming=streaming) as client:
        with pytest.raises(Exception, match=r"max_a2a_message_parts") as caught:
            await collect(client, request)
    assert "201 parts; the limit is 100" in str(caught.value)


# -- interswarm -----------------------------------------------------------------------------
def _address(name: str, kind: str = "agent") -> dict[str, str]:
    return {"address_type": kind, "address": name}


def _envelope(**changes: Any) -> dict[str, Any]:
    task_id = str(uuid.uuid4())
    payload = {
        "task_id": task_id,
        "request_id": str(uuid.uuid4()),
        "sender": _address("helper@other"),
        "recipient": _address("supervisor@stub"),
        "subject": "hello",
        "body": "hi",
        "sender_swarm": "other",
        "recipient_swarm": "stub",
    }
    payload.update(changes.pop("payload", {}))
    envelope = {
        "message_id": str(uuid.uuid4()),
        "source_swarm": "other",
        "target_swarm": "stub",
        "timestamp": "2026-01-01T00:00:00Z",
        "payload": payload,
        "msg_type": "request",
        "task_owner": "user:alice@other",
        "task_contributors": ["user:alice@other"],
        **changes,
    }
    return {"message": envelope}


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth - 1):
        value = {"a": value}
    return {"a": value}


_BROADCAST = {"broadcast_id": str(uuid.uuid4())}


@pytest.mark.parametrize("path", ["/interswarm/forward", "/interswarm/back"])
@pytest.mark.parametrize(
    ("name", "body", "setting", "words"),
    [
        (
            "200 000 contributors",
            _envelope(task_contributors=["user:a@other"] * 200_000),
            "max_interswarm_addresses",
            "parameter 'message.task_contributors' has 200000 entries; the limit is 1000",
        ),
        (
            "a 3 MB task owner",
            _envelope(task_owner="user:" + "a" * 3_000_000 + "@other"),
            "max_address_chars",
            "parameter 'message.task_owner' is 3000011 characters; the limit is 512",
        ),
        (
            "a long recipient address",
            _envelope(payload={"recipient": _address("x" * 1000 + "@stub")}),
            "max_address_chars",
            "parameter 'message.payload.recipient.address' is 1005 characters",
        ),
        (
            "5 000 broadcast recipients",
            _envelope(
                msg_type="broadcast",
                payload={"recipients": [_address("a@stub")] * 5000, **_BROADCAST},
            ),
            "max_interswarm_addresses",
            "parameter 'message.payload.recipients' has 5000 entries",
        ),
        (
            "metadata nested 40 deep",
            _envelope(metadata=_nested(40)),
            "max_interswarm_json_depth",
            "more than 32 deep",
        ),
        (
            "routing_info with 300 000 values",
            _envelope(payload={"routing_info": {"x": [0] * 300_000}}),
            "max_interswarm_json_values",
            "more than 10000 JSON values",
        ),
    ],
)
def test_interswarm_envelopes_are_bounded(
    server: ServerProcess, path: str, name: str, body: Any, setting: str, words: str
) -> None:
    r, memory, elapsed = _post(server, path, "peer", json.dumps(body).encode())
    assert r.status_code == 400, (name, r.text[:500])
    detail = r.json()["detail"]
    assert f"([server.settings] {setting})" in detail, detail
    assert words in detail, detail
    _bounded(memory, elapsed)


def test_an_envelope_at_the_bounds_is_read_on(server: ServerProcess) -> None:
    body = _envelope(
        task_contributors=["user:a@other"] * 1000,
        task_owner="user:" + "a" * 500 + "@other",
        metadata=_nested(30),  # 32 deep in the body: {"message": {"metadata": ...}}
    )
    r, _, _ = _post(server, "/interswarm/forward", "peer", json.dumps(body).encode())
    # Past the bounds and the schema: the stub swarm has interswarm off.
    assert r.status_code == 409, r.text[:500]


@pytest.mark.parametrize(
    ("name", "body", "setting", "words"),
    [
        (
            "500 000 targets",
            {"targets": ["a@b"] * 500_000, "body": "x", "msg_type": "broadcast"},
            "max_interswarm_addresses",
            "parameter 'targets' has 500000 entries; the limit is 1000",
        ),
        (
            "a comma list of 1 000 000 targets",
            {"targets": ",".join(["a@b"] * 1_000_000), "body": "x", "msg_type": "broadcast"},
            "max_interswarm_addresses",
            "parameter 'targets' has 1000000 entries",
        ),
        (
            "a 3 MB target",
            {"targets": ["a" * 3_000_000 + "@b"], "body": "x"},
            "max_address_chars",
            "parameter 'targets[0]' is 3000002 characters",
        ),
        (
            "routing_info nested 100 deep",
            {"targets": ["a@b"], "body": "x", "routing_info": _nested(100)},
            "max_interswarm_json_depth",
            "more than 32 deep",
        ),
        (
            "routing_info with 300 000 values",
            {"targets": ["a@b"], "body": "x", "routing_info": {"x": [0] * 300_000}},
            "max_interswarm_json_values",
            "more than 10000 JSON values",
        ),
    ],
)
def test_interswarm_user_messages_are_bounded(
    server: ServerProcess, name: str, body: Any, setting: str, words: str
) -> None:
    r, memory, elapsed = _post(server, "/interswarm/message", "alice", json.dumps(body).encode())
    assert r.status_code == 400, (name, r.text[:500])
    detail = r.json()["detail"]
    assert f"([server.settings] {setting})" in detail, detail
    assert words in detail, detail
    _bounded(memory, elapsed)


# -- the counting itself ---------------------------------------------------------------------
def test_values_and_depth_are_counted_as_documented() -> None:
    from mail.server.jsonio import excess

    assert excess("x" * 10, 1, 1) is None  # a scalar is one value, nested 0 deep
    assert excess([], 1, 1) is None
    assert excess([[1]], 0, 2) is None
    assert excess([[1]], 0, 1) == "depth"
    assert excess({"a": [1, 2]}, 4) is None  # the object, its member, two items
    assert excess({"a": [1, 2]}, 3) == "values"
    assert excess(_nested(5000), 0, 0) is None  # no recursion: deeper than Python's stack
    assert excess(_nested(5000), 0, 4999) == "depth"
