"""INVARIANTS: one record per invariant, the only place an invariant is described.

Each :class:`Invariant` holds the one-line statement a reader sees in every message, the
likely cause (hint), the tolerance field of :class:`~grpo_monitor.config.Tolerances` it is
measured with, its default severity, and the expected value a breach message shows,
derived from the config. Breach messages, the README's invariants table (``docs/invariants.md``,
generated), the dashboards' per-invariant panels and ``MonitorConfig.policies`` all read it.

Severity: an ``"error"`` stops the run under ``on_violation="raise"``; a ``"warning"`` is
logged, counted (``grpo/invariants/<name>``) and alerted at WARN level, and never stops
the run. An invariant's severity can be lowered for one breach by the rule that judges it
(see :data:`RESIDUE_RULE`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Literal

#: A :class:`~grpo_monitor.config.MonitorConfig` (config.py reads this catalogue, so it is not imported here).
MonitorConfig = Any

Severity = Literal["error", "warning"]
Side = Literal["rollout", "tokens", "steps", "replay"]


@dataclasses.dataclass(frozen=True)
class Invariant:
    """One invariant: what must hold, why it usually breaks, and how it is measured.

    ``str(invariant)`` is its statement, so ``f"{INVARIANTS[name]}"`` reads as a sentence.
    """

    name: str
    statement: str
    hint: str
    side: Side
    tolerance: str | None  # field of Tolerances, or None when the check is exact
    severity: Severity
    expected: Callable[[MonitorConfig], str]
    #: What an estimator promises when it promises this invariant (exact, for batches whose groups have
    #: two or more scorable rows); None: every estimator must keep it (a universal invariant).
    promise: str | None = None
    #: A breach that explains an estimator misfit by itself: no ``convention`` finding is added on top.
    root_cause: bool = False
    #: Each finding is new (its producer says every one once per run): every one is logged and warned.
    said_once: bool = False

    def __str__(self) -> str:
        return self.statement


def _tol(field: str, text: str) -> Callable[[MonitorConfig], str]:
    return lambda cfg: text.format(getattr(cfg.tolerances, field))


def _group_size(cfg: MonitorConfig) -> str:
    return f"{cfg.group_size} rows per group" if cfg.group_size else ">= 2 rows per group"


def _convention(cfg: MonitorConfig) -> str:
    c = cfg.estimator
    return "one convention across groups and steps" if c == "auto" else f"std_convention={c!r}"


def _on_policy(cfg: MonitorConfig) -> str:
    if cfg.on_policy_bitwise:
        return f"max |logprobs - old_logprobs| <= {cfg.tolerances.on_policy:g} nats"
    return f"mean k3(logprobs - old_logprobs) <= {cfg.tolerances.mismatch_k3:g} nats per token"


def _mismatch(cfg: MonitorConfig) -> str:
    t = cfg.tolerances
    lag = f" (error off: max_policy_lag={cfg.max_policy_lag})" if cfg.max_policy_lag else ""
    return (f"grpo/mismatch/k3_mean <= {t.mismatch_k3:g} nats per token{lag}; "
            f"|grpo/mismatch/ratio_mean_z| <= {t.mismatch_ratio_z:g} or |ratio_mean - 1| <= {t.mismatch_ratio_bias:g}")


def _loss_aggregation(cfg: MonitorConfig) -> str:
    scope = "" if cfg.loss_scope == "auto" else f", {cfg.loss_scope} scope"
    return (f"per-token weights of loss_aggregation={cfg.loss_aggregation!r}{scope} within "
            f"{cfg.tolerances.loss_weight_rel:g} relative")


_RECORDS = (
    Invariant("finite", "advantages are finite and rewards are finite or NaN (unscorable)",
              "a zero std without a stabilizer (0/0), a NaN reward propagated into the advantage, or an overflow",
              "rollout", None, "error", lambda cfg: "finite advantages and finite-or-NaN rewards", root_cause=True),
    Invariant("unscorable_rows",
              "unscorable (NaN-reward) rows carry advantage 0 and stay out of their group's statistics",
              "unscorable (None/NaN) rewards were counted as 0 in the baseline or given a nonzero advantage",
              "rollout", "unscorable", "error", _tol("unscorable", "|advantage| <= {:g} x typical on NaN-reward rows"),
              promise="NaN-reward rows get advantage 0 and leave every other row's advantage unchanged"),
    Invariant("group_size", "every group has the declared size, and no group has a single row",
              "rows grouped with the wrong group size, or a contiguous view(-1, G) over interleaved rows",
              "rollout", None, "error", _group_size),
    Invariant("zero_group_mean", "advantages have zero mean inside every group with reward variation",
              "statistics taken over the wrong axis (e.g. the prompt axis), unscorable rows counted in the "
              "mean, or per-row denominators (e.g. a leave-one-out std)",
              "rollout", "zero_group_mean", "error",
              _tol("zero_group_mean", "|group mean| <= {:g} x typical |advantage|"),
              promise="in every group the advantages of the scorable rows average to 0", root_cause=True),
    Invariant("affine_in_rewards",
              "inside a group with variation, advantages are an increasing affine function of rewards",
              "rows misaligned after a shuffle, wrong grouping, a sign flip, or per-row denominators",
              "rollout", "affine_residual", "error",
              _tol("affine_residual", "a = k (r - mean) with k > 0, rms residual <= {:g} x typical |advantage|"),
              promise="in every group with reward variation a_i = k_g (r_i - mean_g) + b_g with one k_g > 0 "
              "and one b_g for all its scorable rows", root_cause=True),
    Invariant("degenerate_zero", "groups whose rewards are all equal carry (near-)zero advantage",
              "float32 rounding of a constant group's std with a tiny stabilizer, or an epsilon used as a floor",
              "rollout", "degenerate_ratio", "error",
              _tol("degenerate_ratio", "|advantage| <= {:g} x typical |advantage| in all-equal groups"),
              promise="every row of a group whose scorable rewards are all equal gets advantage 0"),
    Invariant("one_nonzero_per_group", "with a pass@k estimator, at most one row per group has a nonzero advantage, "
              "and it is a best-rewarded row",
              "a pass@k estimator that credits every row, or the wrong row of the group",
              "replay", "zero_group_mean",
              "error", _tol("zero_group_mean", "one row with |advantage| > {:g} x typical per group, a best one"),
              promise="at most one row per group has a nonzero advantage (pass@k)"),
    Invariant("convention", "one std-scaling convention and one stabilizer hold across the batch and across steps",
              "a swapped scale_rewards branch, Bessel (torch.std's default) where population was meant, "
              "or a stabilizer that changes", "steps", "stabilizer_spread", "error", _convention),
    Invariant("unknown_estimator", "under estimator='auto', a registry estimator (or your declared one) "
              "explains the advantages",
              "an estimator the registry does not know, which keeps the universal invariants (finite, non-decreasing "
              "in reward within each group, one common advantage on constant groups): declare it, "
              "MonitorConfig(estimator=your_fn) or grpo_monitor.estimators.custom(fn, name=...), to check it "
              "exactly", "steps", "estimator_residual", "warning",
              lambda cfg: "a registry estimator, or a declared one, reproduces the advantages"),
    Invariant("token_constant_advantage",
              "with outcome rewards, a row's advantage is the same on all of its valid tokens",
              "advantages misaligned with tokens, or per-token advantages with outcome_rewards=True",
              "tokens", "token_constant", "error", _tol("token_constant", "<= {:g} x typical |advantage|")),
    Invariant("mask_binary", "the loss mask holds only 0 and 1", "a mask that holds weights or garbage instead of 0/1",
              "tokens", None, "error", lambda cfg: "mask in {0, 1}"),
    Invariant("finite_logprobs", "log-probabilities are finite on valid tokens",
              "-inf log-probabilities from masked logits leaking onto valid tokens",
              "tokens", None, "error", lambda cfg: "finite log-probs on mask==1"),
    Invariant("on_policy", "on the first inner epoch, the trainer's log-probs match its old log-probs up to "
              "numerical noise (bitwise, with on_policy_bitwise)",
              "old_logprobs taken at other parameters than logprobs (a stale or reused old-logprob buffer, an "
              "optimizer step between the two passes), or a different model or temperature in one of them",
              "tokens", "mismatch_k3", "error", _on_policy),
    Invariant("mismatch", "the sampler's and the trainer's log-probs of the sampled tokens differ only by numerical "
              "noise: mismatch KL (k3) within tolerance, importance weights averaging to 1",
              "weights not synced to the sampler, log-probs taken before temperature was applied, tokens or mask "
              "shifted by one, or another model's log-probs (error); importance weights away from 1: top-p/top-k "
              "log-probs renormalised over the nucleus while the trainer scores the full vocabulary, or logits "
              "processed after the log-probs were taken (warning)",
              "tokens", "mismatch_k3", "error", _mismatch),
    Invariant("declared_check", "every check the config declares receives the inputs it needs, so it runs",
              "a declared check whose input never arrives (expect_on_policy=True without old_logprobs=, "
              "on_policy_bitwise=True without expect_on_policy, a declared loss_aggregation with loss= but no "
              "advantages=, a multi-reward estimator without reward_components=): pass it, or drop the declaration",
              "steps", None, "warning", lambda cfg: "every declared check's inputs passed", said_once=True),
    Invariant("loss_aggregation", "at ratio 1 without a KL term, every token's loss weight dloss/dlogprob is "
              "-A c with c the declared loss aggregation's (per micro-batch or per optimizer step)",
              "the loss divides by another count than declared: per-row lengths under a constant normaliser, the "
              "micro-batch's tokens instead of the step's, gradient accumulation not divided out, or an extra "
              "per-token factor", "tokens", "loss_weight_rel", "error", _loss_aggregation),
    Invariant("trainer_metric", "the trainer's own logged metrics equal the monitor's exact values of the same "
              "quantities, within each key's documented tolerance",
              "the trainer's dashboard reduces the value differently (the finding names the likely cause: mean of "
              "per-rank means, float32 zero-std test, per-micro-batch averaging, accumulation scaling, a sum over "
              "data-parallel ranks, a cap the clip ratio misses, an off-by-one window); the update is right, the "
              "dashboard is not", "steps", None, "warning",
              lambda cfg: "|trainer - exact| <= atol + rtol |exact| per key (docs/trainer_metrics.md)"),
)

#: Every invariant the monitor checks, by name (the keys of ``MonitorConfig.policies``).
INVARIANTS: dict[str, Invariant] = {inv.name: inv for inv in _RECORDS}

#: What an estimator may promise of the invariants (the others every estimator must keep).
PROMISED: dict[str, str] = {inv.name: inv.promise for inv in _RECORDS if inv.promise is not None}
#: Rollout invariants an estimator may promise, checked by the device-side fit.
DEVICE_PROMISES: tuple[str, ...] = tuple(i.name for i in _RECORDS if i.side == "rollout" and i.promise is not None)
#: Breaches that explain an estimator misfit by themselves (no ``convention`` finding on top).
ROOT_CAUSES: tuple[str, ...] = tuple(i.name for i in _RECORDS if i.root_cause)

#: Invariants checked group by group on the rollout, in check order.
GROUP_INVARIANTS: tuple[str, ...] = tuple(i.name for i in _RECORDS if i.side == "rollout")

#: When a ``degenerate_zero`` breach is only a warning (float32 residue the estimator's own
#: arithmetic explains) and when it stays an error (the constant group acts like a real signal).
RESIDUE_RULE = (
    "A constant group's |advantage| above `degenerate_ratio` x typical is a *warning* when it is at most "
    "`degenerate_error` (default 0.25) x the advantage std of a real (live) group and the estimator's arithmetic "
    "explains it: float32 rewards, "
    "|advantage| <= 4 G ulp32(|reward|) / stabilizer (the rounding of a float32 mean of G equal values, "
    "divided by the std + stabilizer). Anything larger makes the constant group weigh like a real one "
    "and is an *error* (e.g. eps 1e-9: +-59.6 on eight rewards of 0.7, about 60x a real group's advantage std)."
)


def invariant(name: str) -> Invariant:
    """The record of ``name``, with a worded error listing the known names."""
    try:
        return INVARIANTS[name]
    except KeyError:
        raise KeyError(f"unknown invariant {name!r}; expected one of {sorted(INVARIANTS)}") from None
