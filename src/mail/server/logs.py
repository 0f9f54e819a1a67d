"""Server logging off the event loop: records go through a queue to a writer thread."""

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
FLUSH_INTERVAL = 0.25  # seconds: the most a log line waits before it is written

# Arguments that cannot change between the loop creating a record and the writer rendering it.
_IMMUTABLE_ARGS = (str, int, float, bool, bytes, type(None))

# An access line queued without a record: (time.time(), logger name, format, arguments).
AccessLine = tuple[float, str, str, tuple[Any, ...]]
Queued = logging.LogRecord | AccessLine


class _StampFormatter(logging.Formatter):
    """``logging.Formatter`` whose default timestamp text is computed once per second."""

    _second = -1
    _text = ""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        if datefmt is not None or self.datefmt is not None:
            return super().formatTime(record, datefmt)
        return self.stamp(record.created, record.msecs)

    def stamp(self, created: float, msecs: float) -> str:
        second = int(created)
        if second != self._second:
            self._text = time.strftime(self.default_time_format, self.converter(created))
            self._second = second
        return f"{self._text},{int(msecs):03d}"  # logging's default_msec_format


class QuickAccessLogger:
    """Stands in for ``logging.getLogger("uvicorn.access")`` in the server's HTTP protocol.

    ``info`` queues the line for the writer when the logger's records would reach the
    server's queue handler and nothing else; otherwise it is the logger's own ``info``.
    """

    def __init__(self, logger: logging.Logger, handler: _ServerQueueHandler) -> None:
        self.logger = logger
        self.handler = handler

    def hasHandlers(self) -> bool:  # noqa: N802 - logging's spelling
        return self.logger.hasHandlers()

    def _only_to_handler(self) -> bool:
        logger: logging.Logger | None = self.logger
        if self.logger.disabled or self.logger.filters or self.handler.filters:
            return False
        reached = 0
        while logger is not None:
            for handler in logger.handlers:
                if handler is not self.handler:
                    return False
                reached += 1
            if not logger.propagate:
                break
            logger = logger.parent
        return reached == 1

    def info(self, msg: str, *args: Any) -> None:
        if (
            self.logger.isEnabledFor(logging.INFO)
            and self._only_to_handler()
            and self.handler.level <= logging.INFO
            and _immutable(args)
        ):
            self.handler.queue.put_nowait((time.time(), self.logger.name, msg, args))
        else:
            self.logger.info(msg, *args)


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

    def __init__(self, records: queue.SimpleQueue[Queued], handler: logging.StreamHandler[Any]):
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

    def _drain(self) -> list[Queued]:
        batch: list[Queued] = []
        while True:
            try:
                batch.append(self.records.get_nowait())
            except queue.Empty:
                return batch

    def _write(self, batch: list[Queued]) -> None:
        """Render the batch, then one write and one flush for all of it."""
        handler = self.handler
        formatter = handler.formatter
        quick = isinstance(formatter, _StampFormatter) and formatter._fmt == FORMAT
        lines: list[str] = []
        for item in batch:
            if isinstance(item, tuple):
                if quick and handler.level <= logging.INFO and not handler.filters:
                    assert isinstance(formatter, _StampFormatter)
                    created, name, msg, args = item
                    stamp = formatter.stamp(created, _msecs(created))
                    lines.append(f"{stamp} INFO    {name}: {msg % args}{handler.terminator}")
                    continue
                item = _access_record(item)
            record = item
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
            last = batch[-1]
            handler.handleError(
                last if isinstance(last, logging.LogRecord) else _access_record(last)
            )

    def stop(self) -> None:
        self._stop.set()
        self._write(self._drain())
        self.handler.flush()


def _access_record(line: AccessLine) -> logging.LogRecord:
    created, name, msg, args = line
    record = logging.LogRecord(name, logging.INFO, "", 0, msg, args, None)
    record.created = created
    record.msecs = _msecs(created)
    return record


def _msecs(created: float) -> float:
    """``LogRecord.msecs`` of a record made at ``created``."""
    return int((created - int(created)) * 1000) + 0.0


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
    records: queue.SimpleQueue[Queued] = queue.SimpleQueue()
    stream = logging.StreamHandler(sys.stderr)
    stream.setFormatter(_StampFormatter(FORMAT))
    writer = _BatchWriter(records, stream)
    root.addHandler(_ServerQueueHandler(records))
    writer.start()
    atexit.register(writer.stop)  # writes what is still queued at exit


def quick_access_logger(logger: logging.Logger) -> logging.Logger | QuickAccessLogger:
    """The access logger a server connection should use: the quick one when the server's
    logging (``setup_server_logging``) is installed, else ``logger`` itself."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, _ServerQueueHandler):
            return QuickAccessLogger(logger, handler)
    return logger
