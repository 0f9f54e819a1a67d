"""The pure parts of push delivery: what an answer means, the schedule, Retry-After, when a
subscription is disabled, which task endings are which events, and payload bounds."""

from __future__ import annotations

import email.utils
import json
import random
import time
from typing import Any

import pytest

from mail.webhook_settings import WebhooksConfig
from mail.webhooks import engine, signing
from mail.webhooks import events as ev
from mail.webhooks.engine import DeliveryEngine
from mail.webhooks.transport import Answer, WebhookTransport


@pytest.mark.parametrize(
    ("status", "verdict"),
    [
        (200, "delivered"),
        (204, "delivered"),
        (None, "retry"),
        (408, "retry"),
        (429, "retry"),
        (500, "retry"),
        (503, "retry"),
        (410, "gone"),
        (400, "failed"),
        (404, "failed"),
        (301, "failed"),
    ],
)
def test_what_an_answer_means(status: int | None, verdict: str) -> None:
    assert engine.classify(status) == verdict


def test_a_refused_address_fails_at_once() -> None:
    assert engine.classify(None, refused=True) == "failed"


def test_retry_after_seconds_and_dates_are_capped() -> None:
    now = time.time()
    assert engine.retry_after("120", now, 3600) == 120
    assert engine.retry_after("999999", now, 3600) == 3600
    later = email.utils.formatdate(now + 300, usegmt=True)
    assert 290 <= (engine.retry_after(later, now, 3600) or 0) <= 301
    assert engine.retry_after("soon", now, 3600) is None
    assert engine.retry_after(None, now, 3600) is None


def test_the_schedule_spreads_delays_and_ends() -> None:
    schedule = engine.Schedule([10, 100], jitter=0.2)
    rng = random.Random(1)
    delays = [schedule.next_delay(0, rng=rng) for _ in range(200)]
    assert all(8 <= d <= 12 for d in delays if d is not None) and len(set(delays)) > 10
    assert schedule.next_delay(2) is None
    assert schedule.attempts == 3
    assert (schedule.next_delay(0, asked=500) or 0) >= 500  # a Retry-After asking for more


def test_the_default_schedule_spans_about_a_day() -> None:
    total = sum(WebhooksConfig().retry_schedule)
    assert 20 * 3600 <= total <= 30 * 3600


def _engine(**settings: Any) -> DeliveryEngine:
    cfg = WebhooksConfig(**settings)
    return DeliveryEngine(None, cfg, "s", WebhookTransport(cfg))  # type: ignore[arg-type]


def _row(**fields: Any) -> dict[str, Any]:
    row = {
        "delivery_id": "msg_1",
        "subscription_id": "wh_1",
        "attempts": 0,
        "retry_index": 0,
        "failing_since": None,
    }
    row.update(fields)
    return row


def test_a_failure_starts_the_failing_clock_and_a_success_stops_it() -> None:
    engine = _engine(retry_schedule=[1.0], retry_jitter=0.0)
    delivery, sub, outcome = engine._outcome(_row(), Answer(500, 3.0), "retry", 1000.0)
    assert outcome == "retry" and delivery["status"] == "pending"
    assert delivery["next_attempt_at"] == 1001.0 and delivery["retry_index"] == 1
    assert sub == {"subscription_id": "wh_1", "failing_since": 1000.0, "updated_at": 1000.0}
    # The schedule used up: failed, saying so.
    delivery, _, outcome = engine._outcome(_row(retry_index=1), Answer(500, 1.0), "retry", 1002.0)
    assert outcome == "failed" and delivery["status"] == "failed"
    assert "gave up after 1 attempts; last: HTTP 500" in delivery["last_error"]
    # Still failing, not for long: nothing changes on the subscription.
    _, sub, _ = engine._outcome(_row(failing_since=990.0), Answer(500, 1.0), "retry", 1000.0)
    assert sub is None
    delivery, sub, outcome = engine._outcome(
        _row(failing_since=990.0), Answer(200, 1.0), "delivered", 1000.0
    )
    assert outcome == "delivered" and delivery["status"] == "delivered"
    assert sub == {"subscription_id": "wh_1", "failing_since": None, "updated_at": 1000.0}


def test_failing_for_disable_after_disables_with_a_notice() -> None:
    engine = _engine(disable_after=3600.0)
    _, sub, _ = engine._outcome(
        _row(failing_since=0.0), Answer(None, 1.0, error="boom"), "retry", 3600.0
    )
    assert sub is not None and sub["active"] is False
    assert (
        "no delivery succeeded since" in sub["disabled_reason"] and "boom" in sub["disabled_reason"]
    )


