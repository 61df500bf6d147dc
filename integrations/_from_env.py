"""Attaching from the environment: the entry Ray's ``worker_process_setup_hook`` calls in every worker.

A Ray-based trainer runs its training loop in an actor or task (verl's ``TaskRunner``,
OpenRLHF's ``PPOTrainer``, SkyRL's ``skyrl_entrypoint``), not in the driver that starts
it. Ray runs ``runtime_env["worker_process_setup_hook"]`` in each worker process it
starts; each integration's ``attach_from_env`` is such a hook: it reads
``GRPO_MONITOR_CONFIG`` (a JSON object of :class:`~grpo_monitor.MonitorConfig` fields plus
``"sinks"``, a list of specs such as ``"jsonl:PATH"``, ``"tensorboard:DIR"``, ``"wandb"``,
``"mlflow"``, ``"trackio"``, ``"webhook:URL"``, ``"auto"``; default ``["auto"]``) and attaches. Workers that
never call the entry point (rollout and model workers) build no monitor and open nothing:
the monitor and its sinks are built at the first call.

A hook must not submit anything to Ray (the worker has no task yet; see
:mod:`grpo_monitor.integrations._on_import`), so an integration whose framework module
talks to Ray when imported (SkyRL) attaches with :func:`attach_from_env_on_import`: the
patches are applied when the trainer's code first imports that module.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from grpo_monitor.config import MonitorConfig
from grpo_monitor.files.reading import InputFileError, loads
from grpo_monitor.sinks.auto import sinks_from_specs

from ._on_import import when_imported

if TYPE_CHECKING:
    from ._entrypoint import Attachment, Slot

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
        fields = loads(raw, ENV)  # nested too deep or a number out of range: worded (InputFileError)
    except InputFileError as exc:
        raise ValueError(f"{exc}; expected an object of MonitorConfig fields plus \"sinks\"") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{ENV} is not valid JSON ({exc}); expected an object of MonitorConfig fields plus "
                         f"\"sinks\", e.g. '{{\"estimator\": \"verl.grpo\", \"sinks\": [\"auto\"]}}', but got "
                         f"{raw[:200]!r}") from None
    if not isinstance(fields, dict):
        raise ValueError(f"{ENV} must hold a JSON object of MonitorConfig fields plus \"sinks\", but got {raw[:200]!r}")
    sinks = sinks_from_specs(fields.pop("sinks", ["auto"]))
    try:
        config = MonitorConfig(**fields) if fields else None
    except (ValueError, TypeError) as exc:  # pydantic's ValidationError, a misspelt field or estimator
        raise ValueError(f"{ENV} holds an invalid MonitorConfig: {exc}") from None
    return config, sinks


def attach_from_env(attach: Callable[..., Any], current: Callable[[], Any]) -> Any:
    """``attach(config=..., sinks=...)`` from ``GRPO_MONITOR_CONFIG``; the existing attachment when attached.

    A malformed ``GRPO_MONITOR_CONFIG`` does not raise here: a Ray task's worker whose setup hook
    raises dies, and its driver sees only ``WorkerCrashedError``. The error is printed, and the
    attachment raises it (a worded ``ValueError``) from every call of the entry point, so the
    task or actor that trains fails with it and the driver reads it.
    """
    existing = current()
    if existing is not None:
        return existing
    try:
        config, sinks = settings_from_env()
    except ValueError as exc:
        return _failing(attach(config=None, sinks=None), exc)
    return attach(config=config, sinks=sinks)


def _failing(attachment: Attachment, error: ValueError) -> Attachment:
    """``attachment`` raising ``error`` from its entry points; the error printed once from this process."""
    attachment.config_error = error
    print(f"grpo-monitor ({attachment.framework}): {error}; the monitored entry point raises this error "
          f"(pid {os.getpid()})", file=sys.stderr, flush=True)
    return attachment


def attach_from_env_on_import(attach: Callable[..., Attachment], slot: Slot,
                              modules: Sequence[str], *, defer_errors: bool = False) -> Attachment | None:
    """:func:`attach_from_env`, deferred until the first of ``modules`` is imported (now when one already is).

    ``GRPO_MONITOR_CONFIG`` is read now, so a bad value fails the call (with ``defer_errors``, as a Ray
    setup hook needs, it is printed and raised by the entry point instead); the attach runs
    right after the module's code (and its own Ray calls) ran, before the importer binds
    its names. Returns the attachment, or None while deferred (``slot.pending`` is the
    watch; ``detach()`` cancels it).
    """
    if slot.current is not None:
        return slot.current
    if slot.pending is not None:
        return None
    try:
        config, sinks = settings_from_env()
        error = None
    except ValueError as exc:
        if not defer_errors:
            raise
        config, sinks, error = None, None, exc  # raised by the entry point, as :func:`attach_from_env` does

    def on_import(_module: Any) -> None:
        slot.pending = None
        attachment = attach(config=config, sinks=sinks)
        if error is not None:
            _failing(attachment, error)

    slot.pending = when_imported(modules, on_import, slot.framework)
    return slot.current
