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
import functools
from collections.abc import Hashable, Sequence
from typing import Any

import torch

from grpo_monitor.config import MonitorConfig
from grpo_monitor.integrations._common import FailOpen, find_trainer, row_advantages
from grpo_monitor.integrations.hf import REPORTS_KEPT, MonitorCallback, resolve_sinks
from grpo_monitor.monitor import GRPOMonitor
from grpo_monitor.sinks.base import Sink
from grpo_monitor.stats.aggregations import ALIASES
from grpo_monitor.stats.groups import group_reward_stats

#: TRL's ``scale_rewards`` -> the registry entry (``grpo_monitor.ESTIMATORS``) it computes.
ESTIMATOR_OF_SCALE_REWARDS: dict[str, str] = {"group": "trl.group", "batch": "trl.batch", "none": "trl.none"}
_HOOKED = ("_calculate_rewards", "_generate_and_score_completions", "_compute_loss",
           "_get_per_token_logps_and_entropies")
_MISSING = object()
ROWS_KEY = "grpo_monitor_rows"  # added to TRL's batch: each row's index in the gathered rollout (shuffled with it)
_LABEL_CHARS = 200


def config_from_trainer(trainer: Any, config: MonitorConfig | None = None) -> MonitorConfig:
    """A ``MonitorConfig`` declaring what ``trainer`` does; fields set in ``config`` win.

    ``group_size`` = ``num_generations``, the registry estimator of ``scale_rewards``
    (``trl.group``: Bessel + 1e-4, ``trl.batch``, ``trl.none``; ``trl.normalize_then_sum`` under
    ``multi_objective_aggregation="normalize_then_sum"``), the PPO clip
    ``(epsilon_low, epsilon_high)``, no KL clamp, ``rollout_scope="global"``. Declaring the
    estimator makes a swapped branch an error instead of a silent "auto" match.
    """
    scale = getattr(trainer, "scale_rewards", None) or trainer.args.scale_rewards
    if scale not in ESTIMATOR_OF_SCALE_REWARDS:
        raise ValueError(f"trainer.scale_rewards must be one of {sorted(ESTIMATOR_OF_SCALE_REWARDS)}, "
                         f"but got {scale!r}")
    estimator = ESTIMATOR_OF_SCALE_REWARDS[scale]
    if getattr(trainer, "multi_objective_aggregation", "sum_then_normalize") == "normalize_then_sum":
        estimator = "trl.normalize_then_sum"
    derived = dict(
        group_size=int(trainer.num_generations), std_convention=estimator, stabilizer=None,
        clip_range=clip_range(trainer), kl_clamp=None, rollout_scope="global", **loss_aggregation(trainer),
    )
    if config is None:
        return MonitorConfig(**derived)
    for key in ("group_size", "rollout_scope"):
        if key in config.model_fields_set and getattr(config, key) != derived[key]:
            raise ValueError(
                f"config.{key}={getattr(config, key)!r} but the trainer needs {derived[key]!r} "
                f"(num_generations={trainer.num_generations}, rewards gathered on every process); leave it unset"
            )
    return config.model_copy(update={k: v for k, v in derived.items() if k not in config.model_fields_set})


def loss_aggregation(trainer: Any) -> dict[str, Any]:
    """``loss_aggregation`` (``trl.<loss_type>``) and, under ``dr_grpo``, ``loss_normalizer`` =
    ``max_completion_length``: what TRL documents for its ``loss_type``.

    Declared only where the reward term's weight is ``-A c`` at ratio 1: no entropy mask
    (``top_entropy_quantile`` 1), no off-policy mask, no vLLM importance weights, ``cispo``'s
    ``epsilon_high`` >= 1 (below 1 it clips the ratio 1 itself), and for the step-scoped
    ``dapo``/``cispo``/``vespo`` one process with ``steps_per_generation == gradient_accumulation_steps``
    (TRL's denominator is then the step's token count). Elsewhere ``"auto"``: fitted, not checked.
    """
    loss_type = getattr(trainer, "loss_type", None)
    args = trainer.args
    name = f"trl.{loss_type}"
    out: dict[str, Any] = {"loss_aggregation": "auto"}
    if name not in ALIASES:
        return out
    vllm_weights = getattr(trainer, "use_vllm", False) and getattr(trainer, "vllm_importance_sampling_correction",
                                                                   False)
    masked = (float(getattr(trainer, "top_entropy_quantile", 1.0)) < 1.0
              or getattr(trainer, "off_policy_mask_threshold", None) is not None or vllm_weights
              or (loss_type == "cispo" and float(trainer.epsilon_high) < 1.0))
    step_scoped = ALIASES[name][1] == "step"
    spg = getattr(args, "steps_per_generation", None) or args.gradient_accumulation_steps
    if masked or (step_scoped and (trainer.accelerator.num_processes > 1 or spg != args.gradient_accumulation_steps)):
        return out
    out["loss_aggregation"] = name
    if loss_type == "dr_grpo":
        out["loss_normalizer"] = float(trainer.max_completion_length)
    return out


