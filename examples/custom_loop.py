"""GRPO in a hand-written PyTorch loop, with grpo-monitor attached through its public API.

A tiny GRU language model learns to answer "a b =" (digits 0-4) with the digit a + b. Shown here:
flat rollouts with string group ids (as verl's ``uid``), per-question ids, PPO-style inner
epochs over micro-batches (``observe_loss`` once per micro-batch, one sync per step at
``end_step``), TRL-style advantages (torch.std, i.e. Bessel, plus 1e-4) declared in the
config, and the monitor's state saved with the checkpoint.

    python examples/custom_loop.py          # ~20 s on a laptop CPU
"""

from __future__ import annotations

import argparse
import copy
from pathlib import Path

import torch

from grpo_monitor import GRPOMonitor, MonitorConfig
from grpo_monitor.sinks import ConsoleSink, JSONLSink
from grpo_monitor.tools.reporting import log_digest

SEP, EOS, V = 10, 11, 12  # digits 0-9, separator, end of sequence
B, G, T = 16, 8, 4  # prompts per step, responses per prompt, max response tokens
STEPS, EPOCHS, MICRO, BETA, CLIP = 100, 2, 2, 0.02, 0.2
torch.manual_seed(0)
torch.set_num_threads(1)


class TinyLM(torch.nn.Module):
    """Embedding -> GRU -> logits over the 12-token vocabulary."""

    def __init__(self, hidden: int = 64):
        super().__init__()
        self.embed = torch.nn.Embedding(V, 32)
        self.gru = torch.nn.GRU(32, hidden, batch_first=True)
        self.head = torch.nn.Linear(hidden, V)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.gru(self.embed(tokens))[0])


def response_logprobs(model: TinyLM, prompts: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
    """log pi(response token | prefix), (N, T): the logits at prompt_len-1+t predict response token t."""
    logits = model(torch.cat([prompts, responses], dim=1))[:, prompts.shape[1] - 1:-1]
    return torch.log_softmax(logits, -1).gather(2, responses[..., None]).squeeze(-1)


@torch.no_grad()
def generate(model: TinyLM, prompts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample T tokens per prompt; returns (responses (N, T), mask (N, T): 1 up to and including EOS)."""
    seq = prompts
    for _ in range(T):
        nxt = torch.multinomial(torch.softmax(model(seq)[:, -1], -1), 1)
        seq = torch.cat([seq, nxt], dim=1)
    responses = seq[:, prompts.shape[1]:]
    ended_before = torch.cumsum((responses == EOS).long(), 1) - (responses == EOS).long()
    return responses, (ended_before == 0).float()


def trl_advantages(rewards: torch.Tensor) -> torch.Tensor:
    """TRL's scale_rewards="group": (r - mean) / (torch.std(r) + 1e-4), groups of G consecutive rows."""
    grouped = rewards.view(-1, G)
    adv = (grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-4)
    return adv.reshape(-1)


policy = TinyLM()
reference = copy.deepcopy(policy).requires_grad_(False)
optimizer = torch.optim.Adam(policy.parameters(), lr=1e-2)
parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--out", type=Path, default=Path("runs/custom_loop"),
                    help="folder for the log (default runs/custom_loop)")
out = parser.parse_args().out
out.mkdir(parents=True, exist_ok=True)
(out / "monitor.jsonl").unlink(missing_ok=True)
config = MonitorConfig(group_size=G, estimator="bessel", stabilizer=1e-4, clip_range=(CLIP, CLIP))
monitor = GRPOMonitor(config, sinks=[JSONLSink(out / "monitor.jsonl"), ConsoleSink(every=20)])

for step in range(STEPS):
    a, b = torch.randint(0, 5, (2, B))  # digits 0-4: learnable in 100 steps
    prompts = torch.stack([a, b, torch.full_like(a, SEP)], 1).repeat_interleave(G, 0)  # (B*G, 3)
    responses, mask = generate(policy, prompts)
    rewards = (responses[:, 0] == ((a + b) % 10).repeat_interleave(G)).double()  # flat (B*G,)
    uids = [f"uid-{step}-{i}" for i in range(B) for _ in range(G)]  # one id per row, verl style
    questions = [f"{x}+{y}" for x, y in zip(a.tolist(), b.tolist(), strict=True)]  # one id per group

    advantages = trl_advantages(rewards)
    monitor.observe_rollout(rewards, group_ids=uids, advantages=advantages, question_ids=questions)

    with torch.no_grad():
        old_logprobs = response_logprobs(policy, prompts, responses)
        ref_logprobs = response_logprobs(reference, prompts, responses)
    for _epoch in range(EPOCHS):  # PPO-style inner epochs: the ratio leaves 1 on the second
        for idx in torch.randperm(B * G).chunk(MICRO):
            logprobs = response_logprobs(policy, prompts[idx], responses[idx])
            adv = advantages[idx, None].float().expand_as(logprobs)
            ratio = torch.exp(logprobs - old_logprobs[idx])
            surrogate = torch.minimum(ratio * adv, ratio.clamp(1 - CLIP, 1 + CLIP) * adv)
            log_ref_ratio = ref_logprobs[idx] - logprobs
            k3 = torch.exp(log_ref_ratio) - log_ref_ratio - 1
            m = mask[idx]
            loss = (-(surrogate - BETA * k3) * m).sum() / (B * G)  # sum over tokens, mean over responses
            monitor.observe_loss(mask=m, advantages=adv, logprobs=logprobs.detach(), ref_logprobs=ref_logprobs[idx],
                                 old_logprobs=old_logprobs[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    report = monitor.end_step()

torch.save({"model": policy.state_dict(), "monitor": monitor.state_dict()}, out / "checkpoint.pt")
monitor.close()
print(f"reward mean {report.metrics['grpo/reward/mean']:.2f} after {STEPS} steps; "
      f"convention {report.convention}; log {out / 'monitor.jsonl'}")
print("\n".join(log_digest(out / "monitor.jsonl")))  # what the monitor concluded, in its words
