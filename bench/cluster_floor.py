"""The floor under the cluster hop: an HTTP server whose route makes one bare Ray actor call.

bench/cluster.py starts this as its own process, a driver of the bench's Ray cluster as a
front end is, served by uvicorn with the HTTP protocol ``mail server`` uses. Two routes:

- ``GET /plain`` answers at once (the server's own cost);
- ``GET /actor`` awaits one call of a named echo actor on a worker node, as a front end
  awaits its instance's actor, and answers with the actor's reply;
- ``GET /busy?work_ms=W`` makes the same call, with the actor busy for W ms first (in
  slices, its event loop free in between, as an instance running a task is).

What ``/actor`` adds over ``/plain`` is the least any front end that forwards a request
through one Ray actor call can add on this machine, with nothing of MAIL's in between.

    uv run python bench/cluster_floor.py --address HOST:PORT --namespace NS --actor NAME --port N
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# bench/http.py would shadow the stdlib `http` package (this script's folder comes first on
# sys.path): drop that entry before anything imports it.
if sys.path and Path(sys.path[0] or ".").resolve() == Path(__file__).resolve().parent:
    del sys.path[0]

# As `mail server` does, before Ray is imported: no `uv run` runtime environment for workers.
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")

import argparse  # noqa: E402
from typing import Any  # noqa: E402

# The request a front end forwards: its shape, with headers and a body of a message's size.
REQUEST: dict[str, Any] = {
    "method": "GET",
    "path": "/status",
    "headers": [(b"authorization", b"Bearer " + b"k" * 40)] * 6,
    "body": b"x" * 200,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", required=True, help="the Ray cluster's head (host:port)")
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--actor", required=True, help="the named echo actor to call")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()

    import ray
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    from mail.server.http_protocol import http_protocol

    ray.init(
        address=args.address,
        namespace=args.namespace,
        log_to_driver=False,
        configure_logging=False,
    )
    echo = ray.get_actor(args.actor, namespace=args.namespace)

    async def plain(_: Request) -> Response:
        return Response(b"{}", media_type="application/json")

    async def actor(_: Request) -> Response:
        status, _headers, body = await echo.echo.remote(REQUEST)
        return Response(body, status_code=status, media_type="application/json")

    async def busy(request: Request) -> Response:
        work_ms = float(request.query_params.get("work_ms", "0"))
        status, _headers, body = await echo.echo.remote(REQUEST, work_ms)
        return Response(body, status_code=status, media_type="application/json")

    routes = [Route("/plain", plain), Route("/actor", actor), Route("/busy", busy)]
    app = Starlette(routes=routes)
    uvicorn.run(app, host="127.0.0.1", port=args.port, http=http_protocol(), log_level="warning")


if __name__ == "__main__":
    main()
