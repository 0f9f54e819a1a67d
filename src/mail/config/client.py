"""``[client]`` (``mail.config.client``, where v1.3 kept ClientConfig)."""

from mail.client_config import ClientConfig

__all__ = ["ClientConfig"]
