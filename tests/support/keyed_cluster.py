"""Two ``mail server --cluster ray`` front ends over one Ray cluster (a head and one worker)
and their own PostgreSQL database, on the durable test agents that log each call: what the
keyed cluster tests (`test_idempotency_cluster*.py`) share."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path

from tests.support.cluster_server import create_database, drop_database
from tests.support.durable_agents import swarms_json
from tests.support.ray_cluster import ClusterDeployment, RayTestCluster

# The answer of the durable agents' swarm to a message with this body.
EXPECTED = "both: worked(worker1): {0} A + worked(worker2): {0} B"


@contextlib.contextmanager
def two_front_ends(root: Path, latency_ms: int) -> Iterator[ClusterDeployment]:
    """The deployment, its agents taking `latency_ms` a call; stopped and dropped after."""
    database, url = create_database()  # the deployment's own database
    cluster = RayTestCluster(workers=1).start()
    swarm = f"idem-{uuid.uuid4().hex[:8]}"
    dep = ClusterDeployment(
        root=root,
        cluster=cluster,
        database_url=url,
        swarms=swarms_json(swarm),
        swarm=swarm,
        env={
            "MAIL_STUB_LATENCY_MS": str(latency_ms),
            "MAIL_DURABLE_CALL_LOG": str(calls_log(root)),
        },
    ).prepare()
    try:
        dep.start_front_end()
        dep.start_front_end()
        yield dep
    finally:
        dep.stop()
        cluster.shutdown()
        drop_database(database)


def calls_log(root: Path) -> Path:
    return root / "calls.log"


def calls(root: Path, agent: str) -> int:
    """How many calls `agent` got so far (the durable agents log one line a call)."""
    path = calls_log(root)
    lines = path.read_text().splitlines() if path.exists() else []
    return sum(1 for line in lines if line.split()[0] == agent)
