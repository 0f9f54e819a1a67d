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

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(sys.platform == "win32", reason="the bench signals its server (POSIX)"),
]


def test_the_bytecode_bench_counts_what_a_key_adds() -> None:
    run = subprocess.run(
        [sys.executable, str(REPO_ROOT / "bench" / "keyed_bytecodes.py"),
         "--requests", "60", "--rounds", "2", "--top", "12"],
        capture_output=True, text=True, timeout=240, cwd=REPO_ROOT, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    floor = re.search(r"no key \(the floor\): +(\d+)", run.stdout)
    keyed = re.search(r"MAILClient's keys: +(\d+) +\+(\d+)", run.stdout)
    assert floor is not None and keyed is not None, run.stdout
    plain, with_key, added = (int(floor.group(1)), int(keyed.group(1)), int(keyed.group(2)))
    # A stub request runs tens of thousands of bytecodes; a key adds some hundreds to it (the
    # totals also hold what the server did meanwhile on its own: a round may stray by more).
    assert plain > 5_000 and abs(added - (with_key - plain)) <= 1
    assert abs(added) < plain // 5, run.stdout
    shown = run.stdout.split("adds most to", 1)[1]
    rows = re.findall(r"^ +([+-]\d+\.\d) +(\S+)$", shown, re.MULTILINE)
    assert "by round" in run.stdout and len(rows) == 12, run.stdout
    # What only a keyed request runs: the guard's wrapper and the key's take.
    by_name = {name.rsplit(":", 1)[-1]: float(value) for value, name in rows}
    assert by_name.get("idempotent.<locals>.decorate.<locals>.guarded", 0) > 50, run.stdout
    assert by_name.get("Ticket.take", 0) > 20, run.stdout
