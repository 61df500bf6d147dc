"""The demo's GRPO trainer: teaching policy, GRPO update, optional dynamic sampling, monitor attached.

Everything the monitor sees goes through its public API: ``observe_generation`` for
every generated batch (dynamic sampling), ``observe_rollout`` for the retained batch,
``observe_loss`` for the token tensors of the update, ``end_step`` once per step.
Alongside, the trainer records what theory predicts from its own ``sigmoid(z_q)`` at
that step (one :class:`TheoryRow` per step), so observation and theory can be compared.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import Any

import torch

from ...monitor import GRPOMonitor
from ...report import StepReport
from .model import Rollout, TeachingPolicy, grpo_token_loss
from .pipeline import CORRECT, Pipeline


@dataclasses.dataclass
class DemoConfig:
    """Settings of the teaching run (the defaults run in a few seconds on a laptop CPU)."""

    steps: int = 200
    num_questions: int = 64
    groups_per_step: int = 16
    group_size: int = 8
    max_len: int = 6
    vocab: int = 8
    lr: float = 4.0
    beta: float = 0.04
    clip: float = 0.2
    dynamic_sampling: bool = False
    max_gen_batches: int = 8
    z_min: float = -3.0
    z_max: float = 1.5
    seed: int = 0

    def __post_init__(self) -> None:
        checks = {"steps": 1, "num_questions": 1, "groups_per_step": 1, "group_size": 2, "max_len": 1,
                  "vocab": 2, "max_gen_batches": 1}
        for name, low in checks.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"Expected argument `{name}` to be an int >= {low} but got {value!r}")
        if self.groups_per_step > self.num_questions:
            raise ValueError(
                f"groups_per_step={self.groups_per_step} exceeds num_questions={self.num_questions}; "
                "each batch draws distinct questions"
            )


@dataclasses.dataclass
class TheoryRow:
    """What the policy's own success probabilities predict for one step (written to theory.jsonl).

    ``trained_p``: sigmoid(z_q) of each trained group at sampling time; ``generated_p``:
    the same for every generated group (dynamic sampling only);
    ``responses_per_retained_group``: G / mean_q alpha(p_q) over all K questions
    (idealised rejection sampling with the question redrawn at each attempt);
    ``kl_per_token``: exact KL(policy || reference) per valid token on the trained questions;
    ``k3_per_token``: the exact expectation of k3 per valid token of the trained responses
    (equal to the KL without dynamic sampling; see ``DemoTrainer._exact_kl``).
    """

    step: int
    mean_success_prob: float
    trained_p: list[float]
    generated_p: list[float]
    responses_per_retained_group: float
    kl_per_token: float
    k3_per_token: float

    def to_dict(self, group_size: int) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["expected_degenerate_rate"] = degenerate_rate(self.trained_p, group_size)
        out["expected_generated_degenerate_rate"] = degenerate_rate(self.generated_p, group_size)
        return out


def degenerate_rate(ps: list[float], G: int) -> float:
    """Mean of ``p^G + (1-p)^G`` over groups (NaN for no groups)."""
    return sum(p**G + (1 - p) ** G for p in ps) / len(ps) if ps else math.nan


def has_variation(rewards: torch.Tensor) -> torch.Tensor:
    """Groups whose scorable rewards are not all equal, ``(B,)`` bool."""
    valid = ~torch.isnan(rewards)
    hi = torch.where(valid, rewards, -torch.inf).amax(dim=1)
    lo = torch.where(valid, rewards, torch.inf).amin(dim=1)
    return hi > lo


class DemoTrainer:
    """One policy, its frozen reference, plain SGD, and a monitor (see module docstring)."""

    def __init__(self, config: DemoConfig, monitor: GRPOMonitor, pipeline: Pipeline = CORRECT):
        self.config, self.monitor, self.pipeline = config, monitor, pipeline
        self.gen = torch.Generator().manual_seed(config.seed)
        z0 = torch.linspace(config.z_min, config.z_max, config.num_questions)
        z0 = z0[torch.randperm(config.num_questions, generator=self.gen)]
        self.policy = TeachingPolicy(z0, vocab=config.vocab)
        self.reference = copy.deepcopy(self.policy).requires_grad_(False)

    def _draw(self, replace: bool = False) -> torch.Tensor:
        c = self.config
        if replace:
            return torch.randint(c.num_questions, (c.groups_per_step,), generator=self.gen)
        return torch.randperm(c.num_questions, generator=self.gen)[: c.groups_per_step]

    def _generate(self, replace: bool = False) -> tuple[Rollout, torch.Tensor]:
        c = self.config
        rollout = self.policy.sample(self._draw(replace), c.group_size, c.max_len, self.gen)
        return rollout, self.pipeline.score(rollout.correct, self.gen)

    def _dynamic_batch(self) -> tuple[Rollout | None, torch.Tensor | None, list[float]]:
        """DAPO-style dynamic sampling: keep groups with reward variation until the batch is full.

        Each attempt draws a question uniformly (with replacement) and generates one group;
        attempts come in generation batches of ``groups_per_step`` groups, at most
        ``max_gen_batches`` of them (the retry cap). The sampler stops as soon as the batch
        is full: the rest of the last generation batch is never generated nor counted, so
        the ledger measures the theory's ``G / alpha`` responses per retained group.
        """
        c, kept, kept_rewards, generated_p, retained = self.config, [], [], [], 0
        for _ in range(c.max_gen_batches):
            rollout, rewards = self._generate(replace=True)
            live = has_variation(rewards)
            needed = c.groups_per_step - retained
            stop = int(torch.searchsorted(live.long().cumsum(0), needed)) + 1  # attempts used
            used = torch.arange(min(stop, len(live)))
            rollout, rewards, live = rollout.select(used), rewards[used], live[used]
            self.monitor.observe_generation(
                rewards, question_ids=rollout.questions.tolist(), lengths=rollout.lengths.view(-1, c.group_size)
            )
            generated_p += rollout.success_prob.tolist()
            keep = torch.nonzero(live).flatten()
            kept.append(rollout.select(keep))
            kept_rewards.append(rewards[keep])
            retained += len(keep)
            if retained >= c.groups_per_step:
                break
        if retained == 0:
            return None, None, generated_p
        return Rollout.concat(kept), torch.cat(kept_rewards), generated_p

    def step(self) -> tuple[StepReport, TheoryRow]:
        """Generate, check, update, report: one GRPO step."""
        mean_p = float(self.policy.success_prob().mean())
        ledger_theory = self._responses_per_retained()
        if self.config.dynamic_sampling:
            rollout, rewards, generated_p = self._dynamic_batch()
        else:
            (rollout, rewards), generated_p = self._generate(), []
        kl = k3 = math.nan
        if rollout is not None and rewards is not None:  # both None when no group was retained
            kl, k3 = self._exact_kl(rollout.questions)
            self._update(rollout, rewards)
        report = self.monitor.end_step()
        trained_p = rollout.success_prob.tolist() if rollout is not None else []
        return report, TheoryRow(report.step, mean_p, trained_p, generated_p, ledger_theory, kl, k3)

    def _update(self, rollout: Rollout, rewards: torch.Tensor) -> None:
        """Advantages, monitor checks, the GRPO loss and one SGD step."""
        p = self.pipeline
        advantages = p.advantages(rewards)
        self.monitor.observe_rollout(rewards, advantages=advantages, question_ids=rollout.questions.tolist())
        mask = p.loss_mask(rollout.mask)
        token_adv = p.token_advantages(advantages, rollout.mask)
        logprobs = self.policy.token_logprobs(rollout)
        with torch.no_grad():
            ref = self.reference.token_logprobs(rollout)
        old = p.sampler_logprobs(rollout.sampler_logprobs)
        loss, k3 = grpo_token_loss(logprobs, old, ref, token_adv, mask, clip=self.config.clip, beta=self.config.beta)
        self.monitor.observe_loss(mask=mask, advantages=token_adv, logprobs=logprobs.detach(), ref_logprobs=ref,
                                  old_logprobs=old, kl=k3)
        self._sgd(loss)

    def _sgd(self, loss: torch.Tensor) -> None:
        """Plain SGD (torch.optim would import torch._dynamo: seconds of start-up for two tensors)."""
        params = list(self.policy.parameters())
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            for param, grad in zip(params, grads, strict=True):
                param.add_(grad, alpha=-self.config.lr)

    def _responses_per_retained(self) -> float:
        p = self.policy.success_prob()
        G = self.config.group_size
        alpha = float((1 - p**G - (1 - p) ** G).mean())
        return G / alpha if alpha > 0 else math.inf

    @torch.no_grad()
    def _exact_kl(self, questions: torch.Tensor) -> tuple[float, float]:
        """(KL(policy || reference), expected k3) per valid token of the trained responses.

        Averaged over ``questions``; lengths are uniform on 1..T: (T-1)/2 reasoning tokens and
        one answer token on average. k3 is unbiased, so without filtering the two agree.
        Dynamic sampling keeps only groups with variation: their answers are correct with
        probability p' = (p - p^G) / alpha, not p, so the estimators on a filtered batch
        measure the expectation of k3 under p' on the answer token, not the policy's KL.
        """
        T, G, q = self.config.max_len, self.config.group_size, questions
        p, p_ref = torch.sigmoid(self.policy.z[q].double()), torch.sigmoid(self.reference.z[q].double())
        seen = (p - p**G) / (1 - p**G - (1 - p) ** G) if self.config.dynamic_sampling else p
        k3 = lambda ratio: ratio - torch.log(ratio) - 1  # noqa: E731 - k3 at ratio = pi_ref / pi
        kl_answer = p * torch.log(p / p_ref) + (1 - p) * torch.log((1 - p) / (1 - p_ref))
        k3_answer = seen * k3(p_ref / p) + (1 - seen) * k3((1 - p_ref) / (1 - p))
        lw = torch.log_softmax(self.policy.w[q].double(), -1)
        lw_ref = torch.log_softmax(self.reference.w[q].double(), -1)
        kl_filler = (lw.exp() * (lw - lw_ref)).sum(-1)
        reasoning, length = (T - 1) / 2 * kl_filler, (T + 1) / 2
        return float(((reasoning + kl_answer) / length).mean()), float(((reasoning + k3_answer) / length).mean())
