"""A task paused for review keeps its caller's upload across a restart, an offline
`mail db-prune` and the restarted server's own retention rounds, on SQLite and PostgreSQL.

`test_retention_paused_uploads` holds one server up while the TTL passes; here the pause
outlives the process: the server stops (SIGINT), the TTL passes, `mail db-prune --older-than 1`
runs on the stopped store, a new server prunes every 0.3 s, and then the review completes the
task with the upload still readable.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from server_fixtures import ServerProcess, auth, create_key, free_port, server_env, write_config
from support.llm_thread import ThreadedLLM
from support.paused_upload import TEAM, PausedUpload
from support.pg_schema import BASE_URL, scratch_schema, with_search_path
from support.review_swarm import review_swarms_json

pytestmark = pytest.mark.timeout(300)

TTL = 1.0


@pytest.fixture(scope="module")
def llm() -> Iterator[ThreadedLLM]:
    with ThreadedLLM() as model:
        yield model


@pytest.fixture(params=["sqlite", "postgres"])
def store_env(request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    if request.param == "sqlite":
        yield {}
        return
    with scratch_schema("paused_restart") as schema:
        yield {"DATABASE_URL": with_search_path(BASE_URL, schema)}


def _server(directory: Path, swarm: str, env: dict[str, str]) -> ServerProcess:
    extra = f"""
[server.store]
finished_task_ttl = {TTL}
prune_interval = 0.3

[server.team_tools]
files_root = "{directory / "files"}"
"""
    port = free_port()
    config = write_config(directory, port=port, swarm=swarm, extra=extra)
    return ServerProcess(directory, port, args=["--config", str(config)], env=env)


def test_a_paused_tasks_upload_outlives_restart_and_db_prune(
    llm: ThreadedLLM, store_env: dict[str, str], tmp_path: Path
) -> None:
    swarm = f"keep-{uuid.uuid4().hex[:8]}"
    definition = review_swarms_json(swarm, llm.base_url)
    for agent in definition["agents"]:
        agent["team_tools"] = TEAM
    (tmp_path / "swarms.json").write_text(json.dumps([definition]), encoding="utf-8")
    headers = auth(create_key(tmp_path / "registries" / "keys.json", "user", "alice"))
    server = _server(tmp_path, swarm, store_env).start()
    try:
        with httpx.Client(base_url=server.base_url, headers=headers, timeout=120) as client:
            paused = PausedUpload(client, llm, "needed after the review")
            assert paused.upload_status() == 200
    finally:
        assert server.stop(timeout=60) == 0, server.logs()

    time.sleep(TTL * 2)  # the upload and the task's posts get older than the TTL
    config = str(tmp_path / "mail.toml")
    pruned = subprocess.run(
        [sys.executable, "-m", "mail.cli", "db-prune", "--older-than", "1"],
        cwd=tmp_path,
        env=server_env({**store_env, "MAIL_CONFIG_PATH": config}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert pruned.returncode == 0, pruned.stdout + pruned.stderr
    assert "Removed 0 task(s)" in pruned.stdout and " 0 team row(s)" in pruned.stdout, pruned.stdout

    server = _server(tmp_path, swarm, store_env).start()
    try:
        with httpx.Client(base_url=server.base_url, headers=headers, timeout=120) as client:
            paused.client = client  # the new server's connection
            paused.stays_for(TTL * 3)  # many retention rounds of the new server
            paused.finish()
    finally:
        assert server.stop(timeout=60) == 0, server.logs()
