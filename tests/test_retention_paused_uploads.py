"""Retention removes finished tasks only: a task paused for review keeps what it needs,
the caller's uploads included, however long the pause lasts.

A real `mail server` (default SQLite store) with `finished_task_ttl = 2` and rounds every
0.3 s, on a LiteLLM swarm (answered by the scripted model server) whose assistant has the file
tools and a reviewed `send_email` action. The caller sends a message with an attachment; the
model asks for `send_email`, so the task waits for review. While it waits (well past the TTL,
many retention rounds) the task and its attachment must stay; the review then completes it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from server_fixtures import ServerProcess, auth
from support.llm_thread import ThreadedLLM
from support.paused_upload import TEAM, PausedUpload
from support.review_server import review_server

pytestmark = pytest.mark.timeout(300)

TTL = 2.0


@pytest.fixture(scope="module")
def llm() -> Iterator[ThreadedLLM]:
    with ThreadedLLM() as model:
        yield model


@pytest.fixture(scope="module", params=["sqlite", "memory"])
def server(
    llm: ThreadedLLM, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[ServerProcess]:
    directory = tmp_path_factory.mktemp("retention_paused")
    kind = 'kind = "memory"' if request.param == "memory" else ""
    extra = f"""
[server.store]
finished_task_ttl = {TTL}
prune_interval = 0.3
{kind}

[server.team_tools]
files_root = "{directory / "files"}"
"""
    with review_server(
        directory, llm.base_url, ["alice"], prefix="keep", team_tools=TEAM, extra=extra
    ) as srv:
        yield srv


def test_a_paused_tasks_upload_outlives_the_ttl(server: ServerProcess, llm: ThreadedLLM) -> None:
    headers = auth(server.keys["alice"])
    with httpx.Client(base_url=server.base_url, headers=headers, timeout=120) as client:
        paused = PausedUpload(client, llm, "needed after the review")
        # (The model's first call can take longer than the TTL: the upload is already older.)
        assert paused.upload_status() == 200, "the paused task's upload was removed"
        # Well past the TTL: many retention rounds run while the task waits for review.
        paused.stays_for(TTL * 4)
        paused.finish()


def test_a_finished_tasks_upload_stays_as_long_as_the_task(
    server: ServerProcess, llm: ThreadedLLM
) -> None:
    """Paused past the TTL, then finished: the task is kept `finished_task_ttl` from then on,
    and so is what it needs to be read whole (its upload). The upload went at the first
    retention round after the task finished (its own time was older than the TTL), while
    `GET /task` still listed it."""
    headers = auth(server.keys["alice"])
    with httpx.Client(base_url=server.base_url, headers=headers, timeout=120) as client:
        paused = PausedUpload(client, llm, "read after the task ended")
        time.sleep(TTL * 1.5)  # the upload's own time gets older than the TTL
        paused.finish()
        # Until the task itself is removed, its upload is there (read first: a task
        # removed between the two reads took its upload with it).
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            kept = paused.upload_status()
            if paused.record().status_code == 404:
                break
            assert kept == 200, "the finished task is listed but its upload was removed"
            time.sleep(0.05)
        else:
            raise AssertionError("the finished task was not removed after its TTL")
