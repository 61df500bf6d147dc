"""The token-side invariants: each record and its host decision on the step's synced token sums.

The sums are the fused token pass's slots (:data:`grpo_monitor.stats.tokens.table`: ``mask_nonbinary``,
``logprob_nonfinite``, ``adv_row_spread_max``, ``ratio_*``, ``mm_*``), computed on the device and reduced
once per step; :func:`token_violations` decides from them. The mismatch readout (importance-weight z-score,
quantiles) is computed by the caller from the same sums (:func:`grpo_monitor.catalog.family_mismatch.mismatch_metrics`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from .record import Invariant, MonitorConfig, Violation, tol, violation

if TYPE_CHECKING:  # the records are read without torch (the catalogue, the CLI)
    import torch

_MAX_ROWS = 5


def _on_policy_expected(cfg: MonitorConfig) -> str:
    if cfg.on_policy_bitwise:
        return f"max |logprobs - old_logprobs| <= {cfg.tolerances.on_policy:g} nats"
    return f"mean k3(logprobs - old_logprobs) <= {cfg.tolerances.mismatch_k3:g} nats per token"


def _mismatch_expected(cfg: MonitorConfig) -> str:
    t = cfg.tolerances
    lag = f" (error off: max_policy_lag={cfg.max_policy_lag})" if cfg.max_policy_lag else ""
    return (f"grpo/mismatch/k3_mean <= {t.mismatch_k3:g} nats per token{lag}; "
            f"|grpo/mismatch/ratio_mean_z| <= {t.mismatch_ratio_z:g} or |ratio_mean - 1| <= {t.mismatch_ratio_bias:g}")


RECORDS: tuple[Invariant, ...] = (
    Invariant("token_constant_advantage",
              "with outcome rewards, a row's advantage is the same on all of its valid tokens",
              "advantages misaligned with tokens, or per-token advantages with outcome_rewards=True",
              "tokens", "token_constant", "error", tol("token_constant", "<= {:g} x typical |advantage|")),
    Invariant("mask_binary", "the loss mask holds only 0 and 1", "a mask that holds weights or garbage instead of 0/1",
              "tokens", None, "error", lambda cfg: "mask in {0, 1}"),
    Invariant("finite_logprobs", "log-probabilities are finite on valid tokens",
              "-inf log-probabilities from masked logits leaking onto valid tokens",
              "tokens", None, "error", lambda cfg: "finite log-probs on mask==1"),
    Invariant("on_policy", "on the first inner epoch, the trainer's log-probs match its old log-probs up to "
              "numerical noise (bitwise, with on_policy_bitwise)",
              "old_logprobs taken at other parameters than logprobs (a stale or reused old-logprob buffer, an "
              "optimizer step between the two passes), or a different model or temperature in one of them",
              "tokens", "mismatch_k3", "error", _on_policy_expected),
    Invariant("mismatch", "the sampler's and the trainer's log-probs of the sampled tokens differ only by numerical "
              "noise: mismatch KL (k3) within tolerance, importance weights averaging to 1",
              "weights not synced to the sampler, log-probs taken before temperature was applied, tokens or mask "
              "shifted by one, or another model's log-probs (error); importance weights away from 1: top-p/top-k "
              "log-probs renormalised over the nucleus while the trainer scores the full vocabulary, or logits "
              "processed after the log-probs were taken (warning)",
              "tokens", "mismatch_k3", "error", _mismatch_expected),
)


def token_violations(v: dict[str, float], config: MonitorConfig, step: int,
                     mismatch_batches: Sequence[tuple[torch.Tensor, ...]] = (), lag: float = 0.0,
                     readout: Mapping[str, float] | None = None) -> list[Violation]:
    """Token-side invariants from the reduced token statistics of the step (``mismatch_batches``: this
    rank's (mask, trainer, sampler) micro-batches, to name the first offending rows of a mismatch; ``lag``: the
    largest row age the rollout's ``policy_version`` shows, a lag by design like ``max_policy_lag``;
    ``readout``: the step's ``grpo/mismatch/`` figures, needed when ``mm_tokens`` is positive)."""
    tol_, out = config.tolerances, []
    if v.get("mask_nonbinary", 0) > 0:
        n = int(v["mask_nonbinary"])
        out.append(violation("mask_binary", step, f"{n} mask entries not 0/1", config, count=n))
    if v.get("logprob_nonfinite", 0) > 0:
        n = int(v["logprob_nonfinite"])
        out.append(violation("finite_logprobs", step, f"{n} non-finite log-probs on valid tokens", config, count=n))
    typ = v["adv_abs_sum"] / v["adv_tokens"] if v.get("adv_tokens", 0) > 0 else 1.0
    spread = v.get("adv_row_spread_max", float("-inf"))
    if config.outcome_rewards and spread > tol_.token_constant * max(typ, 1e-12):
        out.append(violation("token_constant_advantage", step,
                             f"max within-row spread {spread:.4g} (typical |adv| {typ:.4g})", config))
    if config.expect_on_policy and v.get("ratio_tokens", 0) > 0:
        out += _on_policy(v, config, step)
    if v.get("mm_tokens", 0) > 0 and readout is not None:
        found = mismatch_violations(v, readout, config, step, lag)
        out += [dataclasses.replace(f, groups=worst_rows(mismatch_batches)) for f in found]
    return out


def worst_rows(batches: Sequence[tuple[torch.Tensor, ...]], limit: int = _MAX_ROWS) -> tuple[str, ...]:
    """The rows with the largest mean k3(trainer - sampler), as 'micro-batch b row r: k3 x' (host, float64)."""
    import torch

    scored = []
    for b, (mask, trainer, sampler) in enumerate(batches):
        valid = mask.detach().cpu() > 0
        d = torch.where(valid, trainer.detach().cpu().double() - sampler.detach().cpu().double(), 0.0)
        k3 = (torch.expm1(d) - d).sum(1) / valid.sum(1).clamp_min(1)
        scored += [(float(k), b, r) for r, k in enumerate(k3.tolist()) if valid[r].any()]
    scored.sort(key=lambda t: -t[0] if math.isfinite(t[0]) else -math.inf)
    return tuple(f"micro-batch {b} row {r}: k3 {k:.3g}" for k, b, r in scored[:limit])


def _on_policy(v: dict[str, float], config: MonitorConfig, step: int) -> list[Violation]:
    """Trainer against trainer: the mismatch rule (mean k3 of logprobs - old_logprobs), or the bitwise max."""
    gap, k3 = v["on_policy_absdiff_max"], v["ratio_k3_sum"] / v["ratio_tokens"]
    text = f"mean k3(logprobs - old_logprobs) = {k3:.4g} nats per token, max |logprobs - old_logprobs| = {gap:.4g}"
    bad = gap > config.tolerances.on_policy if config.on_policy_bitwise else not k3 <= config.tolerances.mismatch_k3
    return [violation("on_policy", step, text, config)] if bad else []


def mismatch_violations(v: dict[str, float], m: Mapping[str, float], config: MonitorConfig, step: int,
                        lag: float = 0.0) -> list[Violation]:
    """``mismatch``: an error when the mismatch KL is far above numerical noise (unless the sampler lags by
    design), a warning when the importance weights do not average to 1; noise is never a violation. ``m``: the
    step's ``grpo/mismatch/`` readout of the same sums."""
    tol_ = config.tolerances
    k3, z = v["mm_k3_sum"] / v["mm_tokens"], m["grpo/mismatch/ratio_mean_z"]
    numbers = (f"mismatch KL k3 {k3:.4g} nats per token (noise: <= {tol_.mismatch_k3:g}), k1 "
               f"{m['grpo/mismatch/k1_mean']:.4g}, mean |Delta| {v['mm_abs_sum'] / v['mm_tokens']:.4g}, "
               f"p99 |Delta| {m['grpo/mismatch/abs_diff_p99']:.4g}, mean importance weight "
               f"{m['grpo/mismatch/ratio_mean']:.5g} ({z:+.3g} standard errors from 1) over "
               f"{int(v['mm_tokens'])} tokens")
    n = int(v["mm_tokens"])
    if not k3 <= tol_.mismatch_k3 and config.max_policy_lag == 0 and lag == 0:
        hint = ("a mismatch KL far above numerical noise: sampler weights not synced (one or more optimizer steps "
                "stale), log-probs taken before temperature was applied, tokens or the mask shifted by one, or "
                "another model's log-probs; if the sampler lags by design, declare MonitorConfig.max_policy_lag "
                "or pass observe_rollout(policy_version=)")
        return [violation("mismatch", step, numbers, config, count=n, hint=hint)]
    if not abs(z) <= tol_.mismatch_ratio_z and not abs(m["grpo/mismatch/ratio_mean"] - 1) <= tol_.mismatch_ratio_bias:
        hint = ("the importance weights exp(trainer - sampler) do not average to 1, so the sampler's log-probs "
                "are not those of the distribution it sampled from: top-p/top-k sampling with log-probs "
                "renormalised over the nucleus while the trainer scores the full vocabulary, or logits processed "
                "(penalties, bias, temperature) after the log-probs were taken")
        return [violation("mismatch", step, numbers, config, count=n, severity="warning", hint=hint)]
    return []
