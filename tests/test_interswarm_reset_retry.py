"""Two real `mail server` swarms federated as docs/interswarm.md tells users, each reaching
the other through a proxy that resets the first POST's connection after it reached the peer
whole: the router sends the call again with the same Idempotency-Key, the peer runs it once,
and the answer comes back. The supervisors are LiteLLM agents answered by the scripted
provider, which records every model call (``support.same_name_fed``).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.support.post_resetting_proxy import PostResettingProxy

from mail.net import InterswarmRouter, SwarmRegistry
from server_fixtures import ServerProcess, auth, create_key, free_port, run_cli, write_config
from support.same_name_fed import ThreadedLLM, register_peer, swarms_json

pytestmark = pytest.mark.timeout(300)
SWARMS = ("alpha", "beta")


def _agent_key(keys_file: Path, swarm: str) -> str:
    code, out, err = run_cli(
        "keys", "--keys-file", str(keys_file), "create", "--role", "agent", "--id", swarm,
        "--swarm", swarm, "--json",
    )  # fmt: skip
    assert code == 0, err
    return str(json.loads(out)["key"])


class Pair:
    def __init__(self, llm: ThreadedLLM) -> None:
        self.llm = llm
        self.servers: dict[str, ServerProcess] = {}
        self.keys: dict[str, str] = {}
        self.proxies: dict[str, PostResettingProxy] = {}  # the proxy in front of each swarm

    def arm(self) -> None:
        """Each proxy resets the next POST's connection once."""
        for proxy in self.proxies.values():
            proxy.reset_done = False

    def fired(self, swarm: str) -> bool:
        return self.proxies[swarm].reset_done

    def calls(self, swarm: str, needle: str) -> int:
        return sum(1 for r in self.llm.requests_for(swarm) if needle in str(r.body))


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    llm = ThreadedLLM().start()
    pair = Pair(llm)
    root = tmp_path_factory.mktemp("reset-fed")
    loop = llm._loop
    ports: dict[str, int] = {}
    try:
        for swarm in SWARMS:
            directory = root / swarm
            directory.mkdir()
            peers = [s for s in SWARMS if s != swarm]
            (directory / "swarms.json").write_text(
                json.dumps(swarms_json(swarm, peers, llm.base_url, "completions"))
            )
            ports[swarm] = free_port()
            write_config(
                directory, port=ports[swarm], swarm=swarm, extra="interswarm_timeout = 60.0\n"
            )
            keys_file = directory / "registries" / "keys.json"
            pair.keys[f"{swarm}/admin"] = create_key(keys_file, "admin", f"{swarm}-admin")
            pair.keys[f"{swarm}/user"] = create_key(keys_file, "user", "alice")
            pair.keys[f"{swarm}/as-peer"] = _agent_key(keys_file, peers[0])
        for swarm in SWARMS:
            config = root / swarm / "mail.toml"
            server = ServerProcess(root / swarm, ports[swarm], args=["--config", str(config)])
            pair.servers[swarm] = server.start(wait=False)
            proxy = PostResettingProxy(ports[swarm])
            asyncio.run_coroutine_threadsafe(proxy.__aenter__(), loop).result(10)
            proxy.reset_done = True  # disarmed until a test arms it
            pair.proxies[swarm] = proxy
        for server in pair.servers.values():
            server.wait_healthy()
        for swarm, peer in (("alpha", "beta"), ("beta", "alpha")):
            register_peer(
                pair.servers[swarm].base_url,
                pair.keys[f"{swarm}/admin"],
                peer,
                f"http://127.0.0.1:{pair.proxies[peer].port}",
                pair.keys[f"{peer}/as-peer"],
            )
        yield pair
    finally:
        for server in pair.servers.values():
            server.stop()
        for proxy in pair.proxies.values():
            asyncio.run_coroutine_threadsafe(proxy.__aexit__(None, None, None), loop).result(10)
        llm.stop()


def _ask(pair: Pair, body: str) -> httpx.Response:
    return httpx.post(
        f"{pair.servers['alpha'].base_url}/message",
        json={"body": body},
        headers=auth(pair.keys["alpha/user"]),
        timeout=180,
    )


