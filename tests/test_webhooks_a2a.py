"""A2A push notifications: the SDK's own client against a real `mail server`, and a real
receiver process.

The card says ``pushNotifications: true``; push configs are created, read, listed and deleted
per task and per caller; a breakpoint pause reaches the receiver as ``input-required``, with
the config's token and authentication headers; a config's URL passes the address guard.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import httpx
import pytest
from a2a.types.a2a_pb2 import (
    AuthenticationInfo,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    ListTaskPushNotificationConfigsRequest,
    SendMessageConfiguration,
    TaskPushNotificationConfig,
    TaskState,
)
from tests.support.webhook_receiver import ReceiverProcess

from server_fixtures import ROOT_ALICE_BOB, ServerProcess, free_port, keyed_stub_server
from support.a2a_clients import a2a_client, collect, message

pytestmark = pytest.mark.timeout(240)

WEBHOOKS = """
[server.webhooks]
allowed_hosts = ["127.0.0.1"]
retry_schedule = [0.2, 0.2]
poll_interval = 0.2
"""


@pytest.fixture(scope="module")
def servers(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ServerProcess, ReceiverProcess]]:
    root = tmp_path_factory.mktemp("a2a_push")
    receiver = ReceiverProcess(free_port(), root).start()
    try:
        with keyed_stub_server(root, ROOT_ALICE_BOB, extra=WEBHOOKS) as server:
            yield server, receiver
    finally:
        receiver.stop()


def _push_states(entries: list[dict[str, Any]]) -> list[str]:
    """The pushed states in the order they happened: deliveries are at least once and not in
    order (docs/webhooks.md; a `working` push sent just before the pause may arrive after
    it on a loaded machine), so by the status's own timestamp, not by arrival."""
    states = []
    for entry in entries:
        body = json.loads(entry["body"])
        if "statusUpdate" in body:  # (stamped; the task's first snapshot, below, is not)
            status = body["statusUpdate"]["status"]
            assert status.get("timestamp"), body
            when = datetime.fromisoformat(status["timestamp"].replace("Z", "+00:00"))
            states.append((when.timestamp(), status["state"]))
        elif "task" in body:
            states.append((0.0, body["task"]["status"]["state"]))
    return [state for _, state in sorted(states, key=lambda pair: pair[0])]


async def test_the_card_offers_push_notifications(
    servers: tuple[ServerProcess, ReceiverProcess],
) -> None:
    server, _ = servers
    card = httpx.get(f"{server.base_url}/.well-known/agent-card.json", timeout=30).json()
    assert card["capabilities"]["pushNotifications"] is True


async def test_a_pause_is_pushed_as_input_required_with_token_and_auth(
    servers: tuple[ServerProcess, ReceiverProcess],
) -> None:
    server, receiver = servers
    config = TaskPushNotificationConfig(
        url=receiver.url("/a2a-alice"),
        token="tok-123",
        authentication=AuthenticationInfo(scheme="Bearer", credentials="receiver-secret"),
    )
    request = message("BREAKPOINT may I?")
    request.configuration.CopyFrom(SendMessageConfiguration(task_push_notification_config=config))
    async with a2a_client(server.base_url, server.keys["alice"], streaming=False) as client:
        events = await collect(client, request)
    task = events[-1].task
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    deadline = time.monotonic() + 20
    while "TASK_STATE_INPUT_REQUIRED" not in _push_states(receiver.received("/a2a-alice")):
        assert time.monotonic() < deadline, receiver.received("/a2a-alice")
        time.sleep(0.05)
    got = receiver.received("/a2a-alice")
    for entry in got:
        assert entry["headers"]["x-a2a-notification-token"] == "tok-123"
        assert entry["headers"]["authorization"] == "Bearer receiver-secret"
        assert entry["headers"]["webhook-id"].startswith("msg_")
        body = json.loads(entry["body"])
        update = body.get("statusUpdate") or body.get("task")
        assert update["taskId" if "statusUpdate" in body else "id"] == task.id
    # Only state changes are pushed, not the per-MAIL-event `working` updates.
    states = _push_states(got)
    assert states[-1] == "TASK_STATE_INPUT_REQUIRED"
    assert len(states) <= 4, states
    paused = [json.loads(e["body"]) for e in got if "INPUT_REQUIRED" in e["body"]][0]
    parts = paused["statusUpdate"]["status"]["message"]["parts"]
    assert any(p.get("data", {}).get("mail_pause") == "breakpoint" for p in parts), parts