def trl_rewards(rewards_per_func: torch.Tensor, weights: torch.Tensor, group_size: int,
                aggregation: str = "sum_then_normalize") -> torch.Tensor:
    """The ``(N,)`` rewards TRL logs as ``reward``: the weighted ``nansum`` of the reward functions,
    NaN on unscorable rows (every function gave None).

    Under ``normalize_then_sum`` TRL's advantages come from per-function z-scores, not from
    this sum; the declared estimator ``trl.normalize_then_sum`` promises only what holds for
    it (zero group mean, unscorable rows at 0), so the monitor checks those and reports the
    reward users compare with TRL's log.

    >>> trl_rewards(torch.tensor([[1., float("nan")], [float("nan")] * 2]), torch.tensor([1., 2.]), 2).tolist()
    [1.0, nan]
    """
    if aggregation not in ("sum_then_normalize", "normalize_then_sum"):
        raise ValueError(f"multi_objective_aggregation must be 'sum_then_normalize' or 'normalize_then_sum', "
                         f"but got {aggregation!r}")
    w = weights.to(rewards_per_func.device, rewards_per_func.dtype).unsqueeze(0)
    unscorable = torch.isnan(rewards_per_func).all(dim=1)
    return torch.where(unscorable, torch.nan, (rewards_per_func * w).nansum(dim=1))


def clip_range(trainer: Any) -> tuple[float, float]:
    """The monitor's ``clip_range`` (low, high) for TRL's loss: ratio outside [1 - low, 1 + high] is clipped.

    ``cispo`` clips the ratio at ``epsilon_high`` itself (no lower bound): (1, epsilon_high - 1).
    """
    if getattr(trainer, "loss_type", None) == "cispo":
        return 1.0, max(float(trainer.epsilon_high) - 1.0, 0.0)
    return float(trainer.epsilon_low), float(trainer.epsilon_high)


#: GRPOConfig fields that decide which metric families TRL feeds the monitor (the report's "no data" notes).
SETTINGS = ("beta", "num_iterations", "steps_per_generation", "gradient_accumulation_steps", "scale_rewards",
            "loss_type", "use_vllm", "vllm_importance_sampling_correction", "num_generations")


def trl_settings(trainer: Any) -> dict[str, Any]:
    """The trainer's values of :data:`SETTINGS` (the instance's, else its ``args``'), for the run record."""
    out = {}
    for name in SETTINGS:
        value = getattr(trainer, name, getattr(trainer.args, name, None))
        if isinstance(value, (bool, int, float, str)) or value is None:
            out[name] = value
    return out


def _label(prompt: Any) -> Hashable:
    text = prompt if isinstance(prompt, str) else repr(prompt)
    return text[:_LABEL_CHARS]


