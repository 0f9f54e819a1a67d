"""What tracing costs a `mail server` at 16 kept-alive clients (not a test): prints numbers.

    uv run python bench/tracing.py [--swarm stub|llm] [--rounds 8] [--requests 600]
        [--fresh 4] [--baseline SRC [--baseline-on]] [--sampled RATIO] [--toggle]

Each server is `mail server` started from a scratch folder, as the docs start it (access log
on, info logging to a file), answering POST /message (JSON) to 16 raw kept-alive clients over
4 users (`bench/http.py`'s client):

- ``off``: this tree, no ``OTEL_*`` variables (tracing off);
- ``on``: this tree, ``OTEL_EXPORTER_OTLP_ENDPOINT`` at a local OTLP/HTTP receiver (its own
  process; it counts the spans it decodes, per service, so dropped spans would show), default
  batch settings: every request traced and exported;
- ``sampled``: as ``on`` with ``OTEL_TRACES_SAMPLER=parentbased_traceidratio`` at
  ``--sampled`` (skipped with ``--sampled 0``);
- ``base``: tracing off, ``mail`` imported from ``--baseline`` (a ``src`` directory, e.g. of
  ``git archive main``), to compare ``off`` with today's main; ``base-on`` (with
  ``--baseline-on``): that tree traced as ``on`` is;
- ``toggled`` (with ``--toggle``): as ``on``, but a signal switches its tracing off and on
  between the two back-to-back halves of each round, so both sides of the ratio come from one
  process; during the traced halves it also adds up the CPU time spent inside its tracing
  calls (`bench/tracing_procs.py`), which is what a span costs inside a busy server.

Swarms: ``stub`` is `bench/http.py`'s supervisor + 3 workers with agents that answer at once
(3 agent turns, 3 MAIL tool calls per request: MAIL's own work only, so tracing's share is at
its largest); ``llm`` is a LiteLLM supervisor and worker on a scripted OpenAI-compatible model
in its own process (3 model calls per request, as users run it).

The servers are measured in interleaved rounds (order rotated every round; this VM's speed
drifts by a fifth over seconds): req/s and the server process's CPU per request (all its
threads, so the exporter's thread counts), as medians with their range and as ratios to
``off`` paired by round. A server's cost per request grows with the tasks it holds, so every
``--fresh`` rounds all of them are replaced by new ones. Each round also runs the floor in a
fresh process: N spans made and ended with the bare OpenTelemetry SDK through no processor,
the SDK's batch processor (discarding, and OTLP/HTTP to the same receiver) and mail's, so the
SDK's own cost per span is known in the same run; spans per request come from the receiver.
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/http.py is named like the stdlib package: keep this directory off sys.path.
if sys.path and Path(sys.path[0] or ".").resolve() == Path(__file__).resolve().parent:
    del sys.path[0]

import argparse  # noqa: E402
import asyncio  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import urllib.request  # noqa: E402
from typing import Any  # noqa: E402

HERE = Path(__file__).resolve().parent
PROCS = HERE / "tracing_procs.py"  # the receiver, model, floor and toggled server
TARGET_PCT = 15.0
FLOOR_SPANS = 4000
WARM_UP = 320  # requests a new server answers before it is measured


def _load_http_bench() -> Any:
    spec = importlib.util.spec_from_file_location("bench_http", HERE / "http.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------ the bench


def _helper(mode: str, workdir: Path, env: dict[str, str] | None = None) -> tuple[Any, int]:
    port_file = workdir / f"{mode}.port"
    proc = subprocess.Popen(
        [sys.executable, str(PROCS), f"--{mode}", str(port_file)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while not port_file.exists() or not port_file.read_text():
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise RuntimeError(f"--{mode} helper did not start")
        time.sleep(0.02)
    return proc, int(port_file.read_text())


def swarms_json(swarm: str, model_url: str) -> list[dict[str, Any]]:
    if swarm == "stub":
        workers = ["w1", "w2", "w3"]
        agents = [
            {
                "name": "supervisor",
                "factory": "python::tracing_swarm:supervisor",
                "comm_targets": workers,
                "enable_entrypoint": True,
                "can_complete_tasks": True,
                "agent_params": {},
            }
        ] + [
            {
                "name": w,
                "factory": "python::tracing_swarm:worker",
                "comm_targets": ["supervisor"],
                "agent_params": {},
            }
            for w in workers
        ]
    else:

        def params(role: str) -> dict[str, Any]:
            return {
                "llm": "openai/gpt-4o-mini",
                "use_proxy": False,
                "api_base": model_url,
                "api_key": "bench",
                "system": f"ROLE={role}",
                "memory": False,
            }

        agents = [
            {
                "name": "supervisor",
                "factory": "python::mail.factories.supervisor:LiteLLMSupervisorFunction",
                "comm_targets": ["worker"],
                "enable_entrypoint": True,
                "can_complete_tasks": True,
                "tool_format": "completions",
                "agent_params": params("supervisor"),
            },
            {
                "name": "worker",
                "factory": "python::mail.factories.action:LiteLLMActionAgentFunction",
                "comm_targets": ["supervisor"],
                "tool_format": "completions",
                "agent_params": params("worker"),
            },
        ]
    return [
        {
            "name": "bench",
            "version": "1.0.0",
            "entrypoint": "supervisor",
            "agents": agents,
            "actions": [],
        }
    ]


class Server:
    """`mail server` from its own scratch folder, with its own environment."""

    def __init__(
        self,
        http: Any,
        folder: Path,
        swarm: str,
        model_url: str,
        env: dict[str, str],
        toggled: bool = False,
    ):
        folder.mkdir()
        shutil.copy(HERE / "tracing_swarm.py", folder / "tracing_swarm.py")
        (folder / "swarms.json").write_text(json.dumps(swarms_json(swarm, model_url)))
        (folder / "mail.toml").write_text(
            '[server]\nhost = "127.0.0.1"\naccess_log = true\nlog_level = "info"\n'
            '[server.swarm]\nname = "bench"\nsource = "swarms.json"\n'
            'registry = "registries/bench.json"\n'
            "[server.settings]\ntask_message_limit = 0\nprint_llm_streams = false\n"
            "instance_idle_timeout = 0\n"
        )
        self.keys = http.make_keys(folder / "registries" / "keys.json", 4)
        self.port = http.free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = (folder / "server.log").open("wb")
        command = [sys.executable, "-m", "mail.cli", "server", "--port", str(self.port)]
        self.costs = folder / "tracing-costs.json"
        if toggled:  # the same, with tracing switched by SIGUSR1 and its cost kept
            command = [sys.executable, str(PROCS), "--serve-toggled", str(self.port)]
        self.proc = subprocess.Popen(
            command,
            cwd=folder,
            env={**env, "PYTHONUNBUFFERED": "1", "BENCH_TRACING_COSTS": str(self.costs)},
            stdout=self.log,
            stderr=self.log,
        )
        self.tracing_on = True  # a toggled server's state
        http.wait_health(self.url, self.proc)
        asyncio.run(http.load("raw", self.url, self.keys, 16, WARM_UP, False))  # instances

    def close(self, http: Any) -> None:
        http.stop(self.proc)
        self.log.close()


def receiver_count(port: int) -> dict[str, int]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/count", timeout=10) as reply:
        return dict(json.loads(reply.read()))


def median_range(values: list[float], fmt: str = "{:.0f}") -> str:
    return (
        f"{fmt.format(statistics.median(values))} "
        f"({fmt.format(min(values))}-{fmt.format(max(values))})"
    )


def variants_of(args: argparse.Namespace, base_env: dict[str, str], endpoint: str) -> dict:  # type: ignore[type-arg]
    """Each server's environment, by name."""
    on = {**base_env, "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_SERVICE_NAME": "bench-on"}
    variants = {"off": base_env, "on": on}
    if args.sampled:
        variants["sampled"] = {
            **on,
            "OTEL_SERVICE_NAME": "bench-sampled",
            "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
            "OTEL_TRACES_SAMPLER_ARG": str(args.sampled),
        }
    if args.baseline:
        src = str(Path(args.baseline).resolve())
        variants["base"] = {**base_env, "PYTHONPATH": src}
        if args.baseline_on:
            variants["base-on"] = {**on, "PYTHONPATH": src, "OTEL_SERVICE_NAME": "bench-base-on"}
    if args.toggle:
        variants["toggled"] = {**on, "OTEL_SERVICE_NAME": "bench-toggled"}
    return variants


