"""The wrappers around a TRL ``GRPOTrainer``'s methods (:class:`TRLHooks`), and what they saw in a step.

Where each number is read in TRL's code, and why there: :mod:`grpo_monitor.integrations.trl`.
"""

from __future__ import annotations

import functools
from collections.abc import Hashable
from typing import Any

import torch

from grpo_monitor.monitor import GRPOMonitor

from ._common import FailOpen, row_advantages
from ._trl_audit import (
    TRLAudit,
    group_extrema,
    importance_weight,
    loss_exact,
    rollout_exact,
    zero_std_share,
)
from ._trl_settings import trl_rewards, trl_settings

#: The trainer's methods the hooks wrap (on the instance: a subclass's overrides are wrapped too).
HOOKED_METHODS = ("_calculate_rewards", "_generate_and_score_completions", "_compute_loss",
                  "_get_per_token_logps_and_entropies")
_MISSING = object()
ROWS_KEY = "grpo_monitor_rows"  # added to TRL's batch: each row's index in the gathered rollout (shuffled with it)
_LABEL_CHARS = 200


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
        self.audit = TRLAudit(trainer)  # TRL's own logged entries, paired with their exact values

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
        for name in HOOKED_METHODS:
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
            before = self.audit.counts()
            out = original(*args, **kwargs)
            if self._training():
                self.guard(self._observe_rollout, out, before)
                self.guard(self._tag_rows, out)
            return out

        return wrapper

    def _observe_rollout(self, out: dict, before: dict[str, int]) -> None:
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
        extrema = group_extrema(rewards.double().view(-1, g)) if rewards.numel() % g == 0 else None
        self._compare_zero_std(extrema, before.get("frac_reward_zero_std", 0))
        step = self._step()
        if step > self.monitor.step:
            self.monitor.step = step  # a breach raised here is labelled with TRL's step number
        cut, lengths = self._truncation(out)
        if tr.accelerator.num_processes > 1:
            cut, lengths = tr.accelerator.gather(cut), tr.accelerator.gather(lengths)
        exact = rollout_exact(self._logged_rewards(rpf), g, cut, lengths, zero_std=False)
        if getattr(tr, "scale_rewards", "group") != "batch" and aggregation == "sum_then_normalize":  # else TRL
            # tests the batch's std
            exact["frac_reward_zero_std"] = zero_std_share(rewards.double().view(-1, g), extrema)
        self.audit.pair(before, exact, step)
        components = {}
        if rpf.dim() == 2 and rpf.shape[1] > 1:  # one column per reward function: multi-reward estimators replay
            components = dict(reward_components=rpf.to(rewards.device),
                              reward_weights=tr.reward_weights.detach().to(rewards.device))
        self.monitor.observe_rollout(rewards, advantages=advantages, question_ids=self._question_ids(len(rewards)),
                                     lengths=lengths, truncated=cut, **components)

    def _step(self) -> int:
        """The step ``on_step_end`` will report (TRL's ``global_step`` + 1)."""
        return int(getattr(getattr(self.trainer, "state", None), "global_step", 0)) + 1

    def _logged_rewards(self, rpf: torch.Tensor) -> torch.Tensor:
        """The rewards TRL's ``reward``/``reward_std`` are taken over: the weighted nansum per row, NaN on rows
        every function left unscored (whatever ``multi_objective_aggregation`` does to the advantages)."""
        w = self.trainer.reward_weights.to(rpf.device).double()
        r = (rpf.double() * w.unsqueeze(0)).nansum(dim=1) if rpf.dim() == 2 else rpf.double()
        if rpf.dim() == 2:
            r[torch.isnan(rpf).all(dim=1)] = float("nan")
        return r

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
        return [p[:_LABEL_CHARS] if isinstance(p, str) else _label(p) for p in list(prompts)[-n:]]

    def _compare_zero_std(self, extrema: tuple[torch.Tensor, ...] | None, logged: int) -> None:
        """Pair the value TRL just appended to ``frac_reward_zero_std`` with the exact degenerate rate (the share of
        groups whose scorable rewards do not vary, as ``degenerate_blocks``; ``extrema``: ``group_extrema`` of the
        rewards in groups, None when they do not split into groups)."""
        values = self.trainer._metrics["train"].get("frac_reward_zero_std") or []
        if len(values) <= logged or extrema is None:
            return
        _, hi, lo = extrema
        self._zero_std.append((float(values[-1]), (~(hi > lo)).double().mean()))

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
            before = self.audit.counts()
            try:
                loss = original(*args, **kwargs)
                seen, self._seen = self._seen, None
                if seen is not None:
                    self.guard(self._observe_loss, seen[0], seen[1], loss, seen[2])
                    self.guard(self._pair_loss, seen[0], seen[1], seen[2], before)
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
            entropy=None if entropies is None else entropies.detach(), is_weights=self._is_weights(inputs, mask),
            loss=loss if measured else None, rows=inputs.get(ROWS_KEY),
        )
        self._clips.append(self._region_clips(mask, inputs["advantages"], logps.detach(),
                                              inputs.get("old_per_token_logps")))

    def _is_weights(self, inputs: dict, mask: torch.Tensor) -> torch.Tensor | None:
        """The correction weights TRL multiplies the per-token loss by (``importance_sampling_ratio``: (B, T) in the
        token modes, (B, 1) in the sequence modes, broadcast here); VESPO reads them into its own weights instead."""
        ratio = inputs.get("importance_sampling_ratio")
        if ratio is None or getattr(self.trainer, "loss_type", None) == "vespo":
            return None
        return ratio.expand_as(mask)

    def _pair_loss(self, inputs: dict, logps: torch.Tensor, entropies: torch.Tensor | None,
                   before: dict[str, int]) -> None:
        """Pair the micro-batch entries TRL just appended (one process: its token means are this batch's)."""
        tr = self.trainer
        if tr.accelerator.num_processes > 1:
            return
        mask = inputs["completion_mask"]
        if inputs.get("tool_mask") is not None:
            mask = mask * inputs["tool_mask"]
        level = getattr(tr, "importance_sampling_level", "token")
        clips = self._clips[-1] if self._clips and level == "token" else None
        weight = (importance_weight(logps, inputs.get("old_per_token_logps"), mask, level)
                  if getattr(tr.args, "use_bias_correction_kl", False) else None)
        exact = loss_exact(mask, entropies, logps, inputs.get("ref_per_token_logps"), clips, weight)
        self.audit.pair(before, exact, self._step())

    def audit_window(self) -> None:
        """When the trainer logs this step: its window's values against the exact ones (``trainer_metric``)."""
        logged, exact, windows = self.audit.window()
        if logged:
            tr = self.trainer
            self.monitor.audit_trainer_metrics("TRL", logged, exact, world_size=int(tr.accelerator.num_processes),
                                               accumulation_steps=int(tr.args.gradient_accumulation_steps),
                                               windows=windows)

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
        return torch.stack([low, high, low | high, valid.expand_as(low)]).flatten(1).sum(1).double()
