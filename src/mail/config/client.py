"""``[client]`` (``mail.config.client``, where v1.3 kept ClientConfig).

The model lives in ``mail.client_config``, below the server settings, so the client can read
it without them.
"""

from mail.client_config import ClientConfig

__all__ = ["ClientConfig"]
