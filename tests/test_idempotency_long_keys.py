"""The longest ``Idempotency-Key`` the settings allow is stored by every store.

``max_idempotency_key_length`` accepted up to 4096 characters, but PostgreSQL keeps the key
in the primary key of ``idempotency_keys``, a b-tree whose entries may not pass 2704 bytes:
on a server with the bound raised past about 2600, a key of that length (random, so it does
not compress) got a 500 from every route (``index row size ... exceeds btree version 4
maximum``) where the caller was promised it would be stored and replayed. The bound's
ceiling is now one every store can index, with room left for the swarm, role and caller id
that share the entry.
"""

from __future__ import annotations

import secrets
import string
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.support.pg_schema import BASE_URL, scratch_schema, with_search_path

from mail.config.server import ServerSettings
from server_fixtures import ServerProcess, auth, keyed_stub_server

pytestmark = pytest.mark.timeout(300)

WEBHOOKS = '\n[server.webhooks]\nallowed_hosts = ["127.0.0.1"]\n'


def _ceiling() -> int:
    """The highest `max_idempotency_key_length` a configuration may set."""
    for rule in ServerSettings.model_fields["max_idempotency_key_length"].metadata:
        if getattr(rule, "le", None) is not None:
            return int(rule.le)
    raise AssertionError("max_idempotency_key_length has no ceiling")


@pytest.fixture(params=["sqlite", "postgres"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ServerProcess]:
    extra = f"max_idempotency_key_length = {_ceiling()}\n{WEBHOOKS}"
    users = {"alice": ("user", "alice")}
    if request.param == "sqlite":
        with keyed_stub_server(tmp_path, users, extra=extra) as srv:
            yield srv
        return
    with scratch_schema("mail_idem_long_keys", BASE_URL) as schema:
        env = {"DATABASE_URL": with_search_path(BASE_URL, schema)}
        with keyed_stub_server(tmp_path, users, extra=extra, env=env) as srv:
            yield srv


def _longest_key() -> str:
    alphabet = string.ascii_letters + string.digits + "-_.~"
    return "".join(secrets.choice(alphabet) for _ in range(_ceiling()))


def test_the_longest_allowed_key_is_stored_and_replayed(server: ServerProcess) -> None:
    for path, body in (
        ("/message", {"body": "long key"}),
        ("/webhooks", {"url": "http://127.0.0.1:9/hook", "events": ["*"]}),
        ("/task/cancel", {"task_id": str(uuid.uuid4())}),  # 404: refused, the key freed
    ):
        headers = {**auth(server.keys["alice"]), "Idempotency-Key": f'"{_longest_key()}"'}
        first = httpx.post(f"{server.base_url}{path}", json=body, headers=headers, timeout=60)
        assert first.status_code < 500, (path, first.text)
        again = httpx.post(f"{server.base_url}{path}", json=body, headers=headers, timeout=60)
        assert (again.status_code, again.content) == (first.status_code, first.content), path
        if first.status_code < 400:
            assert again.headers.get("idempotent-replayed") == "true", path
