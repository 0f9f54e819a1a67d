"""Open event streams: a caller's share of them (a slot each), and their closing frame as
soon as the server starts to shut down."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fastapi import HTTPException

from mail.server.stream_buffer import BoundedFrameQueue

if TYPE_CHECKING:
    from mail.config import ServerConfig

FinalEvent = Callable[[str | None], Any]


class OpenStreams:
    """The event streams one application is serving (see module doc)."""

    def __init__(self) -> None:
        self._streams: dict[BoundedFrameQueue, FinalEvent] = {}
        self.closing = False

    def close_all(self) -> None:
        """End every stream at its current wait (and every stream that opens from now on)."""
        self.closing = True
        for queue, final_event in list(self._streams.items()):
            queue.end_now(final_event)

    def add(self, queue: BoundedFrameQueue, final_event: FinalEvent) -> None:
        """Serve ``queue`` until :meth:`discard`; ended at once if the server is closing."""
        if self.closing:
            queue.end_now(final_event)
        else:
            self._streams[queue] = final_event

    def discard(self, queue: BoundedFrameQueue) -> None:
        self._streams.pop(queue, None)


# Seconds an idle kept-alive connection stays open. Longer than the pooled clients' own
# expiry (httpx 5 s, aiohttp 15 s), so a client never sends on a connection the server is
# closing at the same moment (uvicorn's 5 s matched httpx's, and a loaded server reset
# requests that way).
KEEP_ALIVE_SECONDS = 30


def closing_server(app: Any, config: ServerConfig, **options: Any) -> Any:
    """A ``uvicorn.Server`` for a MAIL ``app`` on ``config``'s host and port that ends the open
    event streams when a shutdown signal arrives.
    """
    import uvicorn

    from mail.server.http_protocol import http_protocol

    class _Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            super().handle_exit(sig, frame)
            # The application's registry exists once it has started.
            registry: OpenStreams | None = getattr(
                getattr(app.state, "mail", None), "open_streams", None
            )
            if registry is None:
                return
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return  # not serving yet
            loop.call_soon_threadsafe(registry.close_all)

    return _Server(
        uvicorn.Config(
            app,
            host=config.host,
            port=config.port,
            log_config=None,
            access_log=config.access_log,
            http=http_protocol(
                config.settings.request_head_timeout,
                config.settings.max_connections,
                config.settings.request_body_timeout,
            ),
            ws="none",
            timeout_keep_alive=KEEP_ALIVE_SECONDS,
            **options,
        )
    )


class StreamSlot:
    """One caller's hold on one event stream; `release` is idempotent."""

    def __init__(self, open_: dict[tuple[str, str], int], owner: tuple[str, str]) -> None:
        self._open, self._owner, self._held = open_, owner, True

    def release(self) -> None:
        if self._held:
            self._held = False
            left = self._open.pop(self._owner, 1) - 1
            if left > 0:
                self._open[self._owner] = left


class StreamSlots:
    """Event streams one caller holds open: every SSE response takes a slot before anything
    starts and gives it back however it ends; 429 at `max_event_streams_per_caller`."""

    def __init__(self, limit: int) -> None:
        self.limit = limit  # 0 = no bound
        self._open: dict[tuple[str, str], int] = {}

    def acquire(self, role: str, caller_id: str) -> StreamSlot:
        owner = (role, caller_id)
        held = self._open.get(owner, 0)
        if self.limit and held >= self.limit:
            raise HTTPException(
                429,
                f"you already have {held} event streams open, the most one caller may hold "
                f"([server.settings] max_event_streams_per_caller = {self.limit}); close one "
                "or retry later",
                headers={"Retry-After": "5"},
            )
        self._open[owner] = held + 1
        return StreamSlot(self._open, owner)
