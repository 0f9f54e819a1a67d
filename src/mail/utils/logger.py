"""Logging setup for programs built on `mail` (the library itself only creates loggers)."""

from __future__ import annotations

import logging
import logging.handlers
from pathlib import Path

FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
NOISY_LOGGERS = ("LiteLLM", "litellm", "httpx", "httpcore", "asyncio", "aiohttp.access")


def get_loggers() -> list[str]:
    """Names of every logger created so far in this process."""
    return sorted(logging.root.manager.loggerDict)


def init_logger(
    level: int | str = logging.INFO,
    log_dir: str | Path | None = None,
    rich_console: bool = True,
) -> logging.Logger:
    """Configure the `mail` logger tree once; calling it again only changes the level."""
    root = logging.getLogger("mail")
    root.setLevel(level)
    if getattr(root, "_mail_configured", False):
        return root
    handler: logging.Handler
    if rich_console:
        try:
            from rich.logging import RichHandler

            handler = RichHandler(show_path=False, rich_tracebacks=False)
            handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        except ImportError:  # pragma: no cover - rich is a dependency
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter(FORMAT))
    else:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter(FORMAT))
    root.addHandler(handler)
    if log_dir is not None:
        directory = Path(log_dir)
        directory.mkdir(parents=True, exist_ok=True)
        file_handler = logging.handlers.TimedRotatingFileHandler(
            directory / "mail.log", when="midnight", backupCount=14, encoding="utf-8"
        )
        file_handler.setFormatter(logging.Formatter(FORMAT))
        root.addHandler(file_handler)
    root.propagate = False
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    root._mail_configured = True  # type: ignore[attr-defined]
    return root
