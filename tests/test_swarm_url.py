"""swarm:// links: what they turn into, and a clear error for each kind of bad input."""

from __future__ import annotations

import pytest

from mail.swarm_url import is_swarm_url, parse_swarm_link, parse_swarm_url, resolve_target

GOOD = [
    ("swarm://connect?server=example.com&token=abc", ("https://example.com", "abc")),
    ("swarm://invite?server=example.com&token=abc", ("https://example.com", "abc")),
    ("swarm://connect?server=example.com", ("https://example.com", None)),
    ("swarm://connect?server=example.com&token=", ("https://example.com", None)),
    (
        "swarm://connect?token=t&server=mail.example.org:8443",
        ("https://mail.example.org:8443", "t"),
    ),
    ("  swarm://connect?server=example.com  ", ("https://example.com", None)),
    ("SWARM://Connect?server=example.com", ("https://example.com", None)),
    # percent-encoding of both values
    (
        "swarm://connect?server=ex%2Dample.com%3A9000&token=a%2Bb%2Fc%3D",
        ("https://ex-ample.com:9000", "a+b/c="),
    ),
    # an explicit scheme is kept (local servers without TLS)
    (
        "swarm://connect?server=http%3A%2F%2F127.0.0.1%3A8000&token=k",
        ("http://127.0.0.1:8000", "k"),
    ),
    ("swarm://connect?server=https://example.com/mail/", ("https://example.com/mail", None)),
    ("swarm://connect?server=[::1]:8000", ("https://[::1]:8000", None)),
    # the same parameter twice with the same value is harmless
    ("swarm://connect?server=a.com&server=a.com", ("https://a.com", None)),
]


@pytest.mark.parametrize(("url", "expected"), GOOD, ids=[g[0] for g in GOOD])
def test_good_links(url: str, expected: tuple[str, str | None]) -> None:
    assert parse_swarm_url(url) == expected


BAD = [
    ("https://example.com", "not a swarm:// URL"),
    ("swarmy://connect?server=a.com", "not a swarm:// URL"),
    ("", "not a swarm:// URL"),
    ("swarm:connect?server=a.com", "expected swarm://connect"),
    ("swarm://join?server=a.com", "unsupported swarm:// action 'join'"),
    ("swarm://?server=a.com", "unsupported swarm:// action '(none)'"),
    ("swarm://connect/extra?server=a.com", "unexpected path"),
    ("swarm://connect", "no server parameter"),
    ("swarm://connect?token=abc", "no server parameter"),
    ("swarm://connect?server=", "empty server parameter"),
    ("swarm://connect?server=%20", "empty server parameter"),
    ("swarm://connect?server=a%20b.com", "contains whitespace"),
    ("swarm://connect?server=:8000", "empty host"),
    ("swarm://connect?server=https://", "empty host"),
    ("swarm://connect?server=a.com:port", "invalid port"),
    ("swarm://connect?server=a.com:99999", "invalid port"),
    ("swarm://connect?server=ftp://a.com", "only http and https"),
    ("swarm://connect?server=user:pw@a.com", "must not contain credentials"),
    ("swarm://connect?server=a.com%23frag", "query or fragment"),
    ("swarm://connect?server=a.com&server=b.com", "server more than once"),
]


@pytest.mark.parametrize(("url", "message"), BAD, ids=[b[0] or "empty" for b in BAD])
def test_bad_links(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_swarm_url(url)


def test_link_keeps_its_action() -> None:
    assert parse_swarm_link("swarm://invite?server=a.com").action == "invite"


def test_is_swarm_url() -> None:
    assert is_swarm_url(" swarm://connect?server=a")
    assert not is_swarm_url("http://a")


@pytest.mark.parametrize(
    ("url", "api_key", "expected"),
    [
        ("http://localhost:8000/", None, ("http://localhost:8000", None)),
        ("http://localhost:8000", "k", ("http://localhost:8000", "k")),
        ("swarm://connect?server=a.com&token=t", None, ("https://a.com", "t")),
        # an explicit --api-key wins over the link's token
        ("swarm://connect?server=a.com&token=t", "mine", ("https://a.com", "mine")),
        ("swarm://connect?server=a.com", "mine", ("https://a.com", "mine")),
    ],
)
def test_resolve_target(url: str, api_key: str | None, expected: tuple[str, str | None]) -> None:
    assert resolve_target(url, api_key) == expected
