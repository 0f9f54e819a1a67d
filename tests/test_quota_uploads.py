"""A caller's uploads (`attachments` of POST /message) count against
`[server.store] max_stored_bytes_per_caller` as soon as they are stored.

A real `mail server` (SQLite, the memory store and PostgreSQL) on the abuse swarm, whose agents have the file
tools, with a quota of about 3 MiB: a caller sending 1 MiB uploads one message after another is refused
with 429 naming the setting once its uploads would pass the bound, within the same few
seconds (not only after the server re-measured its team data, or after a restart); another
caller is not affected.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from server_fixtures import ServerProcess, post_as
from support.abuse_harness import abuse_server
from support.pg_schema import BASE_URL, scratch_schema, with_search_path

pytestmark = pytest.mark.timeout(240)

MIB = 1024 * 1024
QUOTA = 3 * MIB + 256 * 1024  # three uploads and their small tasks fit, a fourth does not


@pytest.fixture(scope="module", params=["sqlite", "memory", "postgres"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    directory = tmp_path_factory.mktemp(f"quota_uploads_{request.param}")
    kind = 'kind = "memory"' if request.param == "memory" else ""
    extra = f"""
[server.store]
max_stored_bytes_per_caller = {QUOTA}
finished_task_ttl = 0
{kind}
"""
    if request.param != "postgres":
        with abuse_server(directory, extra=extra) as proc:
            yield proc
        return
    with scratch_schema("quota_uploads") as schema:
        env = {"DATABASE_URL": with_search_path(BASE_URL, schema)}
        with abuse_server(directory, extra=extra, env=env) as proc:
            yield proc


def upload(index: int) -> dict[str, object]:
    return {"filename": f"part{index}.txt", "content": "u" * (MIB - 100)}


def test_uploads_count_against_the_stored_bytes_quota_at_once(server: ServerProcess) -> None:
    statuses = []
    details = []
    for index in range(6):
        answer = post_as(server, "alice", {"body": "hi", "attachments": [upload(index)]}, 60)
        statuses.append(answer.status_code)
        details.append(answer.text)
    assert statuses[:3] == [200, 200, 200], details
    assert statuses[3:] == [429, 429, 429], (statuses, details)
    refused = details[statuses.index(429)]
    assert "max_stored_bytes_per_caller" in refused and str(QUOTA) in refused
    # Another caller has books of its own.
    other = post_as(server, "bob", {"body": "hi", "attachments": [upload(9)]}, 60)
    assert other.status_code == 200, other.text
