"""Context compression for manual steps (`manual_step(..., dynamic_ctx_ratio=r, _llm=model)`)."""

from __future__ import annotations

import json
import logging
from typing import Any

logger = logging.getLogger("mail.api")

KEEP_RECENT = 4
CHARS_PER_TOKEN = 4
DEFAULT_CONTEXT = 128_000
SUMMARY_PREFIX = "[COMPRESSED CONTEXT FROM EARLIER IN CONVERSATION]"
SUMMARY_INSTRUCTIONS = (
    "Summarise the conversation below for the agent that lived it. Keep every fact, "
    "decision, name, number and open question it will need to continue; drop small talk. "
    "Write in the second person, as notes to that agent."
)


def estimate_tokens(history: list[dict[str, Any]]) -> int:
    return sum(len(json.dumps(item, default=str)) for item in history) // CHARS_PER_TOKEN


def context_window(model: str) -> int:
    if model.startswith("mail/"):
        return DEFAULT_CONTEXT  # the offline demo model; LiteLLM knows nothing of it
    try:
        import litellm

        info = litellm.get_model_info(model)
        window = info.get("max_input_tokens") or info.get("max_tokens")
        if window:
            return int(window)
    except Exception:  # noqa: BLE001 - unknown models fall back to a common window size
        pass
    return DEFAULT_CONTEXT


def _split_point(history: list[dict[str, Any]], start: int) -> int:
    """Index where the kept tail begins: at least KEEP_RECENT entries, on a user turn."""
    cut = max(start, len(history) - KEEP_RECENT)
    while cut > start and history[cut].get("role") != "user":
        cut -= 1
    return cut


async def compress_history(history: list[dict[str, Any]], ratio: float, model: str) -> bool:
    """Summarise the older part of `history` in place when it exceeds the budget.

    Returns True when the history was compressed.
    """
    if ratio <= 0 or not history:
        return False
    from mail.factories import model_calls
    from mail.telemetry.usage import field_of

    if not model.startswith("mail/"):
        from mail.factories._litellm import load_litellm_async

        await load_litellm_async()  # context_window imports it: do that off the event loop
    budget = ratio * context_window(model)
    if estimate_tokens(history) <= budget:
        return False
    start = 1 if history[0].get("role") == "system" else 0
    cut = _split_point(history, start)
    if cut <= start:
        return False
    older = history[start:cut]
    transcript = "\n".join(json.dumps(item, default=str) for item in older)
    reply = await model_calls.acompletion(
        model=model,
        messages=[
            {"role": "system", "content": SUMMARY_INSTRUCTIONS},
            {"role": "user", "content": transcript},
        ],
    )
    message = field_of(field_of(reply, "choices")[0], "message")
    summary = field_of(message, "content") or ""
    history[start:cut] = [{"role": "user", "content": f"{SUMMARY_PREFIX}\n\n{summary}"}]
    logger.info("compressed %d history entries into a summary (%d chars)", len(older), len(summary))
    return True
