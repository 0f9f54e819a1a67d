"""MAIL: the Multi-Agent Interface Layer (protocol, runtime, server, client)."""

import os as _os

# LiteLLM otherwise downloads a model price map at import time; we never need the network
# for that, and a closed network would stall every import.
_os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from mail.api import (  # noqa: E402
    MAILAction,
    MAILAgent,
    MAILAgentTemplate,
    MAILSwarm,
    MAILSwarmTemplate,
    action,
)
from mail.core.message import (  # noqa: E402
    MAILAddress,
    MAILBroadcast,
    MAILInterrupt,
    MAILInterswarmMessage,
    MAILMessage,
    MAILRequest,
    MAILResponse,
)
from mail.core.tools import AgentToolCall  # noqa: E402
from mail.version import PROTOCOL_VERSION, __version__  # noqa: E402

__all__ = [
    "PROTOCOL_VERSION",
    "AgentToolCall",
    "MAILAction",
    "MAILAddress",
    "MAILAgent",
    "MAILAgentTemplate",
    "MAILBroadcast",
    "MAILInterrupt",
    "MAILInterswarmMessage",
    "MAILMessage",
    "MAILRequest",
    "MAILResponse",
    "MAILSwarm",
    "MAILSwarmTemplate",
    "__version__",
    "action",
]
