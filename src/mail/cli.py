"""The `mail` command: a dispatch table over `mail.commands.*` modules."""

from __future__ import annotations

import argparse
import atexit
import contextlib
import importlib
import logging
import os
import sys
from collections.abc import Sequence

# (subcommand, module under mail.commands, one-line help)
COMMANDS: list[tuple[str, str, str]] = [
    ("server", "server", "run the MAIL HTTP server"),
    ("client", "client", "open an interactive client (REPL) against a MAIL server"),
    ("ping", "ping", "check that a MAIL server answers on /health"),
    ("version", "version", "print the implementation and protocol versions"),
    ("db-init", "db_init", "create or upgrade the tables used for persistence"),
    ("db-copy", "db_copy", "copy a server's stored data to another database"),
    ("db-prune", "db_prune", "remove expired finished tasks and give their space back"),
    ("register", "register", "register this program as the handler of swarm:// URLs"),
    ("keys", "keys", "manage the local API keys of the embedded auth mode"),
    ("cluster", "cluster", "list or end a cluster deployment's instance actors"),
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mail", description="MAIL: Multi-Agent Interface Layer")
    sub = parser.add_subparsers(dest="command")
    for name, module_name, help_text in COMMANDS:
        try:
            module = importlib.import_module(f"mail.commands.{module_name}")
        except ModuleNotFoundError:
            continue
        cmd = sub.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(cmd)
        cmd.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    run = getattr(args, "_run", None)
    if run is None:
        parser.print_help()
        return 0
    try:
        return int(run(args) or 0)
    except KeyboardInterrupt:
        return 130


def entry(argv: Sequence[str] | None = None) -> None:
    """The console script and ``python -m mail.cli``: run, then exit with the command's code."""
    code = main(argv)
    from mail.commands import exit_at_once

    if exit_at_once():
        atexit._run_exitfuncs()  # exporters and other exit hooks still flush
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":  # pragma: no cover
    entry()
