"""The ``webhook:URL`` sink against real HTTP servers on 127.0.0.1: payloads, retries, a hung server, the outbox."""

from __future__ import annotations

import http.server
import json
import threading
import time
import warnings
from collections.abc import Iterator

import pytest

from grpo_monitor.sinks import SinkSet, WebhookSink
from grpo_monitor.sinks.auto import sinks_from_specs
from grpo_monitor.sinks.webhook import WebhookError


class Hook:
    """A local HTTP server: answers each POST with the next code of ``codes`` (then 200), or hangs while ``hang``."""

    def __init__(self, codes: tuple[int, ...] = (), hang: bool = False):
        self.codes, self.bodies, self.release = list(codes), [], threading.Event()
        if not hang:
            self.release.set()
        hook = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                hook.release.wait(10)  # a hung server: answers only when the test lets it (bounded)
                code = hook.codes.pop(0) if hook.codes else 200
                hook.bodies.append((code, json.loads(body)))
                try:
                    self.send_response(code)
                    self.end_headers()
                    self.wfile.write(b"ok")
                except OSError:  # the client timed out and left
                    pass

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Hook:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    def delivered(self) -> list[dict]:
        return [body for code, body in self.bodies if code == 200]


@pytest.fixture
def hook() -> Iterator[Hook]:
    with Hook() as h:
        yield h


def test_a_breach_is_posted_once_as_a_slack_payload(hook, make_report, make_violation):
    """A breach held over three steps is one message: Slack's text + header/section/fields blocks."""
    sink = WebhookSink(hook.url, label="run-7")
    sink.log_report(make_report(0))
    for step in (1, 2, 3):
        sink.log_report(make_report(step, violations=[make_violation(step)]))
    sink.log_report(make_report(4))
    sink.log_report(make_report(5, violations=[make_violation(5)]))  # broken again after a clean step
    bodies = hook.delivered()
    assert len(bodies) == 2
    first = bodies[0]
    assert first["text"].startswith("grpo-monitor: invariant breach at step 1\n")
    assert "zero_group_mean" in first["text"] and "observed 0.3" in first["text"]
    assert [b["type"] for b in first["blocks"]] == ["header", "section", "section"]
    fields = [f["text"] for f in first["blocks"][2]["fields"]]
    assert fields == ["*step*\n1", "*invariants*\nzero_group_mean", "*level*\nERROR", "*run*\nrun-7"]
    assert "step 5" in bodies[1]["text"]


def test_an_alert_is_posted_with_its_level(hook):
    """``alert`` (a finding's onset, a part switched off) posts title, text and level."""
    sink = WebhookSink(hook.url)
    sink.alert("grpo-monitor: degenerate_dominated opened", "89% of groups degenerate", "WARN")
    (body,) = hook.delivered()
    assert body["blocks"][0]["text"]["text"] == "grpo-monitor: degenerate_dominated opened"
    assert body["blocks"][1]["text"]["text"] == "89% of groups degenerate"
    assert body["blocks"][2]["fields"] == [{"type": "mrkdwn", "text": "*level*\nWARN"}]


@pytest.mark.parametrize("codes, delivered", [((503, 500), True), ((503, 503, 503), False), ((429,), True)],
                         ids=["fails-twice-then-succeeds", "fails-past-the-retries", "rate-limited-once"])
def test_retries_with_backoff(codes, delivered):
    """Server errors and 429 are retried (bounded: retries + 1 attempts); what still fails stays in the outbox."""
    with Hook(codes) as server:
        sink = WebhookSink(server.url, retries=2, backoff=0.05, max_backoff=0.1)
        start = time.monotonic()
        if delivered:
            sink.alert("t", "x")
        else:
            with pytest.raises(WebhookError, match="3 attempts failed"):
                sink.alert("t", "x")
        took = time.monotonic() - start
        assert len(server.bodies) == min(len(codes) + 1, 3)
        assert took >= 0.05 * (len(server.bodies) - 1)  # backed off between attempts
        assert len(sink.outbox) == (0 if delivered else 1)
        if not delivered:
            sink.alert("u", "y")  # the next call delivers the kept message first, then its own
            assert [b["text"] for b in server.delivered()] == ["t\nx", "u\ny"] and not sink.outbox


def test_a_refused_message_is_not_retried():
    """A 4xx (not 429) is the server refusing the message: one attempt, a worded error."""
    with Hook((400,)) as server:
        sink = WebhookSink(server.url, retries=3, backoff=0.05)
        with pytest.raises(WebhookError, match="refused the message: HTTP 400"):
            sink.alert("t", "x")
        assert len(server.bodies) == 1


def test_the_outbox_is_bounded():
    """Undeliverable messages are kept up to ``queue_size``; older ones are dropped and counted."""
    sink = WebhookSink("http://127.0.0.1:9/nothing-listens", retries=0, backoff=0.01, queue_size=3, timeout=1)
    for i in range(5):
        with pytest.raises(WebhookError):
            sink.alert(f"t{i}", "x")
    assert [m["blocks"][0]["text"]["text"] for m in sink.outbox] == ["t2", "t3", "t4"] and sink.dropped == 2


