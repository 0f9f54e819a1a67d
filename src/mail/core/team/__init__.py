"""Team messaging for agents: reply waits, targeted broadcasts, threads, inboxes and files."""

from mail.core.team.service import TeamError, TeamService, TeamSettings
from mail.core.team.tool_specs import (
    TEAM_TOOL_GROUPS,
    TEAM_TOOL_NAMES,
    team_tool_specs,
    validate_team_tools,
)

__all__ = [
    "TEAM_TOOL_GROUPS",
    "TEAM_TOOL_NAMES",
    "TeamError",
    "TeamService",
    "TeamSettings",
    "team_tool_specs",
    "validate_team_tools",
]
