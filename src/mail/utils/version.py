"""v1.3's version helpers (``mail.utils.get_version``), answered from ``mail.version``."""

from __future__ import annotations

from mail.version import PROTOCOL_VERSION, __version__


def get_version() -> str:
    """The implementation's version, ``x.y.z``."""
    return __version__


def get_protocol_version() -> str:
    """The protocol's version, ``x.y`` of the implementation's."""
    return PROTOCOL_VERSION
