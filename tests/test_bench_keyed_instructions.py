"""A scaled-down run of bench/keyed_instructions.py, as its docstring tells a reader to run it:
the server runs under callgrind, both kinds are answered and counted, and what a key adds
shows in the server's own shared objects and functions."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent

pytestmark = [
    pytest.mark.timeout(600),
    pytest.mark.skipif(
        shutil.which("valgrind") is None or shutil.which("callgrind_control") is None,
        reason="the bench runs the server under valgrind's callgrind (Debian package valgrind)",
    ),
]


def test_the_instruction_bench_counts_what_a_key_adds() -> None:
    run = subprocess.run(
        [sys.executable, str(REPO_ROOT / "bench" / "keyed_instructions.py"),
         "--requests", "40", "--rounds", "1", "--clients", "2", "--warmup", "20", "--top", "10"],
        capture_output=True, text=True, timeout=540, cwd=REPO_ROOT, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    floor = re.search(r"no key \(the floor\): +([\d,]+)", run.stdout)
    keyed = re.search(r"MAILClient's keys: +([\d,]+) +([+-][\d,]+)", run.stdout)
    assert floor is not None and keyed is not None, run.stdout
    plain, with_key = (int(floor.group(1).replace(",", "")), int(keyed.group(1).replace(",", "")))
    added = int(keyed.group(2).replace(",", ""))
    # A stub request is millions of instructions (the whole process: HTTP, the runtime, the
    # store); one round's difference is the keyed request's extra, within a fifth of it.
    assert plain > 500_000 and abs(added - (with_key - plain)) <= 1, run.stdout
    assert abs(added) < plain // 5, run.stdout
    objects = run.stdout.split("by shared object", 1)[1].split("by function", 1)[0]
    functions = run.stdout.split("by function", 1)[1]
    # Only a keyed request fingerprints its body: SHA-256 (hashlib's, OpenSSL's libcrypto)
    # runs for it alone.
    assert re.search(r"\+[\d,]+ +(_sha256|libcrypto)", objects) or "sha" in functions, run.stdout
    rows = re.findall(r"^ +[+-][\d,]+ +\S", functions, re.MULTILINE)
    assert len(rows) == 10, run.stdout
