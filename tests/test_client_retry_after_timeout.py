"""MAILClient against a real `mail server` whose model answers after the client's `timeout`.

The first attempt times out; the retry, with the same Idempotency-Key, is answered 409 with
`Retry-After` while the first request's task still runs, and asks again within its own
`timeout` until the answer is there (docs/client.md#retries). It used to raise that 409 at
once, with retries left: the call's one deadline was spent by the timed-out first attempt.
The model ran once, and the caller has one task.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from mail.client import MAILClient
from mail.client_config import ClientConfig
from server_fixtures import ServerProcess, auth, create_key, free_port, write_config
from support.llm_thread import ThreadedLLM, mentions
from support.review_swarm import review_swarms_json
from support.scripted_llm import hang, reply, tool_call

pytestmark = pytest.mark.timeout(120)

TIMEOUT = 2.0  # the client's, per attempt
MODEL_DELAY = 3.0  # longer than TIMEOUT: the first attempt cannot get the answer


class SlowModelServer:
    """A real `mail server` on a LiteLLM swarm answered by the scripted model."""

    def __init__(self, directory: Path, llm: ThreadedLLM) -> None:
        self.llm = llm
        name = f"slow-{uuid.uuid4().hex[:8]}"
        (directory / "swarms.json").write_text(
            json.dumps([review_swarms_json(name, llm.base_url)]), encoding="utf-8"
        )
        self.key = create_key(directory / "registries" / "keys.json", "user", "alice")
        port = free_port()
        config = write_config(directory, port=port, swarm=name)
        self.process = ServerProcess(directory, port, args=["--config", str(config)])

    def answer(self, token: str, delay: float = 0.0) -> None:
        """The model's answer (once, after `delay` seconds) to the message naming `token`."""
        answer = reply(tool_call("task_complete", {"finish_message": f"answer {token}"}))
        self.llm.queue(
            hang(delay, then=answer) if delay else answer,
            match=lambda request: mentions(request, token),
        )

    @property
    def url(self) -> str:
        return self.process.base_url

    def task_ids(self) -> set[str]:
        answer = httpx.get(f"{self.url}/tasks", headers=auth(self.key), timeout=30)
        assert answer.status_code == 200, answer.text
        return set(answer.json())


@pytest.fixture
def slow_server(tmp_path: Path) -> Iterator[SlowModelServer]:
    with ThreadedLLM() as llm:
        server = SlowModelServer(tmp_path, llm)
        server.process.start()
        try:
            yield server
        finally:
            assert server.process.stop() == 0, server.process.logs()


async def test_a_retry_after_a_timeout_waits_out_the_409s_and_gets_the_one_answer(
    slow_server: SlowModelServer, caplog: pytest.LogCaptureFixture
) -> None:
    # A first message warms the server up (its first model call imports LiteLLM's
    # providers), so that the timed one below takes the model's delay and little more.
    warm = uuid.uuid4().hex
    slow_server.answer(warm)
    async with MAILClient(
        slow_server.url, slow_server.key, config=ClientConfig(timeout=60)
    ) as client:
        assert (await client.post_message(f"question {warm}"))["response"] == f"answer {warm}"

    token = uuid.uuid4().hex
    slow_server.answer(token, delay=MODEL_DELAY)
    before = slow_server.task_ids()
    config = ClientConfig(timeout=TIMEOUT, retries=2, retry_backoff=0.05, retry_max_delay=0.1)
    with caplog.at_level(logging.INFO, logger="mail.client"):
        async with MAILClient(slow_server.url, slow_server.key, config=config) as client:
            answer = await client.post_message(f"question {token}")

    assert answer["response"] == f"answer {token}"
    assert len(slow_server.llm.requests(token)) == 1  # the model ran once
    assert slow_server.task_ids() - before == {answer["task_id"]}  # one task, not two
    lines = [r.getMessage() for r in caplog.records if r.name == "mail.client"]
    assert "timed out" in lines[0] and "retry 1 of 2" in lines[0], lines
    assert any("still working on an earlier attempt" in line for line in lines), lines
