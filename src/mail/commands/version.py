"""`mail version`."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    del parser  # no options


def run(args: argparse.Namespace) -> int:
    from mail.version import PROTOCOL_VERSION, __version__

    print(f"mail (an independent implementation of MAIL) version: {__version__}")
    print(f"MAIL protocol version: {PROTOCOL_VERSION}")
    print(
        "Implementation versions x.y.z implement protocol version x.y; "
        "patch releases never change the protocol."
    )
    return 0
