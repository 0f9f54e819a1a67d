"""The interactive client behind `mail client URL`."""

from mail.repl.session import MAILREPL, run_repl

__all__ = ["MAILREPL", "run_repl"]
