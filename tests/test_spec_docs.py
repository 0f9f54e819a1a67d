"""The docs and mail.toml describe what the code has: routes, config keys, server flags."""

from __future__ import annotations

import argparse
import re
import tomllib

import pytest
from pydantic import BaseModel

from mail.commands import server as server_cmd
from mail.config import AuthConfig, ServerConfig, ServerSettings, SwarmConfig
from server_fixtures import REPO_ROOT

DOCS = REPO_ROOT / "docs"


def openapi_paths() -> set[str]:
    import yaml

    return set(yaml.safe_load((REPO_ROOT / "spec" / "openapi.yaml").read_text())["paths"])


@pytest.mark.parametrize("document", ["docs/api-http.md", "spec/SPEC.md"])
def test_every_route_is_documented(document: str) -> None:
    text = (REPO_ROOT / document).read_text()
    missing = [p for p in openapi_paths() if f"`{p}`" not in text and f" {p}`" not in text]
    assert not missing, f"{document} does not mention {missing}"


def _config_keys() -> dict[str, set[str]]:
    server_keys = {
        name
        for name, f in ServerConfig.model_fields.items()
        if name not in ("swarm", "settings", "auth")
    }
    swarm_keys = {f.alias or name for name, f in SwarmConfig.model_fields.items()}
    return {
        "server": server_keys,
        "swarm": swarm_keys,
        "settings": set(ServerSettings.model_fields),
        "auth": set(AuthConfig.model_fields),
    }


def test_configuration_doc_lists_every_key() -> None:
    text = (DOCS / "configuration.md").read_text()
    block = re.search(r"## mail.toml reference\n\n```toml\n(.*?)```", text, re.S)
    assert block, "configuration.md lost its mail.toml reference block"
    documented = tomllib.loads(block.group(1))["server"]
    keys = _config_keys()
    assert set(documented) - {"swarm", "settings", "auth"} == keys["server"]
    for table in ("swarm", "settings", "auth"):
        assert set(documented[table]) == keys[table], table
    # The documented defaults are the real defaults.
    assert ServerConfig.model_validate(documented).model_dump() == ServerConfig().model_dump()


def test_configuration_doc_lists_every_key_of_every_server_table() -> None:
    """Each [server.*] table of the reference block names every key its model has (an
    error that names `[server.cluster] warm_pool` must send the reader to a documented key)."""
    text = (DOCS / "configuration.md").read_text()
    block = re.search(r"## mail.toml reference\n\n```toml\n(.*?)```", text, re.S)
    assert block
    documented = tomllib.loads(block.group(1))["server"]
    for name, field in ServerConfig.model_fields.items():
        model = field.annotation
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            continue
        keys = {f.alias or key for key, f in model.model_fields.items()}
        missing = keys - set(documented.get(name, {}))
        assert not missing, f"[server.{name}] in configuration.md lacks {sorted(missing)}"


def test_repository_mail_toml_uses_only_known_keys() -> None:
    data = tomllib.loads((REPO_ROOT / "mail.toml").read_text())["server"]
    keys = _config_keys()
    assert set(data) - {"swarm", "settings", "auth"} <= keys["server"]
    for table in ("swarm", "settings", "auth"):
        assert set(data.get(table, {})) <= keys[table], table
    assert data["swarm"]["name"] == "demo"  # offline by default


def test_every_server_flag_is_documented() -> None:
    parser = argparse.ArgumentParser()
    server_cmd.add_arguments(parser)
    flags = {
        opt
        for action in parser._actions
        for opt in action.option_strings
        if opt not in ("-h", "--help")
    }
    text = (DOCS / "configuration.md").read_text()
    missing = sorted(
        f for f in flags if f"`{f}" not in text and f", `{f}" not in text and f"{f} " not in text
    )
    assert not missing, missing