async def test_push_configs_are_created_listed_and_deleted_per_caller(
    servers: tuple[ServerProcess, ReceiverProcess],
) -> None:
    server, receiver = servers
    async with a2a_client(server.base_url, server.keys["alice"], streaming=False) as client:
        events = await collect(client, message("BREAKPOINT hold"))
        task_id = events[-1].task.id
        made = await client.create_task_push_notification_config(
            TaskPushNotificationConfig(
                task_id=task_id, id="cfg-1", url=receiver.url("/a2a-cfg"), token="t1"
            )
        )
        assert made.id == "cfg-1" and made.url == receiver.url("/a2a-cfg")
        await client.create_task_push_notification_config(
            TaskPushNotificationConfig(task_id=task_id, id="cfg-2", url=receiver.url("/a2a-cfg2"))
        )
        got = await client.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=task_id, id="cfg-1")
        )
        assert got.token == "t1"
        listed = await client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task_id)
        )
        assert sorted(c.id for c in listed.configs) == ["cfg-1", "cfg-2"]
        # The guard: a private address is refused.
        with pytest.raises(Exception, match="allowed_hosts"):
            await client.create_task_push_notification_config(
                TaskPushNotificationConfig(task_id=task_id, id="bad", url="http://10.0.0.7/x")
            )
        await client.delete_task_push_notification_config(
            DeleteTaskPushNotificationConfigRequest(task_id=task_id, id="cfg-2")
        )
        listed = await client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task_id)
        )
        assert [c.id for c in listed.configs] == ["cfg-1"]
    # Bob cannot see alice's task, let alone its configs.
    async with a2a_client(server.base_url, server.keys["bob"], streaming=False) as client:
        with pytest.raises(Exception):  # noqa: B017 - the SDK's task-not-found error
            await client.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=task_id)
            )
    # Resuming the paused task pushes its completion to the remaining config.
    async with a2a_client(server.base_url, server.keys["alice"], streaming=False) as client:
        resumed = message(
            "",
            {"breakpoint_tool_call_result": "yes"},
            context_id=events[-1].task.context_id,
            task_id=task_id,
        )
        await collect(client, resumed)
    deadline = time.monotonic() + 20
    while "TASK_STATE_COMPLETED" not in _push_states(receiver.received("/a2a-cfg")):
        assert time.monotonic() < deadline, receiver.received("/a2a-cfg")
        time.sleep(0.05)
    assert receiver.received("/a2a-cfg2") == []


async def test_concurrent_push_config_creates_keep_the_bound(
    servers: tuple[ServerProcess, ReceiverProcess],
) -> None:
    """300 configs created at once on one task, from three clients, and again on two more
    tasks: the bound (max_push_configs_per_task, 10) is checked and the config stored in one
    transaction, so each task keeps 10 (of 100 at once, 15 were kept)."""
    server, receiver = servers
    async with contextlib.AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(
                a2a_client(server.base_url, server.keys["bob"], streaming=False)
            )
            for _ in range(3)
        ]
        for burst in range(3):
            hold = message(f"BREAKPOINT hold on {burst}")
            task_id = (await collect(clients[0], hold))[-1].task.id

            async def create(n: int, task_id: str = task_id) -> str | None:
                config = TaskPushNotificationConfig(
                    task_id=task_id, id=f"burst-{n}", url=receiver.url(f"/burst-{n}")
                )
                try:
                    await clients[n % 3].create_task_push_notification_config(config)
                except Exception as exc:  # noqa: BLE001 - the SDK's InvalidParams error
                    return str(exc)
                return None

            refusals = await asyncio.gather(*(create(n) for n in range(300)))
            listed = await clients[0].list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=task_id)
            )
            kept = {c.id for c in listed.configs}
            assert len(kept) == 10, (burst, sorted(kept))
            assert {f"burst-{n}" for n, why in enumerate(refusals) if why is None} == kept
            assert all("max_push_configs_per_task" in why for why in refusals if why), refusals


PER_CALLER = 4  # [server.webhooks] max_push_configs_per_caller, here


@pytest.fixture(scope="module")
def bounded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("a2a_push_per_caller")
    users = {"carol": ("user", "carol"), "dave": ("user", "dave")}
    extra = WEBHOOKS + f"max_push_configs_per_caller = {PER_CALLER}\n"
    with keyed_stub_server(root, users, extra=extra) as server:
        yield server


