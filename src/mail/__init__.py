"""MAIL: the Multi-Agent Interface Layer (protocol, runtime, server, client)."""

from __future__ import annotations

import os as _os
from typing import TYPE_CHECKING

# LiteLLM otherwise downloads a model price map at import time; we never need the network
# for that, and a closed network would stall every import.
_os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from mail import launch as _launch  # noqa: E402
from mail.lazy import lazy_exports  # noqa: E402
from mail.version import PROTOCOL_VERSION, __version__  # noqa: E402

# MAILSwarmTemplate.start_server serves through this (api/ never imports the server).
_launch.install()

if TYPE_CHECKING:
    from mail.api import (
        MAILAction,
        MAILAgent,
        MAILAgentTemplate,
        MAILSwarm,
        MAILSwarmTemplate,
        action,
        current_step_id,
    )
    from mail.core.message import (
        MAILAddress,
        MAILBroadcast,
        MAILInterrupt,
        MAILInterswarmMessage,
        MAILMessage,
        MAILRequest,
        MAILResponse,
    )
    from mail.core.runtime import MAILRuntime
    from mail.core.tools import AgentToolCall

_EXPORTS: dict[str, str] = {
    "MAILAction": "mail.api",
    "MAILAgent": "mail.api",
    "MAILAgentTemplate": "mail.api",
    "MAILSwarm": "mail.api",
    "MAILSwarmTemplate": "mail.api",
    "action": "mail.api",
    "current_step_id": "mail.api",
    "MAILAddress": "mail.core.message",
    "MAILBroadcast": "mail.core.message",
    "MAILInterrupt": "mail.core.message",
    "MAILInterswarmMessage": "mail.core.message",
    "MAILMessage": "mail.core.message",
    "MAILRequest": "mail.core.message",
    "MAILResponse": "mail.core.message",
    "AgentToolCall": "mail.core.tools",
    "MAILRuntime": "mail.core.runtime",
}

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
    "MAILRuntime",
    "MAILSwarm",
    "MAILSwarmTemplate",
    "__version__",
    "action",
    "current_step_id",
]


__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
