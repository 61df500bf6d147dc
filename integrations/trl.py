"""TRL's ``GRPOTrainer`` (TRL 1.16): the full metrics and invariants, with no change to the loop.

Where the numbers are, in TRL 1.16:

- ``_calculate_rewards`` returns the rewards of the whole generation batch, gathered
  across processes, as ``(N, F)`` per reward function and before weighting (``None`` is
  NaN). ``_generate_and_score_completions`` weights them (``nansum`` of rewards times
  ``trainer.reward_weights``; a row where every function gave ``None`` is unscorable),
  groups them contiguously by ``num_generations`` (``RepeatSampler``) and returns the
  advantages of this process's slice only. The rollout is observed right there, before
  ``_prepare_inputs`` shuffles and splits the rows: the local advantages are gathered
  (one collective) so every process observes the whole rollout (``rollout_scope="global"``).
- ``_compute_loss`` calls ``_get_per_token_logps_and_entropies`` once for the policy
  log-probs; the inputs hold ``completion_mask``, ``advantages``, ``ref_per_token_logps``
  (``beta > 0``) and ``old_per_token_logps`` (when TRL computes them). The first such call
  inside a loss is observed.
- The sampler's side: ``sampling_per_token_logps`` (vLLM's log-probs, present under
  ``vllm_importance_sampling_correction``; NaN where vLLM could not score a token, treated as
  TRL does: ratio 1), the ``entropies`` of that same call, and truncation by TRL's own
  ``is_truncated`` test on ``completion_ids`` with the completion lengths (gathered like
  the advantages).
- Conventions: ``scale_rewards="group"`` divides by TRL's ``nanstd`` (Bessel) + 1e-4,
  ``"batch"`` by the batch's Bessel std + 1e-4, ``"none"`` does not divide.

The methods the trainer instance resolves are wrapped, so a subclass that overrides them
is observed too. TRL's own ``frac_reward_zero_std`` counts ``isclose(std, 0)`` (atol 1e-8):
it misses constant groups whose float32 std is ~6e-8 (eight rewards of 0.7) and reads 0.0
under ``scale_rewards="batch"``; ``grpo/trl/frac_reward_zero_std_gap`` reports the monitor's
exact degenerate rate minus TRL's value.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Any

from grpo_monitor.config import MonitorConfig
from grpo_monitor.monitor import GRPOMonitor
from grpo_monitor.sinks.base import Sink
from grpo_monitor.step.calls import checked

from ._base import Integration
from ._common import find_trainer
from ._trl_hooks import HOOKED_METHODS, ROWS_KEY, TRLHooks
from ._trl_settings import (
    ESTIMATOR_OF_SCALE_REWARDS,
    SETTINGS,
    clip_range,
    config_from_trainer,
    importance_mask,
    loss_aggregation,
    trl_rewards,
    trl_settings,
)
from .hf import REPORTS_KEPT, MonitorCallback, resolve_sinks

__all__ = [
    "ESTIMATOR_OF_SCALE_REWARDS", "HOOKED_METHODS", "INTEGRATION", "ROWS_KEY", "SETTINGS", "GRPOMonitorCallback",
    "TRLHooks", "attach", "clip_range", "config_from_trainer", "detach", "importance_mask", "loss_aggregation",
    "trl_rewards", "trl_settings",
]

#: The TRL integration as the report reads it: what to set in ``GRPOConfig`` for a family the run did not log
#: (``{beta}``, ...: the run's values, recorded by :func:`trl_settings`), and why steps can lack a rollout.
INTEGRATION = Integration("trl", advice={
    "grpo/kl/": "set beta > 0 in GRPOConfig (this run: beta = {beta}); TRL then computes the reference log-probs "
                "the KL estimators need",
    "grpo/ratio/": "set num_iterations > 1 in GRPOConfig (this run: num_iterations = {num_iterations}), or "
                   "steps_per_generation above gradient_accumulation_steps; TRL then keeps old_per_token_logps, "
                   "from which the ratio is computed",
    "grpo/sampling/responses_per_retained_group": "TRL's GRPOTrainer has no dynamic sampling: every generated "
                                                  "group is trained on, so there is no ledger",
    "grpo/groups/overdispersion": "reward functions whose weighted sum is 0 or 1 per completion give it (TRL's "
                                  "prompts are the question ids)",
    "grpo/weights/": "the TRL integration measures the loss's token weights from the policy log-probs of each "
                     "loss; none reached it in this run (see docs/integrations.md for the loss types and masks it "
                     "declares)",
    "grpo/mismatch/": "set use_vllm=True and vllm_importance_sampling_correction=True in GRPOConfig (this run: "
                      "use_vllm = {use_vllm}, vllm_importance_sampling_correction = "
                      "{vllm_importance_sampling_correction}); TRL then keeps sampling_per_token_logps, the "
                      "sampler's log-probs the mismatch statistics compare with the trainer's",
    "grpo/entropy/": "the TRL integration passes TRL's own per-token entropies; none reached it in this run (TRL "
                     "computes them for the loss, see docs/integrations.md)",
}, rollout_gaps="TRL trains on each generation for several optimizer steps when num_iterations > 1 or "
                "steps_per_generation is above gradient_accumulation_steps (this run: num_iterations = "
                "{num_iterations}, steps_per_generation = {steps_per_generation}, gradient_accumulation_steps = "
                "{gradient_accumulation_steps})")


class GRPOMonitorCallback(MonitorCallback):
    """Monitors the ``GRPOTrainer`` it is passed to: ``GRPOTrainer(..., callbacks=[GRPOMonitorCallback()])``.

    On ``on_train_begin`` it finds its trainer, builds the monitor (config from
    :func:`config_from_trainer`, ``sinks="auto"``: the trainer's W&B run / TensorBoard
    folder per ``report_to``) and wraps the trainer's methods; ``on_step_end`` ends the
    monitor's step. A breach makes ``train()`` raise ``InvariantViolation``.
    """

    def __init__(self, config: MonitorConfig | None = None, sinks: Sequence[Sink] | str | None = "auto"):
        self.config = config
        self.sinks = sinks
        # built when bound to a trainer; the base class's hooks only run after that (on_train_begin binds)
        self.monitor: GRPOMonitor | None = None  # type: ignore[assignment]
        self.hooks: TRLHooks | None = None
        self.close_on_train_end = True
        self.reports = collections.deque(maxlen=REPORTS_KEPT)

    def bind(self, trainer: Any) -> GRPOMonitor:
        """Build the monitor for ``trainer`` and wrap its methods (idempotent)."""
        if self.hooks is None or self.hooks.trainer is not trainer:
            config = config_from_trainer(trainer, self.config)
            self.monitor = GRPOMonitor(config, sinks=resolve_sinks(self.sinks, trainer.args))
            self.hooks = TRLHooks(trainer, self.monitor)
        self.hooks.install()
        return self.hooks.monitor  # the monitor built with these hooks

    def unbind(self) -> None:
        """Restore the trainer's methods."""
        if self.hooks is not None:
            self.hooks.uninstall()

    def on_train_begin(self, args, state, control, **kwargs):
        if self.hooks is None:
            self.bind(find_trainer(self))
        else:
            self.hooks.install()
        super().on_train_begin(args, state, control, **kwargs)

    def extra_metrics(self) -> dict[str, float]:
        if self.hooks is None:
            return {}
        return self.hooks.guard(self.hooks.step_metrics) or {}

    def on_step_end(self, args, state, control, **kwargs):
        if self.monitor is not None:
            if self.hooks is not None and control.should_log and not self.monitor.closed:
                self.hooks.guard(self.hooks.audit_window)  # TRL's log() of this step averages what it holds now
            super().on_step_end(args, state, control, **kwargs)

    def on_train_end(self, args, state, control, **kwargs):
        if self.monitor is not None:
            self.monitor.close()


@checked
def attach(trainer: Any, config: MonitorConfig | None = None,
           sinks: Sequence[Sink] | str | None = "auto") -> GRPOMonitor:
    """Monitor ``trainer`` (a TRL ``GRPOTrainer`` or subclass); returns the monitor.

    ``config`` may leave ``group_size``, the convention and the clip unset: they are read
    from the trainer. ``sinks="auto"`` logs into the trainer's W&B run / TensorBoard folder
    (per ``report_to``); pass a list to choose.
    """
    if any(isinstance(cb, GRPOMonitorCallback) for cb in trainer.callback_handler.callbacks):
        raise RuntimeError("this trainer is already monitored (attach() or a GRPOMonitorCallback); "
                           "call detach(trainer) first")
    callback = GRPOMonitorCallback(config, sinks)
    monitor = callback.bind(trainer)
    trainer.add_callback(callback)
    return monitor


def detach(trainer: Any) -> None:
    """Undo :func:`attach`: restore the trainer's methods and remove the callback."""
    for cb in list(trainer.callback_handler.callbacks):
        if isinstance(cb, GRPOMonitorCallback):
            cb.unbind()
            trainer.remove_callback(cb)
