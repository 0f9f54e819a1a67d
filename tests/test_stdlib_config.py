"""The [stdlib] tables of mail.toml, their environment overrides and their documentation."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from tests.server_fixtures import REPO_ROOT

from mail.config import ConfigError, StdlibConfig, clear_config_cache, load_config


@pytest.fixture(autouse=True)
def _fresh_cache():
    clear_config_cache()
    yield
    clear_config_cache()


def test_defaults_are_safe() -> None:
    cfg = StdlibConfig()
    assert cfg.fs.root == "" and cfg.net.allowed_hosts == []
    assert cfg.net.allow_private_addresses is False and cfg.mcp.allowed_commands == []
    assert cfg.http.max_response_bytes == 1_048_576 and cfg.http.total_timeout == 60.0


def test_tables_are_read_from_mail_toml(tmp_path: Path) -> None:
    path = tmp_path / "mail.toml"
    path.write_text(
        '[stdlib.fs]\nroot = "/srv/files"\n'
        '[stdlib.net]\nallowed_hosts = ["10.0.0.0/8"]\n'
        "[stdlib.http]\nread_timeout = 2.5\n"
        '[stdlib.mcp]\nallowed_commands = ["/opt/mcp/a.py"]\n'
    )
    cfg = load_config(path).stdlib
    assert cfg.fs.root == "/srv/files" and cfg.net.allowed_hosts == ["10.0.0.0/8"]
    assert cfg.http.read_timeout == 2.5 and cfg.mcp.allowed_commands == ["/opt/mcp/a.py"]


def test_bad_values_are_config_errors(tmp_path: Path) -> None:
    path = tmp_path / "mail.toml"
    path.write_text("[stdlib.http]\nread_timeout = -1\n")
    with pytest.raises(ConfigError, match="stdlib.http.read_timeout"):
        load_config(path)
    path.write_text("[stdlib]\nfs = 3\n")
    with pytest.raises(ConfigError, match=r"\[stdlib\.fs\] must be a table"):
        load_config(path, use_cache=False)


def test_environment_overrides() -> None:
    env = {
        "MAIL_STDLIB_FS_ROOT": "/tmp/x",
        "MAIL_STDLIB_NET_ALLOWED_HOSTS": " 127.0.0.1 , localhost,",
        "MAIL_STDLIB_NET_TRUST_ENV": "false",
        "MAIL_STDLIB_HTTP_MAX_REDIRECTS": "0",
    }
    cfg = StdlibConfig().with_env_overrides(env)
    assert cfg.fs.root == "/tmp/x" and cfg.net.allowed_hosts == ["127.0.0.1", "localhost"]
    assert cfg.net.trust_env is False and cfg.http.max_redirects == 0
    with pytest.raises(ConfigError, match="MAIL_STDLIB_HTTP_READ_TIMEOUT"):
        StdlibConfig().with_env_overrides({"MAIL_STDLIB_HTTP_READ_TIMEOUT": "soon"})


def test_configuration_doc_lists_every_stdlib_key_with_its_default() -> None:
    text = (REPO_ROOT / "docs" / "configuration.md").read_text()
    block = re.search(r"## mail.toml reference\n\n```toml\n(.*?)```", text, re.S)
    assert block
    documented = tomllib.loads(block.group(1))["stdlib"]
    defaults = StdlibConfig().model_dump()
    assert documented == defaults


def test_stdlib_doc_names_every_action_and_setting() -> None:
    text = (REPO_ROOT / "docs" / "stdlib.md").read_text()
    from tests.test_stdlib_example import ALL_ACTIONS

    for names in ALL_ACTIONS.values():
        for name in names:
            assert f"`{name}`" in text, name
    for table, section in StdlibConfig().model_dump().items():
        for key in section:
            assert f"`{key}`" in text, f"{table}.{key}"
