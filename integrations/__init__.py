"""Integrations: TRL's ``GRPOTrainer``, verl, OpenRLHF, SkyRL, AReaL, the Hugging Face ``Trainer`` and plain loops.

Each integration is a submodule imported on demand, so ``import grpo_monitor.integrations``
pulls in neither TRL, verl nor transformers:

- entry-point style, on :mod:`._entrypoint`: :mod:`grpo_monitor.integrations.verl`,
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
"""

__all__ = ["areal", "hf", "openrlhf", "skyrl", "trl", "verl"]