def test_forward_and_back_reset_once_each_run_once(pair: Pair) -> None:
    control = f"calm-{uuid.uuid4().hex[:6]}"
    r = _ask(pair, f"ASK beta {control}")
    assert r.status_code == 200, r.text
    assert r.json()["response"] == f"alpha got: beta says: {control}"
    expected = {s: pair.calls(s, control) for s in SWARMS}  # without resets

    text = f"reset-{uuid.uuid4().hex[:6]}"
    pair.arm()
    r = _ask(pair, f"ASK beta {text}")
    assert r.status_code == 200, r.text
    assert r.json()["response"] == f"alpha got: beta says: {text}"
    assert pair.fired("beta") and pair.fired("alpha")  # both directions were reset once
    assert {s: pair.calls(s, text) for s in SWARMS} == expected


def test_remote_user_message_reset_runs_the_remote_task_once(pair: Pair) -> None:
    text = f"direct-{uuid.uuid4().hex[:6]}"
    pair.arm()
    pair.proxies["alpha"].reset_done = True  # only alpha -> beta
    r = httpx.post(
        f"{pair.servers['alpha'].base_url}/interswarm/message",
        json={"targets": ["supervisor@beta"], "body": text, "msg_type": "request"},
        headers=auth(pair.keys["alpha/user"]),
        timeout=180,
    )
    assert r.status_code == 200, r.text
    data: dict[str, Any] = r.json()
    assert data["response"]["message"]["body"] == f"beta completes: {text}", data
    assert pair.fired("beta")
    assert pair.calls("beta", text) == 1
    admin = auth(pair.keys["beta/admin"])
    tasks = httpx.get(f"{pair.servers['beta'].base_url}/tasks", headers=admin, timeout=20).json()
    mine = [t for t in tasks.values() if text in json.dumps(t)]
    assert len(mine) <= 1


def test_remote_user_message_still_running_is_waited_for(pair: Pair) -> None:
    """The retry reaches the peer while the first attempt's task still runs (its model takes
    seconds, as real ones do): the peer answers 409 + Retry-After until the outcome is there;
    the router waits for it within interswarm_timeout instead of giving up after `retries`."""
    body = "ASK alpha HOLD"  # beta asks alpha's supervisor, which answers after HOLD_SECONDS
    pair.arm()
    pair.proxies["alpha"].reset_done = True  # only alpha -> beta
    before = pair.calls("beta", body)
    r = httpx.post(
        f"{pair.servers['alpha'].base_url}/interswarm/message",
        json={"targets": ["supervisor@beta"], "body": body, "msg_type": "request"},
        headers=auth(pair.keys["alpha/user"]),
        timeout=180,
    )
    assert r.status_code == 200, r.text
    data: dict[str, Any] = r.json()
    assert data["response"]["message"]["body"] == "beta got: alpha says: HOLD", data
    assert pair.fired("beta")
    assert pair.calls("beta", body) - before == 2  # the question out, the answer in: once each


async def test_router_waits_for_a_peer_still_running_the_first_attempt(
    pair: Pair, tmp_path: Path
) -> None:
    """`post_interswarm_user_message` (docs/interswarm.md, Python API) to alpha, whose task
    takes seconds (it asks beta, which asks alpha's supervisor, answered after HOLD_SECONDS).
    The first attempt's connection is reset after alpha got it whole; every retry then reaches
    alpha while that task runs and gets 409 + Retry-After. Those say "not yet", not "failed":
    the router keeps asking within its timeout and gets the one task's answer."""
    body = "ASK alpha HOLD"
    before = pair.calls("beta", body)
    registry = SwarmRegistry("client", "http://127.0.0.1:1", persistence_file=tmp_path / "r.json")
    router = InterswarmRouter(registry, "client", request_timeout=120)
    await router.start()
    try:
        pair.arm()
        pair.proxies["beta"].reset_done = True  # only the router's POST to alpha is reset
        answer = await router.post_interswarm_user_message(
            f"http://127.0.0.1:{pair.proxies['alpha'].port}",
            {"targets": ["supervisor@beta"], "body": body, "msg_type": "request"},
            pair.keys["alpha/user"],
        )
    finally:
        await router.stop()
        await registry.aclose()
    assert pair.fired("alpha")
    assert answer["response"]["message"]["body"] == "beta got: alpha says: HOLD", answer
    assert pair.calls("beta", body) - before == 2  # one task: the question out, the answer in
