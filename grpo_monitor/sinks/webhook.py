"""``webhook:URL``: run-health findings and invariant breaches posted to a chat webhook (Slack-compatible JSON).

Each message is one ``POST`` of ``{"text": ..., "blocks": [...]}`` — the shape Slack's incoming
webhooks take (Mattermost and most chat bridges read ``text``): a header, the paragraph, and the
structured fields (severity, step, the evidence figures, the trainer options that fix it). Only
changes are posted: a finding's onset and clearing, an invariant's first breach after a clean
step, and the monitor's own alerts — never one message per step.

The sink runs in its :class:`~grpo_monitor.sinks.SinkSet` worker thread (``synchronous = False``):
training never waits on it. Its own delivery is bounded: each request times out after
``timeout`` seconds and is retried ``retries`` times with exponential backoff (``backoff``,
doubled, at most ``max_backoff``; a 429's ``Retry-After`` within that bound); a message that
still fails stays in an outbox of at most ``queue_size`` messages (the oldest dropped and
counted) and is retried first on the next call, while the worker backs the sink off.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import WebhookError as WebhookError  # its home; this old path keeps working
from ..report import StepReport
from .base import Sink

#: Slack's limits: header text, a section's text, a field's text, fields per section.
_HEADER, _SECTION, _FIELD, _FIELDS = 150, 3000, 2000, 10


class WebhookSink(Sink):
    """Posts finding onsets/clearings, breach onsets and alerts to ``url`` (see the module docstring).

    >>> sink = WebhookSink("http://127.0.0.1:9/hook")
    >>> sink.name, sink.synchronous
    ('webhook', False)
    """

    name = "webhook"

    def __init__(self, url: str, *, timeout: float = 5.0, retries: int = 2, backoff: float = 0.5,
                 max_backoff: float = 4.0, queue_size: int = 64, label: str | None = None):
        _check_url(url)
        for arg, value in (("timeout", timeout), ("backoff", backoff), ("max_backoff", max_backoff)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"Expected argument `{arg}` to be a number of seconds > 0 but got {value!r}")
        for arg, value, low in (("retries", retries, 0), ("queue_size", queue_size, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"Expected argument `{arg}` to be an int >= {low} but got {value!r}")
        self.url, self.timeout, self.retries = url, float(timeout), retries
        self.backoff, self.max_backoff, self.label = float(backoff), float(max_backoff), label
        self.outbox: deque[dict[str, Any]] = deque(maxlen=queue_size)
        self.dropped = 0  # messages pushed out of the full outbox
        self.delivered = 0
        self._broken: set[str] = set()  # invariants broken at the last reported step
        self._integration: str | None = None
        self._health: Any = None  # the last report's HealthUpdate (None before run health or without it)
        self._step: int | None = None

    @classmethod
    def from_spec(cls, argument: str | None) -> WebhookSink:
        """``webhook:URL`` (the URL stripped; its check names what a URL must be)."""
        return cls((argument or "").strip())

    # ------------------------------------------------------------------ what is posted

    def alert(self, title: str, text: str, level: str = "ERROR") -> None:
        """Post an alert: a finding's onset or clearing (structured from the step's report when this sink saw it:
        the monitor alerts right after handing the report over), a part switched off, ..."""
        structured = _finding_message(title, level, self._health, self._step, self._where())
        self._send(structured or message(title, text, {"level": level, **self._where()}))

    def log_report(self, report: StepReport) -> None:
        """Post the invariants first broken at this step (a breach held over several steps is posted once)."""
        self._health, self._step = getattr(report, "health", None), report.step
        if report.run is not None:
            self._integration = report.run.get("integration")
        names = {v.invariant for v in report.violations}
        new = [v for v in report.violations if v.invariant not in self._broken]
        self._broken = names
        if new:
            first = {v.invariant: v for v in reversed(new)}  # one line per invariant, its first record
            body = "\n".join(f"• {v.message()}" for v in reversed(first.values()))
            level = "ERROR" if any(v.severity == "error" for v in new) else "WARN"
            fields = {"step": report.step, "invariants": ", ".join(first), "level": level, **self._where()}
            self._send(message(f"grpo-monitor: invariant breach at step {report.step}", body, fields))
        elif self.outbox:  # what an earlier call could not deliver
            self._flush()

    def finish(self, failed: bool = False) -> None:
        """Try once more to deliver what the outbox holds (bounded like every call)."""
        if self.outbox:
            self._flush()

    def _where(self) -> dict[str, Any]:
        return {k: v for k, v in (("run", self.label), ("integration", self._integration)) if v}

    # ------------------------------------------------------------------ delivery
    def _send(self, payload: dict[str, Any]) -> None:
        if len(self.outbox) == self.outbox.maxlen:
            self.dropped += 1
        self.outbox.append(payload)
        self._flush()

    def _flush(self) -> None:
        """Deliver the outbox in order; raise :class:`WebhookError` at the first message that still fails."""
        while self.outbox:
            self._post(self.outbox[0])
            self.outbox.popleft()
            self.delivered += 1

    def _post(self, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        wait, error = self.backoff, ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(wait)
                wait = min(2 * wait, self.max_backoff)
            request = urllib.request.Request(self.url, data=data, method="POST",
                                             headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310 - http(s) only
                    response.read(1 << 16)
                return
            except urllib.error.HTTPError as exc:
                error = f"HTTP {exc.code} {exc.reason}"
                if exc.code != 429 and exc.code < 500:  # the server refuses this message: no retry helps
                    raise WebhookError(f"webhook {self.url} refused the message: {error}") from None
                wait = min(max(wait, _retry_after(exc.headers)), self.max_backoff)
            except (OSError, ValueError) as exc:  # URLError, a timeout, a reset connection
                error = repr(getattr(exc, "reason", exc))
        raise WebhookError(f"webhook {self.url}: {self.retries + 1} attempts failed (last: {error}); "
                           f"{len(self.outbox)} message(s) kept for the next call")


def _check_url(url: Any) -> None:
    if not isinstance(url, str) or not url.lower().startswith(("http://", "https://")) or len(url) < 10:
        raise ValueError(f"Expected argument `url` to be an http:// or https:// URL (webhook:URL) but got {url!r}")


def _retry_after(headers: Any) -> float:
    """A 429/503's ``Retry-After`` in seconds (0 when absent or not a number)."""
    try:
        return max(0.0, float((headers or {}).get("Retry-After", 0)))
    except (TypeError, ValueError):
        return 0.0


