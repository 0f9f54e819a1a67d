"""The official A2A conformance kit (a2a-tck) against a real `mail server` (not a test, not CI).

    uv run python3 bench/a2a_tck.py --tck /path/to/a2a-tck [--categories mandatory,quality]
        [--transports jsonrpc,rest] [--keep /tmp/tck-run]

The kit is an outside project and this script fetches nothing: check it out yourself and give
it its own environment once, as its README says (``git clone https://github.com/a2aproject/
a2a-tck``, then in that folder ``uv venv && uv pip install -e .``). The script then

1. starts one `mail server` on loopback, on the stub swarm of the tests (answers at once; a
   body starting ``SLEEP n`` waits n seconds), with a user key and `[server.webhooks]` on (so
   the card declares push notifications and the kit tries them), loopback receivers allowed;
2. runs the kit's pytest categories (``tests/mandatory``, ``tests/optional/capabilities``,
   ``quality``, ``features``) once per binding (``--transports jsonrpc`` then ``rest``), and
   its transport-equivalence category once across both, with the key as the kit's bearer
   token (``A2A_AUTH_TYPE=bearer``, ``A2A_AUTH_TOKEN``);
3. prints, per category and binding, how many passed, failed, skipped and erred, then every
   failure with the kit's one-line reason. The kit's JSON reports and the server's log stay
   in ``--keep`` (a temporary folder otherwise, removed at the end).

The kit's pytest runs with the kit's own interpreter (``<tck>/.venv/bin/python``), in its
folder; the server with this repository's. Runs take a few minutes (the kit waits on streams
and timeouts). ``TCK_STREAMING_TIMEOUT`` is passed through when set.

Three defects of the kit (a2aproject/a2a-tck at 410ba92) are worked around here, without
touching the checkout, and the results (bench/results-a2a-tck.md) say so:

* it sends A2A 1.0 method names without the ``A2A-Version`` header, which A2A 1.0 reads as
  0.3: the header goes in through the kit's own setting for extra headers
  (``A2A_AUTH_HEADERS``, with the bearer key);
* its HTTP+JSON client joins each path to the interface's URL with ``urljoin(url,
  "/message:send")``, which drops the URL's own path (``/a2a``): every REST request went to
  the server's root (``GET /tasks`` reached MAIL's own task list);
* its HTTP+JSON client keeps one ``httpx.AsyncClient`` for the whole run while each async test
  runs on an event loop of its own: from the second streaming test on, every REST stream failed
  with "Event loop is closed" before reaching the server.

A pytest plugin written to the work folder (``-p tck_rest_paths``) makes that join keep the path
and gives the REST client a fresh async client on each event loop; ``--as-is`` leaves the kit
alone (the header still goes in).

``--return-immediately`` is a check of the kit's own assumption, not a workaround: its
reference agent leaves every task working, so many of its tests cancel, list or message a task
they expect still working after a blocking send. With this flag a second plugin
(``tck_return_immediately``) adds ``"returnImmediately": true`` to every ``SendMessage`` the
kit's clients send; with ``--latency-ms 15000`` the tasks are then still working when the kit
looks at them.
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/http.py is named like the stdlib `http` package: drop this script's folder from the path.
if sys.path and Path(sys.path[0] or ".").resolve() == Path(__file__).resolve().parent:
    del sys.path[0]

import argparse
import json
import os
import shutil
import subprocess
import tempfile
from collections import Counter
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from server_fixtures import keyed_stub_server  # noqa: E402

CATEGORIES = {
    "mandatory": "tests/mandatory/",
    "capabilities": "tests/optional/capabilities/",
    "quality": "tests/optional/quality/",
    "features": "tests/optional/features/",
}
EQUIVALENCE = ("transport-equivalence", "tests/optional/multi_transport/")

# The kit's REST client with its paths kept under the interface's URL, and an async client of
# the running event loop (see the module doc).
REST_PATHS_PLUGIN = """
import asyncio

import tck.config  # first, as the kit's conftest does (its modules import each other)
import tck.transport.rest_client as rest_client


def _keep_the_path(base, path):
    return base.rstrip("/") + "/" + path.lstrip("/")


rest_client.urljoin = _keep_the_path

_one_for_the_run = rest_client.RESTClient.async_client


def _one_per_loop(self):
    loop = asyncio.get_running_loop()
    if getattr(self, "_mail_bench_loop", None) is not loop:
        self._async_client, self._mail_bench_loop = None, loop
    return _one_for_the_run.fget(self)


rest_client.RESTClient.async_client = property(_one_per_loop)
"""

SERVER_SETTINGS = """
[server.webhooks]
allowed_hosts = ["127.0.0.1", "localhost"]
"""


# Every SendMessage of the kit's clients asks returnImmediately (``--return-immediately``).
RETURN_IMMEDIATELY_PLUGIN = """
import tck.config  # first, as the kit's conftest does
import tck.transport.jsonrpc_client as jsonrpc_client
import tck.transport.rest_client as rest_client


def _returning_immediately(client_class):
    send = client_class.send_message

    def send_message(self, message, configuration=None, extra_headers=None):
        configuration = {"returnImmediately": True, **(configuration or {})}
        return send(self, message, configuration=configuration, extra_headers=extra_headers)

    client_class.send_message = send_message


