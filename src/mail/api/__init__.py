"""The Python API: actions, agent templates, swarm templates and running swarms."""

from mail.api.actions import MAILAction, action
from mail.api.agents import MAILAgent, MAILAgentTemplate
from mail.api.swarm import MAILSwarm
from mail.api.swarm_template import MAILSwarmTemplate

# v1.3's mail.api was one module, and the names it imported at module level were importable
# from it: its own mafia example wrote `from mail.api import MAILMessage, ...`, and code copied
# from there must keep working. They are the same objects as in their home modules.
from mail.core.actions import (  # noqa: F401
    ActionCore,
    ActionFunction,
    ActionOverrideFunction,
    current_step_id,
)
from mail.core.agents import AgentCore, AgentFunction  # noqa: F401
from mail.core.message import (  # noqa: F401
    MAILBroadcast,
    MAILInterswarmMessage,
    MAILMessage,
    MAILRequest,
    create_admin_address,
    create_agent_address,
    create_user_address,
)

# v1.3's mail.api module held the runtime class too (a swarm's runtime is `swarm.runtime`).
from mail.core.runtime import MAILRuntime  # noqa: F401
from mail.core.tasks import MAILTask  # noqa: F401
from mail.core.tools import MAIL_TOOL_NAMES, AgentToolCall, pydantic_model_to_tool  # noqa: F401
from mail.factories.base import MAILAgentFunction  # noqa: F401
from mail.lazy import lazy_exports

# v1.3's mail.api had SwarmRegistry too; loaded on first use (it brings aiohttp along).
__getattr__, __dir__ = lazy_exports(globals(), {"SwarmRegistry": "mail.net"})


__all__ = [
    "MAILAction",
    "MAILAgent",
    "MAILAgentTemplate",
    "MAILSwarm",
    "MAILSwarmTemplate",
    "action",
    "current_step_id",
]
