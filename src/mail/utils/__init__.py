"""Utilities: import-string parsing, address helpers, auth, logging, stores."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mail.lazy import lazy_exports

if TYPE_CHECKING:
    from mail.utils.parsing import read_python_string, target_address_is_interswarm

# public name -> submodule of mail.utils that defines it
_LAZY_EXPORTS: dict[str, str] = {
    "read_python_string": "parsing",
    "read_url_string": "parsing",
    "resolve_prefixed_string_references": "parsing",
    "target_address_is_interswarm": "parsing",
    "login": "auth",
    "get_token_info": "auth",
    "caller_is_admin": "auth",
    "caller_is_user": "auth",
    "caller_is_agent": "auth",
    "caller_is_admin_or_user": "auth",
    "extract_token_info": "auth",
    "generate_user_id": "auth",
    "generate_agent_id": "auth",
    "get_loggers": "logger",
    "init_logger": "logger",
    "extract_token": "auth",
    "require_debug": "auth",
    "get_langmem_store": "store",
    "get_version": "version",
    "get_protocol_version": "version",
    "export": "serialize",
    "serialize_mail_value": "serialize",
}

# v1.3's list; every name is loaded on first use.
__all__ = [
    "caller_is_admin",
    "caller_is_admin_or_user",
    "caller_is_agent",
    "caller_is_user",
    "export",
    "extract_token",
    "extract_token_info",
    "get_langmem_store",
    "get_loggers",
    "get_protocol_version",
    "get_token_info",
    "get_version",
    "init_logger",
    "login",
    "read_python_string",
    "require_debug",
    "resolve_prefixed_string_references",
    "serialize_mail_value",
    "target_address_is_interswarm",
]


__getattr__, __dir__ = lazy_exports(globals(), _LAZY_EXPORTS, "mail.utils.")
