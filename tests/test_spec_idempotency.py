"""spec/openapi.yaml names the `Idempotency-Key` header (and its 422) on exactly the routes
of a real `mail server` that honour it.

Which routes honour the header is asked of the server itself: each operation of the document
is sent with two `Idempotency-Key` fields, which a route that reads the header refuses with
400 "send one Idempotency-Key header" before doing anything (docs/api-http.md#idempotency-keys);
a route that ignores it answers something else. The document is what /docs (Swagger UI) and
client generators show, so a keyed route must say so there.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from server_fixtures import REPO_ROOT, ServerProcess, auth, keyed_stub_server

pytestmark = pytest.mark.timeout(120)

SPEC = yaml.safe_load((REPO_ROOT / "spec" / "openapi.yaml").read_text(encoding="utf-8"))
METHODS = ("get", "post", "put", "patch", "delete")
KEY_PARAMETER = "#/components/parameters/IdempotencyKey"
TWO_KEYS = "send one Idempotency-Key header"


def _operations() -> Iterator[tuple[str, str, dict[str, Any], list[Any]]]:
    for path, item in SPEC["paths"].items():
        for method in METHODS:
            if method in item:
                yield method.upper(), path, item[method], item.get("parameters", [])


def _declares_key(operation: dict[str, Any], path_parameters: list[Any]) -> bool:
    parameters = [*path_parameters, *operation.get("parameters", [])]
    return any(p.get("$ref") == KEY_PARAMETER for p in parameters)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    keys = {"admin": ("admin", "root"), "agent": ("agent", "peer")}
    with keyed_stub_server(tmp_path_factory.mktemp("spec-keys"), keys) as srv:
        yield srv


def _refuses_two_keys(server: ServerProcess, method: str, path: str) -> bool:
    url = server.base_url + re.sub(r"\{[^}]+\}", "x", path)
    headers = [("Idempotency-Key", '"a"'), ("Idempotency-Key", '"b"')]
    for who in ("admin", "agent"):  # the agent key for /interswarm/forward and /back
        r = httpx.request(
            method,
            url,
            headers=[*auth(server.keys[who]).items(), *headers],
            content=b"{}" if method != "GET" else None,
            timeout=30,
        )
        if r.status_code != 403:
            break
    return r.status_code == 400 and TWO_KEYS in r.text


def test_the_document_names_the_key_on_every_route_that_honours_it(
    server: ServerProcess, tmp_path: Path
) -> None:
    honoured, declared = set(), set()
    for method, path, operation, path_parameters in _operations():
        if method != "GET" and _refuses_two_keys(server, method, path):
            honoured.add(f"{method} {path}")
        if _declares_key(operation, path_parameters):
            declared.add(f"{method} {path}")
    assert "POST /message" in honoured and "POST /webhooks" in honoured  # the probe works
    assert sorted(honoured - declared) == [], "keyed routes the document does not say are"
    assert sorted(declared - honoured) == [], "routes the document says are keyed"


def test_every_keyed_operation_documents_its_answers() -> None:
    """A keyed route may answer 400 (a malformed key), 409 with Retry-After (its first
    request still under way), 422 (the key of another request) and 429 (the key bound)."""
    missing = []
    for method, path, operation, path_parameters in _operations():
        if not _declares_key(operation, path_parameters):
            continue
        statuses = set(operation.get("responses", {}))
        for status in ("400", "409", "422", "429"):
            if status not in statuses:
                missing.append(f"{method} {path}: {status}")
    assert missing == []
