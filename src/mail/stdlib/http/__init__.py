"""HTTP actions behind the address guard (``[stdlib.net]`` / ``[stdlib.http]`` in mail.toml)."""

from mail.stdlib.http.actions import (
    http_delete,
    http_get,
    http_head,
    http_options,
    http_patch,
    http_post,
    http_put,
)

__all__ = [
    "http_delete",
    "http_get",
    "http_head",
    "http_options",
    "http_patch",
    "http_post",
    "http_put",
]
