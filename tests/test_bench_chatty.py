"""A scaled-down run of bench/chatty.py (issue 66's chatty task) so it keeps working: a real
`mail server` per store, one task of request/response rounds, and a row of numbers each."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent

pytestmark = [
    pytest.mark.timeout(400),
    pytest.mark.skipif(sys.platform != "linux", reason="the bench reads /proc"),
]


def _chatty(*args: str) -> str:
    run = subprocess.run(
        [sys.executable, str(REPO_ROOT / "bench" / "chatty.py"), "--quick", *args],
        capture_output=True, text=True, timeout=360, cwd=REPO_ROOT, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout


def _rows(out: str) -> dict[tuple[str, str], list[float]]:
    rows = re.findall(r"^\| (\w+) +\| +(\d+) \| +(\d+) \|(.*)\|$", out, re.MULTILINE)
    return {
        (store, ms): [float(v) if v.strip() != "-" else 0.0 for v in rest.split("|")]
        for store, ms, rounds, rest in rows
    }


def test_the_chatty_bench_prints_a_row_per_store_and_the_targets() -> None:
    out = _chatty("--rounds", "20", "--stores", "memory,sqlite", "--latency-ms", "0,5")
    rows = _rows(out)
    assert set(rows) == {("memory", "0"), ("sqlite", "0"), ("memory", "5"), ("sqlite", "5")}, out
    for (store, _ms), (wall, cpu, rss, write, _stored, history, read, ratio) in rows.items():
        assert wall > 0 and cpu >= 0 and rss > 20 and read > 0.08, out  # 20 x 2 x 2 KB
        if store == "sqlite":
            # The MB columns have one decimal; written / stored is "-" unless both are > 0.
            assert write > 0 and ratio > 0 and history > 0.04, out
    # 20 rounds with 5 ms before each of the 41 agent turns take 0.2 s at least.
    assert rows[("memory", "5")][0] >= 0.2, out
    assert "sqlite, 0 ms: CPU" in out and "target <= 1.3" in out and "target <= +30" in out
    assert "target <= 2" in out, out


def test_the_chatty_bench_runs_litellm_agents_on_the_scripted_model() -> None:
    out = _chatty("--agents", "model", "--rounds", "3", "--stores", "sqlite", "--latency-ms", "0")
    (row,) = _rows(out).values()
    # CPU, MB written, and written / stored ("-" unless the store grew: 3 rounds grow it by
    # less than the 0.1 MB its column shows).
    assert row[1] > 0 and row[3] > 0 and row[7] > 0, out
    assert "x the stored histories" in out, out  # LiteLLM agents' histories are stored
