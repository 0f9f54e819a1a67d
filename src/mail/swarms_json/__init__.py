"""swarms.json: loading, validation and defaults for swarm definitions.

The documented entry points live in ``mail.swarms_json.utils`` (its ``__all__`` is the list);
they are re-exported here for convenience, with the typed dicts of ``types``.
"""

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
