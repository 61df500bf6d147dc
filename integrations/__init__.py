"""Integrations: TRL's ``GRPOTrainer``, verl, OpenRLHF, SkyRL, AReaL, the Hugging Face ``Trainer`` and plain loops.

Each integration is a submodule imported on demand, so ``import grpo_monitor.integrations``
pulls in neither TRL, verl nor transformers:

- entry-point style, on :class:`._base.EntryPoint`: :mod:`grpo_monitor.integrations.verl`,
  :mod:`~grpo_monitor.integrations.openrlhf`, :mod:`~grpo_monitor.integrations.skyrl`,
  :mod:`~grpo_monitor.integrations.areal`: ``attach(monitor | None, *, config=, sinks=)`` /
  ``detach()`` around the one call in which each trainer computes a step's advantages (the
  estimator declared from its config). These trainers offer no callback there, but call
  it once per training step, before the update: the call is the step.
- callback style, on ``transformers.TrainerCallback``: :mod:`grpo_monitor.integrations.trl`
  (``attach(trainer)`` or ``GRPOMonitorCallback``) and :mod:`grpo_monitor.integrations.hf`
  (``MonitorCallback`` for any ``transformers.Trainer``, ``monitored_steps`` for plain PyTorch
  loops). These trainers have callbacks, and no one call is one step (TRL generates once for
  ``steps_per_generation`` optimizer steps): the step ends at ``on_step_end``.

:data:`REGISTRY` names every integration a run record can name (``monitor.declare_integration``);
each such module holds an ``INTEGRATION`` (:class:`._base.Integration`: its report advice, ...),
which :func:`integration` imports by name. Adding an integration is its module and one row here.
"""

import importlib
from typing import Any

#: Integration name (as its runs record it) -> how the report names it.
REGISTRY: dict[str, str] = {
    "trl": "TRL",
    "verl": "verl",
    "openrlhf": "OpenRLHF",
    "skyrl": "SkyRL",
    "areal": "AReaL",
}

#: The submodules: every registered integration, and ``hf`` (step boundaries for any ``Trainer`` and plain loops).
__all__ = sorted([*REGISTRY, "hf"])


def integration(name: str) -> Any:
    """The ``INTEGRATION`` of :data:`REGISTRY`'s ``name`` (its module imported now; its framework is not).

    >>> integration("verl").name
    'verl'
    """
    if name not in REGISTRY:
        raise KeyError(f"no integration named {name!r}; expected one of {sorted(REGISTRY)}")
    return importlib.import_module(f"{__name__}.{name}").INTEGRATION
