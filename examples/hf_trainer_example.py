"""grpo-monitor with a Hugging Face ``Trainer``: observe in ``compute_loss``, end steps with a callback.

A custom ``Trainer`` runs a toy GRPO step in ``compute_loss`` (G=4 sampled responses per
prompt from a table of logits, reward = fraction of token 0) and makes the two observe
calls; ``grpo_monitor.integrations.hf.attach`` adds the callback that calls ``end_step``
at every optimizer step (gradient accumulation included) and closes the monitor at the
end. With ``report_to="wandb"`` the default sinks log into the trainer's own W&B run.
Run: ``python examples/hf_trainer_example.py``.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch
from torch import nn
from transformers import Trainer, TrainingArguments

from grpo_monitor import MonitorConfig
from grpo_monitor.integrations import hf
from grpo_monitor.sinks import JSONLSink, read_jsonl
from grpo_monitor.tools.reporting import log_digest

G, T, V, PROMPTS = 4, 6, 5, 16


class TablePolicy(nn.Module):
    def __init__(self):
        super().__init__()
        self.logits = nn.Parameter(torch.zeros(PROMPTS, T, V))

    def forward(self, prompt_ids):
        return torch.log_softmax(self.logits[prompt_ids], dim=-1)


class Prompts(torch.utils.data.Dataset):
    def __len__(self):
        return PROMPTS

    def __getitem__(self, i):
        return {"prompt_ids": torch.tensor(i)}


class ToyGRPOTrainer(Trainer):
    monitor = None

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        prompt_ids = inputs["prompt_ids"]
        logp_all = model(prompt_ids.repeat_interleave(G))
        with torch.no_grad():
            tokens = torch.multinomial(logp_all.exp().reshape(-1, V), 1).reshape(-1, T)
        mask = torch.ones(len(tokens), T)
        logp = logp_all.gather(-1, tokens[..., None]).squeeze(-1)
        rewards = (tokens == 0).float().mean(1).reshape(-1, G)
        adv = (rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, correction=0, keepdim=True) + 1e-4)
        self.monitor.observe_rollout(rewards, advantages=adv, question_ids=prompt_ids.tolist())
        self.monitor.observe_loss(mask=mask, advantages=adv.reshape(-1), logprobs=logp.detach())
        return -(adv.reshape(-1, 1) * logp * mask).sum() / mask.sum()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for the run's files (default: a temporary folder, removed at the end)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="grpo-hf-") as scratch:
        train(args.out or Path(scratch), args.steps)
        if not args.out:
            print("log removed with its temporary folder (pass --out DIR to keep it)")
    return 0


def train(out: Path, steps: int) -> None:
    """Train with the monitor attached; print each step's headline numbers and what the log holds."""
    torch.manual_seed(0)
    training_args = TrainingArguments(
        output_dir=str(out / "trainer"), use_cpu=True, max_steps=steps, per_device_train_batch_size=4,
        gradient_accumulation_steps=2, learning_rate=0.5, report_to="none", save_strategy="no",
        remove_unused_columns=False, disable_tqdm=True, logging_steps=1,
    )
    trainer = ToyGRPOTrainer(model=TablePolicy(), args=training_args, train_dataset=Prompts())
    trainer.monitor = hf.attach(trainer, config=MonitorConfig(group_size=G, estimator="population"),
                                sinks=[JSONLSink(out / "grpo.jsonl")])
    trainer.train()
    for record in read_jsonl(out / "grpo.jsonl"):
        m = record["metrics"]
        print(f"step {record['step']}: degenerate rate {m['grpo/groups/degenerate_rate']:.2f}, "
              f"groups {m['grpo/groups/total']:.0f}, tokens {m['grpo/tokens/valid']:.0f}")
    print("\n".join(log_digest(out / "grpo.jsonl")))


if __name__ == "__main__":
    raise SystemExit(main())
