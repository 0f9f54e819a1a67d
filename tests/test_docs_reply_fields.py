"""Every field a real `mail server` returns in ``GET /tasks`` records and in ``GET /status``
is documented: in docs/api-http.md's section for the route (as `` `name` ``, a field of an
object as `` `parent.name` ``) and in spec/openapi.yaml's schema of the reply.

The server runs the stub swarm on SQLite (the default store), with a finished task, one
paused at a breakpoint and one that failed, so rows of live and of stored tasks are both seen.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import yaml

from server_fixtures import REPO_ROOT, ServerProcess, auth, keyed_stub_server, post_as

pytestmark = pytest.mark.timeout(180)

API_DOC = REPO_ROOT / "docs" / "api-http.md"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    users = {"admin": ("admin", "root"), "alice": ("user", "alice")}
    with keyed_stub_server(tmp_path_factory.mktemp("reply_fields"), users) as srv:
        for body in ("hello", "BREAKPOINT look", "FAIL now"):
            assert post_as(srv, "alice", {"body": body}).status_code == 200
        yield srv


def section(route: str) -> str:
    """The text of docs/api-http.md's section ``### `<route>` `` (to the next heading of its
    level or above)."""
    text = API_DOC.read_text(encoding="utf-8")
    found = re.search(rf"^### `{re.escape(route)}`\n(.*?)(?=^##? |^### )", text, re.S | re.M)
    assert found, f"docs/api-http.md has no section for {route}"
    return found.group(1)


def field_paths(record: dict[str, Any], prefix: str = "") -> set[str]:
    """The record's keys, and those of its object-valued fields as `parent.key` (lists and
    the objects inside them are described where their items are)."""
    paths = set()
    for key, value in record.items():
        paths.add(prefix + key)
        if isinstance(value, dict):
            paths |= field_paths(value, f"{prefix}{key}.")
    return paths


def schema_paths(spec: dict[str, Any], schema: dict[str, Any], prefix: str = "") -> set[str]:
    """The same paths for what an OpenAPI schema declares (following $ref and allOf)."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        schema = spec["components"]["schemas"][name]
    paths = set()
    for part in schema.get("allOf", []):
        paths |= schema_paths(spec, part, prefix)
    for key, sub in (schema.get("properties") or {}).items():
        paths.add(prefix + key)
        paths |= schema_paths(spec, sub, f"{prefix}{key}.")
    return paths


def reply_schema(spec: dict[str, Any], path: str) -> dict[str, Any]:
    content = spec["paths"][path]["get"]["responses"]["200"]["content"]
    return content["application/json"]["schema"]  # type: ignore[no-any-return]


def undocumented(paths: set[str], text: str) -> list[str]:
    return sorted(p for p in paths if f"`{p}`" not in text)


def test_every_field_of_get_tasks_records_is_documented(server: ServerProcess) -> None:
    reply = httpx.get(f"{server.base_url}/tasks", headers=auth(server.keys["alice"]), timeout=30)
    assert reply.status_code == 200, reply.text
    records = list(reply.json().values())
    assert len(records) == 3
    assert any(r["pending_breakpoints"] for r in records)  # a paused one is among them
    paths = set().union(*(field_paths(r) for r in records))
    assert {"usage.model_calls", "state", "first_message"} <= paths  # the walk sees them
    assert not undocumented(paths, section("GET /tasks")), "docs/api-http.md, GET /tasks"
    spec = yaml.safe_load((REPO_ROOT / "spec" / "openapi.yaml").read_text(encoding="utf-8"))
    declared = schema_paths(spec, reply_schema(spec, "/tasks")["additionalProperties"])
    assert not sorted(paths - declared), "spec/openapi.yaml, TaskSummary"


@pytest.mark.parametrize("who", ["alice", "admin"])
def test_every_field_of_get_status_is_documented(server: ServerProcess, who: str) -> None:
    reply = httpx.get(f"{server.base_url}/status", headers=auth(server.keys[who]), timeout=30)
    assert reply.status_code == 200, reply.text
    paths = field_paths(reply.json())
    assert {"storage.status", "storage.pending_writes", "swarm.name"} <= paths
    assert not undocumented(paths, section("GET /status")), "docs/api-http.md, GET /status"
    spec = yaml.safe_load((REPO_ROOT / "spec" / "openapi.yaml").read_text(encoding="utf-8"))
    assert not sorted(paths - schema_paths(spec, reply_schema(spec, "/status")))


def test_the_check_finds_a_field_missing_from_the_docs() -> None:
    """The walk and the search would miss nothing: a made-up field is reported."""
    text = section("GET /status")
    assert undocumented({"storage.status", "storage.made_up"}, text) == ["storage.made_up"]
    assert field_paths({"a": {"b": 1}, "c": [{"d": 2}]}) == {"a", "a.b", "c"}
