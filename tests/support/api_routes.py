"""Which served routes belong to the API that spec/openapi.yaml describes."""

from __future__ import annotations

# The console's static assets (docs/console.md) and the API's own documentation
# (/openapi.json, /docs with its Swagger UI files) are plain routes too, but not the API.
_PAGE_PREFIXES = ("/ui", "/docs")


def is_api_path(path: str) -> bool:
    if path in ("/openapi.json", "/mcp"):  # /mcp: MCP's JSON-RPC, described in docs/mcp.md
        return False
    return not any(path == prefix or path.startswith(prefix + "/") for prefix in _PAGE_PREFIXES)
