"""Hand an A2A peer's answer to the MAIL instance whose task asked, as ``/interswarm/back``
does for a MAIL peer's answer (same trust checks: only a peer the task was sent to may answer)."""

from __future__ import annotations

import logging
from typing import Any

from mail.a2a.peer import Deliver

logger = logging.getLogger("mail.a2a")


def deliverer(state: Any) -> Deliver:
    async def deliver(envelope: dict[str, Any]) -> None:
        from mail.server.interswarm import _instance_for_back

        inst = await _instance_for_back(state, envelope)
        async with state.instances.lease(inst):
            inst.swarm.receive_interswarm_message(envelope, "back")

    return deliver