class TRLHooks:
    """The wrappers around one trainer's methods, and what they saw during the step."""

    def __init__(self, trainer: Any, monitor: GRPOMonitor):
        self.trainer = trainer
        self.monitor = monitor
        self.guard = FailOpen(monitor, "trl")
        monitor.declare_integration("trl", trl_settings(trainer))
        self._saved: dict[str, Any] = {}
        self._rewards_per_func: torch.Tensor | None = None
        self._loss_inputs: dict | None = None
        #: the policy's inputs, log-probs and entropies inside a loss
        self._seen: tuple[dict, torch.Tensor, torch.Tensor | None] | None = None
        self._zero_std: list[tuple[float, torch.Tensor]] = []  # (TRL's value, monitor's degenerate rate)
        self._clips: list[torch.Tensor] = []  # per micro-batch: (low, high, region, tokens) clipped-token sums

    # ------------------------------------------------------------- install
    @property
    def installed(self) -> bool:
        return bool(self._saved)

    def install(self) -> None:
        """Wrap the methods the trainer instance resolves (a subclass's overrides included)."""
        if self.installed:
            return
        wrappers = {"_calculate_rewards": self._wrap_rewards, "_generate_and_score_completions": self._wrap_generate,
                    "_compute_loss": self._wrap_loss, "_get_per_token_logps_and_entropies": self._wrap_logps}
        for name in _HOOKED:
            original = getattr(self.trainer, name, None)
            if original is None:
                raise AttributeError(f"trainer {type(self.trainer).__name__} has no method {name}; expected TRL's "
                                     "GRPOTrainer (trl>=1.16,<2)")
            self._saved[name] = self.trainer.__dict__.get(name, _MISSING)
            setattr(self.trainer, name, functools.wraps(original)(wrappers[name](original)))

    def uninstall(self) -> None:
        """Restore the trainer's methods exactly as they were."""
        for name, previous in self._saved.items():
            if previous is _MISSING:
                self.trainer.__dict__.pop(name, None)
            else:
                setattr(self.trainer, name, previous)
        self._saved.clear()

    def _training(self) -> bool:
        model = getattr(self.trainer, "model", None)
        return bool(getattr(model, "training", True))

    # ------------------------------------------------------------- rollout
    def _wrap_rewards(self, original):
        def wrapper(*args, **kwargs):
            out = original(*args, **kwargs)
            self._rewards_per_func = out
            return out

        return wrapper

    def _wrap_generate(self, original):
        def wrapper(*args, **kwargs):
            self._rewards_per_func = None
            logged = len(self.trainer._metrics["train"].get("frac_reward_zero_std", ()))
            out = original(*args, **kwargs)
            if self._training():
                self.guard(self._observe_rollout, out, logged)
                self.guard(self._tag_rows, out)
            return out

        return wrapper

    def _observe_rollout(self, out: dict, logged: int) -> None:
        rpf = self._rewards_per_func
        if rpf is None:
            raise RuntimeError("no rewards were captured: _generate_and_score_completions did not call "
                               "_calculate_rewards")
        tr = self.trainer
        g = int(tr.num_generations)
        aggregation = getattr(tr, "multi_objective_aggregation", "sum_then_normalize")
        rewards = trl_rewards(rpf, tr.reward_weights, g, aggregation)
        local = row_advantages(out["advantages"].detach(), out["completion_mask"])  # (B, T): a subclass's
        advantages = tr.accelerator.gather(local.contiguous()) if tr.accelerator.num_processes > 1 else local
        self._compare_zero_std(rewards, g, logged)
        step = int(getattr(getattr(tr, "state", None), "global_step", 0)) + 1  # the step on_step_end will report
        if step > self.monitor.step:
            self.monitor.step = step  # a breach raised here is labelled with TRL's step number
        cut, lengths = self._truncation(out)
        if tr.accelerator.num_processes > 1:
            cut, lengths = tr.accelerator.gather(cut), tr.accelerator.gather(lengths)
        components = {}
        if rpf.dim() == 2 and rpf.shape[1] > 1:  # one column per reward function: multi-reward estimators replay
            components = dict(reward_components=rpf.to(rewards.device),
                              reward_weights=tr.reward_weights.detach().to(rewards.device))
        self.monitor.observe_rollout(rewards, advantages=advantages, question_ids=self._question_ids(len(rewards)),
                                     lengths=lengths, truncated=cut, **components)

    def _truncation(self, out: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """TRL's own test (``is_truncated``: a row whose last completion id is neither EOS nor pad, i.e. cut
        at ``max_completion_length``) on the padded ``completion_ids``, and the completion lengths."""
        tr = self.trainer
        ids = out["completion_ids"]
        stop = [i for i in (*tr.eos_token_ids, tr._tokenizer.pad_token_id) if i is not None]
        last = ids[:, -1] if ids.shape[1] else torch.full((len(ids),), stop[0], device=ids.device)
        cut = ~torch.isin(last, torch.tensor(stop, device=ids.device))
        return cut, out["completion_mask"].sum(1)

    def _tag_rows(self, out: dict) -> None:
        """Each local row's index in the gathered rollout, as a tensor TRL shuffles and splits with the batch."""
        n = len(out["advantages"])
        start = int(self.trainer.accelerator.process_index) * n
        out[ROWS_KEY] = torch.arange(start, start + n, device=out["advantages"].device)

    def _question_ids(self, n: int) -> list[Hashable] | None:
        """The gathered prompts of the rollout, which TRL keeps in ``_logs["prompt"]``."""
        prompts = getattr(self.trainer, "_logs", {}).get("prompt")
        if prompts is None or len(prompts) < n:
            return None
        return [_label(p) for p in list(prompts)[-n:]]

    def _compare_zero_std(self, rewards: torch.Tensor, group_size: int, logged: int) -> None:
        """Pair the value TRL just appended to ``frac_reward_zero_std`` with the exact degenerate rate."""
        values = self.trainer._metrics["train"].get("frac_reward_zero_std") or []
        if len(values) <= logged or rewards.numel() % group_size:
            return
        ng = rewards.numel() // group_size
        gid = torch.arange(ng, device=rewards.device).repeat_interleave(group_size)
        stats = group_reward_stats(rewards.double(), gid, ng)
        self._zero_std.append((float(values[-1]), stats.degenerate.double().mean()))

    def step_metrics(self) -> dict[str, float]:
        """TRL's ``frac_reward_zero_std`` of the step and its gap to the exact degenerate rate."""
        seen, self._zero_std = self._zero_std, []
        out = self._clip_metrics()
        if not seen:
            return out
        trl_frac = sum(v for v, _ in seen) / len(seen)
        exact = float(torch.stack([d for _, d in seen]).mean())
        return {**out, "grpo/trl/frac_reward_zero_std": trl_frac, "grpo/trl/frac_reward_zero_std_gap": exact - trl_frac}

    def _clip_metrics(self) -> dict[str, float]:
        """TRL's sign-aware clip fractions of the step (one host copy of the summed counts)."""
        clips, self._clips = self._clips, []
        if not clips:
            return {}
        low, high, region, tokens = torch.stack(clips).sum(0).tolist()
        if tokens <= 0:
            return {}
        return {"grpo/trl/clip_ratio_low": low / tokens, "grpo/trl/clip_ratio_high": high / tokens,
                "grpo/trl/clip_ratio_region": region / tokens}

    # ---------------------------------------------------------------- loss
    def _wrap_loss(self, original):
        def wrapper(*args, **kwargs):
            inputs = args[1] if len(args) > 1 else kwargs.get("inputs")
            self._loss_inputs = inputs if self._training() and isinstance(inputs, dict) else None
            self._seen = None
            try:
                loss = original(*args, **kwargs)
                seen, self._seen = self._seen, None
                if seen is not None:
                    self.guard(self._observe_loss, seen[0], seen[1], loss, seen[2])
                return loss
            finally:
                self._loss_inputs, self._seen = None, None

        return wrapper

    def _wrap_logps(self, original):
        def wrapper(*args, **kwargs):
            out = original(*args, **kwargs)
            inputs, self._loss_inputs = self._loss_inputs, None  # the first call inside a loss: the policy's
            if inputs is not None:
                self._seen = (inputs, out[0], out[1] if len(out) > 1 else None)  # observed when the loss returns
            return out

        return wrapper

    def _observe_loss(self, inputs: dict, logps: torch.Tensor, loss: Any,
                      entropies: torch.Tensor | None = None) -> None:
        """The micro-batch's tensors and its loss: the token weights are measured from ``logps`` (with grad)."""
        mask = inputs["completion_mask"]
        if inputs.get("tool_mask") is not None:
            mask = mask * inputs["tool_mask"]
        measured = isinstance(loss, torch.Tensor) and loss.requires_grad and logps.requires_grad
        old = inputs.get("old_per_token_logps")
        sampler = inputs.get("sampling_per_token_logps")  # vLLM's log-probs, under importance-sampling correction
        if sampler is not None:  # TRL gives tokens vLLM could not score (NaN) ratio 1: so does the monitor
            sampler = torch.where(torch.isnan(sampler), old if old is not None else logps.detach(), sampler)
        self.monitor.observe_loss(
            mask=mask, advantages=inputs["advantages"], logprobs=logps if measured else logps.detach(),
            ref_logprobs=inputs.get("ref_per_token_logps"), old_logprobs=old, sampler_logprobs=sampler,
            entropy=None if entropies is None else entropies.detach(),
            loss=loss if measured else None, rows=inputs.get(ROWS_KEY),
        )
        self._clips.append(self._region_clips(mask, inputs["advantages"], logps.detach(),
                                              inputs.get("old_per_token_logps")))

    def _region_clips(self, mask: torch.Tensor, advantages: torch.Tensor, logps: torch.Tensor,
                      old: torch.Tensor | None) -> torch.Tensor:
        """Clipped-token counts as TRL's ``clip_ratio/{low,high,region}_mean`` define them: the ratio below
        ``1 - epsilon_low`` with a negative advantage, above ``1 + epsilon_high`` with a positive one
        (token-level ratio ``exp(logps - old)``; no old log-probs: ratio 1). No host sync."""
        valid = mask > 0
        ratio = torch.exp(logps - old) if old is not None else torch.ones_like(logps)
        adv = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages
        tr = self.trainer
        low = (ratio < 1 - float(tr.epsilon_low)) & (adv < 0) & valid
        high = (ratio > 1 + float(tr.epsilon_high)) & (adv > 0) & valid
        return torch.stack([low.sum(), high.sum(), (low | high).sum(), valid.sum()]).double()


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
            super().on_step_end(args, state, control, **kwargs)

    def on_train_end(self, args, state, control, **kwargs):
        if self.monitor is not None:
            self.monitor.close()


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
