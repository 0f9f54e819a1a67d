"""What every section of mail.toml shares: the error type and the section model base."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class ConfigError(ValueError):
    """A configuration file that cannot be read or does not have the right shape."""


class _Section(BaseModel):
    # Unknown keys are tolerated so that older binaries can read newer files.
    model_config = ConfigDict(extra="ignore", populate_by_name=True, validate_assignment=True)
