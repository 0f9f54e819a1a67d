"""Lazy access to LiteLLM.

LiteLLM takes seconds to import and, unless told otherwise, downloads a model price map at
import time. Nothing in the server or CLI start-up path imports it; agent functions call
`load_litellm()` on their first model call.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
import types
import warnings
from typing import Any

logger = logging.getLogger("mail.factories")

_MCP_HANDLER_MODULE = "litellm.responses.mcp.litellm_proxy_mcp_handler"


def _install_mcp_gateway_stub() -> None:
    """Let `litellm.aresponses` run when the optional `mcp` package is not installed.

    LiteLLM's Responses entry point imports its MCP-gateway handler unconditionally, and that
    module needs `mcp`. MAIL never routes tools through LiteLLM's MCP gateway, so when `mcp` is
    missing we register a stand-in handler that always answers "no MCP tools here". When `mcp`
    is installed, LiteLLM's own module is used untouched.
    """
    if _MCP_HANDLER_MODULE in sys.modules or importlib.util.find_spec("mcp") is not None:
        return

    class _NoMCPGateway:
        @staticmethod
        def should_use_litellm_mcp_gateway(tools: Any = None) -> bool:
            for tool in tools or []:
                if isinstance(tool, dict) and tool.get("type") == "mcp":
                    raise RuntimeError(
                        "MCP tools need the optional 'mcp' package; install it to use them"
                    )
            return False

    stub = types.ModuleType(_MCP_HANDLER_MODULE)
    stub.LiteLLM_Proxy_MCP_Handler = _NoMCPGateway  # type: ignore[attr-defined]
    sys.modules[_MCP_HANDLER_MODULE] = stub
    logger.debug("optional 'mcp' package missing; LiteLLM MCP gateway disabled")


def load_litellm() -> Any:
    """Import and configure LiteLLM (idempotent)."""
    # Use the data files shipped with LiteLLM instead of downloading them on first use.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS", "True")
    _install_mcp_gateway_stub()
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
