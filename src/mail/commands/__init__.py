"""Subcommands of the `mail` CLI; each module has add_arguments(parser) and run(args) -> int."""

from __future__ import annotations

# Set by a command whose process should end without the interpreter's teardown once it is done:
# `mail server` after its graceful shutdown. Tearing down the modules of the model library and
# the SDKs a server loaded took seconds of CPU (15 s and more on a loaded machine) after the
# server had logged that it stopped. `mail.cli.entry` runs the exit hooks, flushes and exits.
_exit_at_once = False


def exit_at_once_when_done() -> None:
    global _exit_at_once
    _exit_at_once = True


def exit_at_once() -> bool:
    return _exit_at_once
