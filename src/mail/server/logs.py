"""Server logging off the event loop: records go through a queue to a writer thread.

With ``access_log = true`` uvicorn logs one line per request. Formatting the line (timestamp
included) and writing it to stderr happened in the event loop thread, and a write blocks when
the terminal or pipe reading stderr is slow. Here the loop only creates the record and puts it
on a queue; a background thread formats and writes what has queued up, in batches at most
``FLUSH_INTERVAL`` apart, so it wakes (and takes the interpreter lock) a few times a second
rather than once per request.
"""

from __future__ import annotations

import atexit
import logging
import logging.handlers
import queue
import threading
import time

FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
FLUSH_INTERVAL = 0.05  # seconds: the most a log line waits before it is written


class _ServerQueueHandler(logging.handlers.QueueHandler):
    """Marks the root handler this module installed (so it is installed once)."""


class _BatchWriter:
    """Drains the record queue into a handler in batches, from its own thread."""

    def __init__(self, records: queue.SimpleQueue[logging.LogRecord], handler: logging.Handler):
        self.records = records
        self.handler = handler
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mail-log-writer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            record = self.records.get()
            self._write(record)
            self._drain()
            time.sleep(FLUSH_INTERVAL)  # let lines accumulate; one wake-up per batch

    def _drain(self) -> None:
        while True:
            try:
                record = self.records.get_nowait()
            except queue.Empty:
                return
            self._write(record)

    def _write(self, record: logging.LogRecord) -> None:
        if record.levelno >= self.handler.level:
            self.handler.handle(record)

    def stop(self) -> None:
        self._stop.set()
        self._drain()
        self.handler.flush()


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
    stream = logging.StreamHandler()  # stderr, resolved when written
    stream.setFormatter(logging.Formatter(FORMAT))
    writer = _BatchWriter(records, stream)
    root.addHandler(_ServerQueueHandler(records))
    writer.start()
    atexit.register(writer.stop)  # writes what is still queued at exit
