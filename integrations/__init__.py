"""Integrations: TRL's ``GRPOTrainer``, verl, OpenRLHF, SkyRL, AReaL, the Hugging Face ``Trainer`` and plain loops.

Each integration is a submodule imported on demand, so ``import grpo_monitor.integrations``
pulls in neither TRL, verl nor transformers:

- :mod:`grpo_monitor.integrations.trl`: ``attach(trainer)`` or ``GRPOMonitorCallback``.
- :mod:`grpo_monitor.integrations.verl`: ``attach(monitor)`` / ``detach()`` around verl's
  advantage and KL estimators.
- :mod:`grpo_monitor.integrations.hf`: ``MonitorCallback`` (step boundaries for any
  ``transformers.Trainer``) and ``monitored_steps`` for plain PyTorch loops.
- :mod:`grpo_monitor.integrations.openrlhf`, :mod:`~grpo_monitor.integrations.skyrl`,
  :mod:`~grpo_monitor.integrations.areal`: ``attach()`` / ``detach()`` around each trainer's
  advantage entry point, the estimator declared from its config.
"""

__all__ = ["areal", "hf", "openrlhf", "skyrl", "trl", "verl"]
