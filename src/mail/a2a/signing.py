"""Signed Agent Cards (A2A 1.0, 8.4): a JWS over the card's canonical form, by the SDK's signer."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from a2a.types.a2a_pb2 import AgentCard
from a2a.utils.signing import ProtectedHeader, create_agent_card_signer
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

_CURVES = {"secp256r1": "ES256", "secp384r1": "ES384", "secp521r1": "ES512"}
# RFC 7638: the members of a public JWK its thumbprint covers, per key type.
_THUMBPRINT_MEMBERS = {
    "EC": ("crv", "kty", "x", "y"),
    "RSA": ("e", "kty", "n"),
    "OKP": ("crv", "kty", "x"),
}
MIN_RSA_BITS = 2048


class SigningKeyError(ValueError):
    """The configured key cannot sign cards (the reason, in one line)."""


def _algorithm_and_jwk(key: Any) -> tuple[str, dict[str, Any]]:
    public = key.public_key()
    if isinstance(key, ec.EllipticCurvePrivateKey):
        alg = _CURVES.get(key.curve.name)
        if alg is None:
            raise SigningKeyError(f"the EC curve {key.curve.name} is not P-256, P-384 or P-521")
        return alg, ECAlgorithm.to_jwk(public, as_dict=True)
    if isinstance(key, rsa.RSAPrivateKey):
        if key.key_size < MIN_RSA_BITS:
            raise SigningKeyError(f"an RSA key of {key.key_size} bits (at least {MIN_RSA_BITS})")
        return "RS256", RSAAlgorithm.to_jwk(public, as_dict=True)
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return "EdDSA", OKPAlgorithm.to_jwk(public, as_dict=True)
    raise SigningKeyError(f"a {type(key).__name__}: use an EC, RSA or Ed25519 key")


def thumbprint(jwk: dict[str, Any]) -> str:
    """The RFC 7638 SHA-256 thumbprint of a public JWK, base64url without padding."""
    members = {name: jwk[name] for name in _THUMBPRINT_MEMBERS[jwk["kty"]]}
    digest = hashlib.sha256(json.dumps(members, separators=(",", ":"), sort_keys=True).encode())
    return base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()


def card_signer(path: str, kid: str = "", jku: str = "") -> Callable[[AgentCard], AgentCard]:
    """The function that adds a signature by the key in ``path`` to a card (``kid`` empty:
    the key's thumbprint; ``jku`` empty: none)."""
    file = Path(path).expanduser()
    try:
        pem = file.read_bytes()
    except OSError as exc:
        raise SigningKeyError(f"cannot read {file}: {exc.strerror or exc}") from None
    try:
        key = load_pem_private_key(pem, password=None)
    except TypeError:
        raise SigningKeyError(f"{file} holds an encrypted key: give it unencrypted") from None
    except ValueError:
        raise SigningKeyError(f"{file} holds no PEM private key") from None
    alg, jwk = _algorithm_and_jwk(key)
    header: dict[str, Any] = {"alg": alg, "typ": "JOSE", "kid": kid or thumbprint(jwk)}
    if jku:  # (absent, not null, when unset)
        header["jku"] = jku
    return create_agent_card_signer(pem, cast(ProtectedHeader, header))
