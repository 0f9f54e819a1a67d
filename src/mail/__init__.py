"""MAIL: the Multi-Agent Interface Layer (protocol, runtime, server, client)."""

import os as _os

# LiteLLM otherwise downloads a model price map at import time; we never need the network
# for that, and a closed network would stall every import.
_os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from mail.version import PROTOCOL_VERSION, __version__  # noqa: E402

__all__ = ["PROTOCOL_VERSION", "__version__"]
