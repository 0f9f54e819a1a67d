"""Open event streams end with a closing frame as soon as the server starts to shut down.

On SIGINT/SIGTERM uvicorn stops accepting connections and waits for the open responses to
finish before the application's own shutdown. An SSE stream of a running task never finishes
on its own, so Ctrl+C waited out the whole grace period (10 s) and then cancelled the streams:
tracebacks in the log and clients cut off in the middle of a chunked body.

Each stream waits for its next event under a registered timeout scope; ``OpenStreams.close_all``
(run when the shutdown signal arrives) expires every such wait at once. The stream then sends
``event: resubscribe`` naming the last event id it carried (the event a reader that falls
behind gets; a client that handles it can attach again with ``GET /task/events``) and ends
cleanly. The tasks themselves are left to the application's shutdown.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import uvicorn

FinalEvent = Callable[[str | None], Any]


class OpenStreams:
    """The event streams one application is serving (see module doc)."""

    def __init__(self) -> None:
        self._waits: set[asyncio.Timeout] = set()
        self.closing = False

    def close_all(self) -> None:
        """End every stream at its current wait (and every stream that opens from now on)."""
        self.closing = True
        for wait in list(self._waits):
            wait.reschedule(0)  # a time already past: expires on the loop's next pass

    async def until_closing(
        self, events: AsyncIterator[Any], final_event: FinalEvent
    ) -> AsyncIterator[Any]:
        """``events`` until they end or the server closes; then ``final_event(last id)``."""
        source = aiter(events)
        last_id: str | None = None
        try:
            while not self.closing:
                try:
                    async with asyncio.timeout(None) as wait:
                        self._waits.add(wait)
                        try:
                            event = await anext(source)
                        finally:
                            self._waits.discard(wait)
                except StopAsyncIteration:
                    return
                except TimeoutError:
                    if not self.closing:
                        raise  # not ours: the source's own timeout
                    break
                event_id = (
                    event.get("id") if isinstance(event, dict) else getattr(event, "id", None)
                )
                if event_id is not None:
                    last_id = str(event_id)
                yield event
            yield final_event(last_id)
        finally:
            aclose = getattr(source, "aclose", None)
            if aclose is not None:
                try:
                    await aclose()
                except RuntimeError:
                    pass  # already closing


def closing_server(config: uvicorn.Config, streams: Callable[[], OpenStreams | None]) -> Any:
    """A ``uvicorn.Server`` that ends the open event streams when a shutdown signal arrives
    (``streams`` finds the application's registry once it has started)."""

    class _Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            super().handle_exit(sig, frame)
            registry = streams()
            if registry is None:
                return
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return  # not serving yet
            loop.call_soon_threadsafe(registry.close_all)

    return _Server(config)