async def test_a_caller_keeps_at_most_max_push_configs_per_caller_across_tasks(
    bounded: ServerProcess,
) -> None:
    """30 configs created at once across three tasks (each of which may hold 10): the
    caller keeps 4 in all (`max_push_configs_per_caller`), the rest are refused naming it,
    nothing of theirs stored; replacing a kept config is not a new one; another caller is
    not affected. (Only the per-task bound counted: a caller could keep 10 on every task.)"""
    url = "http://127.0.0.1:9/never-sent"
    async with a2a_client(bounded.base_url, bounded.keys["carol"], streaming=False) as client:
        tasks = [
            (await collect(client, message(f"BREAKPOINT hold {n}")))[-1].task.id for n in range(3)
        ]

        async def create(n: int) -> str | None:
            config = TaskPushNotificationConfig(task_id=tasks[n % 3], id=f"c-{n}", url=url)
            try:
                await client.create_task_push_notification_config(config)
            except Exception as exc:  # noqa: BLE001 - the SDK's InvalidParams error
                return str(exc)
            return None

        refusals = await asyncio.gather(*(create(n) for n in range(30)))
        kept: dict[str, str] = {}
        for task_id in tasks:
            listed = await client.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=task_id)
            )
            kept.update({c.id: task_id for c in listed.configs})
        assert len(kept) == PER_CALLER, kept
        assert {f"c-{n}" for n, why in enumerate(refusals) if why is None} == set(kept)
        assert all("max_push_configs_per_caller" in why for why in refusals if why), refusals
        # Replacing one of them is allowed (the same config, a new URL); a new one is not.
        config_id, task_id = next(iter(kept.items()))
        again = await client.create_task_push_notification_config(
            TaskPushNotificationConfig(task_id=task_id, id=config_id, url=url + "/2")
        )
        assert again.url == url + "/2"
        with pytest.raises(Exception, match="max_push_configs_per_caller"):
            await client.create_task_push_notification_config(
                TaskPushNotificationConfig(task_id=task_id, id="one-more", url=url)
            )
        # Deleting one makes room.
        await client.delete_task_push_notification_config(
            DeleteTaskPushNotificationConfigRequest(task_id=task_id, id=config_id)
        )
        await client.create_task_push_notification_config(
            TaskPushNotificationConfig(task_id=task_id, id="one-more", url=url)
        )
    async with a2a_client(bounded.base_url, bounded.keys["dave"], streaming=False) as client:
        task_id = (await collect(client, message("BREAKPOINT hold")))[-1].task.id
        made = await client.create_task_push_notification_config(
            TaskPushNotificationConfig(task_id=task_id, id="mine", url=url)
        )
        assert made.id == "mine"


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
async def test_a_push_config_id_over_the_limit_is_refused(
    servers: tuple[ServerProcess, ReceiverProcess], binding: str
) -> None:
    """A config's id is the caller's choice and is stored with it: at most 1024 characters
    (mail.a2a.bridge.MAX_A2A_ID_CHARS, as messageId), refused as invalid params."""
    server, receiver = servers
    key = server.keys["alice"]
    async with a2a_client(server.base_url, key, streaming=False, binding=binding) as client:
        task_id = (await collect(client, message("BREAKPOINT hold")))[-1].task.id
        long_id = TaskPushNotificationConfig(
            task_id=task_id, id="c" * 1025, url=receiver.url("/a2a-long-id")
        )
        with pytest.raises(Exception, match="id is 1025 characters; the limit is 1024"):
            await client.create_task_push_notification_config(long_id)
        listed = await client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task_id)
        )
        assert list(listed.configs) == []
        long_id.id = "c" * 1024
        made = await client.create_task_push_notification_config(long_id)
        assert made.id == "c" * 1024


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
async def test_a_push_config_a_delivery_could_not_send_is_refused(
    servers: tuple[ServerProcess, ReceiverProcess], binding: str
) -> None:
    """A token, authentication or url with CR/LF (or another control character) was taken,
    then every delivery failed quietly (no HTTP request can carry it): now the create is
    invalid params naming the field, and a send carrying such a config runs nothing."""
    server, receiver = servers
    key = server.keys["bob"]
    url = receiver.url("/a2a-ctl")
    bad = {
        "token": TaskPushNotificationConfig(url=url, token="tok\r\nX-Injected: 1"),
        "authentication.credentials": TaskPushNotificationConfig(
            url=url, authentication=AuthenticationInfo(scheme="Bearer", credentials="s\nx")
        ),
        "authentication.scheme": TaskPushNotificationConfig(
            url=url, authentication=AuthenticationInfo(scheme="Bea\x00rer", credentials="s")
        ),
        "url": TaskPushNotificationConfig(url=url + "\r\nHost: elsewhere"),
    }
    async with a2a_client(server.base_url, key, streaming=False, binding=binding) as client:
        task_id = (await collect(client, message("BREAKPOINT hold")))[-1].task.id
        for field, config in bad.items():
            config.task_id, config.id = task_id, field
            with pytest.raises(Exception, match=f"parameter '{field}' contains .*control"):
                await client.create_task_push_notification_config(config)
        # Nor a value longer than a header takes (each delivery would carry it).
        long = TaskPushNotificationConfig(url=url, token="t" * 9000, task_id=task_id, id="long")
        with pytest.raises(Exception, match="'token' is 9000 characters; the limit is 8192"):
            await client.create_task_push_notification_config(long)
        both = AuthenticationInfo(scheme="s" * 100, credentials="c" * 8150)  # one header
        long = TaskPushNotificationConfig(url=url, authentication=both, task_id=task_id, id="a")
        with pytest.raises(Exception, match="'authentication' is 8251 characters"):
            await client.create_task_push_notification_config(long)
        listed = await client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task_id)
        )
        assert list(listed.configs) == []
        before = httpx.get(f"{server.base_url}/tasks", headers={"Authorization": f"Bearer {key}"})
        on_send = message("never run")
        on_send.configuration.CopyFrom(
            SendMessageConfiguration(task_push_notification_config=bad["token"])
        )
        with pytest.raises(Exception, match="parameter 'token' contains control characters"):
            await collect(client, on_send)
        after = httpx.get(f"{server.base_url}/tasks", headers={"Authorization": f"Bearer {key}"})
        assert set(after.json()) == set(before.json())
