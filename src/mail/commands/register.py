"""`mail register`: make `mail client` the handler of swarm:// links."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    del parser  # no options: the platform decides what is done


def run(args: argparse.Namespace) -> int:
    from mail.register import register_url_handler

    return register_url_handler()
