"""Cluster mode on a real Ray cluster: a head, two worker nodes, two `mail server` front ends.

Everything is real: ``ray.cluster_utils.Cluster`` processes on this machine, front ends as
``mail server --cluster ray`` subprocesses, PostgreSQL as the store, stub agents whose calls
take 200 ms. Nodes are killed (their raylet and workers) while tasks run or wait.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.server_fixtures import REPO_ROOT
from tests.support.durable_agents import swarms_json
from tests.support.ray_cluster import ClusterDeployment, RayTestCluster, auth_header, ray_available
from tests.test_persistence_e2e import _database_reachable

from server_fixtures import parse_sse_stream

DATABASE_URL = os.environ.get("MAIL_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")

pytestmark = pytest.mark.timeout(300)


def _require() -> None:
    if not ray_available():
        if os.environ.get("MAIL_REQUIRE_RAY") == "1":
            pytest.fail("Ray is required (uv sync --extra cluster) but not installed")
        pytest.skip("Ray not installed (uv sync --extra cluster; MAIL_REQUIRE_RAY=1 fails instead)")
    if not _database_reachable():
        if os.environ.get("MAIL_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"PostgreSQL is required but unreachable at {DATABASE_URL}")
        pytest.skip("PostgreSQL not reachable")


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[RayTestCluster]:
    _require()
    cluster = RayTestCluster(workers=2).start()
    try:
        yield cluster
    finally:
        cluster.shutdown()


def _two_front_ends(
    cluster: RayTestCluster, root: Path, prefix: str, env: dict[str, str]
) -> Iterator[ClusterDeployment]:
    """A deployment of two front ends whose agents' calls take 200 ms and are logged."""
    swarm = f"{prefix}-{uuid.uuid4().hex[:8]}"
    dep = ClusterDeployment(
        root=root,
        cluster=cluster,
        database_url=DATABASE_URL,
        swarms=swarms_json(swarm),
        swarm=swarm,
        env={
            "MAIL_STUB_LATENCY_MS": "200",
            "MAIL_DURABLE_CALL_LOG": str(root / "calls.log"),
            **env,
        },
    ).prepare()
    try:
        dep.start_front_end()
        dep.start_front_end()
        yield dep
    finally:
        dep.stop()


@pytest.fixture(scope="module")
def deployment(
    ray_cluster: RayTestCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ClusterDeployment]:
    # These tests check the (opt-in) warm pool.
    root = tmp_path_factory.mktemp("cluster")
    yield from _two_front_ends(ray_cluster, root, "cl", {"MAIL_CLUSTER_WARM_POOL": "1"})


@pytest.fixture(scope="module")
def cold_deployment(
    ray_cluster: RayTestCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ClusterDeployment]:
    """A deployment with the default configuration (no warm pool): Ray itself starts an
    instance's actor again when its node dies."""
    yield from _two_front_ends(ray_cluster, tmp_path_factory.mktemp("cluster-cold"), "cc", {})


def _calls(dep: ClusterDeployment) -> list[str]:
    path = dep.root / "calls.log"
    return path.read_text().splitlines() if path.exists() else []


def _post(url: str, key: str, body: dict[str, Any], timeout: float = 60) -> httpx.Response:
    return httpx.post(f"{url}/message", json=body, headers=auth_header(key), timeout=timeout)


def _task(url: str, key: str, task_id: str) -> dict[str, Any]:
    reply = httpx.get(
        f"{url}/task", params={"task_id": task_id}, headers=auth_header(key), timeout=60
    )
    assert reply.status_code == 200, reply.text
    result: dict[str, Any] = reply.json()
    return result


def _follow(url: str, key: str, task_id: str, after: int) -> list[Any]:
    """Events of ``task_id`` after id ``after`` until its closing event (pings dropped)."""
    events = []
    with httpx.stream(
        "GET",
        f"{url}/task/events",
        params={"task_id": task_id},
        headers={**auth_header(key), "Last-Event-ID": str(after)},
        timeout=60,
    ) as response:
        assert response.status_code == 200, response.read()
        for event in parse_sse_stream(response):
            if event.event == "ping":
                continue
            events.append(event)
            if event.event in ("task_complete", "task_error") and event.id is None:
                break
    return events