class Results:
    def __init__(self, names: list[str]) -> None:
        self.rps: dict[str, list[float]] = {name: [] for name in names}
        self.cpu: dict[str, list[float]] = {name: [] for name in names}
        self.sent: dict[str, int] = dict.fromkeys(names, 0)  # requests traced servers answered
        self.pairs: dict[bool, list[float]] = {True: [], False: []}  # the toggled server's
        self.costs: list[dict[str, list[float]]] = []  # its tracing calls, per traced half
        self.floors: list[dict[str, float]] = []


def run(args: argparse.Namespace) -> None:
    http = _load_http_bench()
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    base_env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    with tempfile.TemporaryDirectory(prefix="mail-trace-bench-") as tmp:
        workdir = Path(tmp)
        helpers = []
        servers: dict[str, Server] = {}
        try:
            receiver, receiver_port = _helper("receive", workdir, base_env)
            helpers.append(receiver)
            model_url = ""
            if args.swarm == "llm":
                model, model_port = _helper("model", workdir, base_env)
                helpers.append(model)
                model_url = f"http://127.0.0.1:{model_port}/v1"
            endpoint = f"http://127.0.0.1:{receiver_port}"
            variants = variants_of(args, base_env, endpoint)
            names = [name for name in variants if name != "toggled"]
            results = Results(names)
            for number in range(args.rounds):
                print(f"  ... round {number + 1} of {args.rounds}", file=sys.stderr)
                if number % args.fresh == 0:
                    # New processes: a server's cost per request grows with the tasks it
                    # holds, so every variant starts over together.
                    for server in servers.values():
                        server.close(http)
                    servers = {
                        name: Server(
                            http, workdir / f"{name}-{number}", args.swarm, model_url, env,
                            toggled=name == "toggled",
                        )
                        for name, env in variants.items()
                    }  # fmt: skip
                    for name in servers:
                        results.sent[name] = results.sent.get(name, 0) + WARM_UP + 16
                order = names[number % len(names) :] + names[: number % len(names)]
                for name in order if number % 2 == 0 else order[::-1]:
                    server = servers[name]
                    before = http.cpu_seconds(server.proc.pid)
                    got, _ = asyncio.run(
                        http.load("raw", server.url, server.keys, 16, args.requests, False)
                    )
                    used = http.cpu_seconds(server.proc.pid) - before
                    results.sent[name] += args.requests + 16
                    results.rps[name].append(got)
                    results.cpu[name].append(used / args.requests * 1e6)
                if "toggled" in servers:
                    measure_pair(http, servers["toggled"], args.requests, number, results)
                floor = subprocess.run(
                    [sys.executable, str(PROCS), "--floor", str(FLOOR_SPANS), endpoint],
                    env=base_env,
                    capture_output=True,
                    text=True,
                    check=True,
                )
                results.floors.append(json.loads(floor.stdout))
        finally:
            for server in servers.values():
                server.close(http)  # a clean exit flushes the batch processor
        exported = receiver_count(receiver_port)
        for helper in helpers:
            helper.terminate()
            helper.wait(10)
    report(args, results, exported)


