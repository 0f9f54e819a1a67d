"""A scaled-down run of bench/keyed_bytecodes.py, as its docstring tells a reader to run it:
its counting server answers both kinds, and the numbers it prints are the server's own
(a keyed request runs more bytecodes than an unkeyed one, in the key's functions)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.timeout(300)


def test_the_bytecode_bench_counts_what_a_key_adds() -> None:
    run = subprocess.run(
        [sys.executable, str(REPO_ROOT / "bench" / "keyed_bytecodes.py"),
         "--requests", "20", "--rounds", "2", "--top", "8"],
        capture_output=True, text=True, timeout=240, cwd=REPO_ROOT, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    floor = re.search(r"no key \(the floor\): +(\d+)", run.stdout)
    keyed = re.search(r"MAILClient's keys: +(\d+) +\+(\d+)", run.stdout)
    assert floor is not None and keyed is not None, run.stdout
    plain, with_key, added = (int(floor.group(1)), int(keyed.group(1)), int(keyed.group(2)))
    # A stub request runs tens of thousands of bytecodes; a key adds some hundreds to it.
    assert plain > 5_000 and with_key > plain and added == with_key - plain
    assert added < plain // 5, run.stdout
    shown = run.stdout.split("adds most to", 1)[1]
    assert "idempotency" in shown, run.stdout
    rows = [line for line in shown.splitlines() if re.match(r" +[+-]\d+\.\d ", line)]
    assert "by round" in run.stdout and len(rows) == 8, run.stdout
