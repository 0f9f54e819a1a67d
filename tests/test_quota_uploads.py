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
KEYS = {
    "alice": ("user", "alice"),
    "bob": ("user", "bob"),
    "carol": ("user", "carol"),
    "dave": ("user", "dave"),
}
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
        with abuse_server(directory, extra=extra, keys=KEYS) as proc:
            yield proc
        return
    with scratch_schema("quota_uploads") as schema:
        env = {"DATABASE_URL": with_search_path(BASE_URL, schema)}
        with abuse_server(directory, extra=extra, env=env, keys=KEYS) as proc:
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


def test_concurrent_uploads_cannot_pass_the_quota_together(server: ServerProcess) -> None:
    """Eight 1 MiB uploads sent at once by a caller with room for at most three: each was
    checked against the books before any of them was stored and counted, so all passed
    (8 MiB stored under a 3.25 MiB bound). At most three may be stored now; the others are
    refused with 429 naming the setting."""
    import asyncio

    import httpx

    from server_fixtures import auth

    async def send_all() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=120) as http:
            return await asyncio.gather(
                *(
                    http.post(
                        f"{server.base_url}/message",
                        json={"body": "hi", "attachments": [upload(100 + i)]},
                        headers=auth(server.keys["carol"]),
                    )
                    for i in range(8)
                )
            )

    answers = asyncio.run(send_all())
    statuses = sorted(a.status_code for a in answers)
    assert statuses.count(200) <= 3, [(a.status_code, a.text[:200]) for a in answers]
    assert set(statuses) <= {200, 429}, [(a.status_code, a.text[:200]) for a in answers]
    refused = [a.text for a in answers if a.status_code == 429]
    assert refused and all("max_stored_bytes_per_caller" in t for t in refused), refused


def test_base64_uploads_count_in_the_check(server: ServerProcess) -> None:
    """`content_base64` uploads: the check counted only `content` text, so a caller with
    three uploads stored could store a fourth (4 MiB under a 3.25 MiB bound)."""
    import base64

    encoded = base64.b64encode(b"b" * (MIB - 100)).decode("ascii")
    statuses = []
    for index in range(4):
        attachment = {"filename": f"b{index}.bin", "content_base64": encoded}
        answer = post_as(server, "dave", {"body": "hi", "attachments": [attachment]}, 60)
        statuses.append((answer.status_code, answer.text[:200]))
    assert [code for code, _ in statuses] == [200, 200, 200, 429], statuses
    # What was stored is counted once: a small message still fits.
    assert post_as(server, "dave", {"body": "small"}, 60).status_code == 200
