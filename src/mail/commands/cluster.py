"""`mail cluster list|end`: a deployment's instance actors on its Ray cluster."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

# Seconds `list --details` waits for one actor to describe itself.
DESCRIBE_TIMEOUT = 10.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-c", "--config", help="path to mail.toml")
    parser.add_argument("--address", help="Ray cluster address (auto or ray://HOST:10001)")
    parser.add_argument("--namespace", help="the deployment's Ray namespace")
    sub = parser.add_subparsers(dest="action", required=True)
    listing = sub.add_parser("list", help="list the deployment's instance actors")
    listing.add_argument(
        "--details", action="store_true", help="ask each actor for its node, pid and tasks"
    )
    listing.add_argument("--json", action="store_true", help="print JSON")
    end = sub.add_parser("end", help="end instance actors for good (state stays stored)")
    end.add_argument("names", nargs="*", help="actor names as `list` prints them")
    end.add_argument("--all", action="store_true", help="every instance actor of the namespace")


def _fail(message: str) -> int:
    print(f"mail cluster: error: {message}", file=sys.stderr)
    return 2


def _settings(args: argparse.Namespace) -> tuple[str, str]:
    from mail.cluster.settings import apply_cluster_env
    from mail.config import load_config

    if args.config:
        os.environ["MAIL_CONFIG_PATH"] = args.config
    cluster = apply_cluster_env(
        load_config(args.config, use_cache=False).server.cluster.model_dump()
    )
    return str(args.address or cluster["address"]), str(args.namespace or cluster["namespace"])


def _connect(address: str) -> Any:
    from mail.cluster.settings import prepare_ray_environment, require_ray

    prepare_ray_environment(address, "0.0.0.0")
    ray = require_ray()
    ray.init(address=address, log_to_driver=False, configure_logging=False)
    return ray


def instance_names(ray: Any, namespace: str) -> list[str]:
    from mail.cluster.actor import is_instance_name
    from mail.cluster.warm_pool import pooled_names

    named = {
        entry["name"]
        for entry in ray.util.list_named_actors(all_namespaces=True)
        if isinstance(entry, dict)
        and entry.get("namespace") == namespace
        and is_instance_name(entry["name"])
    }
    return sorted(named | set(pooled_names(ray, namespace)))


def _describe(ray: Any, name: str, namespace: str) -> dict[str, Any]:
    try:
        from mail.cluster.warm_pool import instance_handle

        handle = instance_handle(ray, namespace, name)
        info: dict[str, Any] = ray.get(handle.describe.remote(), timeout=DESCRIBE_TIMEOUT)
    except Exception as exc:  # restarting, ending or slow: say so instead of failing
        return {"name": name, "error": type(exc).__name__}
    return {**info, "name": name}


def run(args: argparse.Namespace) -> int:
    from mail.config import ConfigError

    try:
        address, namespace = _settings(args)
    except ConfigError as exc:
        return _fail(str(exc))
    if address == "local":
        return _fail(
            "a 'local' cluster is private to the server that started it and ends with it; "
            "give --address (auto or ray://HOST:10001) of a shared cluster"
        )
    if args.action == "end" and not (args.all or args.names):
        return _fail("name the actors to end, or give --all")
    try:
        ray = _connect(address)
    except Exception as exc:  # noqa: BLE001 - Ray's errors become one line
        text = str(exc).strip().splitlines()
        return _fail(f"cannot join the Ray cluster at '{address}': {text[0] if text else exc}")
    try:
        names = instance_names(ray, namespace)
        if args.action == "list":
            return _list(ray, names, namespace, args)
        return _end(ray, names, namespace, args)
    finally:
        ray.shutdown()


def _list(ray: Any, names: list[str], namespace: str, args: argparse.Namespace) -> int:
    rows = [_describe(ray, n, namespace) if args.details else {"name": n} for n in names]
    if args.json:
        print(json.dumps({"namespace": namespace, "instances": rows}, indent=2, default=str))
        return 0
    for row in rows:
        extra = ""
        if args.details:
            extra = (
                f"  error={row['error']}"
                if "error" in row
                else f"  node={row.get('node_id', '')[:12]} pid={row.get('pid')} "
                f"generation={row.get('generation')} running_tasks={row.get('running_tasks')}"
            )
        print(f"{row['name']}{extra}")
    print(f"{len(rows)} instance actor(s) in namespace '{namespace}'", file=sys.stderr)
    return 0


def _end(ray: Any, names: list[str], namespace: str, args: argparse.Namespace) -> int:
    from mail.cluster.warm_pool import end_instance

    chosen = names if args.all else list(args.names)
    unknown = [n for n in chosen if n not in names]
    if unknown:
        return _fail(f"no instance actor named {', '.join(unknown)} in namespace '{namespace}'")
    for name in chosen:
        try:
            end_instance(ray, namespace, name)
        except ValueError:  # ended meanwhile (reclaimed)
            pass
        print(f"ended {name}")
    print(f"{len(chosen)} instance actor(s) ended in namespace '{namespace}'", file=sys.stderr)
    if args.all:  # the warm pool too, or its directory would start hosts again
        from mail.cluster.warm_pool import end_pool

        warm = end_pool(ray, namespace)
        if warm:
            print(f"warm pool of namespace '{namespace}' ended", file=sys.stderr)
    return 0
