"""Lazy access to LiteLLM, imported off the event loop."""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import logging
import os
import threading
import warnings
from typing import Any

logger = logging.getLogger("mail.factories")

_lock = threading.Lock()
_warming: concurrent.futures.Future[Any] | None = None
_module: Any = None

# Modules LiteLLM imports lazily on its first real request (provider clients, tokenizer data,
# streaming helpers). Loading them in the warm-up thread keeps that work off the event loop.
_FIRST_CALL_MODULES = (
    "anyio._backends._asyncio",
    "anyio.streams.memory",
    "openai",
    "litellm.litellm_core_utils.default_encoding",
    "litellm.litellm_core_utils.streaming_handler",
    "litellm.llms.openai.openai",
    "litellm.llms.openai.chat.gpt_transformation",
    "litellm.llms.openai.responses.transformation",
    "litellm.responses.main",
    "litellm.proxy._types",
)


def load_litellm() -> Any:
    """Import and configure LiteLLM (idempotent). Blocks: not for the event loop."""
    global _module
    if _module is not None:
        return _module
    # Use the data files shipped with LiteLLM instead of downloading them on first use.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS", "True")
    # LiteLLM's own usage objects trip a pydantic serializer warning on streamed responses.
    warnings.filterwarnings("ignore", message="Pydantic serializer warnings", category=UserWarning)
    warnings.filterwarnings("ignore", message=".*`ReadOnly` qualifier", category=UserWarning)
    import litellm

    # Unsupported optional parameters (e.g. reasoning_effort on a non-reasoning model) are
    # dropped instead of failing the request, as the reference implementation does.
    litellm.drop_params = True
    litellm.suppress_debug_info = True
    if not os.environ.get("LITELLM_LOG"):
        # LiteLLM logs two INFO lines per call on its own handler (and again through ours),
        # including the warm-up's mocked calls; LITELLM_LOG=INFO (or DEBUG) brings them back.
        for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy"):
            logging.getLogger(name).setLevel(logging.WARNING)
    _module = litellm
    return litellm


def litellm_ready() -> bool:
    """True once LiteLLM is imported (``load_litellm()`` is then instant)."""
    return _module is not None


def warm_litellm() -> concurrent.futures.Future[Any]:
    """Import LiteLLM and load its first-call modules in a background thread (once).

    Returns a future of the module. Never blocks; safe to call from the event loop.
    """
    global _warming
    with _lock:
        if _warming is None:
            _warming = concurrent.futures.Future()
            thread = threading.Thread(
                target=_warm, args=(_warming,), name="mail-litellm-warm-up", daemon=True
            )
            thread.start()
        return _warming


async def load_litellm_async() -> Any:
    """The LiteLLM module, imported in a thread if needed; never blocks the event loop."""
    if _module is not None:
        return _module
    return await asyncio.wrap_future(warm_litellm())


def _warm(future: concurrent.futures.Future[Any]) -> None:
    try:
        litellm = load_litellm()
    except BaseException as exc:  # noqa: BLE001 - reported to whoever awaits the module
        future.set_exception(exc)
        return
    future.set_result(litellm)  # callers may go on; the rest only saves them time
    for name in _FIRST_CALL_MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - other LiteLLM versions lay modules out differently
            logger.debug("warm-up: could not import %s", name, exc_info=True)
    try:
        _offline_calls(litellm)
    except Exception:  # noqa: BLE001 - a warm-up must never fail anything
        logger.debug("warm-up calls failed", exc_info=True)


def _offline_calls(litellm: Any) -> None:
    """Mocked completions (no network): load the request and streaming code paths."""
    kwargs = {
        "model": "openai/gpt-4o-mini",
        "messages": [{"role": "user", "content": "warm-up"}],
        "mock_response": "ok",
        "api_key": "warm-up",
    }
    litellm.completion(**kwargs)
    for _chunk in litellm.completion(stream=True, **kwargs):
        pass


def supports_reasoning(model: str) -> bool:
    if model.startswith("mail/"):
        return False  # the offline demo model: no reasoning, and no LiteLLM import for it
    litellm = load_litellm()
    try:
        return bool(litellm.supports_reasoning(model=model))
    except Exception:
        # Unknown models (custom providers, proxies with aliases) are treated as plain models.
        return False


def missing_provider_keys(model: str) -> list[str]:
    """Environment variables ``model``'s provider needs that are not set (LiteLLM's own list).

    Empty when nothing is missing or LiteLLM does not know what the provider needs.
    """
    if model.startswith("mail/"):
        return []
    litellm = load_litellm()
    try:
        report = litellm.validate_environment(model=model)
    except Exception:  # noqa: BLE001 - an unknown provider: nothing we can name
        return []
    return [str(k) for k in (report or {}).get("missing_keys") or []]


def provider_key_variable(model: str) -> str | None:
    """The usual key variable of ``model``'s provider (``openai/...`` -> ``OPENAI_API_KEY``)."""
    provider = model.split("/", 1)[0] if "/" in model else ""
    if not provider or provider == "mail":
        return None
    return f"{provider.upper().replace('-', '_')}_API_KEY"
