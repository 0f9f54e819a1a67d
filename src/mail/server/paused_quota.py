"""The per-caller bound on tasks that are paused or may pause
([server.settings] max_paused_tasks_per_caller), counted for ``POST /message`` (`messaging`).
"""

from __future__ import annotations

import time

from fastapi import HTTPException

from mail.server.instances import Instance
from mail.server.state import ServerState
from mail.server.stream_quota import RETRY_AFTER_SECONDS

# A claim only has to cover the moment between a request's checks and its submission into
# the runtime (after that the task's own state answers); a claim whose request vanished
# without releasing it (a stream that never started) stops counting after this long.
CLAIM_SECONDS = 30.0


def paused_tasks(inst: Instance) -> int:
    """Tasks of the instance waiting on a breakpoint resume or a review decision."""
    runtime = inst.swarm.runtime
    return sum(
        1
        for task_id, task in inst.swarm.get_all_tasks().items()
        if task_id != "*"
        and not task.is_running
        and (task.pending_reviews or runtime.pending_breakpoints(task_id))
    )


def open_tasks(inst: Instance, *, besides: str | None = None) -> int:
    """Tasks of the instance that are paused, running (any of them may pause next) or just
    claimed by a request that has not created them yet; `besides` is left out."""
    now = time.monotonic()
    held = inst.swarm.runtime.open_tasks.ids()  # not a scan of every task the caller ran
    held.update(t for t, at in inst.claimed_tasks.items() if now - at < CLAIM_SECONDS)
    if besides is not None:
        held.discard(besides)
    return len(held)


def check_paused_quota(state: ServerState, inst: Instance, task_id: str | None = None) -> None:
    """429 when the caller already holds `max_paused_tasks_per_caller` tasks that are paused
    or may still pause (running, or claimed by a request under way): each paused task keeps
    its histories and held calls in memory until it is resumed. Counting running ones too
    keeps concurrent new tasks from all pausing past the limit."""
    limit = state.config.settings.max_paused_tasks_per_caller
    if not limit:
        return
    held = open_tasks(inst, besides=task_id)
    if held >= limit:
        paused = paused_tasks(inst)
        raise HTTPException(
            429,
            f"you have {held} tasks running or paused ({paused} paused, waiting for a "
            f"breakpoint resume or a review), the most one caller may hold ([server.settings] "
            f"max_paused_tasks_per_caller = {limit}); wait for one to finish, or resume or "
            "answer a paused one, before starting another",
            headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
        )
