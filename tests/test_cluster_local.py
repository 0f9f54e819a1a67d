"""`--cluster-address local` as an operator runs it: `uv run mail server` from a scratch folder.

The server is started exactly as docs/cluster.md says (``uv run mail server --cluster ray
--cluster-address local``), from a folder that is not the project, with an environment that
holds only what an operator's shell would (no ``RAY_*`` switches). Another Ray cluster runs on
the machine first, and ``RAY_ADDRESS`` names it (as in a shell where an operator exported it):
a private cluster must neither join it nor leave anything in it, and with ``--host
127.0.0.1`` every socket the server's process tree listens on must be a loopback one.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.server_fixtures import REPO_ROOT, create_key, free_port, write_stub_swarms
from tests.support.ray_cluster import ray_available
from tests.test_persistence_e2e import _database_reachable

DATABASE_URL = os.environ.get("MAIL_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")

pytestmark = pytest.mark.timeout(400)


def _require() -> None:
    if not ray_available():
        if os.environ.get("MAIL_REQUIRE_RAY") == "1":
            pytest.fail("Ray is required (uv sync --extra cluster) but not installed")
        pytest.skip("Ray not installed (uv sync --extra cluster; MAIL_REQUIRE_RAY=1 fails instead)")
    if not _database_reachable():
        if os.environ.get("MAIL_REQUIRE_POSTGRES") == "1":
            pytest.fail("PostgreSQL is required but unreachable")
        pytest.skip("PostgreSQL not reachable")


def _uv() -> list[str]:
    found = shutil.which("uv")
    return [found] if found else [sys.executable, "-m", "uv"]


def _operator_env(extra: dict[str, str]) -> dict[str, str]:
    """A shell's environment: no virtualenv, no RAY_* switches, no test variables."""
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "USER", "TMPDIR")
    env = {k: v for k, v in os.environ.items() if k in keep or k.startswith(("UV_", "XDG_"))}
    env.pop("UV_PROJECT_ENVIRONMENT", None)
    env.update(extra)
    return env


