"""The HTTP end-to-end tests, run against a cluster deployment (issue 18's matrix entry).

The modules below start real `mail server` processes through ``tests/server_fixtures.py``.
Here they run unchanged in a child ``pytest`` with ``MAIL_TEST_SERVER_MODE=cluster``: every
server they start is two ``mail server --cluster ray`` front ends on the one Ray cluster this
test starts (a head with no CPUs and two worker nodes), with a fresh PostgreSQL database, behind
a round-robin TCP port that alternates new connections between the front ends
(``tests/support/cluster_server.py``). The child run must pass as a whole.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.ray_cluster import RayTestCluster, ray_available
from tests.test_persistence_e2e import _database_reachable

REPO_ROOT = Path(__file__).resolve().parents[1]

MODULES = (
    "tests/test_server_routes.py",
    "tests/test_server_messages.py",
    "tests/test_task_events.py",
    "tests/test_client_e2e.py",
    "tests/test_server_limits_and_state.py",
    "tests/test_server_admin_views.py",
)

# Tests that cannot apply to a cluster deployment by their nature, each with its reason.
DESELECTED = {
    "tests/test_server_limits_and_state.py::test_a_chunked_oversized_body_is_cut_off_while_reading": "measures one process's peak RSS; the request may reach the other front end",
}

# Behaviour that differs in cluster mode today (issue 18): deselected so the rest guards
# conformance; each entry is a gap to close, after which its line goes.
KNOWN_GAPS = {
    "tests/test_server_messages.py::test_stream_first_event_is_prompt": (
        "first SSE event took 0.52 s once (bound 0.4 s; passed in another run): each chunk "
        "waits for the store's durable flush, then the Ray hop"
    ),
    "tests/test_server_limits_and_state.py::test_a_reclaimed_task_id_is_never_replaced": (
        "a reclaimed actor takes its memory of reclaimed task ids with it: the next actor "
        "accepts the old task id (200, not 409)"
    ),
    "tests/test_task_events.py::test_slow_consumer_is_told_to_resubscribe_and_loses_nothing": "no backpressure through the actor: a slow reader is never told to resubscribe",
}

INTERSWARM_MODULES = (
    "tests/test_interswarm_e2e.py",
    "tests/test_client_e2e_interswarm.py",
    "tests/test_interswarm_hardening.py",
    "tests/test_stdlib_interswarm.py",
)

# docs/cluster.md, "Limits": with the default warm_pool = 0 a swarm's first interswarm call
# starts the remote caller's instance actor (a new Python process: seconds), and these tests
# give a peer 3 or 5 s. The (opt-in) warm pool closes that gap for two of them, but the
# matrix runs the default.
_COLD = (
    "the peer's first forward starts a new instance actor there (4-6 s measured on a busy "
    "2-core machine), longer than the test's interswarm_timeout"
)
INTERSWARM_KNOWN_GAPS = {
    "tests/test_interswarm_e2e.py::test_interswarm_message_route_reaches_remote_entrypoint": _COLD,
    "tests/test_interswarm_e2e.py::test_cross_swarm_task_completes_with_remote_answer": _COLD,
    "tests/test_client_e2e_interswarm.py::test_send_interswarm_message_gets_the_remote_answer": _COLD,
    "tests/test_interswarm_hardening.py::test_peer_dying_after_accepting_work_wakes_the_waiting_agent": (
        _COLD + "; and it kills one process to kill the peer, which in a cluster is one front "
        "end of two"
    ),
}

pytestmark = pytest.mark.timeout(1500)


def _require() -> None:
    if not ray_available():
        if os.environ.get("MAIL_REQUIRE_RAY") == "1":
            pytest.fail("Ray is required (uv sync --extra cluster) but not installed")
        pytest.skip("Ray not installed (uv sync --extra cluster; MAIL_REQUIRE_RAY=1 fails instead)")
    if not _database_reachable():
        if os.environ.get("MAIL_REQUIRE_POSTGRES") == "1":
            pytest.fail("PostgreSQL is required but unreachable")
        pytest.skip("PostgreSQL not reachable")


@pytest.fixture(scope="module")
def ray_address() -> Iterator[str]:
    _require()
    cluster = RayTestCluster(workers=2).start()
    try:
        yield cluster.address
    finally:
        cluster.shutdown()


def _run_child(
    modules: tuple[str, ...], deselect: dict[str, str], ray_address: str, basetemp: Path
) -> tuple[dict[str, int], str]:
    env = {
        **os.environ,
        "MAIL_TEST_SERVER_MODE": "cluster",
        "MAIL_TEST_RAY_ADDRESS": ray_address,
    }
    env.pop("RAY_ENABLE_UV_RUN_RUNTIME_ENV", None)  # front ends must do without it
    args = [sys.executable, "-m", "pytest", *modules, "-q", "-rfE", "-p", "no:cacheprovider"]
    args += ["--basetemp", str(basetemp), "-o", "addopts="]
    for test in deselect:
        args += ["--deselect", test]
    run = subprocess.run(args, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=1400)
    summary = run.stdout[-6000:] + run.stderr[-2000:]
    assert run.returncode == 0, summary
    assert " passed" in run.stdout and "error" not in run.stdout.splitlines()[-1], summary
    counts = dict(
        (kind, int(n)) for n, kind in re.findall(r"(\d+) (passed|skipped)", run.stdout[-400:])
    )
    return counts, summary


def test_http_end_to_end_tests_pass_against_two_front_ends(
    ray_address: str, tmp_path: Path
) -> None:
    counts, summary = _run_child(
        MODULES, {**DESELECTED, **KNOWN_GAPS}, ray_address, tmp_path / "matrix"
    )
    # The modules really ran here (nothing skipped away): they hold 80+ tests.
    assert counts.get("passed", 0) >= 80 and not counts.get("skipped"), summary


def test_interswarm_tests_pass_with_two_front_ends_per_swarm(
    ray_address: str, tmp_path: Path
) -> None:
    """Every swarm of the federation tests is a deployment of two front ends behind a
    round-robin port, its agents named as in the other swarms (each entrypoint is
    ``supervisor``); replies come back through ``/interswarm/back`` to whichever front end
    the balancer picks."""
    counts, summary = _run_child(
        INTERSWARM_MODULES, INTERSWARM_KNOWN_GAPS, ray_address, tmp_path / "interswarm"
    )
    assert counts.get("passed", 0) >= 20 and not counts.get("skipped"), summary
