"""Attaching from the environment: the entry Ray's ``worker_process_setup_hook`` calls in every worker.

A Ray-based trainer runs its training loop in an actor or task (verl's ``TaskRunner``,
OpenRLHF's ``PPOTrainer``, SkyRL's ``skyrl_entrypoint``), not in the driver that starts
it. Ray runs ``runtime_env["worker_process_setup_hook"]`` in each worker process it
starts; each integration's ``attach_from_env`` is such a hook: it reads
``GRPO_MONITOR_CONFIG`` (a JSON object of :class:`~grpo_monitor.MonitorConfig` fields plus
``"sinks"``, a list of specs such as ``"jsonl:PATH"``, ``"tensorboard:DIR"``, ``"wandb"``,
``"mlflow"``, ``"trackio"``, ``"auto"``; default ``["auto"]``) and attaches. Workers that
never call the entry point (rollout and model workers) build no monitor and open nothing:
the monitor and its sinks are built at the first call.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError

from grpo_monitor.config import MonitorConfig
from grpo_monitor.sinks.auto import sinks_from_specs

#: The environment variable the hooks read.
ENV = "GRPO_MONITOR_CONFIG"


def settings_from_env(environ: Mapping[str, str] | None = None) -> tuple[MonitorConfig | None, Any]:
    """``(config, sinks)`` from ``GRPO_MONITOR_CONFIG``; unset or empty: ``(None, "auto")``.

    >>> settings_from_env({ENV: '{"group_size": 8, "sinks": ["jsonl:/tmp/m.jsonl"]}'})[0].group_size
    8
    """
    raw = (os.environ if environ is None else environ).get(ENV, "").strip()
    if not raw:
        return None, "auto"
    try:
        fields = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{ENV} is not valid JSON ({exc}); expected an object of MonitorConfig fields plus "
                         f"\"sinks\", e.g. '{{\"std_convention\": \"verl.grpo\", \"sinks\": [\"auto\"]}}', but got "
                         f"{raw[:200]!r}") from None
    if not isinstance(fields, dict):
        raise ValueError(f"{ENV} must hold a JSON object of MonitorConfig fields plus \"sinks\", but got {raw[:200]!r}")
    sinks = sinks_from_specs(fields.pop("sinks", ["auto"]))
    try:
        config = MonitorConfig(**fields) if fields else None
    except ValidationError as exc:
        raise ValueError(f"{ENV} holds an invalid MonitorConfig: {exc}") from None
    return config, sinks


def attach_from_env(attach: Callable[..., Any], current: Callable[[], Any]) -> Any:
    """``attach(config=..., sinks=...)`` from ``GRPO_MONITOR_CONFIG``; the existing attachment when attached."""
    existing = current()
    if existing is not None:
        return existing
    config, sinks = settings_from_env()
    return attach(config=config, sinks=sinks)
