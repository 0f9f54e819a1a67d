"""Telemetry through real `mail server` processes: one trace across two swarms over OTLP/HTTP,
/metrics parsed with Prometheus' parser, usage in GET /task and /tasks, budgets over HTTP."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.support.interswarm_agents import swarm_json
from tests.support.otlp_receiver import OTLPReceiver

from server_fixtures import ServerProcess, auth, create_key, free_port, write_config

pytestmark = pytest.mark.timeout(180)
REPO = Path(__file__).resolve().parents[1]


def _side(directory: Path, name: str, remote: str) -> tuple[Path, Path, int]:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "swarms.json").write_text(json.dumps(swarm_json(name, remote)), encoding="utf-8")
    port = free_port()
    # Generous: under load a hop between two busy servers can take seconds.
    config = write_config(directory, port=port, swarm=name, extra="interswarm_timeout = 30.0\n")
    return config, directory / "registries" / "keys.json", port


def test_a_two_swarm_task_is_one_trace_over_otlp_http(tmp_path: Path) -> None:
    with OTLPReceiver() as receiver:
        otel = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        }
        a_cfg, a_keys, a_port = _side(tmp_path / "a", "swarm-alpha", "swarm-beta")
        b_cfg, b_keys, b_port = _side(tmp_path / "b", "swarm-beta", "swarm-alpha")
        keys = {
            "alpha_admin": create_key(a_keys, "admin", "alpha-admin"),
            "alice": create_key(a_keys, "user", "alice"),
            "beta_on_alpha": create_key(a_keys, "agent", "swarm-beta"),
            "beta_admin": create_key(b_keys, "admin", "beta-admin"),
            "alpha_on_beta": create_key(b_keys, "agent", "swarm-alpha"),
        }
        alpha = ServerProcess(
            tmp_path / "a",
            a_port,
            args=["--config", str(a_cfg)],
            env={**otel, "SWARM_AUTH_TOKEN_SWARM_BETA": keys["alpha_on_beta"]},
        ).start()
        beta = ServerProcess(
            tmp_path / "b",
            b_port,
            args=["--config", str(b_cfg)],
            env={**otel, "SWARM_AUTH_TOKEN_SWARM_ALPHA": keys["beta_on_alpha"]},
        ).start()
        try:
            for server, admin, other, other_name in (
                (alpha, "alpha_admin", beta, "swarm-beta"),
                (beta, "beta_admin", alpha, "swarm-alpha"),
            ):
                r = httpx.post(
                    f"{server.base_url}/swarms",
                    json={"name": other_name, "base_url": other.base_url, "volatile": False},
                    headers=auth(keys[admin]),
                    timeout=20,
                )
                assert r.status_code == 200, r.text
            task_id = str(uuid.uuid4())
            r = httpx.post(
                f"{alpha.base_url}/message",
                json={"body": "ping from alice", "task_id": task_id},
                headers=auth(keys["alice"]),
                timeout=120,
            )
            assert r.status_code == 200, r.text
            assert r.json()["response"] == "alpha got: beta says: ping from alice"

            def whole_trace_arrived(spans: list) -> bool:  # type: ignore[type-arg]
                # Every span asserted below: the two servers export in their own batches,
                # and under load one side's arrive seconds after the other's.
                tasks = {s.service: s for s in spans if s.name == "mail.task"}
                if not {"swarm-alpha", "swarm-beta"} <= set(tasks):
                    return False
                ids = {s.span_id: s for s in spans}
                server_span = ids.get(tasks["swarm-beta"].parent_span_id)
                return (
                    server_span is not None
                    and server_span.parent_span_id in ids
                    and any(s.name == "mail.interswarm swarm-alpha" for s in spans)
                )

            spans = receiver.wait_for(whole_trace_arrived, timeout=90)
            tasks = {s.service: s for s in spans if s.name == "mail.task"}
            trace_id = tasks["swarm-alpha"].trace_id
            assert tasks["swarm-beta"].trace_id == trace_id
            by_id = {s.span_id: s for s in spans}
            # beta's task hangs under the HTTP request alpha's interswarm hop made
            server_span = by_id[tasks["swarm-beta"].parent_span_id]
            assert server_span.service == "swarm-beta" and server_span.name.startswith("POST ")
            hop = by_id[server_span.parent_span_id]
            assert hop.service == "swarm-alpha" and hop.name == "mail.interswarm swarm-beta"
            # the answer beta sent back joins the same trace on alpha
            back = [s for s in spans if s.name == "mail.interswarm swarm-alpha"]
            assert back and all(s.trace_id == trace_id for s in back)

            metrics = httpx.get(
                f"{alpha.base_url}/metrics", headers=auth(keys["alpha_admin"]), timeout=10
            )
            assert metrics.status_code == 200
            samples = {
                (s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(metrics.text)
                for s in family.samples
            }
            assert (
                samples[
                    ("mail_interswarm_requests_total", (("outcome", "ok"), ("peer", "swarm-beta")))
                ]
                >= 1
            )
            assert httpx.get(f"{alpha.base_url}/metrics", timeout=10).status_code == 401
        finally:
            alpha.stop()
            beta.stop()


def _metric(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def test_usage_budgets_and_metrics_over_http(tmp_path: Path) -> None:
    shutil.copy(REPO / "swarms.json", tmp_path / "swarms.json")
    keys_file = tmp_path / "registries" / "keys.json"
    admin = create_key(keys_file, "admin", "root")
    port = free_port()
    config = write_config(tmp_path, port=port, swarm="demo")
    server = ServerProcess(tmp_path, port, args=["--config", str(config)]).start()
    try:
        base, headers = server.base_url, auth(admin)
        before = httpx.get(f"{base}/metrics", headers=headers, timeout=10).text
        task_id = str(uuid.uuid4())
        r = httpx.post(
            f"{base}/message",
            json={"body": "What is 6 times 7?", "task_id": task_id},
            headers=headers,
            timeout=60,
        )
        assert r.status_code == 200, r.text
        task = httpx.get(f"{base}/task", params={"task_id": task_id}, headers=headers).json()
        usage = task["usage"]
        assert usage["model_calls"] >= 3 and usage["input_tokens"] > 0 and usage["cost"] == 0
        assert set(usage["by_agent"]) == {"supervisor", "math"}
        summary = httpx.get(f"{base}/tasks", headers=headers).json()[task_id]
        assert summary["usage"]["total_tokens"] == usage["total_tokens"]
        # A2A's HTTP+JSON routes (an app mounted at /a2a) count under their whole template,
        # not with MAIL's GET /tasks (they were labelled `/tasks`, `/tasks/{id}`).
        a2a = {**headers, "A2A-Version": "1.0"}
        assert httpx.get(f"{base}/a2a/tasks", headers=a2a).status_code == 200
        for _ in range(2):
            unknown = httpx.get(f"{base}/a2a/tasks/{uuid.uuid4()}", headers=a2a)
            assert unknown.status_code == 404, unknown.text
            # (a path the mount does not serve, without a key, is no label of its own)
            assert httpx.get(f"{base}/a2a/{uuid.uuid4()}").status_code == 404
        after = httpx.get(f"{base}/metrics", headers=headers, timeout=10).text
        assert (
            _metric(after, "mail_model_calls_total", model="mail/demo")
            - _metric(before, "mail_model_calls_total", model="mail/demo")
            == usage["model_calls"]
        )
        assert _metric(after, "mail_agent_calls_total", agent="math") >= 1
        assert (
            _metric(after, "mail_model_call_tokens_sum", model="mail/demo") == usage["total_tokens"]
        )
        # (mail_tasks counts the tasks held in memory: a finished one leaves once answered.)
        assert _metric(after, "mail_task_answers_total", state="completed") >= 1
        assert _metric(after, "mail_http_request_duration_seconds_count", route="/message") >= 1
        routes = (("/tasks", 1), ("/a2a/tasks", 1), ("/a2a/tasks/{id}", 2), ("/a2a/{path}", 2))
        for route, count in routes:
            counted = _metric(
                after, "mail_http_request_duration_seconds_count", method="GET", route=route
            ) - _metric(
                before, "mail_http_request_duration_seconds_count", method="GET", route=route
            )
            assert counted == count, (route, counted)

        # A budget pauses the task; a bad one is a 400; a raised one continues it.
        paused_id = str(uuid.uuid4())
        r = httpx.post(
            f"{base}/message",
            json={
                "body": "What is 6 times 7?",
                "task_id": paused_id,
                "kwargs": {"max_tokens_total": 1},
            },
            headers=headers,
            timeout=60,
        )
        assert r.status_code == 200 and "max_tokens_total" in r.json()["response"], r.text
        record = httpx.get(f"{base}/task", params={"task_id": paused_id}, headers=headers).json()
        assert record["state"] == "waiting_for_budget" and record["completed"] is True
        bad = httpx.post(
            f"{base}/message",
            json={
                "body": "go on",
                "task_id": paused_id,
                "resume_from": "user_response",
                "kwargs": {"max_cost": "lots"},
            },
            headers=headers,
        )
        assert bad.status_code == 400, bad.text
        # A new task with a malformed budget is refused the same way, before it starts.
        bad_new = httpx.post(
            f"{base}/message",
            json={"body": "x", "kwargs": {"max_tokens_total": "lots"}},
            headers=headers,
        )
        assert bad_new.status_code == 400 and "max_tokens_total" in bad_new.text, bad_new.text
        again = httpx.post(
            f"{base}/message",
            json={"body": "go on", "task_id": paused_id, "resume_from": "user_response"},
            headers=headers,
        )
        assert again.status_code == 409 and "budget" in again.text
        r = httpx.post(
            f"{base}/message",
            json={
                "body": "go on",
                "task_id": paused_id,
                "resume_from": "user_response",
                "kwargs": {"max_tokens_total": 1_000_000},
            },
            headers=headers,
            timeout=60,
        )
        assert r.status_code == 200, r.text
        record = httpx.get(f"{base}/task", params={"task_id": paused_id}, headers=headers).json()
        assert record["state"] == "completed"
    finally:
        assert server.stop() == 0, server.logs()