def test_gone_disables_at_once() -> None:
    engine = _engine()
    delivery, sub, outcome = engine._outcome(_row(), Answer(410, 1.0), "gone", 5.0)
    assert outcome == "gone" and delivery["status"] == "failed"
    assert sub is not None and sub["active"] is False and "410 Gone" in sub["disabled_reason"]


def test_a_retry_after_that_asks_for_longer_is_honoured() -> None:
    engine = _engine(retry_schedule=[1.0], retry_jitter=0.0)
    delivery, _, _ = engine._outcome(_row(), Answer(429, 1.0, retry_after="60"), "retry", 100.0)
    assert delivery["next_attempt_at"] == 160.0


@pytest.mark.parametrize(
    ("subject", "event_type"),
    [
        ("::task_complete::", "task.completed"),
        ("Re: your question", "task.completed"),
        ("::task_error::", "task.failed"),
        ("::task_timeout::", "task.failed"),
        ("::agent_error::", "task.failed"),
        ("::interswarm_error::", "task.failed"),
        ("::task_cancelled::", "task.cancelled"),
        ("::breakpoint_tool_call::", "task.paused.breakpoint"),
        ("::action_review::", "task.paused.review"),
        ("::budget_exceeded::", "task.paused.budget"),
    ],
)
def test_task_answers_become_event_types(subject: str, event_type: str) -> None:
    assert ev.answer_type(subject) == event_type


def test_payloads_are_bounded_and_shaped() -> None:
    body = json.loads(
        ev.payload(
            "task.completed",
            event_id="evt_1",
            occurred_at=0.0,
            task_id="t",
            caller=("user", "u"),
            swarm="s",
            summary="x" * 50,
            summary_chars=10,
        )
    )
    assert body["type"] == "task.completed" and body["timestamp"] == "1970-01-01T00:00:00Z"
    assert body["data"]["summary"] == "x" * 10 and body["data"]["summary_truncated"] is True


def test_patterns() -> None:
    assert (
        ev.valid_pattern("*") and ev.valid_pattern("task.*") and ev.valid_pattern("task.paused.*")
    )
    assert not ev.valid_pattern("nope.*") and not ev.valid_pattern("task.done")


def test_secrets_and_signatures() -> None:
    secret = signing.new_secret()
    assert signing.check_secret(secret) is None
    assert signing.check_secret("whsec_c2hvcnQ=") is not None  # 5 bytes: too short
    assert signing.check_secret("nope") is not None
    old = signing.new_secret()
    sub = {"secret": secret, "previous_secret": old, "previous_secret_until": 100.0}
    assert signing.signing_secrets(sub, 50.0) == [secret, old]
    assert signing.signing_secrets(sub, 150.0) == [secret]
    headers = signing.headers("msg_1", 1_700_000_000, "{}", [secret, old])
    assert headers["webhook-signature"].count("v1,") == 2


def test_the_openapi_event_patterns_are_exactly_what_a_subscription_accepts() -> None:
    import yaml

    from server_fixtures import REPO_ROOT

    spec = yaml.safe_load((REPO_ROOT / "spec" / "openapi.yaml").read_text())
    listed = spec["components"]["schemas"]["WebhookEventPattern"]["enum"]
    assert all(ev.valid_pattern(p) for p in listed)
    prefixes = {
        ".".join(t.split(".")[:i]) + ".*"
        for t in ev.EVENT_TYPES
        for i in range(1, t.count(".") + 1)
    }
    assert set(listed) == {"*", *ev.EVENT_TYPES, *prefixes}
    assert not ev.valid_pattern("") and not ev.valid_pattern("nope.*")


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("https://example.com:0/hook", "port 0"),
        ("https://exa\x01mple.com/hook", "control characters"),
        ("https://example.com/ho ok", "spaces"),
        ("https://example.com/hook\x7f", "control characters"),
        ("ftp://example.com/hook", "http:// or https://"),
        ("https://example.com:99999/", "not a valid URL"),
    ],
)
def test_malformed_urls_are_refused_with_the_reason(url: str, says: str) -> None:
    from mail.webhooks.transport import UrlRefused, check_url_form

    with pytest.raises(UrlRefused, match=says):
        check_url_form(url, 2048)
    assert check_url_form(" https://example.com:8443/hook?a=1 ", 2048).endswith("?a=1")
