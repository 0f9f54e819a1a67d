"""The MAIL protocol core: messages, tools, tasks, and the runtime."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mail.core.actions import ActionCore, ActionFunction, ActionOverrideFunction
from mail.core.agents import AgentCore, AgentFunction, AgentOutput
from mail.core.message import (
    MAIL_MESSAGE_TYPES,
    MAILAddress,
    MAILBroadcast,
    MAILInterrupt,
    MAILInterswarmMessage,
    MAILMessage,
    MAILRequest,
    MAILResponse,
    build_body_xml,
    build_mail_xml,
    create_address,
    create_admin_address,
    create_agent_address,
    create_system_address,
    create_user_address,
    format_agent_address,
    parse_agent_address,
)
from mail.core.tasks import MAILTask
from mail.core.tools import (
    MAIL_TOOL_NAMES,
    AgentToolCall,
    convert_call_to_mail_message,
    create_acknowledge_broadcast_tool,
    create_await_message_tool,
    create_broadcast_tool,
    create_help_tool,
    create_ignore_broadcast_tool,
    create_interrupt_tool,
    create_interswarm_broadcast_tool,
    create_mail_tools,
    create_request_tool,
    create_response_tool,
    create_supervisor_tools,
    create_swarm_discovery_tool,
    create_task_complete_tool,
    pydantic_model_to_tool,
)
from mail.lazy import lazy_exports

if TYPE_CHECKING:
    from mail.core.runtime import MAILRuntime

__all__ = [
    "MAIL_MESSAGE_TYPES",
    "MAIL_TOOL_NAMES",
    "ActionCore",
    "ActionFunction",
    "ActionOverrideFunction",
    "AgentCore",
    "AgentFunction",
    "AgentOutput",
    "AgentToolCall",
    "MAILAddress",
    "MAILBroadcast",
    "MAILInterrupt",
    "MAILInterswarmMessage",
    "MAILMessage",
    "MAILRequest",
    "MAILResponse",
    "MAILRuntime",
    "MAILTask",
    "build_body_xml",
    "build_mail_xml",
    "convert_call_to_mail_message",
    "create_acknowledge_broadcast_tool",
    "create_address",
    "create_admin_address",
    "create_agent_address",
    "create_await_message_tool",
    "create_broadcast_tool",
    "create_help_tool",
    "create_ignore_broadcast_tool",
    "create_interrupt_tool",
    "create_interswarm_broadcast_tool",
    "create_mail_tools",
    "create_request_tool",
    "create_response_tool",
    "create_supervisor_tools",
    "create_swarm_discovery_tool",
    "create_system_address",
    "create_task_complete_tool",
    "create_user_address",
    "format_agent_address",
    "parse_agent_address",
    "pydantic_model_to_tool",
]


__getattr__, __dir__ = lazy_exports(globals(), {"MAILRuntime": "mail.core.runtime"})
