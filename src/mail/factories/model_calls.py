"""Where an agent function's model request goes: LiteLLM, or the offline demo model."""

from __future__ import annotations

from typing import Any

from mail.factories import demo_model
from mail.factories._litellm import load_litellm_async
from mail.telemetry.model_calls import observed


async def acompletion(**kwargs: Any) -> Any:
    """Chat Completions call (``litellm.acompletion`` semantics), measured (mail.telemetry)."""
    if demo_model.is_offline_model(kwargs.get("model")):
        return await observed("chat", demo_model.acompletion, kwargs)
    litellm = await load_litellm_async()
    return await observed("chat", litellm.acompletion, kwargs)


async def aresponses(**kwargs: Any) -> Any:
    """Responses call (``litellm.aresponses`` semantics), measured (mail.telemetry)."""
    if demo_model.is_offline_model(kwargs.get("model")):
        return await observed("responses", demo_model.aresponses, kwargs)
    litellm = await load_litellm_async()
    return await observed("responses", litellm.aresponses, kwargs)
