"""Lazy access to LiteLLM.

LiteLLM takes seconds to import and, unless told otherwise, downloads a model price map at
import time. Nothing in the server or CLI start-up path imports it; agent functions call
`load_litellm()` on their first model call.
"""

from __future__ import annotations

import logging
import os
import warnings
from typing import Any

logger = logging.getLogger("mail.factories")


def load_litellm() -> Any:
    """Import and configure LiteLLM (idempotent)."""
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
    return litellm


def supports_reasoning(model: str) -> bool:
    litellm = load_litellm()
    try:
        return bool(litellm.supports_reasoning(model=model))
    except Exception:
        # Unknown models (custom providers, proxies with aliases) are treated as plain models.
        return False
