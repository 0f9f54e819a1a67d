"""The client's interswarm methods (and the REPL's message-interswarm) between two real servers.

swarm-alpha and swarm-beta run the deterministic agents of tests/support/interswarm_agents.py
and know each other through persistent registrations, as in tests/test_interswarm_e2e.py.
"""

from __future__ import annotations

import asyncio
import io
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from mail.client import ClientConfig, MAILClient
from mail.repl import MAILREPL
from server_fixtures import REPO_ROOT, ServerProcess, create_key, free_port, write_config

pytestmark = pytest.mark.timeout(120)

Pair = tuple[ServerProcess, ServerProcess, dict[str, str]]


def _swarms_json(name: str, remote: str) -> list[dict[str, Any]]:
    # Imported here: server_fixtures has put the repository root on sys.path by now.
    from tests.support.interswarm_agents import swarm_json

    assert (REPO_ROOT / "tests" / "support").is_dir()
    return swarm_json(name, remote)


def _side(directory: Path, name: str, remote: str) -> tuple[Path, int]:
    directory.mkdir(parents=True)
    (directory / "swarms.json").write_text(json.dumps(_swarms_json(name, remote)))
    port = free_port()
    return write_config(directory, port=port, swarm=name, extra="interswarm_timeout = 3.0\n"), port


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    root = tmp_path_factory.mktemp("client-federation")
    a_cfg, a_port = _side(root / "alpha", "swarm-alpha", "swarm-beta")
    b_cfg, b_port = _side(root / "beta", "swarm-beta", "swarm-alpha")
    a_keys, b_keys = root / "alpha/registries/keys.json", root / "beta/registries/keys.json"
    keys = {
        "alpha_admin": create_key(a_keys, "admin", "alpha-admin"),
        "alice": create_key(a_keys, "user", "alice"),
        "beta_on_alpha": create_key(a_keys, "agent", "swarm-beta"),
        "beta_admin": create_key(b_keys, "admin", "beta-admin"),
        "alpha_on_beta": create_key(b_keys, "agent", "swarm-alpha"),
    }
    alpha = ServerProcess(
        root / "alpha",
        a_port,
        args=["--config", str(a_cfg)],
        env={"SWARM_AUTH_TOKEN_SWARM_BETA": keys["alpha_on_beta"]},
    ).start()
    beta = ServerProcess(
        root / "beta",
        b_port,
        args=["--config", str(b_cfg)],
        env={"SWARM_AUTH_TOKEN_SWARM_ALPHA": keys["beta_on_alpha"]},
    ).start()

    async def register_each_other() -> None:
        for server, admin, other, other_name in (
            (alpha, "alpha_admin", beta, "swarm-beta"),
            (beta, "beta_admin", alpha, "swarm-alpha"),
        ):
            async with MAILClient(server.base_url, keys[admin], config=ClientConfig()) as client:
                result = await client.register_swarm(other_name, other.base_url, volatile=False)
                assert result == {"status": "registered", "swarm_name": other_name}

    try:
        asyncio.run(register_each_other())
        yield alpha, beta, keys
    finally:
        alpha.stop()
        beta.stop()


def _envelope(
    source: str,
    target: str,
    payload: dict[str, Any],
    msg_type: str,
    owner: str,
    contributors: list[str],
) -> dict[str, Any]:
    return {
        "message_id": str(uuid.uuid4()),
        "source_swarm": source,
        "target_swarm": target,
        "timestamp": "2026-01-01T00:00:00+00:00",
        "payload": payload,
        "msg_type": msg_type,
        "auth_token": "unused",
        "task_owner": owner,
        "task_contributors": contributors,
        "metadata": {},
    }


def _agent_payload(
    task_id: str, sender: str, recipient: str, body: str, swarms: tuple[str, str]
) -> dict[str, Any]:
    return {
        "task_id": task_id,
        "request_id": str(uuid.uuid4()),
        "sender": {"address_type": "agent", "address": sender},
        "recipient": {"address_type": "agent", "address": recipient},
        "subject": "from the client test",
        "body": body,
        "sender_swarm": swarms[0],
        "recipient_swarm": swarms[1],
        "routing_info": {},
    }


async def test_send_interswarm_message_gets_the_remote_answer(pair: Pair) -> None:
    alpha, _beta, keys = pair
    async with MAILClient(alpha.base_url, keys["alice"], config=ClientConfig(timeout=60)) as alice:
        result = await alice.send_interswarm_message(
            "direct hello", keys["alice"], targets=["supervisor@swarm-beta"], msg_type="request"
        )
    assert result["response"]["message"]["body"] == "beta completes: direct hello"


async def test_post_interswarm_message_forwards_an_envelope(pair: Pair) -> None:
    _alpha, beta, keys = pair
    task_id = str(uuid.uuid4())
    envelope = _envelope(
        "swarm-alpha",
        "swarm-beta",
        _agent_payload(
            task_id,
            "supervisor@swarm-alpha",
            "supervisor@swarm-beta",
            "hi",
            ("swarm-alpha", "swarm-beta"),
        ),
        "request",
        "user:carol@swarm-alpha",
        ["user:carol@swarm-alpha"],
    )
    async with MAILClient(beta.base_url, keys["alpha_on_beta"], config=ClientConfig()) as agent:
        result = await agent.post_interswarm_message(envelope)
    assert result == {
        "swarm": "swarm-beta",
        "task_id": task_id,
        "status": "success",
        "local_runner": "swarm:swarm-alpha@swarm-beta",
    }


async def test_post_interswarm_response_returns_to_the_owning_swarm(pair: Pair) -> None:
    alpha, _beta, keys = pair
    task_id = str(uuid.uuid4())
    async with MAILClient(alpha.base_url, keys["alice"], config=ClientConfig(timeout=60)) as alice:
        done = await alice.post_message("ping from alice", task_id=task_id)
        assert done["response"] == "alpha got: beta says: ping from alice"
    envelope = _envelope(
        "swarm-beta",
        "swarm-alpha",
        _agent_payload(
            task_id,
            "supervisor@swarm-beta",
            "supervisor",
            "a late word",
            ("swarm-beta", "swarm-alpha"),
        ),
        "response",
        "user:alice@swarm-alpha",
        ["user:alice@swarm-alpha", "swarm:swarm-alpha@swarm-beta"],
    )
    async with MAILClient(alpha.base_url, keys["beta_on_alpha"], config=ClientConfig()) as agent:
        result = await agent.post_interswarm_response(envelope)
    assert result["status"] == "success" and result["task_id"] == task_id
    assert result["swarm"] == "swarm-alpha"


def test_repl_message_interswarm_fills_the_right_fields(pair: Pair) -> None:
    alpha, _beta, keys = pair
    out = io.StringIO()
    console = Console(file=out, width=160, color_system=None, force_terminal=False)
    repl = MAILREPL(alpha.base_url, keys["alice"], ClientConfig(timeout=60), console=console)
    with asyncio.Runner() as runner:
        runner.run(repl.client.login(keys["alice"]))
        repl.execute(runner, "mi 'hello from the repl' supervisor@swarm-beta")
        runner.run(repl.client.aclose())
    assert "beta completes: hello from the repl" in out.getvalue()
