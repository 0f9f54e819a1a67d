"""v1.3's MAILSwarm methods for interswarm traffic and the database, over ours.

v1.3's server called ``load_agent_histories_from_db()`` / ``load_tasks_from_db()`` right after
``instantiate``; here an instance with a store restores everything when the store is attached
(`MAILSwarm.attach_store`; `mail server` attaches its store to every instance), so these only
attach one when the instance has none and DATABASE_URL names a database, as v1.3 read it.

The interswarm methods raise ValueError as v1.3's did: when interswarm is not running, and
for an envelope or a send that fails.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from mail.core.message import MAILInterswarmMessage, MAILMessage
    from mail.core.runtime import MAILRuntime

Direction = Literal["forward", "back"]


class V13SwarmMethods:
    """Mixed into MAILSwarm (which provides the attributes used here)."""

    name: str
    runtime: MAILRuntime
    enable_db_agent_histories: bool | None

    if TYPE_CHECKING:

        async def attach_store(self, store: Any, key: Any = None) -> int: ...

        def accept_interswarm_message(self, envelope: Any, direction: str = "forward") -> str: ...

    # ------------------------------------------------------------------ database
    async def load_agent_histories_from_db(self) -> None:
        """Restore stored tasks and agent histories (see the module docstring)."""
        await self._load_from_database()

    async def load_tasks_from_db(self) -> None:
        """Restore stored tasks, their events and answers (see the module docstring)."""
        await self._load_from_database()

    async def _load_from_database(self) -> None:
        if self.enable_db_agent_histories is False:
            return  # the swarm keeps its histories out of the database
        if getattr(self, "_store_observer", None) is not None:
            return  # restored when the store was attached
        from mail.store import create_store, database_url_from_env

        url = database_url_from_env()
        if url is None:
            return
        store = create_store(url)
        await store.start()
        self._owned_store: Any = store  # closed by MAILSwarm.shutdown
        await self.attach_store(store)

    # ------------------------------------------------------------------ interswarm
    def _router(self) -> Any:
        router = self.runtime.interswarm_router
        if router is None:
            raise ValueError("interswarm router not available")
        return router

    async def receive_interswarm_message(
        self, message: MAILInterswarmMessage, direction: Direction = "forward"
    ) -> str:
        """Take an envelope from another swarm (``/interswarm/forward`` or ``/back``);
        returns the task id (v1.3 returned None). `accept_interswarm_message` is the same
        without the coroutine and with our error types."""
        self._router()
        if direction not in ("forward", "back"):
            raise ValueError(f"invalid direction: {direction}")
        try:
            return self.accept_interswarm_message(message, direction)
        except Exception as exc:
            raise ValueError(f"error routing interswarm message: {exc}") from exc

    async def send_interswarm_message(
        self, message: MAILInterswarmMessage, direction: Direction = "forward"
    ) -> None:
        """POST an envelope to its target swarm's ``/interswarm/forward`` or ``/back``."""
        router = self._router()
        if direction not in ("forward", "back"):
            raise ValueError(f"invalid direction: {direction}")
        try:
            await router.send_interswarm(message, direction)
        except Exception as exc:
            raise ValueError(f"error sending interswarm message: {exc}") from exc

    async def post_interswarm_user_message(self, message: MAILInterswarmMessage) -> MAILMessage:
        """Send an envelope's request to its target swarm as a user message (the envelope's
        ``auth_token`` is the user's token); returns the remote swarm's answer."""
        result = await self._router().post_envelope_as_user_message(message)
        return result  # type: ignore[no-any-return]
