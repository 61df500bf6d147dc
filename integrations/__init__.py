"""Integrations: TRL's ``GRPOTrainer``, verl, the Hugging Face ``Trainer`` and plain loops.

Each integration is a submodule imported on demand, so ``import grpo_monitor.integrations``
pulls in neither TRL, verl nor transformers:

- :mod:`grpo_monitor.integrations.trl`: ``attach(trainer)`` or ``GRPOMonitorCallback``.
- :mod:`grpo_monitor.integrations.verl`: ``attach(monitor)`` / ``detach()`` around verl's
  advantage and KL estimators.
- :mod:`grpo_monitor.integrations.hf`: ``MonitorCallback`` (step boundaries for any
  ``transformers.Trainer``) and ``monitored_steps`` for plain PyTorch loops.
"""

__all__ = ["hf", "trl", "verl"]
