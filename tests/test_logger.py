"""mail.utils.logger: one-time configuration of the `mail` logger tree."""

from __future__ import annotations

import logging
from pathlib import Path

from mail.utils import get_loggers, init_logger


def test_init_logger_writes_to_a_daily_file_and_is_idempotent(tmp_path: Path) -> None:
    root = logging.getLogger("mail")
    saved = (
        list(root.handlers),
        root.level,
        root.propagate,
        getattr(root, "_mail_configured", None),
    )
    root.handlers.clear()
    if hasattr(root, "_mail_configured"):
        del root._mail_configured  # type: ignore[attr-defined]
    try:
        init_logger(logging.INFO, log_dir=tmp_path, rich_console=False)
        handlers = len(root.handlers)
        init_logger(logging.DEBUG, log_dir=tmp_path, rich_console=False)
        assert len(root.handlers) == handlers  # no duplicate handlers
        assert root.level == logging.DEBUG
        logging.getLogger("mail.runtime").info("task %s completed", "t-1")
        for h in root.handlers:
            h.flush()
        text = (tmp_path / "mail.log").read_text(encoding="utf-8")
        assert "mail.runtime: task t-1 completed" in text
        assert "mail.runtime" in get_loggers()
    finally:
        for h in root.handlers:
            h.close()
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        root.propagate = saved[2]
        if saved[3] is None and hasattr(root, "_mail_configured"):
            del root._mail_configured  # type: ignore[attr-defined]
