"""Version numbers: the implementation's and the protocol's (major.minor of the implementation)."""

__version__ = "1.3.6"
PROTOCOL_VERSION = ".".join(__version__.split(".")[:2])
