"""Context compression for manual steps, through LiteLLM with the offline demo model."""

from __future__ import annotations

import pytest

from mail.api.compression import SUMMARY_PREFIX, compress_history, estimate_tokens

pytestmark = pytest.mark.timeout(60)


def _long_history(turns: int = 40) -> list[dict[str, str]]:
    history = [{"role": "system", "content": "You are the narrator."}]
    for i in range(turns):
        history.append({"role": "user", "content": f"round {i}: " + "the village sleeps " * 50})
        history.append({"role": "assistant", "content": f"narration {i}"})
    return history


async def test_long_history_is_summarised_keeping_prompt_and_recent_turns() -> None:
    history = _long_history()
    before = estimate_tokens(history)
    tail = history[-4:]
    assert await compress_history(history, 0.001, "mail/demo") is True
    assert history[0] == {"role": "system", "content": "You are the narrator."}
    assert history[1]["role"] == "user" and history[1]["content"].startswith(SUMMARY_PREFIX)
    assert history[-4:] == tail
    assert len(history) == 6
    assert estimate_tokens(history) < before


async def test_history_within_budget_is_left_alone() -> None:
    history = _long_history(2)
    snapshot = [dict(h) for h in history]
    assert await compress_history(history, 0.9, "mail/demo") is False
    assert history == snapshot
    assert await compress_history(history, 0.0, "mail/demo") is False
