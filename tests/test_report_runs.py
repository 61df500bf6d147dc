"""The report's variants, made with the real monitor, and which figures each one gets.

The demo with dynamic sampling (TensorBoard and W&B offline), and a user's plain loop that
fails at step 6, runs 1 or 3 steps, or logs no token tensors and no ledger. The caption
and browser tests (``test_report_captions``, ``test_report_browser``) import ``VARIANTS``.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

pytest.importorskip("matplotlib")

from grpo_monitor import GRPOMonitor, InvariantViolation, MonitorConfig  # noqa: E402
from grpo_monitor.sinks import JSONLSink  # noqa: E402
from grpo_monitor.tools.reporting import build_report  # noqa: E402


def user_loop(log: Path, steps: int, *, tokens: bool = True, questions: bool = True, bessel_from: int | None = None,
              uncentred_at: int | None = None, policy: str = "raise", seed: int = 0, sampler: bool = False) -> Path:
    """A user's own loop: 6 groups of G=4, population z-scores, off-policy token tensors; a breach ends it.

    With ``sampler`` the loss also gets sampler log-probs (noise growing from 0.005 to 0.05 nats), per-token
    entropies and truncated rows, drawn from a second generator, under a declared mismatch_k3 of 0.05.
    """
    gen, side = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed + 1)
    B, G, T = 6, 4, 5
    tolerances = {"tolerances": {"mismatch_k3": 0.05}} if sampler else {}
    config = MonitorConfig(group_size=G, std_convention="population", on_violation=policy,
                           repro_dir=str(log.parent / "repro"), **tolerances)
    monitor = GRPOMonitor(config, sinks=[JSONLSink(log)])
    try:
        for step in range(steps):
            q = torch.randint(0, 10, (B,), generator=gen)
            p = torch.sigmoid(q.double() / 3 - 1.5 + 0.15 * step)
            rewards = (torch.rand(B, G, generator=gen, dtype=torch.float64) < p[:, None]).double()
            bessel = bessel_from is not None and step >= bessel_from
            std = rewards.std(1, keepdim=True, correction=1 if bessel else 0)
            adv = (rewards - rewards.mean(1, keepdim=True)) / (std + 1e-6) + (0.5 if step == uncentred_at else 0.0)
            truncated = torch.rand(B, G, generator=side) < 0.1 + 0.02 * step if sampler else None
            monitor.observe_rollout(rewards, advantages=adv, question_ids=q.tolist() if questions else None,
                                    truncated=truncated)
            if tokens:
                lengths = torch.randint(1, T + 1, (B * G,), generator=gen)
                mask = (torch.arange(T)[None, :] < lengths[:, None]).double()
                logp = -2 * torch.rand(B * G, T, generator=gen, dtype=torch.float64)
                old = logp + 0.15 * torch.randn(B * G, T, generator=gen, dtype=torch.float64)
                ref = logp + 0.05 * (step + 1) * torch.randn(B * G, T, generator=gen, dtype=torch.float64)
                extra = {}
                if sampler:
                    noise = (0.005 + 0.045 * step / max(1, steps - 1)) * torch.randn(B * G, T, generator=side,
                                                                                     dtype=torch.float64)
                    entropy = (2.0 - 0.06 * step) * torch.rand(B * G, T, generator=side, dtype=torch.float64)
                    extra = {"sampler_logprobs": old + noise, "entropy": entropy}
                monitor.observe_loss(mask=mask, advantages=adv.reshape(-1, 1) * mask, logprobs=logp,
                                     ref_logprobs=ref, old_logprobs=old, **extra)
            monitor.end_step()
    except InvariantViolation:
        pass  # the breach is in the log: the report shows it
    finally:
        monitor.close()
    return log


def _demo(out: Path) -> Path:
    from grpo_monitor.tools.demo import DemoConfig, run_demo

    wandb = importlib.util.find_spec("wandb") is not None
    run_demo(DemoConfig(steps=30, dynamic_sampling=True), out, wandb=wandb, tensorboard=True, progress=False,
             report=False)
    return out / "monitor.jsonl"


def _warned(out: Path) -> Path:
    """12 steps without token tensors or ledger; the uncentred step 7 warns (policy "warn") and the run goes on."""
    with pytest.warns(RuntimeWarning, match=r"step 7: invariant '(zero_group_mean|degenerate_zero)' broken"):
        return user_loop(out / "monitor.jsonl", 12, tokens=False, uncentred_at=7, policy="warn")


#: Variant -> how to make its log in a fresh folder.
VARIANTS: dict[str, Callable[[Path], Path]] = {
    "clean-demo": _demo,
    "failing": lambda out: user_loop(out / "monitor.jsonl", 9, bessel_from=6),
    "short-1-step": lambda out: user_loop(out / "monitor.jsonl", 1),
    "short-3-steps": lambda out: user_loop(out / "monitor.jsonl", 3, questions=False),
    "no-ledger-no-tokens": lambda out: _warned(out),
    "sampler-side": lambda out: user_loop(out / "monitor.jsonl", 15, sampler=True),
}


#: Variant -> the figures its page shows (a family the run did not log gets a note instead); every one also shows
#: the degenerate split, which observe_rollout always logs.
FIGURES_OF = {name: shown | {"split"} for name, shown in {
    "clean-demo": {"degenerate", "prompts", "question_std", "advantages", "convention", "overdispersion_stuck", "kl",
                   "ratio", "tokens", "sampling"},
    "failing": {"violations", "degenerate", "prompts", "question_std", "advantages", "convention",
                "overdispersion_stuck", "kl", "ratio", "tokens"},
    "short-1-step": {"degenerate", "prompts", "question_std", "advantages", "convention", "overdispersion_stuck",
                     "kl", "ratio", "tokens"},
    "short-3-steps": {"degenerate", "prompts", "question_std", "advantages", "convention", "kl", "ratio", "tokens"},
    "no-ledger-no-tokens": {"violations", "degenerate", "prompts", "question_std", "advantages", "convention",
                            "overdispersion_stuck"},
    "sampler-side": {"degenerate", "prompts", "question_std", "advantages", "convention", "overdispersion_stuck", "kl",
                     "ratio", "tokens", "mismatch", "entropy"},
}.items()}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_each_variant_shows_the_families_it_logged(tmp_path, name):
    """A figure per metric family the run logged, a worded note for each one it did not, and a PNG per figure."""
    page = build_report(VARIANTS[name](tmp_path)).read_text()
    shown = set(re.findall(r'<figure id="fig-(\w+)">', page))
    assert shown == FIGURES_OF[name]
    assert {p.stem for p in (tmp_path / "plots").glob("*.png")} == shown
    notes = re.findall(r'<p class="meta note">([^:]+): no data in this run\. Logged when you call observe_', page)
    assert len(notes) == 13 - len(shown - {"violations"})
