"""The server's swarm registry keeps checking its peers after a caller's instance goes.

`mail server` gives every interswarm instance the server's own registry. Shutting one instance
down (an idle reclaim) stopped that registry's health checks for the whole server, so a peer
that went down afterwards stayed `is_active` in `GET /swarms`, and agents waiting on it were no
longer told (docs/configuration.md, `health_check_interval`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.support.peer_agents import peer_swarm_json

from server_fixtures import ServerProcess, auth, create_key, free_port, write_config

pytestmark = pytest.mark.timeout(240)

HEALTH_INTERVAL = 0.5
IDLE_TIMEOUT = 1


def _side(directory: Path, name: str, remote: str, settings: str) -> tuple[Path, int]:
    directory.mkdir(parents=True)
    (directory / "swarms.json").write_text(
        json.dumps(peer_swarm_json(name, remote)), encoding="utf-8"
    )
    port = free_port()
    config = write_config(directory, port=port, swarm=name, extra=settings)
    return config, port


def _beta_on_alpha(alpha: ServerProcess) -> dict[str, Any]:
    r = httpx.get(f"{alpha.base_url}/swarms", timeout=10)
    assert r.status_code == 200, r.text
    return {s["swarm_name"]: s for s in r.json()["swarms"]}["swarm-beta"]


def _wait_for(predicate: Any, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_health_checks_go_on_after_an_instance_is_reclaimed(tmp_path: Path) -> None:
    settings = f"health_check_interval = {HEALTH_INTERVAL}\ninterswarm_timeout = 5.0\n"
    a_cfg, a_port = _side(tmp_path / "alpha", "swarm-alpha", "swarm-beta", settings)
    text = a_cfg.read_text(encoding="utf-8")
    a_cfg.write_text(
        text.replace("instance_idle_timeout = 0", f"instance_idle_timeout = {IDLE_TIMEOUT}"),
        encoding="utf-8",
    )
    b_cfg, b_port = _side(tmp_path / "beta", "swarm-beta", "swarm-alpha", settings)
    a_keys = tmp_path / "alpha/registries/keys.json"
    b_keys = tmp_path / "beta/registries/keys.json"
    alpha_admin = create_key(a_keys, "admin", "alpha-admin")
    alice = create_key(a_keys, "user", "alice")
    create_key(b_keys, "admin", "beta-admin")  # beta makes no keys of its own to print
    alpha = ServerProcess(tmp_path / "alpha", a_port, args=["--config", str(a_cfg)])
    beta = ServerProcess(tmp_path / "beta", b_port, args=["--config", str(b_cfg)])
    beta.start()
    alpha.start()
    try:
        r = httpx.post(
            f"{alpha.base_url}/swarms",
            json={"name": "swarm-beta", "base_url": beta.base_url, "volatile": False},
            headers=auth(alpha_admin),
            timeout=20,
        )
        assert r.status_code == 200, r.text

        # Alice's instance (connected to other swarms, like every instance of this swarm)
        # answers her, then sits idle until the server reclaims it.
        r = httpx.post(
            f"{alpha.base_url}/message", json={"body": "hello"}, headers=auth(alice), timeout=60
        )
        assert r.status_code == 200, r.text
        assert r.json()["response"] == "supervisor@swarm-alpha: hello", r.text
        _wait_for(
            lambda: "reclaimed idle user instance for alice" in alpha.logs(),
            "alice's instance to be reclaimed",
            timeout=60,
        )
        assert _beta_on_alpha(alpha)["is_active"] is True

        # Beta goes away; the server's periodic check still notices.
        beta.stop()
        _wait_for(
            lambda: _beta_on_alpha(alpha)["is_active"] is False,
            "alpha's health check to mark beta inactive",
            timeout=60,
        )
    finally:
        alpha.stop()
        beta.stop()


async def test_a_swarm_still_stops_the_checks_of_the_registry_it_was_built_with(
    tmp_path: Path,
) -> None:
    from tests.support.v13_swarm import template

    from mail.net import SwarmRegistry

    # v1.3: a swarm instantiated with interswarm on owns its registry; shutdown stops it.
    swarm = template(enable_interswarm=True).instantiate(
        instance_params={}, user_id="u-own", registry_file=str(tmp_path / "own.json")
    )
    own = swarm.swarm_registry
    assert own is not None
    await own.start_health_checks()
    # Another registry handed to a second instance afterwards (as `mail server` does) is
    # shared and keeps running.
    shared = SwarmRegistry("compat", "http://127.0.0.1:1", str(tmp_path / "shared.json"))
    await shared.start_health_checks()
    other = template(enable_interswarm=True).instantiate(
        instance_params={}, user_id="u-other", registry_file=str(tmp_path / "other.json")
    )
    other.swarm_registry = shared
    try:
        await swarm.shutdown()
        await other.shutdown()
        assert not own.health_checks_running()
        assert shared.health_checks_running()
    finally:
        await own.aclose()
        await shared.aclose()
