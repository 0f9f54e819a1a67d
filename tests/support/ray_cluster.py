"""A real Ray cluster on this machine (a head and worker nodes) and `mail server` front ends.

``RayTestCluster`` starts ``ray.cluster_utils.Cluster``: a head node that runs no instances
(``num_cpus=0``) and worker nodes that do. Front ends are real ``mail server --cluster ray``
processes sharing one key file, swarms.json and PostgreSQL database. The test process also
joins the cluster as a driver to look at and kill the nodes that host instances.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from tests.server_fixtures import (
    REPO_ROOT,
    ServerProcess,
    create_key,
    free_port,
    server_env,
    write_config,
)

WORKER_CPUS = 2
# How fast the head notices a dead node (Ray's defaults take tens of seconds): 1 s checks, as
# docs/cluster.md recommends for deployments that want a task running again within seconds,
# and 5 missed in a row (about 5 s) before a node counts as dead. With 0.5 s and 3 misses, a
# live node that a loaded 2-core machine stalled for 1.5 s was taken for dead, and a killed
# node's task had nowhere to run again.
FAST_FAILURE_DETECTION = {
    "health_check_period_ms": 1000,
    "health_check_timeout_ms": 1000,
    "health_check_failure_threshold": 5,
}


# What the test process sets for itself as a Ray driver; a front end must do without it.
_DRIVER_ONLY_ENV = ("RAY_ENABLE_UV_RUN_RUNTIME_ENV",)


def uv_command() -> list[str]:
    found = shutil.which("uv")
    return [found] if found else [sys.executable, "-m", "uv"]


def start_with_uv(server: ServerProcess) -> None:
    """Start ``server`` as docs/cluster.md tells an operator: ``uv run mail server ...``.

    Its environment is the test's minus the Ray switches this process set for itself as a
    driver and the virtualenv variables (``uv run`` sets its own), so a front end that only
    works with them fails here.
    """
    env = server_env(server.env)
    for name in (*_DRIVER_ONLY_ENV, "VIRTUAL_ENV"):
        if name not in server.env:
            env.pop(name, None)
    cmd = [*uv_command(), "run", "--project", str(REPO_ROOT), "--no-sync", "mail", "server"]
    server.proc = _UvPopen(
        [*cmd, *server.args],
        cwd=server.directory,
        env=env,
        stdout=server.stdout_path.open("wb"),
        stderr=server.stderr_path.open("wb"),
        start_new_session=True,
    )


class _UvPopen(subprocess.Popen):  # type: ignore[type-arg]
    """``uv run`` passes SIGINT and SIGTERM on to the server, but SIGKILL cannot be passed on:
    ``kill()`` ends the whole process group (uv and the server it started), as killing the
    server process itself does in a single-process test."""

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)


class UvServerProcess(ServerProcess):
    """A front end started with ``uv run mail server`` (see :func:`start_with_uv`)."""

    def start(self, *, wait: bool = True) -> UvServerProcess:
        start_with_uv(self)
        if wait:
            self.wait_healthy()
        return self


def ray_available() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass
class RayTestCluster:
    workers: int = 2
    cluster: Any = None
    nodes: list[Any] = field(default_factory=list)
    namespace: str = field(default_factory=lambda: f"mail-test-{uuid.uuid4().hex[:8]}")

    def start(self) -> RayTestCluster:
        os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
        import ray
        from ray.cluster_utils import Cluster

        self.cluster = Cluster(
            initialize_head=True,
            head_node_args={
                "num_cpus": 0,
                "include_dashboard": False,
                "_system_config": FAST_FAILURE_DETECTION,
            },
        )
        for _ in range(self.workers):
            self.nodes.append(self.cluster.add_node(num_cpus=WORKER_CPUS))
        self.cluster.wait_for_nodes()
        ray.init(address=self.cluster.address, namespace=self.namespace, log_to_driver=False)
        return self

    @property
    def address(self) -> str:
        return str(self.cluster.address)

    def add_worker(self) -> Any:
        node = self.cluster.add_node(num_cpus=WORKER_CPUS)
        self.nodes.append(node)
        self.cluster.wait_for_nodes()
        return node

    def actor(self, swarm: str, kind: str, caller_id: str) -> Any:
        import ray

        from mail.cluster.warm_pool import instance_handle

        return instance_handle(ray, self.namespace, f"{swarm}/{kind}/{caller_id}")

    def describe(self, swarm: str, kind: str, caller_id: str) -> dict[str, Any]:
        import ray

        result: dict[str, Any] = ray.get(
            self.actor(swarm, kind, caller_id).describe.remote(), timeout=60
        )
        return result

    def kill_node_of(
        self, swarm: str, kind: str, caller_id: str, where: dict[str, Any] | None = None
    ) -> str:
        """Remove (kill) the worker node that hosts the instance (``where``: its ``describe``,
        if already known); returns its node id."""
        where = where or self.describe(swarm, kind, caller_id)
        node_id = where["node_id"]
        for node in self.nodes:
            if node.node_id == node_id:
                self.cluster.remove_node(node, allow_graceful=False)
                self.nodes.remove(node)
                # Everything on a dead machine dies with it; removing the node's daemons
                # alone leaves its worker processes running for a while.
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(where["pid"]), signal.SIGKILL)
                return node_id
        raise AssertionError(f"instance runs on node {node_id}, which is not a worker node")

    def wait_pool_settled(self, timeout: float = 180) -> float:
        """Wait until the warm pool has a host of every profile on each worker node and none
        starting; returns the seconds waited. A pool refills in the time a host takes to start
        (a new worker process), so a failover right after another one meets an empty pool."""
        import ray

        from mail.cluster.warm_pool import DIRECTORY_ACTOR

        directory = ray.get_actor(DIRECTORY_ACTOR, namespace=self.namespace)
        began = time.monotonic()
        while True:
            pool = ray.get(directory.pool.remote(), timeout=60)
            profiles = [v for k, v in pool.items() if k != "assigned"]
            if profiles and all(
                not any(p["starting"].values())
                and sum(n > 0 for n in p["warm"].values()) >= len(self.nodes)
                for p in profiles
            ):
                return time.monotonic() - began
            if time.monotonic() - began > timeout:
                raise TimeoutError(f"the warm pool did not settle in {timeout:.0f} s: {pool}")
            time.sleep(0.2)

    def shutdown(self) -> None:
        import ray

        with contextlib.suppress(Exception):
            ray.shutdown()
        if self.cluster is not None:
            with contextlib.suppress(Exception):
                self.cluster.shutdown()


@dataclass
class ClusterDeployment:
    """Two (or more) front ends of one deployment, sharing keys, swarms and database."""

    root: Path
    cluster: RayTestCluster
    database_url: str
    swarms: list[dict[str, Any]]
    swarm: str
    env: dict[str, str] = field(default_factory=dict)
    settings: str = ""
    front_ends: list[ServerProcess] = field(default_factory=list)
    keys: dict[str, str] = field(default_factory=dict)

    def prepare(self) -> ClusterDeployment:
        (self.root / "swarms.json").write_text(json.dumps(self.swarms), encoding="utf-8")
        self.keys_file = self.root / "keys.json"
        self.keys["admin"] = create_key(self.keys_file, "admin", "ops")
        self.keys["alice"] = create_key(self.keys_file, "user", "alice")
        self.keys["bob"] = create_key(self.keys_file, "user", "bob")
        return self

    def config_file(self) -> Path:
        """The deployment's one mail.toml: every front end uses it, with its own ``--port``."""
        path = self.root / "mail.toml"
        if not path.exists():
            write_config(
                self.root,
                port=8000,  # each front end overrides it with --port
                swarm=self.swarm,
                source=str(self.root / "swarms.json"),
                extra=self.settings,
            )
            text = path.read_text(encoding="utf-8")
            if "instance_idle_timeout" in self.settings:  # replaces the fixture's default of 0
                text = text.replace("instance_idle_timeout = 0\n", "", 1)
            path.write_text(text, encoding="utf-8")
        return path

    def start_front_end(self) -> ServerProcess:
        index = len(self.front_ends)
        directory = self.root / f"fe{index}"
        directory.mkdir(parents=True, exist_ok=True)
        port = free_port()
        config = self.config_file()
        env = {
            "DATABASE_URL": self.database_url,
            "MAIL_KEYS_FILE": str(self.keys_file),
            "MAIL_CONFIG_PATH": str(config),
            **self.env,
        }
        server = UvServerProcess(
            directory,
            port,
            args=[
                "--port",
                str(port),
                "--cluster",
                "ray",
                "--cluster-address",
                self.cluster.address,
                "--cluster-namespace",
                self.cluster.namespace,
            ],
            env=env,
        )
        server.start()
        self.front_ends.append(server)
        return server

    def stop(self) -> None:
        for server in self.front_ends:
            with contextlib.suppress(Exception):
                server.stop()


def auth_header(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def get_json(client: httpx.Client, url: str, key: str) -> Any:
    reply = client.get(url, headers=auth_header(key))
    assert reply.status_code == 200, reply.text
    return reply.json()


def env_without_cluster() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("MAIL_CLUSTER_")}
