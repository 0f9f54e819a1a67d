"""Regression tests for what the schemathesis run (tests/test_fuzz_openapi.py) found."""

from __future__ import annotations

import json
import uuid

import httpx
import pytest

from server_fixtures import (
    ServerProcess,
    auth,
    create_key,
    free_port,
    write_config,
    write_stub_swarms,
)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    directory = tmp_path_factory.mktemp("fuzz-regressions")
    swarms = write_stub_swarms(directory)
    document = json.loads(swarms.read_text())
    document[0]["enable_interswarm"] = True
    swarms.write_text(json.dumps(document))
    port = free_port()
    config = write_config(directory, port=port)
    keys_file = directory / "registries" / "keys.json"
    proc = ServerProcess(directory, port, args=["--config", str(config)]).start(wait=False)
    proc.wait_healthy(timeout=120)
    proc.keys = {"user": create_key(keys_file, "user", "fuzzed")}
    yield proc
    assert proc.stop() == 0, proc.logs()[-3000:]


def _send(server: ServerProcess, **body: object) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/interswarm/message",
        headers=auth(server.keys["user"]),
        json={"body": "+", "targets": ["nobody"], **body},
        timeout=60,
    )


def test_interswarm_message_with_a_non_uuid_task_id_is_400(server: ServerProcess) -> None:
    # Found by fuzzing: the answer carried task_id "y", which violates the MAIL schema.
    r = _send(server, task_id="y")
    assert r.status_code == 400
    assert r.json()["detail"] == "parameter 'task_id' must be a UUID, got 'y'"


def test_interswarm_message_answer_conforms_with_a_uuid_task_id(server: ServerProcess) -> None:
    task_id = str(uuid.uuid4())
    r = _send(server, task_id=task_id)
    assert r.status_code == 200, r.text
    message = r.json()["response"]
    assert message["message"]["task_id"] == task_id
    uuid.UUID(message["id"])
    # An unknown local agent is reported inside the task, as a protocol message.
    assert "There is no agent called 'nobody'" in message["message"]["body"]
