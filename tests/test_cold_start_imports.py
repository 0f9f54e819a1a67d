"""A new cluster instance host (what a failover or a caller's first request starts) imports
only what serving its swarm needs: the heavy packages a stub swarm never uses stay unloaded.

Each of these cost a new host 0.1-1.3 s on the shared 2-core machine (issue 27: failover in
<= 5 s). The host runs in a fresh Python process, as in a Ray worker, without Ray.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mail.config import ServerConfig
from server_fixtures import REPO_ROOT, server_env, write_stub_swarms

pytestmark = pytest.mark.timeout(90)

DATABASE_URL = os.environ.get("MAIL_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")

# Loaded only by what uses them: agent memory, url:: references and HTTP actions, reviewed
# actions' argument checks, the front end's socket server.
NOT_AT_START = ("langgraph", "langchain_core", "langmem", "httpx", "jsonschema", "uvicorn")

_PROBE = """
import asyncio, json, sys
from mail.cluster.host import ForwardedRequest, InstanceHost

async def main():
    host = InstanceHost(sys.argv[1], {"role": "user", "id": sys.argv[2], "api_key": "k"})
    await host.ready()
    answer = await host.unary(host.owner(), ForwardedRequest("GET", "/status", headers=[(b"authorization", b"Bearer k")]))
    loaded = sorted(m for m in json.loads(sys.argv[3]) if m in sys.modules)
    print(json.dumps({"status": answer.status, "loaded": loaded, "store": host.app.state.mail.store.backend}))
    await host.stop()

asyncio.run(main())
"""


def test_a_new_instance_host_does_not_import_what_its_swarm_never_uses(tmp_path: Path) -> None:
    source = write_stub_swarms(tmp_path)
    config = ServerConfig.model_validate(
        {
            "host": "127.0.0.1",
            "port": 1,
            "swarm": {
                "name": "stub",
                "source": str(source),
                "registry": str(tmp_path / "registries" / "stub.json"),
            },
            "settings": {"instance_idle_timeout": 0},
        }
    )
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            _PROBE,
            config.model_dump_json(),
            f"cold-{os.getpid()}",
            json.dumps(NOT_AT_START),
        ],
        cwd=tmp_path,
        env=server_env({"DATABASE_URL": DATABASE_URL, "PYTHONPATH": str(REPO_ROOT)}),
        capture_output=True,
        text=True,
        timeout=80,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["status"] == 200, report
    assert report["store"] == "postgres"  # agent memory is configured, just not opened
    assert report["loaded"] == [], report