def measure_pair(http: Any, server: Server, requests: int, number: int, results: Results) -> None:
    """One round of the toggled server: tracing on, then off (or off, then on: ABBA); during
    the traced half the server adds up the CPU time spent in tracing calls."""
    for want in (True, False) if number % 2 == 0 else (False, True):
        if want != server.tracing_on:
            os.kill(server.proc.pid, signal.SIGUSR1)
            server.tracing_on = want
            # a few requests first: the signal is handled between two of them
            asyncio.run(http.load("raw", server.url, server.keys, 16, 32, False))
        if want:
            os.kill(server.proc.pid, signal.SIGUSR2)  # start counting
        before = http.cpu_seconds(server.proc.pid)
        asyncio.run(http.load("raw", server.url, server.keys, 16, requests, False))
        results.pairs[want].append((http.cpu_seconds(server.proc.pid) - before) / requests * 1e6)
        if want:
            server.costs.unlink(missing_ok=True)
            os.kill(server.proc.pid, signal.SIGUSR2)  # write what was counted
            deadline = time.monotonic() + 10
            while not server.costs.exists() and time.monotonic() < deadline:
                time.sleep(0.02)
            counted = json.loads(server.costs.read_text())
            results.costs.append(
                {k: [v[0] / requests, v[1] / requests * 1e6] for k, v in counted.items()}
            )


