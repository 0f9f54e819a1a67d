"""How punctual scheduled tasks are (not a test).

    uv run python3 bench/crons.py [--seconds 12] [--store sqlite|memory]

One `mail server` (the tests' supervisor swarm, which answers at once) with a cron firing
every second (`min_interval = 1`). After `--seconds` it prints how many runs started and how
long after its scheduled second each run's task started (its `start_time` in `GET /tasks`):
median and max, in ms.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

# This folder holds an http.py: off the path, or it hides the standard library's.
if sys.path and Path(sys.path[0] or ".").resolve() == Path(__file__).resolve().parent:
    del sys.path[0]
ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from tests.test_crons import SETTINGS, Deployment  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--store", choices=["sqlite", "memory"], default="sqlite")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="mail-bench-crons-"))
    settings = SETTINGS + ('\n[server.store]\nkind = "memory"\n' if args.store == "memory" else "")
    deployment = Deployment(root, {}, settings=settings, fronts=1)
    deployment.fronts[0].start()
    try:
        made = deployment.call(
            "POST", "/crons", json={"schedule": "* * * * * *", "message": {"body": "bench"}}
        )
        made.raise_for_status()
        time.sleep(args.seconds)
        deployment.call("PATCH", f"/crons/{made.json()['id']}", json={"paused": True})
        tasks = deployment.call("GET", "/tasks").json()
        lags = sorted(
            (dt.datetime.fromisoformat(t["start_time"]).timestamp() % 1.0) * 1000
            for t in tasks.values()
        )
        print(
            f"{args.store}: {len(lags)} runs in {args.seconds:g} s; start after the scheduled "
            f"second: median {statistics.median(lags):.1f} ms, max {max(lags):.1f} ms"
        )
    finally:
        deployment.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
