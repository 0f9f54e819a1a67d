"""`mail client URL`: the interactive REPL against a MAIL server."""

from __future__ import annotations

import argparse
import logging
import os
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "url", help="server base URL, or a swarm://connect?server=HOST&token=KEY link"
    )
    parser.add_argument("-c", "--config", help="mail.toml to read [client] settings from")
    parser.add_argument("-ak", "--api-key", help="API key (overrides a swarm:// link's token)")
    parser.add_argument(
        "-t", "--timeout", type=float, help="seconds per request (default: [client].timeout)"
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", default=None, help="log every HTTP request"
    )


def _setup_logging(verbose: bool) -> None:
    from rich.logging import RichHandler

    level_name = os.environ.get("MAIL_LOG_LEVEL", "").upper()
    level = logging.getLevelName(level_name) if level_name else None
    if not isinstance(level, int):
        level = logging.INFO if verbose else logging.WARNING
    handler = RichHandler(show_path=False, markup=False, rich_tracebacks=False)
    root = logging.getLogger("mail")
    root.addHandler(handler)
    root.setLevel(level)


def run(args: argparse.Namespace) -> int:
    from mail.client_config import load_client_config
    from mail.swarm_url import resolve_target

    try:
        base_url, api_key = resolve_target(args.url, args.api_key)
    except ValueError as exc:
        print(f"✗ {exc}", file=sys.stderr)
        return 1
    try:
        config = load_client_config(args.config)
    except ValueError as exc:
        print(f"✗ {exc}", file=sys.stderr)
        return 1
    updates: dict[str, object] = {}
    if args.timeout is not None:
        if args.timeout <= 0:
            print("✗ --timeout must be a positive number of seconds", file=sys.stderr)
            return 1
        updates["timeout"] = args.timeout
    if args.verbose:
        updates["verbose"] = True
    config = config.model_copy(update=updates)
    _setup_logging(config.verbose)

    from mail.repl import run_repl

    return run_repl(base_url, api_key=api_key, config=config)
