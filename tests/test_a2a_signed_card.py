"""Signed Agent Cards against a real `mail server`: the official SDK verifies the signature.

With ``[server.settings] a2a_card_signing_key`` the card carries a JWS over its canonical form
(A2A 1.0, 8.4); the SDK's verifier accepts it with the public key, and refuses it for a card
changed after signing or for another key. A key file that cannot sign stops the server with
one line.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, create_client
from a2a.helpers.proto_helpers import get_artifact_text
from a2a.types.a2a_pb2 import AgentCard
from a2a.utils.signing import InvalidSignaturesError, create_signature_verifier
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from google.protobuf.json_format import ParseDict

from server_fixtures import ServerProcess, keyed_stub_server
from support.a2a_clients import collect, message

pytestmark = pytest.mark.timeout(240)

JKU = "https://keys.example.com/mail/jwks.json"  # where clients are told to find the key


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> Path:
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    path.write_bytes(pem)
    return path


def _public_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def _thumbprint(key: ec.EllipticCurvePrivateKey) -> str:
    """RFC 7638: SHA-256 over the public JWK's required members, in lexicographic order."""
    numbers = key.public_key().public_numbers()
    x, y = (_b64url(n.to_bytes(32, "big")) for n in (numbers.x, numbers.y))
    members = f'{{"crv":"P-256","kty":"EC","x":"{x}","y":"{y}"}}'
    return _b64url(hashlib.sha256(members.encode()).digest())


@pytest.fixture(scope="module")
def signed(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ServerProcess, ec.EllipticCurvePrivateKey]]:
    root = tmp_path_factory.mktemp("a2a_signed")
    key = ec.generate_private_key(ec.SECP256R1())
    path = _write_key(root / "card-key.pem", key)
    extra = f'a2a_card_signing_key = "{path}"\na2a_card_signing_jku = "{JKU}"\n'
    with keyed_stub_server(root, {"alice": ("user", "alice")}, extra=extra) as server:
        yield server, key


async def test_the_sdk_verifies_the_signed_card(
    signed: tuple[ServerProcess, ec.EllipticCurvePrivateKey],
) -> None:
    server, key = signed
    asked: list[tuple[str | None, str | None]] = []

    def public_key(kid: str | None, jku: str | None) -> bytes:
        asked.append((kid, jku))
        return _public_pem(key)

    verify = create_signature_verifier(public_key, ["ES256"])
    async with httpx.AsyncClient(timeout=30) as http:
        card = await A2ACardResolver(http, server.base_url).get_agent_card(
            signature_verifier=verify
        )
        raw = (await http.get(f"{server.base_url}/.well-known/agent-card.json")).json()
    assert card.name == "stub"
    (signature,) = raw["signatures"]
    header = json.loads(base64.urlsafe_b64decode(signature["protected"] + "=="))
    assert header == {"alg": "ES256", "typ": "JOSE", "kid": _thumbprint(key), "jku": JKU}
    assert asked == [(_thumbprint(key), JKU)]
    # The SDK's client checks the card before it talks to the agent.
    headers = {"Authorization": f"Bearer {server.keys['alice']}"}
    async with httpx.AsyncClient(headers=headers, timeout=30) as http:
        client = await create_client(
            server.base_url,
            ClientConfig(streaming=False, httpx_client=http),
            signature_verifier=verify,
        )
        try:
            task = (await collect(client, message("signed hello")))[-1].task
        finally:
            await client.close()
    assert get_artifact_text(task.artifacts[0]) == "echo[alice]: signed hello"


async def test_a_changed_card_or_another_key_is_refused(
    signed: tuple[ServerProcess, ec.EllipticCurvePrivateKey],
) -> None:
    server, key = signed
    raw = httpx.get(f"{server.base_url}/.well-known/agent-card.json", timeout=30).json()
    verify = create_signature_verifier(lambda _kid, _jku: _public_pem(key), ["ES256"])
    verify(ParseDict(raw, AgentCard()))  # as served: valid
    changed = ParseDict({**raw, "description": "an agent that is not this one"}, AgentCard())
    with pytest.raises(InvalidSignaturesError):
        verify(changed)
    other = ec.generate_private_key(ec.SECP256R1())
    with pytest.raises(InvalidSignaturesError):
        create_signature_verifier(lambda _kid, _jku: _public_pem(other), ["ES256"])(
            ParseDict(raw, AgentCard())
        )


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (None, "cannot read"),
        (b"not a key\n", "holds no PEM private key"),
        ("ec-p192", "is not P-256, P-384 or P-521"),
    ],
)
def test_a_key_that_cannot_sign_stops_the_server(
    tmp_path: Path, content: bytes | str | None, reason: str
) -> None:
    path = tmp_path / "card-key.pem"
    if content == "ec-p192":
        _write_key(path, ec.generate_private_key(ec.SECP192R1()))
    elif isinstance(content, bytes):
        path.write_bytes(content)
    extra = f'a2a_card_signing_key = "{path}"\n'
    with pytest.raises(RuntimeError, match="server exited") as failed:  # noqa: SIM117
        with keyed_stub_server(tmp_path, {"alice": ("user", "alice")}, extra=extra):
            pass
    [line] = [x for x in str(failed.value).splitlines() if "a2a_card_signing_key" in x]
    assert "the MAIL server cannot start: [server.settings] a2a_card_signing_key: " in line
    assert reason in line, line
    assert "Traceback" not in str(failed.value)
