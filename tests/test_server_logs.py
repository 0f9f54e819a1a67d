"""mail.server.logs: records are rendered off the loop thread, a batch is one write."""

from __future__ import annotations

import io
import logging
import queue
import time
from typing import Any

from mail.server.logs import (
    FORMAT,
    QuickAccessLogger,
    _BatchWriter,
    _ServerQueueHandler,
    _StampFormatter,
)


class CountingStream(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0
        self.flushes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)

    def flush(self) -> None:
        self.flushes += 1


def _logger(name: str, records: queue.SimpleQueue[Any]) -> logging.Logger:
    logger = logging.getLogger(name)
    logger.handlers[:] = [_ServerQueueHandler(records)]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    return logger


def test_plain_records_are_queued_unrendered_and_mutable_args_are_rendered_at_once() -> None:
    records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    logger = _logger("mail.test.logs.prepare", records)
    logger.info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:5", "POST", "/message", "1.1", 200)
    names = ["a"]
    logger.info("agents %s", names)
    names.append("b")  # changed after logging: the line must show the value at log time

    plain = records.get_nowait()
    assert plain.args == ("127.0.0.1:5", "POST", "/message", "1.1", 200)  # not rendered yet
    assert plain.getMessage() == '127.0.0.1:5 - "POST /message HTTP/1.1" 200'
    mutable = records.get_nowait()
    assert mutable.args is None and mutable.getMessage() == "agents ['a']"


def test_a_batch_is_rendered_and_written_once() -> None:
    stream = CountingStream()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter(FORMAT))
    handler.setLevel(logging.INFO)
    records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    logger = _logger("mail.test.logs.batch", records)
    for i in range(5):
        logger.info("line %d", i)
    logger.debug("not shown")  # below the logger's level: never queued
    logger.setLevel(logging.DEBUG)
    logger.debug("below the handler's level")
    writer = _BatchWriter(records, handler)

    writer._write(writer._drain())

    lines = stream.getvalue().splitlines()
    assert [line.split(": ", 1)[1] for line in lines] == [f"line {i}" for i in range(5)]
    assert all("INFO" in line and "mail.test.logs.batch" in line for line in lines)
    assert stream.writes == 1 and stream.flushes == 1


ACCESS_ARGS = ("127.0.0.1:5", "POST", "/message", "1.1", 200)


def _writer(stream: io.StringIO, records: queue.SimpleQueue[Any]) -> _BatchWriter:
    handler = logging.StreamHandler(stream)
    handler.setFormatter(_StampFormatter(FORMAT))
    return _BatchWriter(records, handler)


def test_the_stamp_formatter_writes_what_logging_writes() -> None:
    plain, stamped = logging.Formatter(FORMAT), _StampFormatter(FORMAT)
    base = time.time()
    for offset in (0.0, 0.0004, 0.9996, 1.0, 1.5, 61.25, 3600.999):
        record = logging.LogRecord("x.y", logging.WARNING, "", 0, "m %d", (1,), None)
        record.created = base + offset
        record.msecs = int((record.created - int(record.created)) * 1000) + 0.0
        assert stamped.format(record) == plain.format(record)


def test_a_quick_access_line_reads_as_the_logged_one() -> None:
    records: queue.SimpleQueue[Any] = queue.SimpleQueue()
    logger = _logger("mail.test.logs.quick", records)
    quick = QuickAccessLogger(logger, logger.handlers[0])  # type: ignore[arg-type]
    quick.info('%s - "%s %s HTTP/%s" %d', *ACCESS_ARGS)
    queued = records.get_nowait()
    assert isinstance(queued, tuple)  # no LogRecord was made on the caller's thread
    logger.info('%s - "%s %s HTTP/%s" %d', *ACCESS_ARGS)
    logged = records.get_nowait()
    assert isinstance(logged, logging.LogRecord)
    logged.created = queued[0]  # the same instant, so the two lines must be equal
    logged.msecs = int((logged.created - int(logged.created)) * 1000) + 0.0
    stream = io.StringIO()
    writer = _writer(stream, records)
    writer._write([queued, logged])
    first, second = stream.getvalue().splitlines()
    assert first == second
    assert first.endswith(
        ' INFO    mail.test.logs.quick: 127.0.0.1:5 - "POST /message HTTP/1.1" 200'
    )


def test_an_access_line_another_handler_would_see_takes_the_logging_path() -> None:
    records: queue.SimpleQueue[Any] = queue.SimpleQueue()
    logger = _logger("mail.test.logs.shared", records)
    quick = QuickAccessLogger(logger, logger.handlers[0])  # type: ignore[arg-type]
    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    extra = Keep()
    logger.addHandler(extra)
    try:
        quick.info('%s - "%s %s HTTP/%s" %d', *ACCESS_ARGS)
    finally:
        logger.removeHandler(extra)
    assert [r.getMessage() for r in seen] == ['127.0.0.1:5 - "POST /message HTTP/1.1" 200']
    assert isinstance(records.get_nowait(), logging.LogRecord)  # the server's log has it too

    logger.addFilter(lambda record: False)  # a filter on the logger: nothing is written
    try:
        quick.info('%s - "%s %s HTTP/%s" %d', *ACCESS_ARGS)
    finally:
        logger.filters.clear()
    assert records.empty()


def test_a_quick_access_line_respects_level_and_disabled() -> None:
    records: queue.SimpleQueue[Any] = queue.SimpleQueue()
    logger = _logger("mail.test.logs.level", records)
    quick = QuickAccessLogger(logger, logger.handlers[0])  # type: ignore[arg-type]
    logger.setLevel(logging.WARNING)
    quick.info("hidden %s", "a")
    logger.setLevel(logging.INFO)
    logger.disabled = True
    quick.info("hidden %s", "b")
    logger.disabled = False
    quick.info("shown %s", "c")
    assert isinstance(records.get_nowait(), tuple) and records.empty()
