"""swarms.json: loading, validation and defaults for swarm definitions.

The documented entry points live in ``mail.swarms_json.utils``; they are
re-exported here for convenience.
"""

from mail.swarms_json.suggestions import suggest
from mail.swarms_json.types import SwarmsJSONAction, SwarmsJSONAgent, SwarmsJSONSwarm
from mail.swarms_json.utils import (
    AGENT_DEFAULTS,
    SWARM_DEFAULTS,
    build_action_from_json,
    build_agent_from_json,
    build_swarm_from_json,
    build_swarms_from_json,
    find_swarm,
    load_swarm_from_json_file,
    load_swarms_json_from_file,
)
from mail.swarms_json.validation import (
    validate_action_from_swarms_json,
    validate_agent_from_swarms_json,
    validate_swarm_from_swarms_json,
)

__all__ = [
    "AGENT_DEFAULTS",
    "SWARM_DEFAULTS",
    "SwarmsJSONAction",
    "SwarmsJSONAgent",
    "SwarmsJSONSwarm",
    "build_action_from_json",
    "build_agent_from_json",
    "build_swarm_from_json",
    "build_swarms_from_json",
    "find_swarm",
    "load_swarm_from_json_file",
    "load_swarms_json_from_file",
    "suggest",
    "validate_action_from_swarms_json",
    "validate_agent_from_swarms_json",
    "validate_swarm_from_swarms_json",
]