def paired(values: list[float], base: list[float]) -> str:
    """Median (range) of the per-round ratios values/base, in percent."""
    ratios = [100 * (a / b - 1) for a, b in zip(values, base, strict=True)]
    return f"{statistics.median(ratios):+.1f}% ({min(ratios):+.1f}..{max(ratios):+.1f})"


def report(args: argparse.Namespace, results: Results, exported: dict[str, int]) -> None:
    rps, cpu = results.rps, results.cpu
    print(
        f"swarm {args.swarm}: POST /message (json), 16 raw kept-alive clients over 4 users, "
        f"{args.requests} requests a round, {args.rounds} rounds, new servers every "
        f"{args.fresh}; median (range):"
    )
    for name in rps:
        print(
            f"  {name:<8} req/s {median_range(rps[name]):<18} server CPU per request "
            f"{median_range(cpu[name])} us"
        )
    for name in [n for n in rps if n != "off"]:
        lost = statistics.median([1 - a / b for a, b in zip(rps[name], rps["off"], strict=True)])
        verdict = ""
        if name == "on":
            verdict = "  (target met)" if 100 * lost <= TARGET_PCT else "  (TARGET MISSED)"
        print(
            f"  {name:<8} vs off, paired by round: req/s {paired(rps[name], rps['off'])}, "
            f"CPU per request {paired(cpu[name], cpu['off'])}{verdict}"
        )
    per_request = 0.0
    for name in ("on", "sampled", "base-on"):
        if name in rps:
            got, sent = exported.get(f"bench-{name}", 0), results.sent[name]
            per_request = got / sent if name == "on" else per_request
            print(f"  {name}: {got} spans exported for {sent} requests: {got / sent:.2f} each")
    if results.pairs[True]:
        on, off = results.pairs[True], results.pairs[False]
        print(
            "one server, tracing switched on and off between back-to-back halves of each "
            f"round: CPU per request on {median_range(on)} us, off {median_range(off)} us, "
            f"paired {paired(on, off)}"
        )
        print("  inside its tracing calls during the traced halves, per request (median):")
        for key in results.costs[0]:
            calls = statistics.median(c[key][0] for c in results.costs if key in c)
            took = statistics.median(c[key][1] for c in results.costs if key in c)
            print(f"    {key:<24} {calls:4.1f} calls {took:6.0f} us ({took / calls:5.1f} us each)")
        total = statistics.median(sum(v[1] for v in c.values()) for c in results.costs)
        print(
            f"    all of them: {total:.0f} us = {100 * total / statistics.median(off):.0f}% of off"
        )
    floors = results.floors
    print(f"floor: {FLOOR_SPANS} bare OpenTelemetry SDK spans per round, CPU us per span:")
    for key in floors[0]:
        print(f"  {key:<40} {median_range([f[key] for f in floors], '{:.1f}')}")
    off_cpu = statistics.median(cpu["off"])
    print(
        f"  x {per_request:.2f} spans per request, as a share of the untraced request's "
        f"{off_cpu:.0f} us (tracing added {statistics.median(cpu['on']) - off_cpu:.0f} us):"
    )
    for key in [k for k in floors[0] if k.endswith(": all")]:
        per_span = statistics.median(f[key] for f in floors)
        cost = per_span * per_request
        print(
            f"    {key.removesuffix(': all'):<36} {per_span:5.1f} us x {per_request:.2f} = "
            f"{cost:4.0f} us = {100 * cost / off_cpu:3.0f}%; {TARGET_PCT:.0f}% allows "
            f"{TARGET_PCT / 100 * off_cpu / per_span:.1f} spans"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--swarm", choices=("stub", "llm"), default="stub")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--requests", type=int, default=600, help="requests per round")
    parser.add_argument("--fresh", type=int, default=4, help="new servers every N rounds")
    parser.add_argument("--baseline", help="a src directory to compare 'off' with")
    parser.add_argument(
        "--baseline-on", action="store_true", help="also trace the baseline ('base-on')"
    )
    parser.add_argument(
        "--sampled", type=float, default=0.1, help="sampling ratio of the 'sampled' server"
    )
    parser.add_argument(
        "--toggle",
        action="store_true",
        help="also one server whose tracing is switched off and on between paired rounds",
    )
    run(parser.parse_args())


if __name__ == "__main__":
    main()
