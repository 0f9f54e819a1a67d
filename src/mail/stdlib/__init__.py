"""Ready-made actions and agent functions, as in the original's ``mail.stdlib``.

Nothing is exported here; import from the sub-packages, e.g. in swarms.json
``"python::mail.stdlib.fs.actions:read_file"`` or ``"python::mail.stdlib.fs:read_file"``:

- :mod:`mail.stdlib.fs` — read_file, write_file, delete_file, create_directory, read_directory
- :mod:`mail.stdlib.http` — http_get, http_post, http_put, http_delete, http_patch, http_head,
  http_options
- :mod:`mail.stdlib.interswarm` — ping_swarm, get_swarm_health, get_swarm_registry
- :mod:`mail.stdlib.mcp` — mcp_ping, mcp_list_tools, mcp_call_tool, mcp_get_prompt,
  mcp_list_prompts, mcp_read_resource, mcp_list_resources
- :mod:`mail.stdlib.openai` — agent functions on the official OpenAI SDK
- :mod:`mail.stdlib.anthropic` — an empty placeholder, as in the original

Unlike the original, the actions are guarded by default: files stay inside a root folder,
outbound requests refuse internal addresses, and MCP servers must be URLs unless a local
command is allow-listed. See docs/stdlib.md and the ``[stdlib]`` table of mail.toml.
"""
