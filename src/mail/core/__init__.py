"""The MAIL protocol core: messages, tools, tasks, and the runtime."""

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
from mail.core.tools import AgentToolCall

__all__ = [
    "MAIL_MESSAGE_TYPES",
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
    "MAILTask",
    "build_body_xml",
    "build_mail_xml",
    "create_address",
    "create_admin_address",
    "create_agent_address",
    "create_system_address",
    "create_user_address",
    "format_agent_address",
    "parse_agent_address",
]
