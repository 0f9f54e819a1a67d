"""Warm the model library after start-up so the first answer does not pay for its import.

LiteLLM takes seconds to import and to load what its first request needs. The server starts
without it (fast /health), then — shortly after it is serving, and only when the swarm has
agents on real models (the offline demo model needs no LiteLLM) — imports it in a background thread (``mail.factories._litellm``). The
event loop never waits for it: agent calls that arrive earlier await the same thread.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

logger = logging.getLogger("mail.server")

# Seconds between the end of the lifespan start-up and the warm-up: long enough for the
# server to bind and answer its first /health without sharing the interpreter with an import.
WARM_UP_DELAY = 0.2

_MODEL_FACTORY_MODULES = ("mail.factories", "mail.examples")


def uses_model_library(template: Any) -> bool:
    """Whether any agent of ``template`` is likely to call LiteLLM.

    Agents on the offline demo model (``mail/...``) never do: it answers in-process.
    """
    from mail.factories.demo_model import is_offline_model

    for agent in getattr(template, "agents", None) or []:
        params = getattr(agent, "agent_params", None) or {}
        llm = params.get("llm") if isinstance(params, dict) else None
        if isinstance(llm, str):
            if is_offline_model(llm):
                continue
            return True
        module = getattr(getattr(agent, "factory", None), "__module__", "") or ""
        if module.startswith(_MODEL_FACTORY_MODULES):
            return True
    return False


def schedule_warm_up(template: Any, delay: float = WARM_UP_DELAY) -> asyncio.TimerHandle | None:
    """Start the background import ``delay`` seconds from now if the swarm needs it."""
    if not uses_model_library(template):
        return None
    from mail.factories._litellm import litellm_ready, warm_litellm

    if litellm_ready():
        return None

    def start() -> None:
        logger.debug("warming up the model library in the background")
        warm_litellm()

    return asyncio.get_running_loop().call_later(delay, start)
