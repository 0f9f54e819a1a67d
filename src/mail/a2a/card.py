"""The swarm's A2A Agent Card (``GET /.well-known/agent-card.json``), built from its template.

Name, version, description and keywords come from ``GET /`` (``state.swarm_info()``); there is
one skill for the swarm as a whole (its default entrypoint) and one per other entrypoint agent
(addressed with an ``entrypoint`` data part). Two interfaces of A2A 1.0, both at
``<base_url>/a2a``: JSON-RPC (``POST /a2a``) first, the one a client picks when it can, and
HTTP+JSON (``/a2a/message:send``, ...); callers authenticate with the server's bearer API keys
(``mail keys``), as for ``/message``.
"""

from __future__ import annotations

from typing import Any

from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from a2a.utils.constants import PROTOCOL_VERSION_1_0, TransportProtocol

from mail.server.swarm_description import describe_swarm

A2A_PATH = "/a2a"
BEARER = "mailApiKey"
MODES = ["text/plain", "application/json"]


def build_agent_card(state: Any) -> AgentCard:
    info = state.swarm_info()
    described = describe_swarm(state.template, name=info["name"])
    entrypoint = info["entrypoint"]
    tags = [str(k) for k in info.get("keywords") or []] or ["mail"]
    skills = [
        AgentSkill(
            id=f"swarm:{info['name']}",
            name=info["name"],
            description=info["description"] or f"The MAIL swarm '{info['name']}' ({entrypoint})",
            tags=tags,
        )
    ]
    for agent in described["agents"]:
        if agent["enable_entrypoint"] and agent["name"] != entrypoint:
            skills.append(
                AgentSkill(
                    id=f"agent:{agent['name']}",
                    name=agent["name"],
                    description=(
                        f"Entrypoint agent '{agent['name']}' of swarm '{info['name']}' (send a "
                        f'data part {{"entrypoint": "{agent["name"]}"}} with the message)'
                    ),
                    tags=tags,
                )
            )
    base = str(state.config.base_url).rstrip("/")
    return AgentCard(
        name=info["name"],
        description=info["description"] or f"MAIL swarm '{info['name']}'",
        version=info["version"] or "0",
        supported_interfaces=[
            AgentInterface(
                url=base + A2A_PATH, protocol_binding=binding, protocol_version=PROTOCOL_VERSION_1_0
            )
            for binding in (TransportProtocol.JSONRPC.value, TransportProtocol.HTTP_JSON.value)
        ],
        capabilities=AgentCapabilities(
            streaming=True, push_notifications=getattr(state, "webhooks", None) is not None
        ),
        security_schemes={
            BEARER: SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(
                    scheme="bearer", description="A MAIL API key (`mail keys create`)"
                )
            )
        },
        security_requirements=[SecurityRequirement(schemes={BEARER: StringList(list=[])})],
        default_input_modes=MODES,
        default_output_modes=MODES,
        skills=skills,
    )
