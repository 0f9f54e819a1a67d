"""Hand an A2A peer's answer to the MAIL instance whose task asked, as ``/interswarm/back``
does for a MAIL peer's answer (same trust checks: only a peer the task was sent to may answer),
and its updates meanwhile, as progress events of that task."""

from __future__ import annotations

import logging
from typing import Any

from mail.a2a.peer import Deliver, Report

logger = logging.getLogger("mail.a2a")


def deliverer(state: Any) -> Deliver:
    async def deliver(envelope: dict[str, Any]) -> None:
        from mail.server.interswarm import _instance_for_back

        inst = await _instance_for_back(state, envelope)
        async with state.instances.lease(inst):
            inst.swarm.accept_interswarm_message(envelope, "back")

    return deliver


def reporter(state: Any) -> Report:
    """Record one update of the peer an envelope went to on the sending task (its instance is
    found as for the answer; the runtime checks the task was sent there and still runs)."""

    async def report(envelope: dict[str, Any], description: str, extra: dict[str, Any]) -> None:
        from mail.server.interswarm import _instance_for_back

        inst = await _instance_for_back(state, envelope)
        inst.swarm.receive_interswarm_progress(
            envelope["payload"]["task_id"], envelope["target_swarm"], description, extra
        )

    return report
