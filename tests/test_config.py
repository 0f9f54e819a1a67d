"""mail.toml loading and `mail server` flag resolution."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from mail.commands import server as server_cmd
from mail.config import ConfigError, ServerConfig, clear_config_cache, find_config_file, load_config

FULL = """
[server]
port = 9001
host = "127.0.0.1"
reload = true
debug = true

[server.swarm]
name = "alpha"
source = "alpha.json"
registry_file = "reg/alpha.json"

[server.settings]
task_message_limit = 7
print_llm_streams = false
sse_ping_interval = 2.5

[server.auth]
token_cache_ttl = 5

[client]
timeout = 12.0
"""


@pytest.fixture(autouse=True)
def _fresh_cache():
    clear_config_cache()
    yield
    clear_config_cache()


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "mail.toml"
    path.write_text(text)
    return path


def test_defaults_without_a_file() -> None:
    cfg = ServerConfig()
    assert (cfg.port, cfg.host, cfg.reload, cfg.debug) == (8000, "0.0.0.0", False, False)
    assert cfg.swarm.name == "demo" and cfg.swarm.registry_file == "registries/demo.json"
    assert cfg.settings.task_message_limit == 15 and cfg.settings.print_llm_streams is True
    assert cfg.auth.mode == "auto" and cfg.auth.token_cache_ttl == 60.0
    assert cfg.base_url == "http://localhost:8000"


def test_full_file(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, FULL))
    s = cfg.server
    assert (s.port, s.host, s.reload, s.debug) == (9001, "127.0.0.1", True, True)
    assert (s.swarm.name, s.swarm.registry) == ("alpha", "reg/alpha.json")
    # A relative source is the file's (whoever reads it); the registry is the current folder's.
    assert s.swarm.source == str(tmp_path.resolve() / "alpha.json")
    assert s.settings.task_message_limit == 7 and s.settings.print_llm_streams is False
    assert s.settings.sse_ping_interval == 2.5 and s.auth.token_cache_ttl == 5
    assert cfg.client == {"timeout": 12.0}
    assert s.base_url == "http://127.0.0.1:9001"


def test_settings_are_read_without_a_swarm_table(tmp_path: Path) -> None:
    # The original ignored [server.settings] unless [server.swarm] existed.
    cfg = load_config(write(tmp_path, "[server.settings]\ntask_message_limit = 3\n"))
    assert cfg.server.settings.task_message_limit == 3
    assert cfg.server.swarm.name == "demo"


def test_zero_task_message_limit_means_unlimited(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, "[server.settings]\ntask_message_limit = 0\n"))
    assert cfg.server.settings.task_message_limit is None


def test_negative_task_message_limit_is_refused(tmp_path: Path) -> None:
    # -1 used to be accepted and ended every task at once without an answer.
    with pytest.raises(ConfigError, match=r"task_message_limit: Input should be greater"):
        load_config(write(tmp_path, "[server.settings]\ntask_message_limit = -1\n"))


def test_registry_alias_and_unknown_keys(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, '[server.swarm]\nregistry = "r.json"\nfuture_key = 1\n'))
    assert cfg.server.swarm.registry_file == "r.json"


def test_config_errors_name_the_problem(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(write(tmp_path, "[server\nport = 1"))
    with pytest.raises(ConfigError, match=r"port"):
        load_config(write(tmp_path, '[server]\nport = "eighty"\n'), use_cache=False)
    with pytest.raises(ConfigError, match=r"\[server.settings\] must be a table"):
        load_config(write(tmp_path, "[server]\nsettings = 3\n"), use_cache=False)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.toml")


def test_search_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env_file = tmp_path / "env.toml"
    env_file.write_text("[server]\nport = 1111\n")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "mail.toml").write_text("[server]\nport = 2222\n")
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("MAIL_CONFIG_PATH", str(env_file))
    assert find_config_file() == env_file
    assert load_config().server.port == 1111
    monkeypatch.setenv("MAIL_CONFIG_PATH", str(tmp_path / "nope.toml"))
    assert find_config_file() == cwd / "mail.toml"
    monkeypatch.delenv("MAIL_CONFIG_PATH")
    assert load_config().server.port == 2222


def test_keys_file_location(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MAIL_KEYS_FILE", raising=False)
    cfg = ServerConfig.model_validate({"swarm": {"registry": "regs/x.json"}})
    assert cfg.keys_file_path() == Path("regs/keys.json")
    cfg = ServerConfig.model_validate({"auth": {"keys_file": "/k/keys.json"}})
    assert cfg.keys_file_path() == Path("/k/keys.json")
    monkeypatch.setenv("MAIL_KEYS_FILE", "/env/keys.json")
    assert cfg.keys_file_path() == Path("/env/keys.json")


def parse_server_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    server_cmd.add_arguments(parser)
    return parser.parse_args(argv)


def test_flags_override_only_when_given(tmp_path: Path) -> None:
    path = write(tmp_path, FULL)
    cfg = server_cmd.resolve_config(parse_server_args("-c", str(path)))
    # reload/debug stay as the file says when the flags are absent (the original reset them).
    assert cfg.reload is True and cfg.debug is True and cfg.port == 9001
    cfg = server_cmd.resolve_config(
        parse_server_args(
            "-c",
            str(path),
            "-p",
            "9100",
            "-H",
            "0.0.0.0",
            "-n",
            "beta",
            "-s",
            "b.json",
            "--print-llm-streams",
            "yes",
        )
    )
    assert (cfg.port, cfg.host, cfg.swarm.name, cfg.swarm.source) == (
        9100,
        "0.0.0.0",
        "beta",
        "b.json",
    )
    assert cfg.swarm.registry_file == "reg/alpha.json"  # explicitly configured, so kept
    assert cfg.settings.print_llm_streams is True
    assert cfg.settings.task_message_limit == 7


def test_new_swarm_name_moves_the_default_registry(tmp_path: Path) -> None:
    path = write(tmp_path, '[server.swarm]\nname = "demo"\nregistry = "registries/demo.json"\n')
    cfg = server_cmd.resolve_config(parse_server_args("-c", str(path), "--swarm-name", "other"))
    assert cfg.swarm.registry_file == "registries/other.json"
    cfg = server_cmd.resolve_config(
        parse_server_args("-c", str(path), "-n", "other", "-rf", "x.json")
    )
    assert cfg.swarm.registry_file == "x.json"


def test_print_llm_streams_flag_values() -> None:
    assert parse_server_args("--print-llm-streams", "F").print_llm_streams is False
    assert parse_server_args("--print-llm-streams", "1").print_llm_streams is True
    with pytest.raises(SystemExit):
        parse_server_args("--print-llm-streams", "maybe")


def test_client_config_is_reexported() -> None:
    from mail.client_config import ClientConfig as Original
    from mail.config import ClientConfig

    assert ClientConfig is Original
    assert ClientConfig().timeout == 3600.0