def _finding_message(title: str, level: str, health: Any, step: int | None,
                     where: dict[str, Any]) -> dict[str, Any] | None:
    """The structured payload of a finding's onset or clearing named by ``title`` (the monitor's alert titles:
    ``grpo-monitor: <name> (<severity>)``, ``grpo-monitor: <name> cleared``), or None when ``health`` lacks it."""
    if health is None:
        return None
    for state in health.opened:
        if title == f"grpo-monitor: {state.name} ({state.severity})":
            evidence = ", ".join(f"{k} {_figure(v)}" for k, v in list(state.evidence.items())[:6])
            fields = {"status": health.status_name, "finding": state.name, "severity": state.severity,
                      "step": state.step, "figure": _figure(state.figure), "evidence": evidence or None,
                      "level": level, **where}
            return message(f"grpo-monitor: {state.name} ({state.severity}) at step {state.step}", state.message,
                           fields, state.remedies)
    for name in health.cleared:
        if title == f"grpo-monitor: {name} cleared":
            return message(f"grpo-monitor: {name} cleared at step {step}",
                           f"The run-health finding {name} no longer holds; run health is {health.status_name}.",
                           {"status": health.status_name, "finding": name, "step": step, "level": level, **where})
    return None


def _figure(value: float) -> str:
    return f"{value:.4g}" if isinstance(value, (int, float)) else str(value)


def message(title: str, text: str, fields: Mapping[str, Any] | None = None,
            remedies: Sequence[str] = ()) -> dict[str, Any]:
    """The Slack-compatible payload: ``text`` (the fallback every client shows) and ``blocks``.

    >>> p = message("grpo-monitor: degenerate_dominated (degraded)", "89% of groups degenerate", {"step": 7})
    >>> p["text"].splitlines()[0], [b["type"] for b in p["blocks"]]
    ('grpo-monitor: degenerate_dominated (degraded)', ['header', 'section', 'section'])
    """
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": _cut(title, _HEADER)}},
        {"type": "section", "text": {"type": "mrkdwn", "text": _cut(text or title, _SECTION)}},
    ]
    items = [f"*{name}*\n{value}" for name, value in (fields or {}).items() if value is not None]
    if items:
        blocks.append({"type": "section", "fields": [{"type": "mrkdwn", "text": _cut(i, _FIELD)}
                                                     for i in items[:_FIELDS]]})
    if remedies:
        fixes = "\n".join(f"• {r}" for r in remedies)
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": _cut(f"*Remedies*\n{fixes}", _SECTION)}})
    return {"text": f"{title}\n{text}" if text else title, "blocks": blocks}


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"
