"""The `grpo-monitor demo` as plain code: the finite-group teaching model trained with GRPO, the monitor attached.

K questions; question q is answered correctly with probability sigmoid(z_q); reward 1 for a
correct answer, 0 otherwise. Each response is a few "reasoning" tokens and one answer token,
so the monitor's token statistics (KL estimators, ratios, masks) have something to measure.

    python examples/demo_plain.py            # ~2 s on a laptop CPU; log in runs/demo_plain/
    grpo-monitor report runs/demo_plain      # figures and an HTML page from the log
"""

from __future__ import annotations

import argparse
import copy
from pathlib import Path

import torch

from grpo_monitor import GRPOMonitor, MonitorConfig
from grpo_monitor.sinks import ConsoleSink, JSONLSink
from grpo_monitor.tools.reporting import log_digest

K, B, G, T = 64, 16, 8, 6  # questions, groups per step, responses per group, max response length
STEPS, LR, BETA, EPS = 200, 4.0, 0.04, 1e-6
torch.set_num_threads(1)  # tensors of a few hundred numbers: threads only add overhead
gen = torch.Generator().manual_seed(0)

# The policy: answer logits z (K,) and reasoning-token logits w (K, V); a frozen copy is the reference.
policy = torch.nn.ParameterDict({"z": torch.nn.Parameter(torch.linspace(-3.0, 1.5, K)),
                                 "w": torch.nn.Parameter(torch.zeros(K, 8))})
reference = copy.deepcopy(policy).requires_grad_(False)


def token_logprobs(params, rows, tokens, lengths, correct):
    """log pi of every response token, (N, T); reasoning tokens from softmax(w_q), the last from sigmoid(z_q)."""
    filler = torch.log_softmax(params["w"][rows], -1).gather(1, tokens)
    z = params["z"][rows]
    answer = torch.where(correct, torch.nn.functional.logsigmoid(z), torch.nn.functional.logsigmoid(-z))
    is_answer = torch.arange(T)[None, :] == (lengths - 1)[:, None]
    mask = (torch.arange(T)[None, :] < lengths[:, None]).float()
    return torch.where(is_answer, answer[:, None], filler) * mask, mask


def advantages_of(rewards):
    """Group-standardised advantages, population std, eps outside the root; all-equal groups get 0."""
    mean = rewards.mean(1, keepdim=True)
    std = rewards.std(1, keepdim=True, correction=0)
    return torch.where(std > 0, (rewards - mean) / (std + EPS), 0.0)


parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--out", type=Path, default=Path("runs/demo_plain"),
                    help="folder for the log (default runs/demo_plain)")
out = parser.parse_args().out
out.mkdir(parents=True, exist_ok=True)
(out / "monitor.jsonl").unlink(missing_ok=True)
config = MonitorConfig(group_size=G, estimator="population", expect_on_policy=True, repro_dir=str(out / "repro"))
with GRPOMonitor(config, sinks=[JSONLSink(out / "monitor.jsonl"), ConsoleSink(every=50)]) as monitor:
    for _step in range(STEPS):
        # 1. generate: B distinct questions, G responses each
        questions = torch.randperm(K, generator=gen)[:B]
        rows = questions.repeat_interleave(G)
        with torch.no_grad():
            p = torch.sigmoid(policy["z"][rows])
            correct = torch.rand(B * G, generator=gen) < p
            lengths = torch.randint(1, T + 1, (B * G,), generator=gen)
            tokens = torch.multinomial(torch.softmax(policy["w"][rows], -1), T, replacement=True, generator=gen)
            old_logprobs, mask = token_logprobs(policy, rows, tokens, lengths, correct)  # what the sampler reports
        rewards = correct.double().view(B, G)

        # 2. advantages, checked by the monitor against the rewards they came from
        advantages = advantages_of(rewards)
        monitor.observe_rollout(rewards, advantages=advantages, question_ids=questions.tolist())

        # 3. the GRPO loss: clipped surrogate + beta * k3, summed over tokens, averaged over responses
        logprobs, _ = token_logprobs(policy, rows, tokens, lengths, correct)
        with torch.no_grad():
            ref_logprobs, _ = token_logprobs(reference, rows, tokens, lengths, correct)
        token_adv = advantages.reshape(-1, 1).float().expand_as(mask)
        ratio = torch.exp(logprobs - old_logprobs)
        surrogate = torch.minimum(ratio * token_adv, ratio.clamp(0.8, 1.2) * token_adv)
        k3 = torch.exp(ref_logprobs - logprobs) - (ref_logprobs - logprobs) - 1
        loss = (-(surrogate - BETA * k3) * mask).sum() / (B * G)
        monitor.observe_loss(mask=mask, advantages=token_adv, logprobs=logprobs.detach(), ref_logprobs=ref_logprobs,
                             old_logprobs=old_logprobs, kl=k3.detach())

        # 4. plain SGD, then one sync and every check of the step
        grads = torch.autograd.grad(loss, list(policy.values()))
        with torch.no_grad():
            for param, grad in zip(policy.values(), grads, strict=True):
                param -= LR * grad
        report = monitor.end_step()

print(f"final degenerate rate {report.metrics['grpo/groups/degenerate_rate']:.1%}, "
      f"mean success probability {torch.sigmoid(policy['z']).mean():.3f}; log: {out / 'monitor.jsonl'}")
print("\n".join(log_digest(out / "monitor.jsonl")))  # what the monitor concluded, in its words
