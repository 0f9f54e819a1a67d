"""`mail keys`: manage the API keys of the embedded (local) auth mode."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


def _file_options(parser: argparse.ArgumentParser, default: object = None) -> None:
    """Where the keys are: given before the subcommand or after it (SUPPRESS: a subcommand
    that is not given them keeps what came before it)."""
    parser.add_argument(
        "-c", "--config", default=default, help="path to mail.toml (default: the usual search)"
    )
    parser.add_argument(
        "--keys-file", default=default, help="key file to use (overrides the config)"
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    _file_options(parser)
    sub = parser.add_subparsers(dest="keys_command", metavar="{create,list,revoke}")
    create = sub.add_parser("create", help="create a key and print it once")
    create.add_argument("--role", required=True, choices=("admin", "user", "agent"))
    create.add_argument(
        "--id", dest="key_id", help="caller id bound to the key (default: generated)"
    )
    create.add_argument(
        "--swarm",
        help="agent keys: the remote swarm this key speaks for; its /interswarm calls for "
        "any other swarm are refused (403)",
    )
    create.add_argument(
        "--key",
        help="use this secret instead of a generated one (random, at least 24 characters; "
        "for scripted setups)",
    )
    create.add_argument("--json", action="store_true", help="print a JSON object instead of text")
    lst = sub.add_parser("list", help="list keys (no secrets)")
    lst.add_argument("--json", action="store_true", help="print JSON")
    revoke = sub.add_parser("revoke", help="delete keys by id, full key or prefix")
    revoke.add_argument("target", metavar="ID|PREFIX")
    revoke.add_argument(
        "--role",
        choices=("admin", "user", "agent"),
        help="only keys of this role (required when the id has keys of several roles)",
    )
    for command in (create, lst, revoke):
        _file_options(command, argparse.SUPPRESS)


def _keys_path(args: argparse.Namespace) -> Path:
    if args.keys_file:
        return Path(args.keys_file)
    from mail.config import load_config

    if args.config:
        os.environ["MAIL_CONFIG_PATH"] = args.config
    return load_config(args.config).server.keys_file_path()


def _error(message: str) -> int:
    print(f"mail keys: error: {message}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    from mail.config import ConfigError
    from mail.server import keystore

    command = getattr(args, "keys_command", None)
    if command is None:
        return _error("choose a subcommand: create, list or revoke")
    try:
        path = _keys_path(args)
        if command == "create":
            secret, record = keystore.create_key(
                path, args.role, args.key_id, key=args.key, swarm=args.swarm
            )
            if args.json:
                print(json.dumps({**record.public_dict(), "key": secret, "keys_file": str(path)}))
            else:
                bound = f" (acts only for swarm '{record.swarm}')" if record.swarm else ""
                print(f"Created {record.role} key for id '{record.id}'{bound} in {path}.")
                print("This is the only time the key is shown; store it now:")
                print(secret)
            return 0
        if command == "list":
            records = keystore.read_records(path)
            if args.json:
                print(json.dumps(keystore.records_as_json(records)))
            elif not records:
                print(f"No keys in {path}.")
            else:
                print(f"{'ID':<24} {'ROLE':<6} {'PREFIX':<14} {'CREATED':<26} SWARM")
                for r in records:
                    print(
                        f"{r.id:<24} {r.role:<6} {r.prefix + '…':<14} {r.created_at:<26} "
                        f"{r.swarm or '-'}"
                    )
            return 0
        if command == "revoke":
            removed = keystore.revoke_keys(path, args.target, role=args.role)
            if not removed:
                role = f" of role {args.role}" if args.role else ""
                return _error(f"no key{role} matches '{args.target}' in {path}")
            for r in removed:
                print(f"Revoked {r.role} key '{r.id}' ({r.prefix}…).")
            print(f"{len(removed)} key(s) revoked.")
            return 0
    except (keystore.KeyStoreError, ConfigError) as exc:
        return _error(str(exc))
    return _error(f"unknown subcommand '{command}'")