def run_front_end(
    folder: Path, address: str, swarm: str, env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``mail server --cluster ray --cluster-address ADDRESS`` run to its exit (a failed start)."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mail.cli",
            "server",
            "--cluster",
            "ray",
            "--cluster-address",
            address,
            "--port",
            str(free_port()),
            "--swarm-name",
            swarm,
            "--swarm-source",
            str(folder / "swarms.json"),
        ],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _query_cluster(address: str) -> dict[str, Any]:
    """The named actors and live nodes of the cluster at ``address`` (from a fresh driver)."""
    code = (
        "import json, ray\n"
        f"ray.init(address={address!r}, log_to_driver=False, configure_logging=False)\n"
        "actors = ray.util.list_named_actors(all_namespaces=True)\n"
        "nodes = [n['NodeID'] for n in ray.nodes() if n['Alive']]\n"
        "print(json.dumps({'actors': actors, 'nodes': nodes}))\n"
    )
    env = {**os.environ, "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0", "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    run = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
    return result


def _processes_with(marker: str) -> list[Any]:
    import psutil

    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        with contextlib.suppress(psutil.Error):
            if any(marker in part for part in proc.info["cmdline"] or ()):
                found.append(proc)
    return found


@pytest.fixture(scope="module")
def other_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Ray head started the usual way (`ray start --head`) in a folder of its own."""
    _require()
    temp_dir = str(tmp_path_factory.mktemp("other-ray"))
    port = free_port()
    env = {**os.environ, "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0", "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    start = subprocess.run(
        [
            sys.executable,
            "-m",
            "ray.scripts.scripts",
            "start",
            "--head",
            f"--port={port}",
            "--num-cpus=1",
            "--include-dashboard=false",
            "--disable-usage-stats",
            f"--temp-dir={temp_dir}",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    address = f"127.0.0.1:{port}"
    try:
        assert start.returncode == 0, start.stdout[-2000:] + start.stderr[-2000:]
        # Ray prints the address to join with "To add another node" (not every version or
        # run does; the head listens on the port asked for either way).
        found = re.search(r"--address='([^']+)'", start.stdout)
        if found:
            address = found.group(1)
        yield address
    finally:
        # `ray stop` would end every Ray process of the machine: end this cluster's only.
        for proc in _processes_with(temp_dir):
            with contextlib.suppress(Exception):
                proc.kill()


def _listening(procs: list[Any]) -> list[tuple[int, str, str, int]]:
    import psutil

    found = []
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            for conn in proc.net_connections(kind="inet"):
                if conn.status == psutil.CONN_LISTEN:
                    found.append((proc.pid, proc.name(), conn.laddr.ip, conn.laddr.port))
    return found


def _is_loopback(ip: str) -> bool:
    import ipaddress

    address = ipaddress.ip_address(ip)
    mapped = getattr(address, "ipv4_mapped", None)
    return bool((mapped or address).is_loopback)


def test_local_cluster_is_private_loopback_and_ends_with_the_server(
    other_cluster: str, tmp_path: Path
) -> None:
    import psutil

    before = _query_cluster(other_cluster)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    swarm = f"loc-{uuid.uuid4().hex[:8]}"
    write_stub_swarms(scratch, swarm)
    keys = scratch / "keys.json"
    alice = create_key(keys, "user", "alice")
    port = free_port()
    env = _operator_env(
        {
            "DATABASE_URL": DATABASE_URL,
            "MAIL_KEYS_FILE": str(keys),
            # The operator's own agent modules (here: the test stubs) are importable.
            "PYTHONPATH": str(REPO_ROOT),
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            # Another cluster is this shell's default: `local` must not join it.
            "RAY_ADDRESS": other_cluster,
        }
    )
    cmd = [
        *_uv(),
        "run",
        "--project",
        str(REPO_ROOT),
        "--no-sync",
        "--extra",
        "cluster",
        "mail",
        "server",
        "--cluster",
        "ray",
        "--cluster-address",
        "local",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--swarm-name",
        swarm,
        "--swarm-source",
        str(scratch / "swarms.json"),
    ]
    out = (scratch / "server.log").open("wb")
    proc = subprocess.Popen(cmd, cwd=scratch, env=env, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    tree: list[Any] = []
    try:
        deadline = time.monotonic() + 240
        while True:
            assert proc.poll() is None, (scratch / "server.log").read_text()[-4000:]
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                    break
            assert time.monotonic() < deadline, (scratch / "server.log").read_text()[-4000:]
            time.sleep(0.2)
        reply = httpx.post(
            f"{base}/message",
            json={"body": "hello from a scratch folder"},
            headers={"Authorization": f"Bearer {alice}"},
            timeout=240,
        )
        assert reply.status_code == 200, reply.text + (scratch / "server.log").read_text()[-4000:]
        assert reply.json()["response"], reply.json()
        # What it did while Ray and the first instance started was said, in order. (The
        # server writes its log from a thread of its own, in batches: the last line may
        # reach the file a moment after the answer.)
        said = [
            "Starting a private Ray cluster for this server...",
            "Ray cluster ready (",
            "listening on http://127.0.0.1:",
            f"instance {swarm}/user/alice: reaching its host on the Ray cluster",
            f"instance {swarm}/user/alice: ready after ",
        ]
        written = time.monotonic() + 30
        while True:
            log = (scratch / "server.log").read_text()
            positions = [log.find(line) for line in said]
            if -1 not in positions or time.monotonic() > written:
                break
            time.sleep(0.1)
        assert -1 not in positions and positions == sorted(positions), (positions, log[-4000:])

        tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
        names = " ".join(p.name() for p in tree)
        assert "gcs_server" in names and "raylet" in names, names  # its own cluster
        # The instance actor runs in the server's own cluster, a descendant of the server.
        titles = []
        for p in tree:
            with contextlib.suppress(psutil.Error):
                titles.append(" ".join(p.cmdline()))
        assert any("InstanceActor" in title for title in titles), names
        listening = _listening(tree)
        assert any(p == port for *_, p in listening), listening
        assert len(listening) >= 4, listening  # GCS, raylet, workers: the check is not empty
        exposed = [entry for entry in listening if not _is_loopback(entry[2])]
        assert not exposed, exposed

        # The other cluster is untouched: no instance actor there, the same nodes.
        after = _query_cluster(other_cluster)
        assert after["actors"] == before["actors"] == [], after
        assert after["nodes"] == before["nodes"], (before, after)
        gcs = next(p for p in tree if p.name() == "gcs_server")
        session = next(a for a in gcs.cmdline() if a.startswith("--session-dir="))
        temp_root = Path(session.split("=", 1)[1]).parent
        assert temp_root.name.startswith("mail-ray-"), temp_root
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
        finally:
            out.close()
    assert code == 0, (scratch / "server.log").read_text()[-4000:]
    # The private cluster ended with the server: its processes and its folder are gone.
    deadline = time.monotonic() + 30
    while any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in tree[1:]):
        alive = [p for p in tree[1:] if p.is_running()]
        assert time.monotonic() < deadline, [(p.pid, p.name()) for p in alive]
        time.sleep(0.2)
    assert not temp_root.exists(), list(temp_root.iterdir())
    assert _query_cluster(other_cluster)["nodes"] == before["nodes"]


def test_cluster_mode_without_database_is_one_line_and_exit_2(tmp_path: Path) -> None:
    _require()
    write_stub_swarms(tmp_path, "nodb")
    env = _operator_env({"PYTHONPATH": str(REPO_ROOT), "MAIL_KEYS_FILE": str(tmp_path / "k")})
    run = run_front_end(tmp_path, "local", "nodb", env)
    assert run.returncode == 2, run.stderr
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert lines == [
        "mail server: error: cluster mode keeps instances in PostgreSQL, not in SQLite or "
        'memory: set DATABASE_URL (or run without --cluster / with [server.cluster] backend = "none")'
    ], run.stderr


def test_an_unreachable_cluster_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """Ray alone would retry an unreachable head for minutes; the server says so at once."""
    _require()
    write_stub_swarms(tmp_path, "unreach")
    closed = free_port()  # nothing listens there
    env = _operator_env(
        {
            "PYTHONPATH": str(REPO_ROOT),
            "MAIL_KEYS_FILE": str(tmp_path / "k"),
            "DATABASE_URL": DATABASE_URL,
        }
    )
    started = time.monotonic()
    run = run_front_end(tmp_path, f"127.0.0.1:{closed}", "unreach", env)
    assert run.returncode == 2, run.stderr[-2000:]
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert "Traceback" not in run.stderr, run.stderr[-2000:]
    assert lines[-1].startswith(
        f"mail server: error: cannot reach the Ray cluster at '127.0.0.1:{closed}'"
    ), lines
    assert time.monotonic() - started < 60