def test_one_instance_per_caller_across_front_ends(deployment: ClusterDeployment) -> None:
    fe0, fe1 = deployment.front_ends
    alice = deployment.keys["alice"]
    task_id = str(uuid.uuid4())
    first = _post(fe0.base_url, alice, {"body": "FANOUT one", "task_id": task_id})
    assert first.status_code == 200, first.text
    assert first.json()["response"] == "both: worked(worker1): one A + worked(worker2): one B"
    holder = deployment.cluster.describe(deployment.swarm, "user", "alice")

    # The same task, continued through the other front end, in the same instance.
    second = _post(fe1.base_url, alice, {"body": "FANOUT two", "task_id": task_id})
    assert second.status_code == 200, second.text
    record = _task(fe1.base_url, alice, task_id)
    bodies = [e["data"] for e in record["events"] if e["event"] == "new_message"]
    assert any("FANOUT one" in str(b) for b in bodies) and any(
        "FANOUT two" in str(b) for b in bodies
    )
    assert deployment.cluster.describe(deployment.swarm, "user", "alice")["pid"] == holder["pid"]

    # A burst of first requests from a new caller through both front ends: one instance.
    # (Alice took a warm host; on a loaded machine its replacement may still be starting.)
    deployment.cluster.wait_pool_settled()
    bob = deployment.keys["bob"]
    results: list[httpx.Response] = []

    def hit(url: str) -> None:
        results.append(_post(url, bob, {"body": "FANOUT burst"}))

    threads = [threading.Thread(target=hit, args=(fe.base_url,)) for fe in (fe0, fe1, fe0, fe1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.status_code for r in results] == [200] * 4, [r.text for r in results]
    import ray

    from mail.commands.cluster import instance_names

    names = instance_names(ray, deployment.cluster.namespace)
    assert names.count(f"{deployment.swarm}/user/bob") == 1, names
    # A warm host of the pool adopted the new caller's instance (no process started for it).
    assert deployment.cluster.describe(deployment.swarm, "user", "bob")["adopted_warm"] is True
    tasks = httpx.get(f"{fe1.base_url}/tasks", headers=auth_header(bob), timeout=30).json()
    assert len(tasks) == 4
    # Users stay isolated: alice's task is not bob's.
    missing = httpx.get(
        f"{fe0.base_url}/task", params={"task_id": task_id}, headers=auth_header(bob), timeout=30
    )
    assert missing.status_code == 404


def _stream_and_kill(
    dep: ClusterDeployment, url: str, key: str, body: dict[str, Any], kill: Any
) -> list[int]:
    """Stream a task; as soon as a worker call of it started, ``kill()`` (once, from a thread
    watching the call log: events reach the client only once stored, so they may lag behind
    the calls); read until the stream is cut. Returns the event ids seen (maybe none)."""
    calls_before = len(_calls(dep))
    seen: list[int] = []
    ended: list[str] = []
    killed = threading.Event()
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            if any(line.startswith("worker") for line in _calls(dep)[calls_before:]):
                kill()
                killed.set()
                return
            stop.wait(0.01)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        with httpx.stream(
            "POST", url, json={**body, "stream": True}, headers=auth_header(key), timeout=60
        ) as response:
            if response.status_code == 503:
                # The node died before the stream's head reached the front end: the caller is
                # told to retry or follow the task (docs/cluster.md), which continues anyway.
                assert killed.wait(30), response.read()
                assert "GET /task/events" in response.read().decode()
                return seen
            assert response.status_code == 200
            try:
                for event in parse_sse_stream(response):
                    if event.id and event.event != "ping":
                        seen.append(int(event.id))
                    if event.event in ("task_complete", "task_error") and event.id is None:
                        ended.append(event.event)
            except httpx.HTTPError:
                pass  # the stream is cut when the node dies
    finally:
        stop.set()
        watcher.join(timeout=60)
    assert killed.is_set(), "no worker call started"
    # A kill that comes after the task's end tests nothing (no task to continue).
    assert not ended, f"the task ended ({ended[0]}) before its node was killed"
    return seen


def test_node_killed_mid_task_resumes_on_another_node(deployment: ClusterDeployment) -> None:
    fe0, fe1 = deployment.front_ends
    alice = deployment.keys["alice"]
    task_id = str(uuid.uuid4())
    # Make sure the instance exists and note where it runs.
    assert _post(fe0.base_url, alice, {"body": "FANOUT warm"}).status_code == 200
    before = deployment.cluster.describe(deployment.swarm, "user", "alice")
    # Alice's is the only instance to move: with one warm host per node and profile, another
    # instance on the same node (bob's, from the previous test) could take the one it needs.
    import ray

    from mail.cluster.warm_pool import end_instance

    with contextlib.suppress(ValueError):
        end_instance(ray, deployment.cluster.namespace, f"{deployment.swarm}/user/bob")
    # The other node has its warm hosts again (the previous test's new caller took one).
    deployment.cluster.wait_pool_settled()
    calls_before = len(_calls(deployment))

    seen = _stream_and_kill(
        deployment,
        f"{fe0.base_url}/message",
        alice,
        {"body": "FANOUT go", "task_id": task_id},
        lambda: deployment.cluster.kill_node_of(deployment.swarm, "user", "alice", before),
    )
    assert seen == list(range(1, len(seen) + 1)), seen

    # Reconnect through the OTHER front end after the last id seen.
    last_seen = seen[-1] if seen else 0  # the stream may be cut before its first event
    events = _follow(fe1.base_url, alice, task_id, last_seen)
    assert events[-1].event == "task_complete", [e.event for e in events]
    assert events[-1].json()["response"] == "both: worked(worker1): go A + worked(worker2): go B"
    ids = [int(e.id) for e in events if e.id is not None]
    assert ids, ("the task was not interrupted", seen, [e.event for e in events])
    assert ids == list(range(last_seen + 1, last_seen + 1 + len(ids))), (seen, ids)
    record = _task(fe1.base_url, alice, task_id)
    assert record["completed"] is True
    assert [int(e["id"]) for e in record["events"]] == list(range(1, ids[-1] + 1))

    after = deployment.cluster.describe(deployment.swarm, "user", "alice")
    assert after["node_id"] != before["node_id"]
    assert after["generation"] > before["generation"]
    assert after["adopted_warm"] is True  # failover took a warm host of the other node
    # The task really continued in the restarted instance: its workers ran there.
    ran_after = {
        line.split()[0]
        for line in _calls(deployment)[calls_before:]
        if line.split()[1] == str(after["pid"])
    }
    assert {"worker1", "worker2"} <= ran_after, _calls(deployment)[calls_before:]


def test_breakpoint_pause_survives_node_kill(deployment: ClusterDeployment) -> None:
    fe0, fe1 = deployment.front_ends
    bob = deployment.keys["bob"]
    task_id = str(uuid.uuid4())
    paused = _post(fe0.base_url, bob, {"body": "BREAKPOINT check", "task_id": task_id})
    assert paused.status_code == 200, paused.text
    count = len(_task(fe0.base_url, bob, task_id)["events"])
    before = deployment.cluster.describe(deployment.swarm, "user", "bob")
    deployment.cluster.kill_node_of(deployment.swarm, "user", "bob")
    deployment.cluster.add_worker()  # keep two workers for the tests that follow

    record = _task(fe1.base_url, bob, task_id)
    assert record["pending_breakpoints"], record
    assert len(record["events"]) == count
    resumed = _post(
        fe1.base_url,
        bob,
        {
            "body": "",
            "task_id": task_id,
            "resume_from": "breakpoint_tool_call",
            "kwargs": {"breakpoint_tool_call_result": "approved"},
        },
    )
    assert resumed.status_code == 200, resumed.text
    assert resumed.json()["response"] == "reviewed: approved"
    assert (
        deployment.cluster.describe(deployment.swarm, "user", "bob")["node_id"] != before["node_id"]
    )


@pytest.mark.timeout(600)
def test_failover_without_a_warm_pool_runs_the_task_again(
    cold_deployment: ClusterDeployment,
) -> None:
    """The default configuration (``warm_pool = 0``): the node of a running task dies, Ray
    starts the instance's actor again on a live node, and the task runs again with no
    request sent. (With a pool, the directory's refill races the node's death, so which
    kind of host adopts there is not fixed; this path has no pool to race.)"""
    deployment = cold_deployment
    while len(deployment.cluster.nodes) < 2:
        deployment.cluster.add_worker()
    fe0, fe1 = deployment.front_ends
    alice = deployment.keys["alice"]
    task_id = str(uuid.uuid4())
    assert _post(fe0.base_url, alice, {"body": "FANOUT warm"}).status_code == 200
    before = deployment.cluster.describe(deployment.swarm, "user", "alice")
    assert before["adopted_warm"] is False  # no pool: the actor was started for alice
    killed_calls: list[int] = []

    def kill() -> None:
        deployment.cluster.kill_node_of(deployment.swarm, "user", "alice", before)
        killed_calls.append(len(_calls(deployment)))

    seen = _stream_and_kill(
        deployment,
        f"{fe0.base_url}/message",
        alice,
        {"body": "FANOUT again", "task_id": task_id},
        kill,
    )

    # No request reaches the instance: Ray's restart alone must bring the task back (a new
    # Ray worker process that imports and starts the server, slow on a loaded machine).
    killed = time.monotonic()
    deadline = killed + 240
    while not any(
        line.startswith("worker") and line.split()[1] != str(before["pid"])
        for line in _calls(deployment)[killed_calls[0] :]
    ):
        assert time.monotonic() < deadline, "the task did not run again within 240 s"
        time.sleep(0.2)
    print(f"the task ran again {time.monotonic() - killed:.1f} s after the node was killed")
    after = deployment.cluster.describe(deployment.swarm, "user", "alice")
    assert after["node_id"] != before["node_id"]
    assert after["generation"] > before["generation"]
    assert after["adopted_warm"] is False
    # `mail cluster list --details` names the restarted actor (a named actor, no pool).
    listed = _mail_cluster(deployment, "list", "--details", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {row["name"]: row for row in json.loads(listed.stdout)["instances"]}
    mine = rows[f"{deployment.swarm}/user/alice"]
    assert mine["caller"] == {"role": "user", "id": "alice"} and mine["pid"] == after["pid"]

    last_seen = seen[-1] if seen else 0  # the stream may be cut before its first event
    events = _follow(fe1.base_url, alice, task_id, last_seen)
    assert events[-1].event == "task_complete", [e.event for e in events]
    assert (
        events[-1].json()["response"] == "both: worked(worker1): again A + worked(worker2): again B"
    )
    deployment.cluster.add_worker()  # keep two workers for the tests that follow


def test_zombie_writes_after_failover_are_rejected(
    deployment: ClusterDeployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host that lost its instance to a newer host cannot change the stored state."""
    import asyncio

    from tests.test_persistence_e2e import _fetch

    from mail.cluster.frontend import host_config_json
    from mail.cluster.host import InstanceHost
    from mail.config import ServerConfig

    fe0 = deployment.front_ends[0]
    alice = deployment.keys["alice"]
    assert _post(fe0.base_url, alice, {"body": "FANOUT before"}).status_code == 200
    old = deployment.cluster.describe(deployment.swarm, "user", "alice")

    # A newer host takes the instance over (as a restart elsewhere does) while the old one
    # lives on: its node was cut off, not dead.
    config = ServerConfig.model_validate_json(_front_end_config(deployment))
    caller = {"role": "user", "id": "alice", "api_key": alice, "swarm": None}

    # The newer host runs in this process: its database comes from the environment, which
    # monkeypatch restores afterwards (later tests run in-process servers without one).
    monkeypatch.setenv("DATABASE_URL", DATABASE_URL)

    async def take_over() -> int:
        host = InstanceHost(host_config_json(config), caller, {"DATABASE_URL": DATABASE_URL})
        await host.ready()
        generation = host.generation
        await host.stop()
        assert generation is not None
        return generation

    newer = asyncio.run(take_over())
    assert newer > old["generation"]

    # The old host runs a task: none of its writes may land.
    task_id = str(uuid.uuid4())
    zombie = _post(fe0.base_url, alice, {"body": "FANOUT zombie", "task_id": task_id})
    assert zombie.status_code in (200, 503), zombie.text
    assert _fetch("SELECT task_id FROM tasks WHERE task_id = $1", task_id) == []
    assert _fetch("SELECT event_id FROM task_events WHERE task_id = $1", task_id) == []

    # Fenced, the old host ends itself; the next request gets a fresh host that claimed a
    # newer generation and sees the state as the newer host left it.
    deadline = time.monotonic() + 60
    while True:
        reply = _post(fe0.base_url, alice, {"body": "FANOUT later"})
        if reply.status_code == 200:
            current = deployment.cluster.describe(deployment.swarm, "user", "alice")
            if current["generation"] > newer:
                break
        assert time.monotonic() < deadline, reply.text
        time.sleep(0.2)
    missing = httpx.get(
        f"{fe0.base_url}/task", params={"task_id": task_id}, headers=auth_header(alice), timeout=30
    )
    assert missing.status_code == 404, missing.text


def _front_end_config(dep: ClusterDeployment) -> str:
    from mail.config import load_config

    cfg = load_config(dep.config_file(), use_cache=False).server
    return cfg.model_dump_json(by_alias=False)


def test_sigterm_drains_open_requests(deployment: ClusterDeployment) -> None:
    fe0 = deployment.front_ends[0]
    extra = deployment.start_front_end()
    carol = deployment.keys["alice"]
    results: list[httpx.Response | BaseException] = []
    calls_before = len(_calls(deployment))

    def call(i: int) -> None:
        try:
            results.append(_post(extra.base_url, carol, {"body": f"FANOUT drain{i}"}))
        except BaseException as exc:  # noqa: BLE001 - recorded and asserted below
            results.append(exc)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    # Every request has reached the instance (its supervisor turn started): now drain.
    deadline = time.monotonic() + 60
    while sum(1 for line in _calls(deployment)[calls_before:] if line.startswith("supervisor")) < 8:
        assert time.monotonic() < deadline, _calls(deployment)[calls_before:]
        time.sleep(0.005)
    assert extra.proc is not None
    extra.proc.send_signal(signal.SIGTERM)
    for t in threads:
        t.join(60)
    assert extra.proc.wait(60) == 0, extra.logs()
    deployment.front_ends.remove(extra)
    assert len(results) == 8
    bad = [r for r in results if not isinstance(r, httpx.Response) or r.status_code != 200]
    assert not bad, bad
    answers = sorted(r.json()["response"] for r in results if isinstance(r, httpx.Response))
    assert answers == sorted(
        f"both: worked(worker1): drain{i} A + worked(worker2): drain{i} B" for i in range(8)
    )
    # The instance was not touched: the other front end still reaches it.
    assert _post(fe0.base_url, carol, {"body": "FANOUT after"}).status_code == 200


def test_stopping_a_node_moves_its_instances(deployment: ClusterDeployment) -> None:
    """A node stopped on purpose (drained): its instances come back elsewhere, state intact."""
    fe0, fe1 = deployment.front_ends
    bob = deployment.keys["bob"]
    task_id = str(uuid.uuid4())
    done = _post(fe0.base_url, bob, {"body": "FANOUT moved", "task_id": task_id})
    assert done.status_code == 200, done.text
    before = deployment.cluster.describe(deployment.swarm, "user", "bob")
    for node in list(deployment.cluster.nodes):
        if node.node_id == before["node_id"]:
            deployment.cluster.cluster.remove_node(node, allow_graceful=True)
            deployment.cluster.nodes.remove(node)
    deployment.cluster.add_worker()
    record = _task(fe1.base_url, bob, task_id)
    assert record["completed"] is True
    assert record["events"][-1]["event"] == "task_complete"
    assert "both: worked(worker1): moved A" in str(record["events"][-1]["data"])
    after = deployment.cluster.describe(deployment.swarm, "user", "bob")
    assert after["node_id"] != before["node_id"]


def test_front_ends_share_health_template_and_uptime(deployment: ClusterDeployment) -> None:
    fe0, fe1 = deployment.front_ends
    admin = deployment.keys["admin"]
    # fe1 started seconds after fe0; both report the deployment's uptime, not their own.
    first = httpx.get(f"{fe0.base_url}/", timeout=30).json()["uptime"]
    second = httpx.get(f"{fe1.base_url}/", timeout=30).json()["uptime"]
    assert second >= first - 0.05, (first, second)
    assert abs(second - first) < 2.0, (first, second)

    before = httpx.get(f"{fe1.base_url}/health", timeout=30).json()
    r = httpx.post(
        f"{fe0.base_url}/health",
        json={"status": "maintenance"},
        headers=auth_header(admin),
        timeout=30,
    )
    assert r.status_code == 200, r.text
    try:
        after = httpx.get(f"{fe1.base_url}/health", timeout=30).json()
        assert after["status"] == "maintenance", after
        assert after["timestamp"] > before["timestamp"]
    finally:
        httpx.post(
            f"{fe1.base_url}/health",
            json={"status": "healthy"},
            headers=auth_header(admin),
            timeout=30,
        )
    assert httpx.get(f"{fe0.base_url}/health", timeout=30).json()["status"] == "healthy"


def _mail_cluster(dep: ClusterDeployment, *args: str) -> subprocess.CompletedProcess[str]:
    """``mail cluster ...`` as an operator runs it on a node of the cluster."""
    from tests.support.ray_cluster import uv_command

    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "MAIL_"))}
    env.pop("VIRTUAL_ENV", None)
    cmd = [*uv_command(), "run", "--project", str(REPO_ROOT), "--no-sync", "mail", "cluster"]
    cmd += ["--config", str(dep.config_file()), "--address", dep.cluster.address]
    cmd += ["--namespace", dep.cluster.namespace, *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)


def test_mail_cluster_lists_and_ends_instance_actors(deployment: ClusterDeployment) -> None:
    fe0, fe1 = deployment.front_ends
    alice = deployment.keys["alice"]
    task_id = str(uuid.uuid4())
    assert (
        _post(fe0.base_url, alice, {"body": "FANOUT kept", "task_id": task_id}).status_code == 200
    )
    name = f"{deployment.swarm}/user/alice"

    listed = _mail_cluster(deployment, "list", "--details", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {row["name"]: row for row in json.loads(listed.stdout)["instances"]}
    assert name in rows and rows[name]["caller"] == {"role": "user", "id": "alice"}, rows
    # Instance actors only (not the pool's hosts nor the directory), each under its name.
    plain = _mail_cluster(deployment, "list", "--json")
    assert sorted(rows) == sorted(r["name"] for r in json.loads(plain.stdout)["instances"])
    assert all(n.count("/") == 2 and not n.startswith("_") for n in rows), rows

    unknown = _mail_cluster(deployment, "end", f"{deployment.swarm}/user/nobody")
    assert unknown.returncode == 2 and "no instance actor named" in unknown.stderr

    ended = _mail_cluster(deployment, "end", "--all")
    assert ended.returncode == 0, ended.stderr
    assert f"ended {name}" in ended.stdout
    import ray

    from mail.commands.cluster import instance_names

    assert name not in instance_names(ray, deployment.cluster.namespace)
    left = [
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["namespace"] == deployment.cluster.namespace
    ]
    # The warm pool went too (its directory would otherwise start hosts again).
    assert name not in left and not [n for n in left if n.startswith(("_host/", "_directory"))]
    # The state stayed in PostgreSQL: the next request makes a new actor that restores it.
    record = _task(fe1.base_url, alice, task_id)
    assert record["completed"] is True
    assert "FANOUT kept" in json.dumps(record["events"])


def test_idle_instances_are_reclaimed_and_restored(
    ray_cluster: RayTestCluster, tmp_path: Path
) -> None:
    swarm = f"idle-{uuid.uuid4().hex[:8]}"
    dep = ClusterDeployment(
        root=tmp_path,
        cluster=ray_cluster,
        database_url=DATABASE_URL,
        swarms=swarms_json(swarm),
        swarm=swarm,
        settings="instance_idle_timeout = 1",
    ).prepare()
    try:
        fe = dep.start_front_end()
        alice = dep.keys["alice"]
        task_id = str(uuid.uuid4())
        assert (
            _post(fe.base_url, alice, {"body": "FANOUT idle", "task_id": task_id}).status_code
            == 200
        )
        first = dep.cluster.describe(swarm, "user", "alice")
        import ray

        from mail.commands.cluster import instance_names

        def alive() -> bool:
            return f"{swarm}/user/alice" in instance_names(ray, ray_cluster.namespace)

        deadline = time.monotonic() + 60
        while alive():
            assert time.monotonic() < deadline, "idle instance was not reclaimed"
            time.sleep(0.2)
        # The next request makes a new instance, restored from the store.
        record = _task(fe.base_url, alice, task_id)
        assert record["completed"] is True
        second = dep.cluster.describe(swarm, "user", "alice")
        assert second["pid"] != first["pid"] or second["generation"] > first["generation"]
        assert second["generation"] > first["generation"]
    finally:
        dep.stop()


def _wait_for(condition: Any, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_a_restarted_deployment_continues_running_tasks_by_itself(
    ray_cluster: RayTestCluster, tmp_path: Path
) -> None:
    """The whole deployment ends (its front end stopped, the instance's actor ended) while a
    task's model call hangs; a front end started again has the caller's actor started, which
    continues the task to its end: nothing of its caller reaches the deployment meanwhile. A
    second front end started while it runs finds that actor and leaves it be."""
    import ray
    from tests.test_persistence_e2e import _fetch

    from mail.cluster.warm_pool import end_instance

    swarm = f"rs-{uuid.uuid4().hex[:8]}"
    gate = tmp_path / "gate"
    dep = ClusterDeployment(
        root=tmp_path,
        cluster=ray_cluster,
        database_url=DATABASE_URL,
        swarms=swarms_json(swarm),
        swarm=swarm,
        env={"MAIL_DURABLE_CALL_LOG": str(tmp_path / "calls.log"), "MAIL_DURABLE_GATE": str(gate)},
    ).prepare()
    resumed = "continuing the running tasks of user:alice"
    try:
        fe = dep.start_front_end()
        task_id = str(uuid.uuid4())
        body = {"body": "FANOUT later", "task_id": task_id, "background": True}
        assert _post(fe.base_url, dep.keys["alice"], body).status_code == 202
        # The supervisor's call started; it waits at the gate.
        _wait_for(lambda: _calls(dep), "the task's first call did not start")
        before = dep.cluster.describe(swarm, "user", "alice")
        end_instance(ray, ray_cluster.namespace, f"{swarm}/user/alice")
        fe.stop()

        fe = dep.start_front_end()
        _wait_for(lambda: resumed in fe.logs(), fe.logs()[-3000:])
        hosted = dep.cluster.describe(swarm, "user", "alice")
        assert hosted["pid"] != before["pid"] and hosted["generation"] > before["generation"]
        assert hosted["running_tasks"] == 1, hosted
        other = dep.start_front_end()
        _wait_for(lambda: resumed in other.logs(), other.logs()[-3000:])
        assert dep.cluster.describe(swarm, "user", "alice")["generation"] == hosted["generation"]
        assert [line.split()[:2] for line in _calls(dep)] == [
            ["supervisor", str(before["pid"])],
            ["supervisor", str(hosted["pid"])],
        ]

        gate.touch()
        sql = "SELECT completed, is_running FROM tasks WHERE swarm_name = $1 AND task_id = $2"
        _wait_for(lambda: list(_fetch(sql, swarm, task_id)[0]) == [True, False], str(_calls(dep)))
        assert dep.cluster.describe(swarm, "user", "alice")["pid"] == hosted["pid"]
        record = _task(fe.base_url, dep.keys["alice"], task_id)
        answer = "both: worked(worker1): later A + worked(worker2): later B"
        assert record["completed"] is True and answer in json.dumps(record["events"]), record
    finally:
        dep.stop()
        with contextlib.suppress(Exception):
            end_instance(ray, ray_cluster.namespace, f"{swarm}/user/alice")


@contextlib.contextmanager
def _role(role: str, schema: str) -> Iterator[None]:
    """A login role that may make and use tables in `schema`; dropped afterwards."""
    from tests.support.pg_schema import _execute

    _execute(DATABASE_URL, f"CREATE ROLE {role} LOGIN; GRANT ALL ON SCHEMA {schema} TO {role}")
    try:
        yield
    finally:
        _execute(DATABASE_URL, f"DROP OWNED BY {role}; DROP ROLE {role}")


def test_an_instance_without_a_database_connection_answers_one_line(
    ray_cluster: RayTestCluster, tmp_path: Path
) -> None:
    """PostgreSQL has no connection to spare for a new instance (a role's CONNECTION LIMIT,
    as max_connections would): the request gets 503 with one line saying what is short and
    which settings to change, not Ray's traceback in terminal colours (nor a 500); the host
    that could not start is ended, so the caller's next request, once there is room, runs."""
    import asyncio

    import ray
    from tests.support.pg_schema import _execute, fetch_rows, scratch_schema, with_search_path

    from mail.cluster.warm_pool import end_instance

    role = f"mail_few_{uuid.uuid4().hex[:8]}"
    swarm = f"few-{uuid.uuid4().hex[:8]}"
    with scratch_schema("mail_few", DATABASE_URL) as schema, _role(role, schema):
        scheme, rest = DATABASE_URL.split("://", 1)
        url = with_search_path(f"{scheme}://{role}@{rest.split('@', 1)[-1]}", schema)
        dep = ClusterDeployment(
            root=tmp_path,
            cluster=ray_cluster,
            database_url=url,
            swarms=swarms_json(swarm),
            swarm=swarm,
        ).prepare()
        try:
            fe = dep.start_front_end()
            count = "SELECT count(*) FROM pg_stat_activity WHERE usename = $1"
            held = asyncio.run(fetch_rows(DATABASE_URL, count, role))[0][0]
            _execute(DATABASE_URL, f"ALTER ROLE {role} CONNECTION LIMIT {held}")  # none to spare
            refused = _post(fe.base_url, dep.keys["alice"], {"body": "hello"}, timeout=300)
            assert refused.status_code == 503, refused.text
            assert refused.headers["Retry-After"] == "5"
            detail = refused.json()["detail"]
            assert "\x1b" not in detail and "\n" not in detail and "ray::" not in detail, detail
            assert detail.startswith(
                "this caller's instance cannot start now: PostgreSQL has no connection to "
                f'spare (too many connections for role "{role}"): raise its max_connections '
                "(or the role's CONNECTION LIMIT), or lower MAIL_DB_POOL_MAX"
            ), detail
            _execute(DATABASE_URL, f"ALTER ROLE {role} CONNECTION LIMIT -1")
            answered = _post(fe.base_url, dep.keys["alice"], {"body": "hello"}, timeout=300)
            assert answered.status_code == 200, answered.text
            assert f"instance {swarm}/user/alice: {detail}" in fe.logs()
        finally:
            dep.stop()
            with contextlib.suppress(Exception):
                end_instance(ray, ray_cluster.namespace, f"{swarm}/user/alice")


def test_a_cron_runs_once_per_time_in_its_callers_instance_actor(
    ray_cluster: RayTestCluster, tmp_path: Path
) -> None:
    """Crons in cluster mode: both front ends schedule (claiming each due time on the shared
    PostgreSQL), and every run starts its task in the caller's one instance actor, like a
    `POST /message` through either front end; no scheduled time runs twice."""
    import ray

    from mail.cluster.warm_pool import end_instance

    swarm = f"cr-{uuid.uuid4().hex[:8]}"
    dep = ClusterDeployment(
        root=tmp_path,
        cluster=ray_cluster,
        database_url=DATABASE_URL,
        swarms=swarms_json(swarm),
        swarm=swarm,
        env={"MAIL_DURABLE_CALL_LOG": str(tmp_path / "calls.log")},
        settings="\n[server.crons]\nmin_interval = 1\nrescan_interval = 0.5\n",
    ).prepare()
    key = dep.keys["alice"]
    try:
        first, second = dep.start_front_end(), dep.start_front_end()
        assert _post(first.base_url, key, {"body": "FANOUT hello"}).status_code == 200
        # Another caller's actor runs meanwhile: it schedules nothing (none of alice's runs).
        bob = _post(second.base_url, dep.keys["bob"], {"body": "FANOUT hi"})
        assert bob.status_code == 200, bob.text
        actor = dep.cluster.describe(swarm, "user", "alice")
        body = {"schedule": "* * * * * *", "message": {"body": "FANOUT tick"}}
        made = httpx.post(f"{first.base_url}/crons", json=body, headers=auth_header(key))
        assert made.status_code == 201, made.text
        url = f"{second.base_url}/crons/{made.json()['id']}"

        def runs() -> int:  # a refused run shows in last_error until the next one starts
            seen = httpx.get(url, headers=auth_header(key)).json()
            assert seen["last_error"] is None, seen  # e.g. claimed by a host without the key
            return int(seen["runs"])

        _wait_for(lambda: runs() >= 5, "five runs")
        paused = httpx.patch(url, json={"paused": True}, headers=auth_header(key)).json()
        assert paused["paused"] and paused["last_error"] is None, paused
        tasks: list[dict[str, Any]] = []

        def all_ran() -> bool:
            runs = httpx.get(url, headers=auth_header(key)).json()["runs"]
            listed = httpx.get(f"{second.base_url}/tasks", headers=auth_header(key), timeout=60)
            tasks[:] = [t for t in listed.json().values() if t["state"] == "completed"]
            return len(tasks) == runs + 1  # the runs and the first message's task

        _wait_for(all_ran, "every run's task completed")
        for task in tasks:
            events = json.dumps(_task(first.base_url, key, task["task_id"])["events"])
            assert "worked(worker1)" in events, events[-2000:]
        # Every call ran in the one actor (same process, same generation), once per task.
        assert dep.cluster.describe(swarm, "user", "alice")["generation"] == actor["generation"]
        calls = [line.split()[:2] for line in _calls(dep)]
        bobs = str(dep.cluster.describe(swarm, "user", "bob")["pid"])
        alices = [(agent, pid) for agent, pid in calls if pid != bobs]
        assert {pid for _, pid in alices} == {str(actor["pid"])}, calls
        assert sum(agent == "worker1" for agent, _ in alices) == len(tasks), calls
    finally:
        dep.stop()
        for caller in ("alice", "bob"):
            with contextlib.suppress(Exception):
                end_instance(ray, ray_cluster.namespace, f"{swarm}/user/{caller}")
