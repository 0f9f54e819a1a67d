"""mail.utils.auth: the original's helper names over our authenticators."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from fastapi import Depends, FastAPI, HTTPException

import mail.utils.auth as compat
from mail.config import clear_config_cache
from mail.server import keystore
from server_fixtures import StubAuthService, auth


@pytest.fixture
def local_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    path = tmp_path / "keys.json"
    monkeypatch.setenv("MAIL_KEYS_FILE", str(path))
    monkeypatch.delenv("AUTH_ENDPOINT", raising=False)
    monkeypatch.delenv("TOKEN_INFO_ENDPOINT", raising=False)
    monkeypatch.setattr(compat, "_fallback", None)
    clear_config_cache()
    return {
        role: keystore.create_key(path, role, f"{role}-1")[0] for role in ("admin", "user", "agent")
    }


def test_id_helpers() -> None:
    assert compat.generate_user_id({"role": "user", "id": "42"}) == "user_42"
    assert compat.generate_agent_id({"role": "agent", "id": "meteo"}) == "swarm_meteo"


async def test_login_and_token_info_in_local_mode(local_keys: dict[str, str]) -> None:
    token = await compat.login(local_keys["user"])
    info = await compat.get_token_info(token)
    assert info == {"role": "user", "id": "user-1", "api_key": local_keys["user"]}
    with pytest.raises(HTTPException) as exc:
        await compat.login("mail_unknown-key-000000000000000000")
    assert exc.value.status_code == 401


async def test_login_and_token_info_in_external_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    with StubAuthService({"k-1": ("admin", "ops")}) as service:
        for name, value in service.env.items():
            monkeypatch.setenv(name, value)
        monkeypatch.setattr(compat, "_fallback", None)
        token = await compat.login("k-1")
        assert token == "tok-k-1"
        assert (await compat.get_token_info(token))["id"] == "ops"
        assert (service.login_calls, service.token_info_calls) == (1, 1)


async def test_role_guards_as_fastapi_dependencies(local_keys: dict[str, str]) -> None:
    app = FastAPI()

    @app.get("/admin", dependencies=[Depends(compat.caller_is_admin)])
    async def admin_only() -> dict[str, bool]:
        return {"ok": True}

    @app.get("/either", dependencies=[Depends(compat.caller_is_admin_or_user)])
    async def either() -> dict[str, bool]:
        return {"ok": True}

    @app.get("/agent", dependencies=[Depends(compat.caller_is_agent)])
    async def agent_only() -> dict[str, bool]:
        return {"ok": True}

    @app.get("/user", dependencies=[Depends(compat.caller_is_user)])
    async def user_only() -> dict[str, bool]:
        return {"ok": True}

    @app.get("/me")
    async def me(info: dict = Depends(compat.extract_token_info)) -> dict:
        return info

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        expected = {
            ("/admin", "admin"): 200,
            ("/admin", "user"): 403,
            ("/either", "user"): 200,
            ("/either", "admin"): 200,
            ("/either", "agent"): 403,
            ("/agent", "agent"): 200,
            ("/agent", "user"): 403,
            ("/user", "user"): 200,
            ("/user", "admin"): 403,
        }
        for (path, role), status in expected.items():
            assert (await c.get(path, headers=auth(local_keys[role]))).status_code == status, (
                path,
                role,
            )
        assert (await c.get("/admin")).status_code == 401
        me = (await c.get("/me", headers=auth(local_keys["agent"]))).json()
        assert me == {"role": "agent", "id": "agent-1", "api_key": local_keys["agent"]}
