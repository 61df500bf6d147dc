"""grpo-monitor in a plain PyTorch GRPO loop: the three calls, nothing else.

A toy policy (a table of logits per prompt and position) samples G=4 responses per prompt;
the reward is the fraction of token 0. Each step: ``observe_rollout`` with the (B, G)
rewards and advantages, ``observe_loss`` with the token tensors of each micro-batch, and
``end_step`` (here through ``monitored_steps``). At the end it prints what the JSONL log
holds: every violation as the monitor worded it, with its severity, and the counts. Run:
``python examples/torch_loop.py`` (``--out DIR`` keeps the log; by default it goes to a
temporary folder, removed at the end). Pass ``--bug`` to compute the std over the wrong
axis and watch the run stop.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch

from grpo_monitor import GRPOMonitor, InvariantViolation, MonitorConfig
from grpo_monitor.integrations.hf import monitored_steps
from grpo_monitor.sinks import JSONLSink
from grpo_monitor.tools.reporting import log_digest

G, T, V, PROMPTS = 4, 6, 5, 16


def sample(logits: torch.Tensor, prompt_ids: torch.Tensor, gen: torch.Generator):
    """G responses per prompt: tokens, mask and per-token log-probs (with grad)."""
    logp_all = torch.log_softmax(logits[prompt_ids.repeat_interleave(G)], dim=-1)  # (B*G, T, V)
    with torch.no_grad():
        tokens = torch.multinomial(logp_all.exp().reshape(-1, V), 1, generator=gen).reshape(-1, T)
        lengths = torch.randint(2, T + 1, (len(tokens),), generator=gen)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).float()
    return tokens, mask, logp_all.gather(-1, tokens[..., None]).squeeze(-1)


def advantages(rewards: torch.Tensor, bug: bool) -> torch.Tensor:
    """Population z-scores inside each group (the bug: std over the prompt axis)."""
    std = rewards.std(0 if bug else 1, correction=0, keepdim=True)
    return (rewards - rewards.mean(1, keepdim=True)) / (std + 1e-4)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for the run's files (default: a temporary folder, removed at the end)")
    parser.add_argument("--bug", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="grpo-torch-") as scratch:
        out = args.out or Path(scratch)
        code = train(out, args.steps, args.bug)
        print("\n".join(log_digest(out / "grpo.jsonl")))
        print(f"log: {out / 'grpo.jsonl'}" if args.out else "log removed with its temporary folder "
              "(pass --out DIR to keep it)")
    return code


def train(out: Path, steps: int, bug: bool) -> int:
    """The loop; 1 when the monitor stopped it."""
    gen = torch.Generator().manual_seed(0)
    logits = torch.zeros(PROMPTS, T, V, requires_grad=True)
    opt = torch.optim.SGD([logits], lr=2.0)
    config = MonitorConfig(group_size=G, estimator="population", repro_dir=str(out / "repro"))
    monitor = GRPOMonitor(config, sinks=[JSONLSink(out / "grpo.jsonl")])
    try:
        for step in monitored_steps(monitor, range(steps)):
            prompt_ids = torch.randperm(PROMPTS, generator=gen)[:8]
            tokens, mask, logp = sample(logits, prompt_ids, gen)
            rewards = (((tokens == 0) & (mask > 0)).sum(1) / mask.sum(1)).reshape(-1, G)
            adv = advantages(rewards, bug)
            monitor.observe_rollout(rewards, advantages=adv, question_ids=prompt_ids.tolist())
            for rows in torch.arange(len(tokens)).chunk(2):  # two micro-batches
                row_adv = adv.reshape(-1)[rows]
                loss = -(row_adv[:, None] * logp[rows] * mask[rows]).sum() / mask[rows].sum()
                loss.backward(retain_graph=True)
                monitor.observe_loss(mask=mask[rows], advantages=row_adv, logprobs=logp[rows].detach())
            opt.step()
            opt.zero_grad()
            print(f"step {step}: reward {rewards.mean():.3f}")
    except InvariantViolation as exc:
        print(f"stopped by grpo-monitor:\n{exc}")
        return 1
    finally:
        monitor.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
