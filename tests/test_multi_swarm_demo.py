"""scripts/multi_swarm_demo.py: two federated servers answer a cross-swarm question offline."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.timeout(150)


def test_multi_swarm_demo_runs_offline() -> None:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.pop("DATABASE_URL", None)
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "multi_swarm_demo.py")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=140,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "swarm-alpha answered: 17 * 23 = 391" in out
    # The conversation crossed the swarm boundary in both directions.
    assert "sent interswarm message forward to swarm swarm-beta" in out
    assert "sent interswarm message back to swarm swarm-alpha" in out
