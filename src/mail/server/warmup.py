"""Warm the model library after start-up so the first answer does not pay for its import.

LiteLLM takes seconds to import and to load what its first request needs. The server starts
without it (fast /health), then — shortly after it is serving, and only when the swarm has
agents on real models (the offline demo model needs no LiteLLM) — imports it in a background thread (``mail.factories._litellm``). The
event loop never waits for it: agent calls that arrive earlier await the same thread.
"""

from __future__ import annotations

import asyncio
import logging
import os
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
        warm_litellm().add_done_callback(lambda _done: warn_missing_keys(template))

    return asyncio.get_running_loop().call_later(delay, start)


def missing_key_warnings(template: Any) -> list[str]:
    """One line per agent whose model cannot be called for lack of a key or proxy URL.

    Agents with their own ``api_key`` or ``api_base`` are left alone (a local model server
    needs no key). Reads LiteLLM's list of the variables each provider needs.
    """
    from mail.factories._litellm import missing_provider_keys
    from mail.factories.demo_model import is_offline_model

    lines: list[str] = []
    for agent in getattr(template, "agents", None) or []:
        params = getattr(agent, "agent_params", None) or {}
        llm = params.get("llm") if isinstance(params, dict) else None
        if not isinstance(llm, str) or is_offline_model(llm):
            continue
        if params.get("api_key") or params.get("api_base"):
            continue
        if params.get("use_proxy", True):
            if not os.environ.get("LITELLM_PROXY_API_BASE"):
                lines.append(
                    f"agent '{agent.name}' calls {llm} through a LiteLLM proxy (use_proxy) but "
                    "LITELLM_PROXY_API_BASE is not set: set it, or use_proxy: false"
                )
            continue
        missing = missing_provider_keys(llm)
        if missing:
            lines.append(
                f"agent '{agent.name}' uses {llm} but {', '.join(missing)} is not set: its "
                "calls will fail until you set it and restart the server"
            )
    return lines


def warn_missing_keys(template: Any) -> None:
    try:
        for line in missing_key_warnings(template):
            logger.warning("%s", line)
    except Exception:  # noqa: BLE001 - a check must never take the server down
        logger.debug("provider key check failed", exc_info=True)
