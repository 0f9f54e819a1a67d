"""mail.server.logs: records are rendered off the loop thread, a batch is one write."""

from __future__ import annotations

import io
import logging
import queue

from mail.server.logs import FORMAT, _BatchWriter, _ServerQueueHandler


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


def _logger(name: str, records: queue.SimpleQueue[logging.LogRecord]) -> logging.Logger:
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