def test_a_hung_server_never_delays_training(make_report, make_violation):
    """Through a SinkSet, emit returns at once while the server hangs; each request times out (bounded), the
    failures are counted and warned, and the sink is disabled after max_failures, never blocking the run."""
    with Hook(hang=True) as server:
        sink = WebhookSink(server.url, timeout=0.2, retries=1, backoff=0.05)
        sinks = SinkSet([sink], stall_timeout=5.0, flush_timeout=5.0, max_failures=3)
        start = time.monotonic()
        for step in range(20):
            sinks.emit(make_report(step, violations=[make_violation(step)] if step % 2 else []))
        for i in range(3):
            sinks.alert(f"alert {i}", "text")
        assert time.monotonic() - start < 0.5  # the training thread never waited on the server
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            sinks.finish()
        health = sinks.health_of(sink)
        assert health.disabled and health.total_failures == 3
        assert any("TimeoutError" in str(w.message) for w in caught)
        assert time.monotonic() - start < 5.0  # 3 failed calls of 2 attempts x 0.2 s, then disabled


@pytest.mark.parametrize("spec", ["webhook:http://127.0.0.1:8080/h", "WEBHOOK:https://hooks.example/x"],
                         ids=["http", "https-upper-case-name"])
def test_the_spec_builds_the_sink(spec):
    """``webhook:URL`` in a sink spec list (GRPO_MONITOR_CONFIG's "sinks") gives a WebhookSink for that URL."""
    (sink,) = sinks_from_specs([spec])
    assert isinstance(sink, WebhookSink) and sink.url == spec.split(":", 1)[1]


def test_grpo_monitor_config_names_a_webhook():
    """GRPO_MONITOR_CONFIG's "sinks" (what Ray workers attach with) takes "webhook:URL" beside the others."""
    from grpo_monitor.integrations._from_env import ENV, settings_from_env

    config, sinks = settings_from_env({ENV: '{"group_size": 4, "sinks": ["auto", "webhook:http://127.0.0.1:9/h"]}'})
    assert config.group_size == 4 and sinks[0] == "auto"
    assert isinstance(sinks[1], WebhookSink) and sinks[1].url == "http://127.0.0.1:9/h"


@pytest.mark.parametrize("spec", ["webhook", "webhook:", "webhook:ftp://x.example/h", "webhook:hooks.slack.com"],
                         ids=["no-url", "empty-url", "ftp", "no-scheme"])
def test_a_bad_url_is_worded(spec):
    """A spec without an http(s) URL names the argument, what was expected and what came."""
    with pytest.raises(ValueError, match=r"`url` to be an http:// or https:// URL \(webhook:URL\) but got"):
        sinks_from_specs([spec])


def test_a_real_monitor_posts_a_finding_onset_and_clearing(hook):
    """A GRPOMonitor with the webhook: all-top-reward groups open degenerate_dominated (one structured message with
    its severity, evidence and remedies), varied rewards clear it (one message); nothing is posted per step."""
    torch = pytest.importorskip("torch")
    from grpo_monitor import GRPOMonitor, MonitorConfig

    gen = torch.Generator().manual_seed(0)
    monitor = GRPOMonitor(MonitorConfig(group_size=4, std_convention="population"), sinks=[WebhookSink(hook.url)])
    for step in range(14):
        saturated = 2 <= step < 8
        rewards = torch.ones(6, 4, dtype=torch.float64) if saturated else \
            (torch.rand(6, 4, generator=gen, dtype=torch.float64) < 0.5).double()
        adv = (rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True, correction=0) + 1e-6)
        monitor.observe_rollout(rewards, advantages=adv, question_ids=list(range(100 * step, 100 * step + 6)))
        monitor.end_step(step=step)
    monitor.close()
    titles = [b["blocks"][0]["text"]["text"] for b in hook.delivered()]
    onset = [b for b in hook.delivered() if b["blocks"][0]["text"]["text"].startswith(
        "grpo-monitor: degenerate_dominated (stalled) at step")]
    assert len(onset) == 1, titles
    fields = {f["text"].split("\n")[0].strip("*"): f["text"].split("\n", 1)[1] for f in onset[0]["blocks"][2]["fields"]}
    assert fields["finding"] == "degenerate_dominated" and fields["severity"] == "stalled"
    assert fields["status"] == "stalled" and "degenerate_rate 1" in fields["evidence"]
    assert onset[0]["blocks"][3]["text"]["text"].startswith("*Remedies*\n• ")
    assert "100% saturated" in onset[0]["text"]
    assert sum(t.startswith("grpo-monitor: degenerate_dominated cleared at step") for t in titles) == 1
    assert len(titles) == len(set(titles)) < 8  # onsets and clearings only, never one per step
