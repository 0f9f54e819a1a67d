"""The modules of `mail` one POST /message passes through, in order (issue 67's request path).

    uv run python bench/request_path.py [--key] [--requests 5]

bench/http.py's stub server (a supervisor and three workers, SQLite) runs in a child process,
as in bench/keyed_bytecodes.py. Between two signals the child follows the asyncio task that
handles each request (uvicorn's task for it; the runtime's own tasks are not followed): every
time the running function moves from one module of `mail` to another, by a call or a return,
that is a stop. Printed for the last request: the stops in order, how many there were, how
many modules, and how often the request came back to a module it had left (issue 67: "a
reader follows a request in one direction").
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

HERE = Path(__file__).resolve().parent
# Where a request's route starts: a route module, the Idempotency-Key guard around it, or the
# message handler it routes to.
ROUTE_MODULES = ("mail.server.routes", "mail.server.idempotency", "mail.server.messaging")


def _bench(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"bench_{name}", HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def serve_following(out: str, serve_args: list[str]) -> None:
    """The child: the stub server, writing each followed request's stops to `out`."""
    paths: dict[Any, list[str]] = {}  # by task (held: an id() could be reused)

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event not in ("call", "return"):
            return
        try:
            task = asyncio.current_task()
        except RuntimeError:
            return
        if task is None:
            return
        where = frame if event == "call" else frame.f_back
        module = where.f_globals.get("__name__", "") if where is not None else ""
        if not module.startswith("mail."):
            return
        path = paths.get(task)
        if path is None:
            if event != "call" or not module.startswith(ROUTE_MODULES):
                return  # not a request's task (or not yet in the route)
            path = paths[task] = []
        if not path or path[-1] != module:
            path.append(module)

    def start(*_: Any) -> None:
        paths.clear()
        sys.setprofile(profile)

    def stop(*_: Any) -> None:
        sys.setprofile(None)
        partial = out + ".partial"
        with open(partial, "w", encoding="utf-8") as file:
            for path in paths.values():
                file.write(" ".join(path) + "\n")
        os.replace(partial, out)

    signal.signal(signal.SIGUSR2, start)
    signal.signal(signal.SIGHUP, stop)
    port, keys_file, directory = serve_args
    _bench("http").serve(int(port), keys_file, directory, 0.0, False)


def main() -> None:
    if len(sys.argv) >= 2 and sys.argv[1] == "--serve-following":
        serve_following(sys.argv[2], sys.argv[3:])
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--key", action="store_true", help="with an Idempotency-Key")
    parser.add_argument("--requests", type=int, default=5, help="requests followed")
    parser.add_argument(
        "--package", default="mail.server", help="the stops counted (default mail.server)"
    )
    args = parser.parse_args()
    http = _bench("http")
    kind = "raw+key" if args.key else "raw"
    with tempfile.TemporaryDirectory(prefix="mail-path-") as tmp:
        workdir = Path(tmp)
        keys_file = workdir / "keys.json"
        keys = http.make_keys(keys_file, 1)
        port = http.free_port()
        out = workdir / "paths.txt"
        log = (workdir / "server.log").open("wb")
        proc = subprocess.Popen(
            [sys.executable, __file__, "--serve-following", str(out), str(port),
             str(keys_file), str(workdir)],
            stdout=log, stderr=log, start_new_session=True,
        )  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        try:
            http.wait_health(url, proc)
            asyncio.run(http.load(kind, url, keys, 1, 20, False))  # warm-up
            os.kill(proc.pid, signal.SIGUSR2)
            time.sleep(0.2)
            asyncio.run(http.load(kind, url, keys, 1, args.requests, False))
            time.sleep(0.2)
            os.kill(proc.pid, signal.SIGHUP)
            deadline = time.monotonic() + 60
            while not out.exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the server wrote no paths (see its log)")
                time.sleep(0.05)
        finally:
            http.stop(proc)
            log.close()
        paths = [line.split() for line in out.read_text().splitlines() if line.strip()]
    whole = max(paths, key=len)  # the last requests are alike; the longest is a whole one
    # The server's part (the issue counts stops in `mail.server`): other packages' calls in
    # between are left out, and the stops on either side of them are one if they are alike.
    path = [m for m in whole if m.startswith(args.package)]
    path = [m for n, m in enumerate(path) if n == 0 or path[n - 1] != m]
    seen: set[str] = set()
    back: Counter[str] = Counter()
    for before, module in zip(["", *path], path, strict=False):
        if module in seen and module != before:
            back[module] += 1
        seen.add(module)
    print(
        f"POST /message ({'keyed' if args.key else 'no key'}), stub swarm, SQLite: "
        f"{len(whole)} stops in all `mail` modules; in {args.package}:"
    )
    for n, module in enumerate(path, 1):
        print(f"  {n:3d}  {module.removeprefix('mail.')}")
    print(f"stops: {len(path)}, modules: {len(seen)}, returns to a module it had left:")
    for module, count in back.most_common():
        print(f"  {count:3d}  {module.removeprefix('mail.')}")


if __name__ == "__main__":
    main()
