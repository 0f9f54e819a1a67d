"""`ServerProcess` in cluster mode: two front ends on one Ray cluster behind a round-robin port.

With ``MAIL_TEST_SERVER_MODE=cluster``, ``tests/server_fixtures.py`` hands out the class made
here in place of the single-process one, so the existing end-to-end tests run unchanged
against a cluster deployment (issue 18's test matrix entry, ``tests/test_cluster_matrix.py``):

- the same ``mail server`` arguments (minus ``--port``) start two front ends with
  ``--cluster ray`` in the server's directory, each on its own port;
- the port the test chose is a :class:`RoundRobinProxy` that alternates each new connection
  between them, so consecutive requests of one test reach different front ends;
- each server gets its own Ray namespace (its instance actors) and its own fresh PostgreSQL
  database, so servers of different tests share nothing but the Ray cluster; both are removed
  on ``stop()``.

The Ray cluster is the one at ``MAIL_TEST_RAY_ADDRESS`` (the matrix test starts it once for the
whole run) or, when unset, one started here on first use and shut down at exit.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import threading
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from tests.support.round_robin import RoundRobinProxy

MODE_VAR = "MAIL_TEST_SERVER_MODE"
ADDRESS_VAR = "MAIL_TEST_RAY_ADDRESS"
FRONT_ENDS = 2
DEFAULT_DATABASE_URL = "postgresql://postgres@127.0.0.1:5432/test"

_ray_lock = threading.Lock()
_ray_address: str | None = None


def cluster_mode() -> bool:
    return os.environ.get(MODE_VAR) == "cluster"


def ray_address() -> str:
    """The test cluster's address; this process joins it as a driver (to remove actors)."""
    global _ray_address
    with _ray_lock:
        if _ray_address is None:
            os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
            import ray

            address = os.environ.get(ADDRESS_VAR)
            if address:
                ray.init(address=address, namespace="mail-matrix-driver", log_to_driver=False)
            else:
                from tests.support.ray_cluster import RayTestCluster

                cluster = RayTestCluster(workers=2).start()
                atexit.register(cluster.shutdown)
                address = cluster.address
            _ray_address = address
        return _ray_address


def _run(coro: Any) -> Any:
    """Run a coroutine to its end from sync code, even when a loop runs in this thread."""
    result: list[Any] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            result.append(asyncio.run(coro))
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return result[0] if result else None


def _admin_url() -> str:
    return os.environ.get("MAIL_TEST_DATABASE_URL", DEFAULT_DATABASE_URL)


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


async def _execute(sql: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(_admin_url())
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


def create_database() -> tuple[str, str]:
    name = f"mail_matrix_{uuid.uuid4().hex[:12]}"
    _run(_execute(f'CREATE DATABASE "{name}"'))
    return name, _with_database(_admin_url(), name)


def drop_database(name: str) -> None:
    _run(_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def remove_actors(namespace: str) -> int:
    """End every instance actor of ``namespace`` for good; returns how many there were."""
    import ray

    from mail.cluster.warm_pool import end_pool

    end_pool(ray, namespace)  # first: a directory would replace the hosts ended below
    names = [
        entry["name"]
        for entry in ray.util.list_named_actors(all_namespaces=True)
        if isinstance(entry, dict) and entry.get("namespace") == namespace
    ]
    for name in names:
        with contextlib.suppress(Exception):
            ray.kill(ray.get_actor(name, namespace=namespace), no_restart=True)
    return len(names)


def _without_port(args: list[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg in ("--port", "-p"):
            skip = True
            continue
        if arg.startswith("--port="):
            continue
        out.append(arg)
    return out


def cluster_server_class(base: type) -> type:
    """A subclass of the single-process ``ServerProcess`` that runs a cluster deployment."""

    class FrontEnd(base):  # type: ignore[misc,valid-type]
        """One front end; logs go to ``frontend<N>.out/.err`` in the server's directory."""

        index: int = 0

        def start(self, *, wait: bool = True) -> Any:
            from tests.support.ray_cluster import start_with_uv

            start_with_uv(self)  # `uv run mail server`, as the docs say
            if wait:
                self.wait_healthy()
            return self

        @property
        def stdout_path(self) -> Path:
            return Path(self.directory) / f"frontend{self.index}.out"

        @property
        def stderr_path(self) -> Path:
            return Path(self.directory) / f"frontend{self.index}.err"

    class ClusterServerProcess(base):  # type: ignore[misc,valid-type]
        front_ends: list[Any]
        proxy: RoundRobinProxy | None = None
        namespace: str = ""
        database: str | None = None

        def start(self, *, wait: bool = True) -> ClusterServerProcess:
            from tests.server_fixtures import free_port

            address = ray_address()
            self.namespace = f"mx-{uuid.uuid4().hex[:10]}"
            # The matrix runs the default (warm_pool = 0); docs/cluster.md, Limits.
            env = {"MAIL_CLUSTER_PUBLIC_URL": self.base_url, **self.env}
            if "DATABASE_URL" not in env:
                self.database, env["DATABASE_URL"] = create_database()
            args = _without_port(list(self.args))
            self.front_ends = []
            for index in range(FRONT_ENDS):
                port = free_port()
                front = FrontEnd(
                    self.directory,
                    port,
                    args=[
                        *args,
                        "--port",
                        str(port),
                        "--cluster",
                        "ray",
                        "--cluster-address",
                        address,
                        "--cluster-namespace",
                        self.namespace,
                    ],
                    env=env,
                )
                front.index = index
                front.start(wait=False)
                self.front_ends.append(front)
            self.proc = self.front_ends[0].proc
            self.proxy = RoundRobinProxy([f.port for f in self.front_ends], self.port).start()
            if wait:
                self.wait_healthy()
            return self

        def wait_healthy(self, timeout: float = 120.0) -> float:
            return max(front.wait_healthy(timeout) for front in self.front_ends)

        def logs(self) -> str:
            return "\n".join(
                f"--- front end {f.index} ---\n{f.logs()}" for f in getattr(self, "front_ends", [])
            )

        def stop(self, timeout: float = 15.0) -> int | None:
            codes: list[int | None] = []
            try:
                if self.proxy is not None:
                    self.proxy.stop()
                for front in getattr(self, "front_ends", []):
                    codes.append(front.stop(timeout))
            finally:
                if self.namespace:
                    remove_actors(self.namespace)
                    self.namespace = ""
                if self.database:
                    drop_database(self.database)
                    self.database = None
            if not codes or all(code is None for code in codes):
                return None
            return next((code for code in codes if code), 0)

    return ClusterServerProcess
