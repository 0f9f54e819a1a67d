"""Server logging off the event loop: records go through a queue to a writer thread.

With ``access_log = true`` uvicorn logs one line per request. Formatting the line (timestamp
included) and writing it to stderr happened in the event loop thread, and a write blocks when
the terminal or pipe reading stderr is slow. Here the loop only creates the record and puts it
on a queue; a background thread formats and writes it (``logging.handlers.QueueListener``).
"""

from __future__ import annotations

import atexit
import logging
import logging.handlers
import queue

FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


class _ServerQueueHandler(logging.handlers.QueueHandler):
    """Marks the root handler this module installed (so it is installed once)."""


def setup_server_logging(level: str | int = logging.INFO) -> None:
    """Log everything at ``level`` to stderr through a writer thread (idempotent).

    Like ``logging.basicConfig``, nothing is done when the root logger already has handlers
    (an application that configured logging keeps its own).
    """
    root = logging.getLogger()
    if root.handlers:
        return
    if isinstance(level, str):
        level = getattr(logging, level.upper(), logging.INFO)
    root.setLevel(level)
    records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    writer = logging.StreamHandler()  # stderr, resolved when written
    writer.setFormatter(logging.Formatter(FORMAT))
    listener = logging.handlers.QueueListener(records, writer, respect_handler_level=True)
    root.addHandler(_ServerQueueHandler(records))
    listener.start()
    atexit.register(listener.stop)  # flushes what is queued at exit
