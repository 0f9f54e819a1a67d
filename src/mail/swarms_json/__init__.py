"""swarms.json: loading, validation and defaults for swarm definitions."""

from mail.swarms_json import utils as _utils
from mail.swarms_json.types import (
    SwarmsJSONAction,
    SwarmsJSONAgent,
    SwarmsJSONFile,
    SwarmsJSONSwarm,
)
from mail.swarms_json.utils import *  # noqa: F403

__all__ = [
    *_utils.__all__,
    "SwarmsJSONAction",
    "SwarmsJSONAgent",
    "SwarmsJSONFile",
    "SwarmsJSONSwarm",
]
