"""Local auth: the hashed key file, `mail keys`, and the request-time key store."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from fastapi import HTTPException

from mail.server import keystore
from mail.server.auth import LocalAuthenticator
from server_fixtures import run_cli


def test_create_stores_only_a_hash_with_mode_0600(tmp_path: Path) -> None:
    path = tmp_path / "reg" / "keys.json"
    secret, record = keystore.create_key(path, "user", "alice")
    assert secret.startswith("mail_") and len(secret) >= 40
    text = path.read_text()
    assert secret not in text
    assert keystore.hash_key(secret) in text
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    data = json.loads(text)["keys"][0]
    assert data["id"] == "alice" and data["role"] == "user" and data["prefix"] == secret[:12]
    assert record.created_at.endswith("+00:00")


def test_validation_of_roles_and_custom_keys(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    with pytest.raises(keystore.KeyStoreError, match="role must be one of"):
        keystore.create_key(path, "root", "x")
    with pytest.raises(keystore.KeyStoreError, match="at least 24 characters"):
        keystore.create_key(path, "user", "x", key="short")
    for same in ("k" * 30, "mail_" + "k" * 30, "1234" * 8):  # long, but no secret
        with pytest.raises(keystore.KeyStoreError, match="must be random: this one has"):
            keystore.create_key(path, "user", "x", key=same)
    key = "k7Qx2mVb9Lp4Rt8Wz3Hn6Yc1"
    keystore.create_key(path, "user", "x", key=key)
    with pytest.raises(keystore.KeyStoreError, match="already"):
        keystore.create_key(path, "admin", "y", key=key)


def test_revoke_by_id_full_key_or_prefix(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    a, _ = keystore.create_key(path, "user", "a")
    b, _ = keystore.create_key(path, "user", "b")
    c, _ = keystore.create_key(path, "admin", "c")
    for part in ("mail", "mail_"):  # the same in every generated key: no secret of any
        assert keystore.revoke_keys(path, part) == []
    assert [r.id for r in keystore.revoke_keys(path, "a")] == ["a"]
    assert [r.id for r in keystore.revoke_keys(path, b)] == ["b"]
    assert [r.id for r in keystore.revoke_keys(path, c[:10])] == ["c"]
    assert keystore.read_records(path) == []
    assert keystore.revoke_keys(path, "nobody") == []
    lone = tmp_path / "lone.json"
    keystore.create_key(lone, "user", "only")
    assert keystore.revoke_keys(lone, "mail") == []  # (it was revoked: it was the only match)


def test_list_shows_no_more_of_a_custom_key_than_of_a_generated_one(tmp_path: Path) -> None:
    """`mail keys list` showed 12 characters of a custom key (half of a 24-character
    secret); it shows 7, as of a generated key's random part (after `mail_`), and revoking
    by what it shows still works."""
    path = tmp_path / "keys.json"
    custom = "Zq8vT2kLm5Xw9Rb3Nc6Hy1Dp"
    assert run_cli("keys", "--keys-file", str(path), "create", "--role", "user",
                   "--id", "carl", "--key", custom)[0] == 0  # fmt: skip
    code, out, _ = run_cli("keys", "--keys-file", str(path), "list")
    assert code == 0 and f" {custom[:7]}… " in out and custom[:8] not in out, out
    code, out, _ = run_cli("keys", "--keys-file", str(path), "list", "--json")
    assert [k["prefix"] for k in json.loads(out)] == [custom[:7]]
    assert custom[:8] not in path.read_text()  # nor does the file keep more
    code, out, _ = run_cli("keys", "--keys-file", str(path), "revoke", custom[:7])
    assert code == 0 and "Revoked user key 'carl'" in out, out
    # A file written before (12 characters kept) shows 7 too, and revokes by them.
    secret, _ = keystore.create_key(path, "user", "dora")
    data = json.loads(path.read_text())
    data["keys"].append({**data["keys"][0], "id": "old", "prefix": custom[:12], "sha256": "0" * 64})
    path.write_text(json.dumps(data))
    code, out, _ = run_cli("keys", "--keys-file", str(path), "list")
    assert custom[:7] in out and custom[:8] not in out and secret[:12] in out, out
    code, out, _ = run_cli("keys", "--keys-file", str(path), "revoke", custom[:7])
    assert code == 0 and "Revoked user key 'old'" in out, out
    assert [r.id for r in keystore.read_records(path)] == ["dora"]


def test_store_lookup_follows_file_changes(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    store = keystore.LocalKeyStore(path)
    assert len(store) == 0
    key, _ = keystore.create_key(path, "admin", "root")
    assert store.lookup(key).id == "root"
    keystore.revoke_keys(path, "root")
    assert store.lookup(key) is None


def test_store_keeps_last_good_keys_when_the_file_is_corrupted(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    key, _ = keystore.create_key(path, "user", "u")
    store = keystore.LocalKeyStore(path)
    path.write_text("{oops")
    assert store.lookup(key).id == "u"


async def test_local_authenticator(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    key, _ = keystore.create_key(path, "agent", "peer")
    auth = LocalAuthenticator(path)
    caller = await auth.authenticate(key)
    assert (caller.role, caller.id, caller.api_key) == ("agent", "peer", key)
    with pytest.raises(HTTPException) as exc:
        await auth.authenticate(key + "x")
    assert exc.value.status_code == 401 and exc.value.detail == "invalid API key"


def test_bootstrap_creates_admin_and_user_once(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    created = keystore.bootstrap_keys(path)
    assert [(r.role, r.id) for _, r in created] == [("admin", "admin"), ("user", "user")]
    assert keystore.bootstrap_keys(path) == []


# ------------------------------------------------------------------------------- CLI


def test_keys_cli_create_list_revoke(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    code, out, _ = run_cli(
        "keys", "--keys-file", str(path), "create", "--role", "user", "--id", "zoe"
    )
    assert code == 0
    secret = out.strip().splitlines()[-1]
    assert secret.startswith("mail_")
    code, out, _ = run_cli("keys", "--keys-file", str(path), "list")
    assert code == 0 and "zoe" in out and "user" in out and secret not in out
    code, out, _ = run_cli("keys", "--keys-file", str(path), "list", "--json")
    assert json.loads(out) == [
        {
            "id": "zoe",
            "role": "user",
            "prefix": secret[:12],
            "created_at": json.loads(out)[0]["created_at"],
        }
    ]
    code, out, _ = run_cli("keys", "--keys-file", str(path), "revoke", "zoe")
    assert code == 0 and "Revoked user key 'zoe'" in out
    code, _, err = run_cli("keys", "--keys-file", str(path), "revoke", "zoe")
    assert code == 2 and "no key matches 'zoe'" in err


def test_keys_cli_takes_the_file_after_the_subcommand_too(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    code, out, err = run_cli("keys", "create", "--keys-file", str(path), "--role", "user")
    assert code == 0, err
    code, out, _ = run_cli("keys", "list", "--keys-file", str(path), "--json")
    assert [k["role"] for k in json.loads(out)] == ["user"]
    config = tmp_path / "mail.toml"  # -c too, and before the subcommand still
    config.write_text(f'[server.swarm]\nregistry = "{tmp_path / "regs" / "x.json"}"\n')
    code, out, _ = run_cli("keys", "create", "-c", str(config), "--role", "admin", "--json")
    assert json.loads(out)["keys_file"] == str(tmp_path / "regs" / "keys.json")
    code, out, _ = run_cli("keys", "--keys-file", str(path), "list", "--json")
    assert [k["role"] for k in json.loads(out)] == ["user"]


def test_keys_cli_uses_config_and_env_for_the_file(tmp_path: Path) -> None:
    config = tmp_path / "mail.toml"
    config.write_text(f'[server.swarm]\nregistry = "{tmp_path / "regs" / "x.json"}"\n')
    code, out, _ = run_cli("keys", "-c", str(config), "create", "--role", "admin", "--json")
    assert code == 0
    made = json.loads(out)
    assert made["keys_file"] == str(tmp_path / "regs" / "keys.json")
    assert made["id"].startswith("admin-")
    env_file = tmp_path / "env-keys.json"
    code, out, _ = run_cli(
        "keys",
        "-c",
        str(config),
        "create",
        "--role",
        "user",
        "--json",
        env={"MAIL_KEYS_FILE": str(env_file)},
    )
    assert json.loads(out)["keys_file"] == str(env_file)


def test_keys_cli_errors_are_one_line(tmp_path: Path) -> None:
    code, _, err = run_cli(
        "keys", "--keys-file", str(tmp_path / "k.json"), "create", "--role", "user", "--key", "tiny"
    )
    assert code == 2 and err.count("\n") == 1 and "at least 24" in err
    code, _, err = run_cli("keys", "--keys-file", str(tmp_path / "k.json"))
    assert code == 2 and "choose a subcommand" in err


def test_keys_create_refuses_ids_that_clash_with_task_owners(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    for bad in ("al ice", "alice@swarm", "user:alice", " ", ".x"):
        code, _, err = run_cli(
            "keys", "--keys-file", str(path), "create", "--role", "user", "--id", bad
        )
        assert code == 2, bad
        assert "invalid id" in err and "'@'" in err
    assert keystore.read_records(path) == []


def test_keys_bound_to_a_swarm(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    code, out, _ = run_cli(
        "keys", "--keys-file", str(path), "create", "--role", "agent", "--id", "peer",
        "--swarm", "swarm-beta",
    )  # fmt: skip
    assert code == 0 and "acts only for swarm 'swarm-beta'" in out
    secret = out.strip().splitlines()[-1]
    record = LocalAuthenticator(path).store.lookup(secret)
    assert record is not None and record.swarm == "swarm-beta"
    code, out, _ = run_cli("keys", "--keys-file", str(path), "list")
    assert "swarm-beta" in out
    code, _, err = run_cli(
        "keys", "--keys-file", str(path), "create", "--role", "user", "--swarm", "swarm-beta"
    )
    assert code == 2 and "only agent keys" in err


async def test_bound_key_caller_carries_its_swarm(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    secret, _ = keystore.create_key(path, "agent", "peer", swarm="swarm-beta")
    loose, _ = keystore.create_key(path, "agent", "other")
    auth = LocalAuthenticator(path)
    assert (await auth.authenticate(secret)).swarm == "swarm-beta"
    assert (await auth.authenticate(loose)).swarm is None


def test_keys_revoke_asks_which_role_when_an_id_has_several(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    keystore.create_key(path, "user", "alice")
    keystore.create_key(path, "admin", "alice")
    code, _, err = run_cli("keys", "--keys-file", str(path), "revoke", "alice")
    assert code == 2 and "several roles (admin, user)" in err and "--role" in err
    assert len(keystore.read_records(path)) == 2
    code, out, _ = run_cli("keys", "--keys-file", str(path), "revoke", "alice", "--role", "user")
    assert code == 0 and "Revoked user key 'alice'" in out and "1 key(s) revoked" in out
    assert [(r.id, r.role) for r in keystore.read_records(path)] == [("alice", "admin")]
