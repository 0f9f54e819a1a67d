"""The scripted LLM (``support.scripted_llm``) on an event loop of its own thread.

For module-scoped servers: a test module starts one model server and one `mail server` and
shares them between its tests, whatever event loop each test runs on. ``queue`` and the
recorded ``requests`` are the scripted server's, reached safely from the test's thread.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future
from typing import Any

from support.scripted_llm import ScriptedLLM, ScriptedRequest


class ThreadedLLM:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.llm = ScriptedLLM()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> ThreadedLLM:
        self._thread.start()
        self._call(self.llm.__aenter__())
        return self

    def __exit__(self, *exc: object) -> None:
        self._call(self.llm.__aexit__(None, None, None))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    @property
    def base_url(self) -> str:
        return self.llm.base_url

    def queue(self, *parts: Any, **options: Any) -> None:
        done: Future[None] = Future()

        def add() -> None:
            self.llm.queue(*parts, **options)
            done.set_result(None)

        self.loop.call_soon_threadsafe(add)
        done.result(10)

    def requests(self, token: str | None = None) -> list[ScriptedRequest]:
        """The model calls so far (those whose messages mention `token`)."""
        found = list(self.llm.requests)
        return [r for r in found if token is None or mentions(r, token)]


def mentions(request: ScriptedRequest, token: str) -> bool:
    return token in str(request.body)
