"""mail.net.trust: who a peer's envelope may speak as, and what its task-end notice does.

The pure rules, one case per line; tests/test_interswarm_same_name.py drives them over HTTP.
"""

from __future__ import annotations

import pytest

from mail.net.trust import TrustError, check_subject, peer_sender, task_end_effect


def agent(address: str) -> dict[str, str]:
    return {"address_type": "agent", "address": address}


@pytest.mark.parametrize(
    ("sender", "owner", "expected"),
    [
        (agent("supervisor"), "swarm:a@alpha", agent("supervisor@alpha")),
        (agent("supervisor@alpha"), "swarm:a@alpha", agent("supervisor@alpha")),
        (
            {"address_type": "user", "address": "alice"},
            "user:alice@alpha",
            {"address_type": "user", "address": "alice@alpha"},
        ),
        (
            {"address_type": "admin", "address": "root@alpha"},
            "admin:root@alpha",
            {"address_type": "admin", "address": "root@alpha"},
        ),
    ],
)
def test_senders_a_peer_may_carry_are_reattributed_to_it(
    sender: dict[str, str], owner: str, expected: dict[str, str]
) -> None:
    assert peer_sender(sender, source_swarm="alpha", task_owner=owner) == expected


@pytest.mark.parametrize(
    ("sender", "owner", "says"),
    [
        (agent("supervisor@beta"), "swarm:a@alpha", "belongs to swarm 'beta'"),
        (agent("x@gamma"), "swarm:a@alpha", "belongs to swarm 'gamma'"),
        ({"address_type": "system", "address": "beta"}, "swarm:a@alpha", "system"),
        ({"address_type": "user", "address": "bob"}, "user:alice@alpha", "cannot send as a user"),
        ({"address_type": "user", "address": "alice"}, "swarm:a@alpha", "cannot send as a user"),
        ({"address_type": "user", "address": "alice"}, "admin:alice@alpha", "as a user"),
        ({"address_type": "admin", "address": "alice"}, "user:alice@alpha", "as a admin"),
        ({"address_type": "user", "address": "alice@beta"}, "user:alice@beta", "'beta'"),
        ({"address_type": "agent", "address": "  "}, "swarm:a@alpha", "no address"),
    ],
)
def test_senders_a_peer_may_not_carry_are_refused(
    sender: dict[str, str], owner: str, says: str
) -> None:
    with pytest.raises(TrustError) as caught:
        peer_sender(sender, source_swarm="alpha", task_owner=owner)
    assert caught.value.status == 403
    assert says in str(caught.value)


def _effect(**overrides: object) -> str:
    args: dict[str, object] = {
        "source_swarm": "beta",
        "task_id": "t",
        "task_owner": "user:alice@alpha",
        "owned_here": True,
        "to_local_agent": False,
        "to_direct_caller": False,
    }
    args.update(overrides)
    return task_end_effect(**args)  # type: ignore[arg-type]


def test_task_end_notices() -> None:
    # The owner ends a contributor's copy, whoever the notice names.
    assert _effect(owned_here=False, source_swarm="alpha") == "end"
    # A contributor's notice to the agent that asked is a message to it.
    assert _effect(to_local_agent=True) == "deliver"
    # ... also when another contributor tells a contributor (only the owner ends its copy).
    assert _effect(owned_here=False, source_swarm="gamma", to_local_agent=True) == "deliver"
    # Our user's direct task to that peer ends with the peer's answer.
    assert _effect(to_direct_caller=True) == "end"
    for refused in (
        {},  # to the user of a task our agents forwarded, or to nobody
        {"owned_here": False, "source_swarm": "gamma"},
    ):
        with pytest.raises(TrustError) as caught:
            _effect(**refused)
        assert caught.value.status == 403 and "cannot finish it" in str(caught.value)


@pytest.mark.parametrize("subject", ["hello", "", "::task_complete::", "::task_error::", " ::x::"])
def test_subjects_a_peer_may_send(subject: str) -> None:
    check_subject(subject, source_swarm="alpha")


@pytest.mark.parametrize(
    "subject",
    ["::maximum_steps_reached::", "::action_complete_broadcast::", "::task_complete:: ", "::"],
)
def test_runtime_subjects_from_a_peer_are_refused(subject: str) -> None:
    with pytest.raises(TrustError) as caught:
        check_subject(subject, source_swarm="alpha")
    assert caught.value.status == 400 and "reserved for the runtime" in str(caught.value)
