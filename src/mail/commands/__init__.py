"""Subcommands of the `mail` CLI; each module has add_arguments(parser) and run(args) -> int."""

from __future__ import annotations

# Set by `mail server` after its graceful shutdown: `mail.cli.entry` then runs the exit hooks,
# flushes and exits without the interpreter's (seconds-long) teardown of the loaded SDKs.
_exit_at_once = False


def exit_at_once_when_done() -> None:
    global _exit_at_once
    _exit_at_once = True


def exit_at_once() -> bool:
    return _exit_at_once
