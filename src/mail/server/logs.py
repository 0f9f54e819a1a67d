"""Server logging off the event loop: records go through a queue to a writer thread.

With ``access_log = true`` uvicorn logs one line per request. Formatting the line (timestamp
included) and writing it to stderr happened in the event loop thread, and a write blocks when
the terminal or pipe reading stderr is slow. Here the loop only creates the record and puts it
on a queue; a background thread formats what has queued up and writes it as one block, at most
``FLUSH_INTERVAL`` apart.

What it costs the loop, and why it is shaped this way (measured with ``bench/http.py``):

* the record goes on the queue as it is: ``QueueHandler.prepare`` would render the message
  and copy the record in the loop thread, which only matters when its arguments could change
  before the writer gets to them; records whose arguments are plain strings and numbers (the
  access log's) skip that, anything else is rendered at once as before;
* the writer makes one ``write`` and one ``flush`` per batch rather than per line: each is a
  system call that drops the interpreter lock, and taking it back makes the event loop thread
  hand it over, a forced switch per line that cost more than the line itself.
"""

from __future__ import annotations

import atexit
import logging
import logging.handlers
import queue
import sys
import threading
import time
from typing import Any

FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
FLUSH_INTERVAL = 0.05  # seconds: the most a log line waits before it is written

# Arguments that cannot change between the loop creating a record and the writer rendering it.
_IMMUTABLE_ARGS = (str, int, float, bool, bytes, type(None))


class _ServerQueueHandler(logging.handlers.QueueHandler):
    """The root handler this module installs (so it is installed once).

    Leaves rendering to the writer thread when that cannot change the line (see module doc).
    """

    def prepare(self, record: logging.LogRecord) -> Any:
        if record.exc_info is None and record.stack_info is None and _immutable(record.args):
            return record
        return super().prepare(record)


def _immutable(args: Any) -> bool:
    if args is None:
        return True
    if type(args) is not tuple:
        return False  # a mapping (``%(name)s`` formatting): render it now
    return all(isinstance(arg, _IMMUTABLE_ARGS) for arg in args)


class _BatchWriter:
    """Drains the record queue into a stream handler in batches, from its own thread."""

    def __init__(
        self, records: queue.SimpleQueue[logging.LogRecord], handler: logging.StreamHandler[Any]
    ):
        self.records = records
        self.handler = handler
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mail-log-writer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            first = self.records.get()
            self._write([first, *self._drain()])
            time.sleep(FLUSH_INTERVAL)  # let lines accumulate; one wake-up per batch

    def _drain(self) -> list[logging.LogRecord]:
        batch: list[logging.LogRecord] = []
        while True:
            try:
                batch.append(self.records.get_nowait())
            except queue.Empty:
                return batch

    def _write(self, batch: list[logging.LogRecord]) -> None:
        """Render the batch, then one write and one flush for all of it."""
        handler = self.handler
        lines: list[str] = []
        for record in batch:
            if record.levelno < handler.level or not handler.filter(record):
                continue
            try:
                lines.append(handler.format(record) + handler.terminator)
            except Exception:  # noqa: BLE001 - as logging does: report it, keep going
                handler.handleError(record)
        if not lines:
            return
        try:
            with handler.lock or _NO_LOCK:
                stream = handler.stream
                stream.write("".join(lines))
                stream.flush()
        except Exception:  # noqa: BLE001
            handler.handleError(batch[-1])

    def stop(self) -> None:
        self._stop.set()
        self._write(self._drain())
        self.handler.flush()


_NO_LOCK = threading.Lock()  # stands in for a handler without one (never the case in practice)


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
    stream = logging.StreamHandler(sys.stderr)
    stream.setFormatter(logging.Formatter(FORMAT))
    writer = _BatchWriter(records, stream)
    root.addHandler(_ServerQueueHandler(records))
    writer.start()
    atexit.register(writer.stop)  # writes what is still queued at exit