_returning_immediately(jsonrpc_client.JSONRPCClient)
_returning_immediately(rest_client.RESTClient)
"""


def _run_pytest(
    tck: Path,
    base_url: str,
    path: str,
    transports: str,
    report: Path,
    env: dict[str, str],
    plugins: list[str],
) -> None:
    python = tck / ".venv" / "bin" / "python"
    command = [
        str(python if python.exists() else sys.executable),
        "-m",
        "pytest",
        path,
        f"--sut-url={base_url}",
        "--test-scope=all",
        f"--transports={transports}",
        "--tb=line",
        "-q",
        "-p",
        "no:cacheprovider",
        "--json-report",
        f"--json-report-file={report}",
        *[arg for plugin in plugins for arg in ("-p", plugin)],
    ]
    if path == CATEGORIES["mandatory"] and "jsonrpc" in transports:
        command += ["-m", "mandatory or mandatory_protocol or mandatory_jsonrpc"]
    elif path == CATEGORIES["mandatory"]:
        command += ["-m", "mandatory or mandatory_protocol"]
    elif path == EQUIVALENCE[1]:
        command += ["-m", "transport_equivalence"]
    log = report.with_suffix(".log")
    with log.open("wb") as out:
        subprocess.run(command, cwd=tck, env=env, stdout=out, stderr=subprocess.STDOUT, check=False)


def _reason(test: dict[str, Any]) -> str:
    for phase in ("setup", "call", "teardown"):
        part = test.get(phase) or {}
        if part.get("outcome") in ("failed", "error"):
            crash = (part.get("crash") or {}).get("message") or part.get("longrepr") or ""
            return " ".join(str(crash).split())[:300]
    return ""


def _summarize(label: str, report: Path) -> list[str]:
    if not report.exists():
        print(f"{label:38} no report (see {report.with_suffix('.log')})")
        return []
    tests = json.loads(report.read_text(encoding="utf-8")).get("tests", [])
    counts = Counter(t["outcome"] for t in tests)
    print(
        f"{label:38} passed {counts['passed']:3}  failed {counts['failed']:3}  "
        f"skipped {counts['skipped']:3}  error {counts['error']:3}  "
        f"xfailed {counts['xfailed']:3}  xpassed {counts['xpassed']:3}"
    )
    return [
        f"[{label}] {t['nodeid']}: {_reason(t)}"
        for t in tests
        if t["outcome"] in ("failed", "error")
    ]


def _commit(checkout: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True
    )
    return done.stdout.strip() or "commit unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tck", type=Path, required=True, help="a local a2a-tck checkout")
    parser.add_argument("--categories", default=",".join([*CATEGORIES, EQUIVALENCE[0]]))
    parser.add_argument("--transports", default="jsonrpc,rest")
    parser.add_argument(
        "--latency-ms",
        type=int,
        default=1500,
        help="each agent turn waits this long (the kit expects tasks to be seen working)",
    )
    parser.add_argument(
        "--as-is", action="store_true", help="no workaround for the kit's REST path joining"
    )
    parser.add_argument(
        "--return-immediately",
        action="store_true",
        help="every SendMessage of the kit asks returnImmediately (see the module doc)",
    )
    parser.add_argument("--keep", type=Path, help="keep reports and the server's log here")
    args = parser.parse_args()
    tck = args.tck.resolve()
    if not (tck / "tests" / "mandatory").is_dir():
        parser.error(f"{tck} is not an a2a-tck checkout (no tests/mandatory)")
    chosen = [c.strip() for c in args.categories.split(",") if c.strip()]
    transports = [t.strip() for t in args.transports.split(",") if t.strip()]
    work = args.keep or Path(tempfile.mkdtemp(prefix="a2a-tck-"))
    (work / "server").mkdir(parents=True, exist_ok=True)
    failures: list[str] = []
    try:
        with keyed_stub_server(
            work / "server",
            {"tck": ("user", "tck")},
            extra=SERVER_SETTINGS,
            env={"MAIL_STUB_LATENCY_MS": str(args.latency_ms)},
        ) as server:
            env = dict(os.environ)
            # The kit sends 1.0 method names without the `A2A-Version` header, which the
            # specification reads as 0.3: its own setting for extra headers sends it.
            headers = {"Authorization": f"Bearer {server.keys['tck']}", "A2A-Version": "1.0"}
            env["A2A_AUTH_HEADERS"] = json.dumps(headers)
            env.pop("VIRTUAL_ENV", None)
            plugins: list[str] = []
            if not args.as_is:
                (work / "tck_rest_paths.py").write_text(REST_PATHS_PLUGIN, encoding="utf-8")
                plugins.append("tck_rest_paths")
                print("the kit's REST client: the interface's path, a client per event loop")
            if args.return_immediately:
                (work / "tck_return_immediately.py").write_text(
                    RETURN_IMMEDIATELY_PLUGIN, encoding="utf-8"
                )
                plugins.append("tck_return_immediately")
                print("every SendMessage of the kit asks returnImmediately")
            if plugins:
                env["PYTHONPATH"] = os.pathsep.join(
                    filter(None, [str(work), env.get("PYTHONPATH")])
                )
            print(f"mail server at {server.base_url}; a2a-tck at {tck} ({_commit(tck)})")
            for category in chosen:
                if category == EQUIVALENCE[0]:
                    runs = [(",".join(transports), EQUIVALENCE[1])]
                else:
                    runs = [(t, CATEGORIES[category]) for t in transports]
                for transport, path in runs:
                    report = work / f"{category}-{transport.replace(',', '+')}.json"
                    _run_pytest(
                        tck, f"{server.base_url}/a2a", path, transport, report, env, plugins
                    )
                    failures += _summarize(f"{category} ({transport})", report)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    print()
    print(f"{len(failures)} failures and errors:" if failures else "no failures")
    for line in failures:
        print(" ", line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
