"""ClientConfig and the lookup of the [client] table of mail.toml."""

from __future__ import annotations

from pathlib import Path

import pytest

from mail.client import MAILClient
from mail.client_config import ClientConfig, find_config_path, load_client_config


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("MAIL_CONFIG_PATH", raising=False)
    monkeypatch.chdir(tmp_path)


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_without_any_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("mail.client_config.find_config_file", lambda: None)
    assert find_config_path() is None
    config = load_client_config()
    assert (config.timeout, config.verbose) == (3600.0, False)


def test_local_mail_toml_is_used(tmp_path: Path) -> None:
    _write(tmp_path / "mail.toml", "[server]\nport = 1\n[client]\ntimeout = 12.5\nverbose = true\n")
    config = load_client_config()
    assert (config.timeout, config.verbose) == (12.5, True)


def test_env_var_beats_local_file_and_missing_env_file_falls_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(tmp_path / "mail.toml", "[client]\ntimeout = 1\n")
    other = _write(tmp_path / "other.toml", "[client]\ntimeout = 2\n")
    monkeypatch.setenv("MAIL_CONFIG_PATH", str(other))
    assert load_client_config().timeout == 2
    monkeypatch.setenv("MAIL_CONFIG_PATH", str(tmp_path / "missing.toml"))
    assert load_client_config().timeout == 1


def test_explicit_path_beats_everything_and_must_exist(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "MAIL_CONFIG_PATH", str(_write(tmp_path / "env.toml", "[client]\ntimeout = 2\n"))
    )
    explicit = _write(tmp_path / "explicit.toml", "[client]\ntimeout = 3\n")
    assert load_client_config(explicit).timeout == 3
    with pytest.raises(ValueError, match="configuration file not found"):
        load_client_config(tmp_path / "nope.toml")


def test_search_is_the_same_as_the_servers(tmp_path: Path) -> None:
    from mail.config import find_config_file

    assert find_config_path() == find_config_file()
    _write(tmp_path / "mail.toml", "[client]\ntimeout = 5\n")
    assert find_config_path() == find_config_file() == tmp_path / "mail.toml"


def test_file_without_client_table_gives_defaults(tmp_path: Path) -> None:
    _write(tmp_path / "mail.toml", "[server]\nport = 8000\n")
    assert load_client_config() == ClientConfig()


def test_malformed_toml_names_the_file(tmp_path: Path) -> None:
    _write(tmp_path / "mail.toml", "[client\ntimeout = 1\n")
    with pytest.raises(ValueError, match=r"invalid TOML in .*mail\.toml"):
        load_client_config()


def test_bad_values_name_the_key(tmp_path: Path) -> None:
    _write(tmp_path / "mail.toml", '[client]\ntimeout = "soon"\n')
    with pytest.raises(ValueError, match=r"invalid \[client\] settings .*timeout"):
        load_client_config()
    _write(tmp_path / "mail.toml", "[client]\ntimeout = -1\n")
    with pytest.raises(ValueError, match="timeout"):
        load_client_config()


def test_client_without_config_reads_mail_toml(tmp_path: Path) -> None:
    _write(tmp_path / "mail.toml", "[client]\ntimeout = 42\nverbose = true\n")
    client = MAILClient("http://127.0.0.1:9")
    assert client.config == ClientConfig(timeout=42, verbose=True)


@pytest.mark.parametrize("value", [True, False])
def test_a_bool_is_not_a_number_of_retries_in_either_place(tmp_path: Path, value: bool) -> None:
    """`ClientConfig(retries=True)` was taken as 1 while `MAILClient(retries=True)` was a
    ValueError: both refuse it now, with the same words (and so does a [client] table)."""
    problem = f"retries must be a whole number from 0 to 100, got {value}"
    with pytest.raises(ValueError, match=problem):
        ClientConfig(retries=value)
    with pytest.raises(ValueError, match=problem):
        MAILClient("http://127.0.0.1:1", retries=value)
    _write(tmp_path / "mail.toml", f"[client]\nretries = {str(value).lower()}\n")
    with pytest.raises(ValueError, match=rf"mail\.toml: retries: .*{problem}"):
        load_client_config()
    assert ClientConfig(retries=0).retries == 0 and ClientConfig(retries=100).retries == 100
