"""Machine instructions the server runs per POST /message, with an Idempotency-Key and without.

    uv run python bench/keyed_instructions.py [--requests 600] [--rounds 4] [--clients 16]
                                              [--warmup 400] [--top 20]

CPU time on this VM moves by more than a key costs, and `bench/keyed_bytecodes.py` counts
Python bytecodes only; this counts every user-space instruction of the server process
(Python, SQLite, the C extensions, libc), all threads, with valgrind's callgrind, which
counts the same instructions however busy the machine is. The server is bench/http.py's
stub server (a supervisor and three workers, SQLite, the access log on) run under
callgrind with instrumentation off; it is turned on (`callgrind_control -i on`) for each
round of requests of one kind and the counts dumped after it, the kinds alternating. The
floor in the same run is the unkeyed request's own count. Printed: instructions per request
of each kind, the keyed request's extra in all, and where it goes by shared object and by
function (what the kernel does, e.g. writing the WAL, is not counted: bench/http.py's CPU
time has it). Rounds of 600 requests at 16 clients move by about 1% between rounds, as
requests share commits differently; compare medians of 4 or more rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from keyed_bytecodes import bench_http  # (a sibling script: bench/ is the path's first entry)

HERE = Path(__file__).resolve().parent
KINDS = ("raw", "raw+key")
# A callgrind_annotate row: its count, its share, then file:function [object].
_ROW = re.compile(r"\s*([\d,]+) \([^)]*\)\s+(.*)")


def counted(path: Path) -> tuple[int, dict[str, int], dict[str, int]]:
    """(all instructions, by shared object, by function) of one callgrind dump."""
    out = subprocess.run(
        ["callgrind_annotate", "--inclusive=no", "--threshold=100", str(path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    total = 0
    objects: dict[str, int] = collections.Counter()
    functions: dict[str, int] = collections.Counter()
    for line in out.splitlines():
        match = _ROW.match(line)
        if match is None:
            continue
        count = int(match.group(1).replace(",", ""))
        place = match.group(2)
        if "PROGRAM TOTALS" in place:
            total = count
            continue
        obj = place.rsplit("[", 1)[-1].rstrip("] ").rsplit("/", 1)[-1] if "[" in place else "?"
        function = place.split(" [", 1)[0].rsplit(":", 1)[-1]
        objects[obj] += count
        functions[f"{function} [{obj}]"] += count
    return total, objects, functions


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--requests", type=int, default=600, help="requests per kind a round")
    parser.add_argument("--rounds", type=int, default=4, help="rounds of each kind")
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients")
    parser.add_argument("--top", type=int, default=20, help="functions shown")
    parser.add_argument("--warmup", type=int, default=400, help="uncounted requests a kind first")
    args = parser.parse_args()
    for tool in ("valgrind", "callgrind_control", "callgrind_annotate"):
        if shutil.which(tool) is None:
            sys.exit(f"bench/keyed_instructions.py needs {tool} (Debian package valgrind)")
    http = bench_http()
    with tempfile.TemporaryDirectory(prefix="mail-instructions-") as tmp:
        workdir = Path(tmp)
        keys_file = workdir / "keys.json"
        keys = http.make_keys(keys_file, 4)
        port = http.free_port()
        out = workdir / "callgrind.out"
        log = (workdir / "server.log").open("wb")
        proc = subprocess.Popen(
            ["valgrind", "--tool=callgrind", "--instr-atstart=no",
             f"--callgrind-out-file={out}", sys.executable, str(HERE / "http.py"), "--serve",
             str(port), str(keys_file), str(workdir), "0.0", "1"],
            stdout=log,
            stderr=log,
            start_new_session=True,
        )  # fmt: skip
        url = f"http://127.0.0.1:{port}"

        def control(*flags: str) -> None:
            subprocess.run(["callgrind_control", *flags, str(proc.pid)], check=True,
                           capture_output=True)  # fmt: skip

        dumps: dict[str, list[Path]] = {kind: [] for kind in KINDS}
        try:
            http.wait_health(url, proc, timeout=600)
            for kind in KINDS:  # warm-up: instances, the key table, the callers' key filters
                asyncio.run(http.load(kind, url, keys, 4, args.warmup, False))
            for turn in range(args.rounds):
                for kind in KINDS if turn % 2 == 0 else KINDS[::-1]:
                    control("-z")
                    control("-i", "on")
                    asyncio.run(http.load(kind, url, keys, args.clients, args.requests, False))
                    time.sleep(1.0)  # the server's own work after the last answer
                    control("-i", "off")
                    before = set(workdir.glob("callgrind.out.*"))
                    control("-d", f"{kind}-{turn}")
                    (dump,) = set(workdir.glob("callgrind.out.*")) - before
                    dumps[kind].append(dump)
            counts = {kind: [counted(path) for path in paths] for kind, paths in dumps.items()}
        finally:
            http.stop(proc)
            log.close()
    sent = args.requests + args.clients  # (`http.load` warms each client with one request)
    plain = [total / sent for total, _, _ in counts["raw"]]
    keyed = [total / sent for total, _, _ in counts["raw+key"]]
    added = [k - p for k, p in zip(keyed, plain, strict=True)]
    print(
        f"POST /message, stub swarm, SQLite, {args.clients} clients over 4 users, "
        f"{args.requests} requests a kind a round, {args.rounds} rounds: instructions of the "
        "server process per request (callgrind, user space, all threads)"
    )
    print(f"  no key (the floor):  {statistics.median(plain):12,.0f}")
    print(
        f"  MAILClient's keys:   {statistics.median(keyed):12,.0f}   "
        f"{statistics.median(added):+,.0f} "
        f"({100 * (statistics.median(keyed) / statistics.median(plain) - 1):+.2f}%); by round "
        + ", ".join(f"{a:+,.0f}" for a in added)
    )
    for index, what in ((1, "shared object"), (2, "function")):
        diff: dict[str, float] = collections.Counter()
        for kind, sign in (("raw+key", 1), ("raw", -1)):
            for entry in counts[kind]:
                for name, count in entry[index].items():
                    diff[name] += sign * count / sent / args.rounds
        rows = sorted(diff.items(), key=lambda item: -item[1])[: args.top if index == 2 else 8]
        print(f"  what a key adds, by {what} (instructions per request):")
        for name, count in rows:
            print(f"    {count:+10,.0f}  {name}")


if __name__ == "__main__":
    main()
